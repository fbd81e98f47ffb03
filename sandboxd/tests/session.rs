//! sandboxd end to end: the built binary, driven over its stdio by a small blocking client.
//!
//! These run sandboxd as an ordinary child (not a PID-namespace init), which its shepherds do
//! not need: every process-tree check here holds without namespaces.

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sandboxd::proto::{Decoder, Failure, Frame, Message, Spawn, Status, StdinMode, Stream, VERSION};

/// A client whose frames are read on a thread of their own: a host must read while it writes,
/// or sandboxd's output and the host's input can fill both pipes and wait on each other.
struct Client {
    child: Child,
    to: Option<ChildStdin>,
    from: mpsc::Receiver<Frame>,
    user: Option<(u32, u32)>,
}

#[derive(Default, Debug)]
struct Outcome {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    pid: Option<u32>,
    status: Option<Status>,
    failed: Option<(Failure, String)>,
}

impl Client {
    /// Starts the built binary, or, with `SANDBOXD_TEST_WRAP` set, `sh -c "$SANDBOXD_TEST_WRAP"`
    /// with `$SANDBOXD` naming the binary: for running the same checks with sandboxd as a
    /// container's or a bwrap sandbox's first process (`scripts/sandboxd-wrapped`).
    fn start() -> Client {
        let mut command = match std::env::var("SANDBOXD_TEST_WRAP") {
            Ok(wrap) => {
                let mut c = Command::new("sh");
                c.arg("-c").arg(wrap).env("SANDBOXD", env!("CARGO_BIN_EXE_sandboxd"));
                c
            }
            Err(_) => Command::new(env!("CARGO_BIN_EXE_sandboxd")),
        };
        let mut child =
            command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("sandboxd starts");
        let to = child.stdin.take();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, from) = mpsc::channel();
        std::thread::spawn(move || {
            let mut decoder = Decoder::new();
            loop {
                while let Some(f) = decoder.next_frame().expect("well-formed frames") {
                    if tx.send(f).is_err() {
                        return;
                    }
                }
                let mut buf = vec![0; decoder.wants().min(1 << 16)];
                match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => decoder.push(&buf[..n]),
                }
            }
        });
        let mut c = Client { child, to, from, user: None };
        c.send(0, Message::Hello { version: VERSION });
        match c.recv().message {
            Message::HelloAck { version, .. } => assert_eq!(version, VERSION),
            other => panic!("expected HelloAck, got {other:?}"),
        }
        c
    }

    fn send(&mut self, id: u32, message: Message) {
        let bytes = Frame::new(id, message).to_bytes().unwrap();
        self.to.as_mut().unwrap().write_all(&bytes).unwrap();
    }

    fn recv(&mut self) -> Frame {
        self.from.recv_timeout(Duration::from_secs(30)).expect("a frame from sandboxd")
    }

    fn spawn(&mut self, id: u32, argv: &[&str], stdin: StdinMode) {
        let spec = Spawn {
            argv: argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
            env: vec![(b"PATH".to_vec(), b"/usr/bin:/bin".to_vec())],
            stdin,
            user: self.user,
            ..Spawn::default()
        };
        self.send(id, Message::Spawn(spec));
    }

    /// Collects command `id`'s frames until its `Exit` or `Failed`, granting `credit` up front.
    fn finish(&mut self, id: u32) -> Outcome {
        self.send(id, Message::Credit { bytes: u32::MAX });
        let mut out = Outcome::default();
        loop {
            let f = self.recv();
            if f.id != id {
                continue;
            }
            match f.message {
                Message::Spawned { pid } => out.pid = Some(pid),
                Message::Output { stream: Stream::Stdout, data } => out.stdout.extend(data),
                Message::Output { stream: Stream::Stderr, data } => out.stderr.extend(data),
                Message::Credit { .. } => {}
                Message::Exit { status, .. } => {
                    out.status = Some(status);
                    return out;
                }
                Message::Failed { failure, message } => {
                    out.failed = Some((failure, String::from_utf8_lossy(&message).into_owned()));
                    return out;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    fn run(&mut self, id: u32, argv: &[&str]) -> Outcome {
        self.spawn(id, argv, StdinMode::Null);
        self.finish(id)
    }
}

impl Drop for Client {
    /// Ends the session the way an owner does, by closing the stream: sandboxd then kills its
    /// commands. (Killing sandboxd instead would orphan them here, where it is not an init.)
    fn drop(&mut self) {
        self.to = None;
        let _ = self.child.wait();
    }
}

/// Pids of live (non-zombie) processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let state = stat.rsplit(')').next().and_then(|r| r.split_whitespace().next());
        if state != Some("Z") && String::from_utf8_lossy(&cmdline).contains(marker) {
            out.push(pid);
        }
    }
    out
}

fn euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn exit_codes_and_both_streams_are_exact() {
    let mut c = Client::start();
    let out = c.run(1, &["sh", "-c", "printf 'a\\377b'; printf err >&2; exit 3"]);
    assert_eq!(out.stdout, b"a\xffb");
    assert_eq!(out.stderr, b"err");
    assert_eq!(out.status, Some(Status::Code(3)));
    assert!(out.pid.is_some());
}

#[test]
fn a_signal_death_is_a_signal_not_an_exit_code() {
    let mut c = Client::start();
    assert_eq!(c.run(1, &["sh", "-c", "kill -9 $$"]).status, Some(Status::Signal(9)));
    // The control: a command that exits 137 is an exit code.
    assert_eq!(c.run(2, &["sh", "-c", "exit 137"]).status, Some(Status::Code(137)));
}

#[test]
fn stdin_reaches_the_command_within_its_window() {
    let mut c = Client::start();
    c.spawn(1, &["cat"], StdinMode::Pipe);
    // More than one window in total: sandboxd hands credit back as the pipe takes bytes.
    let data: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    let mut sent = 0;
    let mut window = 256 * 1024;
    let mut got = Vec::new();
    c.send(1, Message::Credit { bytes: u32::MAX });
    while got.len() < data.len() {
        while sent < data.len() && window > 0 {
            let n = (data.len() - sent).min(window).min(65536);
            c.send(1, Message::Stdin { data: data[sent..sent + n].to_vec() });
            sent += n;
            window -= n;
            if sent == data.len() {
                c.send(1, Message::StdinEof);
            }
        }
        match c.recv().message {
            Message::Credit { bytes } => window += bytes as usize,
            Message::Output { data, .. } => got.extend(data),
            Message::Spawned { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got, data);
    loop {
        if let Message::Exit { status, .. } = c.recv().message {
            assert_eq!(status, Status::Code(0));
            break;
        }
    }
}

#[test]
fn output_never_runs_ahead_of_credit() {
    let mut c = Client::start();
    c.spawn(1, &["head", "-c", "3000000", "/dev/zero"], StdinMode::Null);
    c.send(1, Message::Credit { bytes: 1000 });
    let mut got = 0usize;
    while got < 1000 {
        match c.recv().message {
            Message::Output { data, .. } => got += data.len(),
            Message::Spawned { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    // A round trip after the credit is used: had sandboxd sent more than granted, it would
    // arrive before the Pong.
    c.send(0, Message::Ping { nonce: 7 });
    loop {
        match c.recv().message {
            Message::Pong { nonce } => {
                assert_eq!(nonce, 7);
                break;
            }
            Message::Spawned { .. } => {}
            other => panic!("output past the credit: {other:?}"),
        }
    }
    assert_eq!(got, 1000);
    let rest = c.finish(1);
    assert_eq!(got + rest.stdout.len(), 3_000_000);
    assert_eq!(rest.status, Some(Status::Code(0)));
}

#[test]
fn everything_a_command_started_is_gone_when_it_ends() {
    let mut c = Client::start();
    let marker = "4011.25";
    // A double fork, a setsid'd process and a plain background job, then the command exits.
    let script = format!("(sleep {marker} &) ; setsid sleep {marker} & sleep {marker} & echo started");
    let out = c.run(1, &["sh", "-c", &script]);
    assert_eq!(out.stdout, b"started\n");
    assert_eq!(out.status, Some(Status::Code(0)));
    assert_eq!(processes_with(marker), Vec::<i32>::new(), "processes outlived their command");

    // The positive control: while a command runs, its background processes are visible to
    // the same scan, and a kill ends them all.
    let marker = "4012.25";
    let script = format!("(sleep {marker} &) ; setsid sleep {marker} & echo started; sleep {marker}");
    c.spawn(2, &["sh", "-c", &script], StdinMode::Null);
    wait_for("the control's processes", || processes_with(marker).len() >= 3);
    c.send(2, Message::Signal { signal: 9 });
    let out = c.finish(2);
    assert_eq!(out.status, Some(Status::Signal(9)));
    assert_eq!(processes_with(marker), Vec::<i32>::new());
}

#[test]
fn a_command_cannot_reach_its_shepherd_through_proc() {
    let mut c = Client::start();
    // Root may read any process's fds (CAP_SYS_PTRACE): as root, run the commands as nobody,
    // the way a backend runs them as the sandbox's user.
    if euid() == 0 {
        c.user = Some((65534, 65534));
    }
    let own = c.run(1, &["sh", "-c", "ls /proc/$$/fd >/dev/null"]);
    assert_eq!(own.status, Some(Status::Code(0)), "control: a command may read its own fds");
    let shepherd = c.run(2, &["sh", "-c", "ls /proc/$PPID/fd >/dev/null 2>&1 || exit 42"]);
    assert_eq!(shepherd.status, Some(Status::Code(42)), "the shepherd's fds were readable");
}

#[test]
fn killing_the_shepherd_ends_the_command_and_is_reported() {
    let mut c = Client::start();
    let marker = "4013.25";
    let out = c.run(1, &["sh", "-c", &format!("sleep {marker} & kill -9 $PPID; sleep {marker}")]);
    let (failure, message) = out.failed.expect("a failure, not a forged exit");
    assert_eq!(failure, Failure::Io, "{message}");
    wait_for("the orphaned processes to die", || processes_with(marker).is_empty());
    // The session is still good.
    assert_eq!(c.run(2, &["true"]).status, Some(Status::Code(0)));
}

#[test]
fn the_host_leaving_ends_every_command_and_sandboxd() {
    let mut c = Client::start();
    let marker = "4014.25";
    c.spawn(1, &["sh", "-c", &format!("setsid sleep {marker} & sleep {marker}")], StdinMode::Null);
    wait_for("the processes to start", || processes_with(marker).len() >= 2);
    c.to = None; // the owner's stream ends
    let status = c.child.wait().unwrap();
    assert!(status.success(), "{status}");
    wait_for("every process to end", || processes_with(marker).is_empty());
}

#[test]
fn refusals_are_typed() {
    let mut c = Client::start();
    let (failure, _) = c.run(1, &["/nonexistent/program"]).failed.unwrap();
    assert_eq!(failure, Failure::NotFound);
    let (failure, _) = c.run(2, &["sh\0x"]).failed.unwrap();
    assert_eq!(failure, Failure::InvalidInput);
    let (failure, _) = c.run(3, &[]).failed.unwrap();
    assert_eq!(failure, Failure::InvalidInput);
}

#[test]
fn garbage_ends_the_session_without_a_hang() {
    let mut c = Client::start();
    c.to.as_mut().unwrap().write_all(&[0xff; 64]).unwrap();
    let status = c.child.wait().unwrap();
    assert_eq!(status.code(), Some(2));
    // And a stream that does not start with Hello.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandboxd")).stdin(Stdio::piped()).spawn().unwrap();
    let bytes = Frame::new(1, Message::Ping { nonce: 1 }).to_bytes().unwrap();
    child.stdin.as_mut().unwrap().write_all(&bytes).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(2));
}
