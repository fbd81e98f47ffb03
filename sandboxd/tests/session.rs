//! sandboxd end to end: the built binary, driven over its stdio by a small blocking client.
//!
//! These run sandboxd as an ordinary child (not a PID-namespace init), which its shepherds do
//! not need: every process-tree check here holds without namespaces.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sandboxd::proto;
use sandboxd::proto::{
    Decoder, Failure, FileType, Frame, Message, Spawn, Status, StdinMode, Stream, VERSION,
};

/// A client whose frames are read on a thread of their own: a host must read while it writes,
/// or sandboxd's output and the host's input can fill both pipes and wait on each other.
struct Client {
    /// sandboxd (or its wrapper); `None` for a `--listen-fd` connection.
    child: Option<Child>,
    to: Option<Box<dyn Write + Send>>,
    from: mpsc::Receiver<Frame>,
    user: Option<(u32, u32)>,
    /// The pid sandboxd gave in `HelloAck`, in its own PID namespace.
    pid: u32,
}

/// The writing half of a `--listen-fd` connection: dropping it shuts the socket's write side,
/// which sandboxd reads as the end of the session (the reader thread holds another handle).
struct SocketWriter(UnixStream);

impl Write for SocketWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl Drop for SocketWriter {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Write);
    }
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
        Client::start_as(None)
    }

    /// As [`Client::start`], with `user` as the session's sandbox user.
    fn start_as(user: Option<(u32, u32)>) -> Client {
        Client::start_with(&[], user, false)
    }

    /// As [`Client::start_as`], with sandboxd's command-line `args` (after the wrapper's, if
    /// any), and its stderr piped (to read with [`Client::stderr`]) when `stderr` is set.
    fn start_with(args: &[&str], user: Option<(u32, u32)>, stderr: bool) -> Client {
        let mut command = sandboxd(args);
        if stderr {
            command.stderr(Stdio::piped());
        }
        Client::start_command(command, user)
    }

    /// sandboxd with `args` and `--listen-fd 4`: a socket bound here at `path` (not
    /// listening), handed over as descriptor 4 as the local backend's launcher does. `None`,
    /// said on stderr, under a Docker wrapper, which cannot pass a descriptor (docker:// gives
    /// sandboxd no socket); the bwrap wrapper passes it on.
    fn start_listening(args: &[&str], path: &std::path::Path) -> Option<Client> {
        use command_fds::{CommandFdExt as _, FdMapping};
        if std::env::var("SANDBOXD_TEST_WRAP").is_ok_and(|w| w.contains("docker ")) {
            eprintln!("skipped: a Docker wrapper cannot hand sandboxd a descriptor");
            return None;
        }
        let mut all = args.to_vec();
        all.extend(["--listen-fd", "4"]);
        let mut command = sandboxd(&all);
        command.fd_mappings(vec![FdMapping { parent_fd: bound_socket(path), child_fd: 4 }]).unwrap();
        Some(Client::start_command(command, None))
    }

    /// Spawns `command` with piped stdio and greets it; the command (and any descriptor it
    /// was to hand over) is dropped once spawned, so sandboxd holds the only copy.
    fn start_command(mut command: Command, user: Option<(u32, u32)>) -> Client {
        let spawned = command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn();
        drop(command);
        let mut child = spawned.expect("sandboxd starts");
        let to = child.stdin.take().unwrap();
        let from = child.stdout.take().unwrap();
        Client::over(Some(child), Box::new(to), from, user)
    }

    /// A session on sandboxd's `--listen-fd` socket, bound at `path`.
    fn connect(path: &std::path::Path) -> Client {
        Client::try_connect(path).expect("a session on the socket")
    }

    /// As [`Client::connect`]; `None` when sandboxd closed the connection instead of
    /// answering `Hello`.
    fn try_connect(path: &std::path::Path) -> Option<Client> {
        let socket = UnixStream::connect(path).expect("the socket accepts");
        let reader = socket.try_clone().unwrap();
        Client::try_over(None, Box::new(SocketWriter(socket)), reader, None)
    }

    fn over(
        child: Option<Child>,
        to: Box<dyn Write + Send>,
        from: impl Read + Send + 'static,
        user: Option<(u32, u32)>,
    ) -> Client {
        Client::try_over(child, to, from, user).expect("a HelloAck")
    }

    fn try_over(
        child: Option<Child>,
        to: Box<dyn Write + Send>,
        mut stdout: impl Read + Send + 'static,
        user: Option<(u32, u32)>,
    ) -> Option<Client> {
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
        let mut c = Client { child, to: Some(to), from, user: None, pid: 0 };
        // A connection sandboxd closed at once may refuse the Hello itself (EPIPE).
        let bytes = Frame::new(0, Message::Hello { version: VERSION, user }).to_bytes().unwrap();
        c.to.as_mut().unwrap().write_all(&bytes).ok()?;
        match c.from.recv_timeout(Duration::from_secs(30)).ok()?.message {
            Message::HelloAck { version, pid } => {
                assert_eq!(version, VERSION);
                c.pid = pid;
            }
            other => panic!("expected HelloAck, got {other:?}"),
        }
        Some(c)
    }

    fn send(&mut self, id: u32, message: Message) {
        let bytes = Frame::new(id, message).to_bytes().unwrap();
        self.to.as_mut().unwrap().write_all(&bytes).unwrap();
    }

    fn recv(&mut self) -> Frame {
        self.from.recv_timeout(Duration::from_secs(30)).expect("a frame from sandboxd")
    }

    /// sandboxd (or its wrapper) itself.
    fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("a client that started sandboxd")
    }

    /// Everything sandboxd wrote to stderr (piped by [`Client::start_with`]), once it exited.
    fn stderr(&mut self) -> String {
        let mut text = String::new();
        self.child().stderr.take().expect("a piped stderr").read_to_string(&mut text).unwrap();
        text
    }

    /// Sends `Detach` and waits for `Detached`, skipping other frames.
    fn detach(&mut self) {
        self.send(0, Message::Detach);
        while !matches!(self.recv(), Frame { id: 0, message: Message::Detached }) {}
    }

    /// Starts a command that prints `started` and then sleeps with `marker` in its command
    /// line, and returns once it printed (so it is running, its processes findable).
    fn start_sleeper(&mut self, id: u32, marker: &str) {
        self.spawn(id, &["sh", "-c", &format!("echo started; exec sleep {marker}")], StdinMode::Null);
        self.send(id, Message::Credit { bytes: 1 << 20 });
        loop {
            match self.recv().message {
                Message::Output { stream: Stream::Stdout, data } => {
                    assert_eq!(data, b"started\n");
                    break;
                }
                Message::Spawned { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        wait_for("the sleeper", || !processes_with(marker).is_empty());
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
        if let Some(child) = &mut self.child {
            let _ = child.wait();
        }
    }
}

/// The command that starts sandboxd with `args`: the built binary, or with
/// `SANDBOXD_TEST_WRAP` set, that shell command with `"$@"` appended (the wrapper ends with
/// the binary, which gets the arguments).
fn sandboxd(args: &[&str]) -> Command {
    if let Ok(wrap) = std::env::var("SANDBOXD_TEST_WRAP") {
        let mut c = Command::new("sh");
        c.arg("-c").arg(format!("{wrap} \"$@\"")).arg("sh").args(args);
        c.env("SANDBOXD", env!("CARGO_BIN_EXE_sandboxd"));
        c
    } else {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sandboxd"));
        c.args(args);
        c
    }
}

/// A Unix stream socket bound at `path`, not listening: what the local backend hands sandboxd.
fn bound_socket(path: &std::path::Path) -> std::os::fd::OwnedFd {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let socket =
        rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None)
            .unwrap();
    rustix::net::bind(&socket, &SocketAddrUnix::new(path).unwrap()).unwrap();
    socket
}

/// Whether the tests run sandboxd inside a container or bwrap (`scripts/sandboxd-wrapped`):
/// then the test's child is the wrapper, not sandboxd.
fn wrapped() -> bool {
    std::env::var_os("SANDBOXD_TEST_WRAP").is_some()
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

/// Waits for sandboxd (or its wrapper) to exit, failing the test (and killing it) when it
/// is still running after `within`.
fn exit_status(c: &mut Client, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = c.child().try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = c.child().kill();
            panic!("sandboxd still runs after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
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

/// Issue #28's lost commands: from about 24 at once, sandboxd's descriptors reach 100, where a
/// shepherd used to park its own while moving them into place (`dup2` onto 100..=105), and a
/// command whose pipes sat there lost its report pipe: it ran, yet sandboxd said "the
/// command's shepherd was killed". Every command here holds its five descriptors open
/// (`cat` on a piped stdin), so each new one's pipes sit higher than the last's and some land
/// on 100..=105 whatever the base count.
#[test]
fn no_command_is_lost_however_many_descriptors_sandboxd_holds() {
    const HELD: u32 = 60;
    let mut c = Client::start();
    for id in 1..=HELD {
        c.spawn(id, &["cat"], StdinMode::Pipe);
    }
    let mut spawned = 0;
    let mut failed = Vec::new();
    while spawned + failed.len() < HELD as usize {
        let Ok(f) = c.from.recv_timeout(Duration::from_secs(20)) else {
            panic!(
                "{spawned} of {HELD} commands started, {} were lost, the rest never answered: {failed:?}",
                failed.len()
            )
        };
        match f.message {
            Message::Spawned { .. } => spawned += 1,
            Message::Failed { message, .. } => {
                failed.push((f.id, String::from_utf8_lossy(&message).into_owned()));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(failed.is_empty(), "{} of {HELD} commands were lost: {failed:?}", failed.len());
    for id in 1..=HELD {
        c.send(id, Message::Stdin { data: format!("{id}\n").into_bytes() });
        c.send(id, Message::StdinEof);
    }
    for id in 1..=HELD {
        let out = c.finish(id);
        assert_eq!(out.status, Some(Status::Code(0)), "command {id}: {out:?}");
        assert_eq!(out.stdout, format!("{id}\n").as_bytes(), "command {id}");
    }
}

/// A command writing a byte at a time to stdout and stderr in turn gets one output frame per
/// byte from a sandboxd that keeps up; each frame takes at least `MIN_FRAME_CREDIT` of the
/// host's credit, so a window of 64 KiB carries at most 256 of them before sandboxd waits
/// for more (the host keeps each frame it has not handed out, at a cost beyond its bytes).
#[test]
fn each_output_frame_takes_at_least_its_minimum_credit() {
    const WRITES: usize = 3000;
    const WINDOW: u32 = 64 * 1024;
    let mut c = Client::start();
    let program = format!(
        "import os, time\nfor i in range({WRITES}):\n    os.write(1 + i % 2, b'x')\n    time.sleep(0.0002)\n"
    );
    c.spawn(1, &["python3", "-c", &program], StdinMode::Null);
    c.send(1, Message::Credit { bytes: WINDOW });
    let (mut frames, mut bytes) = (0, 0);
    // Until sandboxd goes quiet: its credit is spent, or the command wrote everything.
    while let Ok(f) = c.from.recv_timeout(Duration::from_secs(2)) {
        match f.message {
            Message::Output { data, .. } => {
                frames += 1;
                bytes += data.len();
            }
            Message::Spawned { .. } => {}
            other => panic!("unexpected {other:?} with {frames} frames, {bytes} bytes"),
        }
    }
    let allowed = (WINDOW / proto::MIN_FRAME_CREDIT) as usize;
    assert!(frames <= allowed, "{frames} frames ({bytes} bytes) within {WINDOW} bytes of credit");
    // The control: with credit to spare the rest arrives, every byte.
    let rest = c.finish(1);
    assert_eq!(rest.status, Some(Status::Code(0)), "{rest:?}");
    assert_eq!(bytes + rest.stdout.len() + rest.stderr.len(), WRITES);
    assert!(frames * 2 >= allowed, "control: {frames} frames: the writes did not come a few bytes at a time");
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
fn a_command_that_stops_its_shepherd_still_ends_on_a_kill() {
    // Same uid as its shepherd (as a root sandbox user's commands are): the command can stop
    // it. The host's kill must still end the command and everything it started.
    let mut c = Client::start();
    let marker = "4015.25";
    c.spawn(
        1,
        &["sh", "-c", &format!("sleep {marker} & kill -STOP $PPID; echo stopped; sleep {marker}")],
        StdinMode::Null,
    );
    c.send(1, Message::Credit { bytes: 1 << 20 });
    loop {
        match c.recv().message {
            Message::Output { stream: Stream::Stdout, data } if data == b"stopped\n" => break,
            Message::Spawned { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    // Positive control: the shepherd is stopped, and the command's processes run.
    wait_for("the command's processes", || processes_with(marker).len() >= 2);
    let started = Instant::now();
    c.send(1, Message::Signal { signal: 9 });
    let out = c.finish(1);
    assert!(out.status.is_some() || out.failed.is_some(), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "the kill took {:?}", started.elapsed());
    wait_for("the command's processes to die", || processes_with(marker).is_empty());
    assert_eq!(c.run(2, &["true"]).status, Some(Status::Code(0)), "the session is still good");
}

#[test]
fn a_command_that_stops_its_shepherd_still_reports_its_exit() {
    let mut c = Client::start();
    let started = Instant::now();
    let out = c.run(1, &["sh", "-c", "kill -STOP $PPID; exit 7"]);
    assert_eq!(out.status, Some(Status::Code(7)), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "the exit took {:?}", started.elapsed());
}

#[test]
fn the_host_leaving_ends_a_command_that_stopped_its_shepherd() {
    let mut c = Client::start();
    let marker = "4016.25";
    let out = c.run(1, &["sh", "-c", "true"]);
    assert_eq!(out.status, Some(Status::Code(0)));
    c.spawn(2, &["sh", "-c", &format!("sleep {marker} & kill -STOP $PPID; sleep {marker}")], StdinMode::Null);
    wait_for("the processes to start", || processes_with(marker).len() >= 2);
    c.to = None; // the owner's stream ends
    let status = exit_status(&mut c, Duration::from_secs(10));
    assert!(status.success(), "{status}");
    wait_for("every process to end", || processes_with(marker).is_empty());
}

#[test]
fn the_host_leaving_ends_every_command_and_sandboxd() {
    let mut c = Client::start();
    let marker = "4014.25";
    c.spawn(1, &["sh", "-c", &format!("setsid sleep {marker} & sleep {marker}")], StdinMode::Null);
    wait_for("the processes to start", || processes_with(marker).len() >= 2);
    c.to = None; // the owner's stream ends
    let status = c.child().wait().unwrap();
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
    let status = c.child().wait().unwrap();
    assert_eq!(status.code(), Some(2));
    // And a stream that does not start with Hello.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandboxd")).stdin(Stdio::piped()).spawn().unwrap();
    let bytes = Frame::new(1, Message::Ping { nonce: 1 }).to_bytes().unwrap();
    child.stdin.as_mut().unwrap().write_all(&bytes).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(2));
}

/// Everything sandboxd answered to file request `id`, through its last frame.
fn answers(c: &mut Client, id: u32) -> Vec<Message> {
    let mut got = Vec::new();
    loop {
        let f = c.recv();
        if f.id != id {
            continue;
        }
        let last =
            matches!(f.message, Message::FsDone | Message::Failed { .. } | Message::FsStatReply { .. });
        got.push(f.message);
        if last {
            return got;
        }
    }
}

fn failure_of(answers: &[Message]) -> Option<Failure> {
    answers.iter().find_map(|m| match m {
        Message::Failed { failure, .. } => Some(*failure),
        _ => None,
    })
}

fn write_file(c: &mut Client, id: u32, path: &str, mode: u32, data: &[u8]) -> Vec<Message> {
    c.send(id, Message::FsWrite { path: path.into(), mode });
    for chunk in data.chunks(60_000) {
        c.send(id, Message::FsData { data: chunk.to_vec() });
    }
    c.send(id, Message::FsEnd);
    answers(c, id).into_iter().filter(|m| !matches!(m, Message::Credit { .. })).collect()
}

fn read_file(c: &mut Client, id: u32, path: &str, limit: u64) -> Result<Vec<u8>, Failure> {
    c.send(id, Message::FsRead { path: path.into(), limit });
    c.send(id, Message::Credit { bytes: u32::MAX });
    let got = answers(c, id);
    if let Some(f) = failure_of(&got) {
        return Err(f);
    }
    Ok(got
        .into_iter()
        .flat_map(|m| if let Message::FsChunk { data } = m { data } else { Vec::new() })
        .collect())
}

struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("sandboxd-fs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        Scratch(dir)
    }

    /// A scratch directory of mode `mode` for a test that switches the filesystem identity,
    /// which needs root: `None` (the test skipped, saying so) without it.
    fn as_root(name: &str, mode: u32) -> Option<Scratch> {
        if euid() != 0 {
            eprintln!("skipped: switching the filesystem identity needs root");
            return None;
        }
        let dir = Scratch::new(name);
        std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        Some(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn files_round_trip_whole_with_their_mode_and_no_temporary_left() {
    let mut c = Client::start();
    let dir = Scratch::new("roundtrip");
    let data: Vec<u8> = (0..300_000u32).map(|i| u8::try_from(i * 7 % 256).unwrap()).collect();
    assert_eq!(write_file(&mut c, 1, &dir.path("f.bin"), 0o640, &data), vec![Message::FsDone]);
    assert_eq!(read_file(&mut c, 2, &dir.path("f.bin"), 1 << 30), Ok(data.clone()));
    c.send(3, Message::FsStat { path: dir.path("f.bin").into() });
    assert_eq!(
        answers(&mut c, 3),
        vec![Message::FsStatReply { file_type: FileType::File, size: 300_000, mode: 0o640 }]
    );
    // Replacing is atomic and leaves only the file.
    assert_eq!(write_file(&mut c, 4, &dir.path("f.bin"), 0o600, b"new"), vec![Message::FsDone]);
    assert_eq!(read_file(&mut c, 5, &dir.path("f.bin"), 10), Ok(b"new".to_vec()));
    let names: Vec<_> = std::fs::read_dir(&dir.0).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("f.bin")]);
}

#[test]
fn reads_are_refused_by_kind_and_size_without_hanging() {
    let mut c = Client::start();
    let dir = Scratch::new("refusals");
    std::fs::write(dir.0.join("big"), vec![0u8; 5000]).unwrap();
    let fifo = dir.path("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    assert_eq!(read_file(&mut c, 1, &dir.path("big"), 4999), Err(Failure::TooLarge));
    assert_eq!(
        read_file(&mut c, 2, &dir.path("big"), 5000).map(|d| d.len()),
        Ok(5000),
        "control: at the limit"
    );
    assert_eq!(read_file(&mut c, 3, &dir.path(""), 10), Err(Failure::IsADirectory));
    assert_eq!(read_file(&mut c, 4, &fifo, 10), Err(Failure::InvalidInput), "a fifo must not block sandboxd");
    assert_eq!(read_file(&mut c, 5, &dir.path("missing"), 10), Err(Failure::NotFound));
    assert_eq!(read_file(&mut c, 6, "relative/path", 10), Err(Failure::InvalidInput));
    let written = write_file(&mut c, 7, &dir.path(""), 0o600, b"x");
    assert_eq!(failure_of(&written), Some(Failure::IsADirectory));
}

#[test]
fn a_read_never_runs_ahead_of_its_credit() {
    let mut c = Client::start();
    let dir = Scratch::new("credit");
    std::fs::write(dir.0.join("f"), vec![1u8; 200_000]).unwrap();
    c.send(1, Message::FsRead { path: dir.path("f").into(), limit: 1 << 20 });
    c.send(1, Message::Credit { bytes: 1000 });
    c.send(0, Message::Ping { nonce: 1 });
    let mut got = 0;
    loop {
        match c.recv().message {
            Message::FsChunk { data } => got += data.len(),
            Message::Pong { .. } if got == 1000 => break,
            Message::Pong { .. } => c.send(0, Message::Ping { nonce: 1 }),
            other => panic!("unexpected {other:?}"),
        }
    }
    c.send(0, Message::Ping { nonce: 2 });
    assert!(matches!(c.recv().message, Message::Pong { nonce: 2 }), "bytes past the credit arrived");
    c.send(1, Message::Credit { bytes: u32::MAX });
    let rest: usize = answers(&mut c, 1)
        .iter()
        .map(|m| if let Message::FsChunk { data } = m { data.len() } else { 0 })
        .sum();
    assert_eq!(got + rest, 200_000);
}

#[test]
fn directories_are_made_listed_and_removed() {
    let mut c = Client::start();
    let dir = Scratch::new("dirs");
    c.send(1, Message::FsMkdir { path: dir.path("a/b/c").into(), parents: true });
    assert_eq!(answers(&mut c, 1), vec![Message::FsDone]);
    c.send(2, Message::FsMkdir { path: dir.path("x/y").into(), parents: false });
    assert_eq!(failure_of(&answers(&mut c, 2)), Some(Failure::NotFound));
    std::fs::write(dir.0.join("a/file"), b"12345").unwrap();
    std::fs::set_permissions(dir.0.join("a/file"), std::os::unix::fs::PermissionsExt::from_mode(0o640))
        .unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.0.join("a/link")).unwrap();
    c.send(3, Message::FsList { path: dir.path("a").into() });
    c.send(3, Message::Credit { bytes: u32::MAX });
    let mut entries: Vec<_> = answers(&mut c, 3)
        .into_iter()
        .flat_map(|m| if let Message::FsEntries { entries } = m { entries } else { Vec::new() })
        .map(|e| (String::from_utf8(e.name).unwrap(), e.file_type, e.size, e.mode))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(entries[0].1, FileType::Dir);
    assert_eq!(entries[1], ("file".into(), FileType::File, 5, 0o640));
    assert_eq!(entries[2].0, "link");
    assert_eq!((entries[2].1, entries[2].3), (FileType::Symlink, 0o777), "the link itself, not its target");
    c.send(4, Message::FsRemove { path: dir.path("a").into(), recursive: false });
    assert_eq!(
        failure_of(&answers(&mut c, 4)),
        Some(Failure::IsADirectory),
        "a non-empty directory needs recursive"
    );
    c.send(5, Message::FsRemove { path: dir.path("a").into(), recursive: true });
    assert_eq!(answers(&mut c, 5), vec![Message::FsDone]);
    assert!(!dir.0.join("a").exists());
    assert!(std::path::Path::new("/etc/passwd").exists(), "the link's target survives");
}

#[test]
fn file_operations_run_as_the_sandbox_user() {
    let Some(dir) = Scratch::as_root("identity", 0o755) else { return };
    std::fs::create_dir(dir.0.join("open")).unwrap();
    std::fs::set_permissions(dir.0.join("open"), std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .unwrap();
    std::fs::write(dir.0.join("secret"), b"root only").unwrap();
    std::fs::set_permissions(dir.0.join("secret"), std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .unwrap();
    let mut c = Client::start_as(Some((65534, 65534)));
    // The control: where nobody may write, the write works and the file is nobody's.
    assert_eq!(write_file(&mut c, 1, &dir.path("open/mine"), 0o644, b"hi"), vec![Message::FsDone]);
    let meta = std::fs::metadata(dir.0.join("open/mine")).unwrap();
    assert_eq!(
        (std::os::unix::fs::MetadataExt::uid(&meta), std::os::unix::fs::MetadataExt::gid(&meta)),
        (65534, 65534)
    );
    assert_eq!(
        failure_of(&write_file(&mut c, 2, &dir.path("denied"), 0o644, b"x")),
        Some(Failure::PermissionDenied)
    );
    assert_eq!(read_file(&mut c, 3, &dir.path("secret"), 100), Err(Failure::PermissionDenied));
    // And sandboxd is root again afterwards: the commands it starts without a user still are.
    let mut plain = Client::start();
    assert_eq!(read_file(&mut plain, 1, &dir.path("secret"), 100), Ok(b"root only".to_vec()));
}

#[test]
fn a_signal_cancels_a_file_request_and_frees_its_id() {
    let mut c = Client::start();
    let dir = Scratch::new("cancel");
    std::fs::write(dir.0.join("f"), vec![0u8; 100_000]).unwrap();
    c.send(9, Message::FsRead { path: dir.path("f").into(), limit: 1 << 20 });
    c.send(9, Message::Signal { signal: 9 });
    // Were the read still open, reusing its id would end the session as a protocol error.
    c.send(9, Message::FsStat { path: dir.path("f").into() });
    assert!(matches!(answers(&mut c, 9)[..], [Message::FsStatReply { size: 100_000, .. }]));
}

fn mode_of(path: &std::path::Path) -> u32 {
    std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(path).unwrap().permissions()) & 0o7777
}

#[test]
fn an_existing_file_is_written_in_place_keeping_its_mode_links_and_hard_links() {
    let mut c = Client::start();
    let dir = Scratch::new("inplace");
    let tool = dir.0.join("tool.sh");
    std::fs::write(&tool, b"old").unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o750)).unwrap();
    std::fs::hard_link(&tool, dir.0.join("hard")).unwrap();
    std::os::unix::fs::symlink("tool.sh", dir.0.join("link")).unwrap();
    assert_eq!(write_file(&mut c, 1, &dir.path("tool.sh"), 0o600, b"new"), vec![Message::FsDone]);
    assert_eq!(std::fs::read(dir.0.join("hard")).unwrap(), b"new", "the hard link sees the write");
    assert_eq!(mode_of(&tool), 0o750, "the mode is kept");
    assert_eq!(write_file(&mut c, 2, &dir.path("link"), 0o600, b"through"), vec![Message::FsDone]);
    assert!(
        std::fs::symlink_metadata(dir.0.join("link")).unwrap().file_type().is_symlink(),
        "the link stays"
    );
    assert_eq!(std::fs::read(&tool).unwrap(), b"through", "the link's target is written");
    // A dangling link: its target is made (as `>` would), with the mode asked for.
    std::os::unix::fs::symlink("made.txt", dir.0.join("dangling")).unwrap();
    assert_eq!(write_file(&mut c, 3, &dir.path("dangling"), 0o640, b"m"), vec![Message::FsDone]);
    assert_eq!(std::fs::read(dir.0.join("made.txt")).unwrap(), b"m");
    assert_eq!(mode_of(&dir.0.join("made.txt")), 0o640);
    // A new file in a new directory: the parent made, the mode exactly as asked (no umask),
    // and no temporary file left beside it.
    assert_eq!(write_file(&mut c, 4, &dir.path("sub/new.bin"), 0o604, b"n"), vec![Message::FsDone]);
    assert_eq!(mode_of(&dir.0.join("sub/new.bin")), 0o604);
    let names: Vec<_> =
        std::fs::read_dir(dir.0.join("sub")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("new.bin")]);
}

#[test]
fn a_write_to_a_special_file_is_refused_at_once_and_leaves_it() {
    use std::os::unix::fs::FileTypeExt as _;
    let mut c = Client::start();
    let dir = Scratch::new("special");
    let fifo = dir.path("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let started = Instant::now();
    assert_eq!(failure_of(&write_file(&mut c, 1, &fifo, 0o644, b"x")), Some(Failure::InvalidInput));
    assert!(started.elapsed() < Duration::from_secs(5), "a FIFO with no reader held the write");
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced");
    std::os::unix::fs::symlink("/dev/null", dir.0.join("null")).unwrap();
    assert_eq!(
        failure_of(&write_file(&mut c, 2, &dir.path("null"), 0o644, b"x")),
        Some(Failure::InvalidInput)
    );
    assert!(
        std::fs::symlink_metadata(dir.0.join("null")).unwrap().file_type().is_symlink(),
        "the link was replaced"
    );
    // The session goes on: the refused writes' data frames were dropped quietly.
    assert_eq!(write_file(&mut c, 3, &dir.path("plain"), 0o644, b"ok"), vec![Message::FsDone]);
}

#[test]
fn a_write_the_sandbox_user_may_not_make_is_refused_even_where_a_rename_could_replace_it() {
    // A directory everyone may write (no sticky bit), so a rename over the file would work.
    let Some(dir) = Scratch::as_root("notmine", 0o777) else { return };
    std::fs::write(dir.0.join("roots"), b"root's").unwrap();
    std::fs::set_permissions(dir.0.join("roots"), std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .unwrap();
    std::fs::write(dir.0.join("nobodys"), b"nobody's").unwrap();
    std::os::unix::fs::chown(dir.0.join("nobodys"), Some(65534), Some(65534)).unwrap();
    let mut c = Client::start_as(Some((65534, 65534)));
    // The control: the user's own file is written, and stays the user's.
    assert_eq!(write_file(&mut c, 1, &dir.path("nobodys"), 0o600, b"new"), vec![Message::FsDone]);
    let meta = std::fs::metadata(dir.0.join("nobodys")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 65534);
    assert_eq!(
        failure_of(&write_file(&mut c, 2, &dir.path("roots"), 0o600, b"taken")),
        Some(Failure::PermissionDenied)
    );
    assert_eq!(std::fs::read(dir.0.join("roots")).unwrap(), b"root's", "root's file was replaced");
    assert_eq!(mode_of(&dir.0.join("roots")), 0o644);
}

#[test]
fn sandboxd_never_reads_or_writes_its_own_process_files() {
    let mut c = Client::start();
    let dir = Scratch::new("ownproc");
    // The control: other /proc files read as any file.
    assert!(read_file(&mut c, 1, "/proc/version", 1 << 20).is_ok_and(|v| v.starts_with(b"Linux")));
    assert_eq!(read_file(&mut c, 2, "/proc/self/environ", 1 << 20), Err(Failure::PermissionDenied));
    assert_eq!(read_file(&mut c, 3, "/proc/thread-self/status", 1 << 20), Err(Failure::PermissionDenied));
    if !wrapped() {
        let own = format!("/proc/{}/cmdline", c.pid);
        assert_eq!(read_file(&mut c, 4, &own, 1 << 20), Err(Failure::PermissionDenied));
    }
    // Nor through a link the code planted, for a read or a write.
    std::os::unix::fs::symlink("/proc/self/comm", dir.0.join("comm")).unwrap();
    assert_eq!(read_file(&mut c, 5, &dir.path("comm"), 100), Err(Failure::PermissionDenied));
    assert_eq!(
        failure_of(&write_file(&mut c, 6, &dir.path("comm"), 0o644, b"renamed")),
        Some(Failure::PermissionDenied)
    );
    assert!(std::fs::symlink_metadata(dir.0.join("comm")).unwrap().file_type().is_symlink());
}

#[test]
fn listings_mkdir_and_remove_refuse_the_wrong_kind() {
    let mut c = Client::start();
    let dir = Scratch::new("kinds");
    std::fs::write(dir.0.join("file"), b"x").unwrap();
    c.send(1, Message::FsList { path: dir.path("file").into() });
    c.send(1, Message::Credit { bytes: 1 << 20 });
    assert_eq!(failure_of(&answers(&mut c, 1)), Some(Failure::InvalidInput), "a file is not listed");
    c.send(2, Message::FsMkdir { path: dir.path("file").into(), parents: true });
    assert_eq!(failure_of(&answers(&mut c, 2)), Some(Failure::InvalidInput), "mkdir over a file");
    c.send(3, Message::FsMkdir { path: dir.path("file/below").into(), parents: true });
    assert_eq!(failure_of(&answers(&mut c, 3)), Some(Failure::NotFound), "mkdir below a file");
    c.send(4, Message::FsMkdir { path: dir.path("").into(), parents: true });
    assert_eq!(answers(&mut c, 4), vec![Message::FsDone], "an existing directory is fine");
    c.send(5, Message::FsRemove { path: dir.path("missing").into(), recursive: true });
    assert_eq!(failure_of(&answers(&mut c, 5)), Some(Failure::NotFound));
}

/// What the code-cell runner (`sandboxd/src/runner.py`) said, in arrival order, with the
/// stdout bytes between its records.
#[derive(Debug, PartialEq)]
enum Said {
    Stdout(String),
    Record(String, Vec<u8>),
}

struct Runner {
    c: Client,
    ctrl: Vec<u8>,
}

impl Runner {
    fn start() -> Option<Runner> {
        if !std::path::Path::new("/usr/bin/python3").exists() {
            eprintln!("skipped: no /usr/bin/python3 for the runner");
            return None;
        }
        let mut c = Client::start();
        let spec = Spawn {
            argv: ["python3", "-u", "-c", include_str!("../src/runner.py")]
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect(),
            env: vec![(b"PATH".to_vec(), b"/usr/bin:/bin".to_vec())],
            control: true,
            undumpable: true,
            ..Spawn::default()
        };
        c.send(1, Message::Spawn(spec));
        c.send(1, Message::Credit { bytes: u32::MAX });
        let mut r = Runner { c, ctrl: Vec::new() };
        let (said, _) = r.until_done_or("ready");
        assert!(matches!(&said[..], [Said::Record(h, _)] if h == "ready 0"), "{said:?}");
        Some(r)
    }

    /// Parses one record off the control bytes received so far.
    fn record(&mut self) -> Option<(String, Vec<u8>)> {
        let nl = self.ctrl.iter().position(|&b| b == b'\n')?;
        let header = String::from_utf8(self.ctrl[..nl].to_vec()).unwrap();
        let len: usize = header.rsplit(' ').next().unwrap().parse().unwrap();
        if self.ctrl.len() < nl + 1 + len {
            return None;
        }
        let payload = self.ctrl[nl + 1..nl + 1 + len].to_vec();
        self.ctrl.drain(..nl + 1 + len);
        Some((header, payload))
    }

    /// Collects what arrives until a record whose header starts with `stop`.
    fn until_done_or(&mut self, stop: &str) -> (Vec<Said>, String) {
        let mut said = Vec::new();
        loop {
            while let Some((header, payload)) = self.record() {
                let done = header.starts_with(stop);
                said.push(Said::Record(header.clone(), payload));
                if done {
                    return (said, header);
                }
            }
            match self.c.recv().message {
                Message::Output { stream: Stream::Control, data } => self.ctrl.extend(data),
                Message::Output { stream: Stream::Stdout, data } => {
                    said.push(Said::Stdout(String::from_utf8(data).unwrap()));
                }
                Message::Output { stream: Stream::Stderr, .. }
                | Message::Spawned { .. }
                | Message::Credit { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    fn cell(&mut self, code: &str) -> Vec<Said> {
        let mut data = format!("cell {}\n", code.len()).into_bytes();
        data.extend_from_slice(code.as_bytes());
        self.c.send(1, Message::ControlIn { data });
        self.until_done_or("done").0
    }
}

fn records(said: &[Said]) -> Vec<(String, String)> {
    said.iter()
        .filter_map(|s| match s {
            Said::Record(h, p) => Some((h.clone(), String::from_utf8_lossy(p).into_owned())),
            Said::Stdout(_) => None,
        })
        .collect()
}

#[test]
fn code_cells_keep_their_state_and_print_before_their_results() {
    let Some(mut r) = Runner::start() else { return };
    let said = r.cell("x = 41\nprint('hello')\nx + 1");
    let first_record = said.iter().position(|s| matches!(s, Said::Record(..))).unwrap();
    let printed: String =
        said[..first_record].iter().map(|s| if let Said::Stdout(t) = s { t.as_str() } else { "" }).collect();
    assert_eq!(printed, "hello\n", "printed output comes first: {said:?}");
    assert_eq!(
        records(&said),
        vec![
            ("bundle result 1 0".into(), String::new()),
            ("item text/plain 2".into(), "42".into()),
            ("done 1 0".into(), String::new()),
        ]
    );
    // State survives, and a cell cannot break the runner by shadowing its names.
    let said = r.cell("send = main = None\nx");
    assert_eq!(records(&said)[1], ("item text/plain 2".into(), "41".into()));
    let said = r.cell("1/0");
    let (header, payload) = &records(&said)[0];
    assert!(header.starts_with("error "), "{said:?}");
    assert!(payload.starts_with("ZeroDivisionError\ndivision by zero\n"), "{payload}");
    assert!(payload.contains("<cell-3>") && !payload.contains("<string>"), "{payload}");
}

#[test]
fn rich_results_come_back_by_mime_type() {
    let Some(mut r) = Runner::start() else { return };
    let code = "class T:\n    def _repr_html_(self):\n        return '<b>t</b>'\n    def _repr_png_(self):\n        return b'\\x89PNG'\n\ndisplay(T())\nT()";
    let said = records(&r.cell(code));
    assert_eq!(said[0].0, "bundle display 3 0");
    assert!(said.contains(&("item text/html 8".into(), "<b>t</b>".into())), "{said:?}");
    assert!(said.iter().any(|(h, _)| h == "item image/png 4"), "{said:?}");
    assert!(said.iter().any(|(h, _)| h == "bundle result 3 0"), "{said:?}");
}

#[test]
fn an_interrupt_stops_the_cell_and_keeps_the_context() {
    let Some(mut r) = Runner::start() else { return };
    r.cell("x = 7");
    let code = "import time\nprint('started')\ntime.sleep(1000)";
    let mut data = format!("cell {}\n", code.len()).into_bytes();
    data.extend_from_slice(code.as_bytes());
    r.c.send(1, Message::ControlIn { data });
    // Wait for the cell to be running before interrupting it.
    loop {
        if let Message::Output { stream: Stream::Stdout, data } = r.c.recv().message {
            assert!(data.starts_with(b"started"), "{data:?}");
            break;
        }
    }
    r.c.send(1, Message::Signal { signal: 2 });
    let said = records(&r.until_done_or("done").0);
    assert!(said[0].0.starts_with("error ") && said[0].1.starts_with("KeyboardInterrupt"), "{said:?}");
    assert_eq!(records(&r.cell("x"))[1], ("item text/plain 1".into(), "7".into()));
}

#[test]
fn a_matplotlib_figure_is_a_png_and_a_dataframe_is_html() {
    let Some(mut r) = Runner::start() else { return };
    let probe =
        records(&r.cell("import importlib.util as u\nall(u.find_spec(m) for m in ('matplotlib', 'pandas'))"));
    if probe[1].1 != "True" {
        assert!(
            std::env::var_os("SANDBOXIO_STRICT").is_none(),
            "matplotlib and pandas are missing in a strict run"
        );
        eprintln!("skipped: matplotlib or pandas is not installed for /usr/bin/python3");
        return;
    }
    let said = r.cell("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nNone");
    let png = said.iter().find_map(|s| match s {
        Said::Record(h, p) if h.starts_with("item image/png ") => Some(p.clone()),
        _ => None,
    });
    assert!(png.is_some_and(|p| p.starts_with(b"\x89PNG\r\n\x1a\n")), "{:?}", records(&said));
    let said = records(&r.cell("import pandas as pd\npd.DataFrame({'a': [1, 2]})"));
    let html = said.iter().find(|(h, _)| h.starts_with("item text/html ")).map(|(_, p)| p.clone());
    assert!(html.is_some_and(|h| h.contains("<table")), "{said:?}");
}

/// Whether `pid` is a live (non-zombie) process.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit(')').next().and_then(|r| r.split_whitespace().next()) != Some("Z"))
}

/// The CPU time (user plus system) process `pid` used so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name: the state is field 3, utime field 14 and stime field 15.
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn the_ttl_ends_every_command_and_sandboxd_exits_0() {
    const TTL: Duration = Duration::from_secs(2);
    let started = Instant::now();
    let mut c = Client::start_with(&["--ttl-ms", "2000"], None, true);
    let marker = "4021.25";
    // The positive control: before the TTL, the command runs.
    c.start_sleeper(1, marker);
    assert!(started.elapsed() < TTL, "the command started only after the TTL: this proves nothing");
    if !wrapped() {
        // No busy loop: waiting for the deadline costs sandboxd no CPU time. (A spinning poll
        // would use about as many ticks as the wait lasts: 100 a second.)
        std::thread::sleep((TTL * 3 / 4).saturating_sub(started.elapsed()));
        let ticks = cpu_ticks(c.child().id());
        assert!(ticks < 30, "sandboxd used {ticks} clock ticks of CPU while it waited");
    }
    let status = exit_status(&mut c, TTL + Duration::from_secs(10));
    let elapsed = started.elapsed();
    assert!(status.success(), "{status}");
    assert!(elapsed >= TTL, "sandboxd ended after {elapsed:?}, before its TTL");
    assert!(elapsed < TTL + Duration::from_secs(5), "sandboxd ended only after {elapsed:?}");
    let stderr = c.stderr();
    assert!(stderr.contains("sandboxd: TTL reached"), "{stderr}");
    wait_for("the command to end", || processes_with(marker).is_empty());
}

/// A host that stops reading while a command floods its output cannot hold sandboxd past the
/// TTL: sandboxd's writes wait for the host only until the deadline. (sandboxd used to block
/// in the write for good, and the sandbox outlived its TTL.)
#[test]
fn a_host_that_stops_reading_does_not_hold_sandboxd_past_its_ttl() {
    const TTL: Duration = Duration::from_millis(1500);
    if std::env::var("SANDBOXD_TEST_WRAP").is_ok_and(|w| w.contains("docker")) {
        // `docker run -i` buffers the container's output itself and cannot exit before the
        // test reads it: the wrapper, not sandboxd, would be measured.
        eprintln!(
            "[skip] a_host_that_stops_reading...: sandboxd's stdout is the engine's, not this test's pipe"
        );
        return;
    }
    let marker = "ttl-flood-7731";
    let started = Instant::now();
    let mut child = sandboxd(&["--ttl-ms", "1500"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = child.stdin.take().unwrap();
    let spec = Spawn {
        argv: vec![b"yes".to_vec(), marker.as_bytes().to_vec()],
        env: vec![(b"PATH".to_vec(), b"/usr/bin:/bin".to_vec())],
        ..Spawn::default()
    };
    for frame in [
        Frame::new(0, Message::Hello { version: VERSION, user: None }),
        Frame::new(1, Message::Spawn(spec)),
        Frame::new(1, Message::Credit { bytes: u32::MAX }),
    ] {
        to.write_all(&frame.to_bytes().unwrap()).unwrap();
    }
    // Nothing reads sandboxd's stdout until it has exited.
    let deadline = started + TTL + Duration::from_secs(8);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("sandboxd still runs {:?} after its start, with a TTL of {TTL:?}", started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = started.elapsed();
    assert!(status.success(), "{status}");
    assert!(elapsed >= TTL, "sandboxd ended after {elapsed:?}, before its TTL");
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(stderr.contains("sandboxd: TTL reached"), "{stderr}");
    // The positive control: sandboxd had filled the pipe nobody read (16 pages, partly filled
    // by frames: 49264 bytes in one run) while `yes` had more for it, so its writes had to wait
    // for the host.
    let mut unread = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut unread).unwrap();
    assert!(
        unread.len() >= 32768,
        "only {} bytes waited in the pipe: sandboxd never had to wait",
        unread.len()
    );
    drop(to);
    wait_for("the flood to end", || processes_with(marker).is_empty());
}

#[test]
fn bad_flags_are_refused_with_status_64_and_a_message() {
    let run = |args: &[&str]| {
        let out =
            Command::new(env!("CARGO_BIN_EXE_sandboxd")).args(args).stdin(Stdio::null()).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for args in [
        &["--ttl-ms"][..],
        &["--ttl-ms", "soon"],
        &["--ttl-ms", "-1"],
        &["--bogus"],
        &["--listen-fd"],
        &["--listen-fd", "1"],
        // sandboxd never creates a socket at a path any more (issue #27).
        &["--listen", "/tmp/sandboxd-test-never.sock"],
    ] {
        let (code, stderr) = run(args);
        assert_eq!(code, Some(64), "{args:?}: {stderr}");
        assert!(stderr.starts_with("sandboxd: ") && !stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // The control: a good TTL, already passed at the first turn of the loop.
    let (code, stderr) = run(&["--ttl-ms", "0"]);
    assert_eq!((code, stderr.trim()), (Some(0), "sandboxd: TTL reached"));
}

#[test]
fn a_listen_fd_that_is_not_a_bound_unix_stream_socket_is_refused() {
    use command_fds::{CommandFdExt as _, FdMapping};
    let dir = Scratch::new("notasocket");
    let unbound =
        rustix::net::socket(rustix::net::AddressFamily::UNIX, rustix::net::SocketType::STREAM, None).unwrap();
    let datagram =
        rustix::net::socket(rustix::net::AddressFamily::UNIX, rustix::net::SocketType::DGRAM, None).unwrap();
    rustix::net::bind(&datagram, &rustix::net::SocketAddrUnix::new(dir.0.join("dgram")).unwrap()).unwrap();
    let file = std::os::fd::OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
    let run = |fd: Option<std::os::fd::OwnedFd>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sandboxd"));
        command.stdin(Stdio::null());
        if let Some(fd) = fd {
            command.args(["--listen-fd", "4"]);
            command.fd_mappings(vec![FdMapping { parent_fd: fd, child_fd: 4 }]).unwrap();
        } else {
            // A number no process here has open (4 might be one this test inherited).
            command.args(["--listen-fd", "1000"]);
        }
        let out = command.output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for (what, fd) in [
        ("no such descriptor", None),
        ("a file", Some(file)),
        ("an unbound socket", Some(unbound)),
        ("a datagram socket", Some(datagram)),
    ] {
        let (code, stderr) = run(fd);
        assert_eq!(code, Some(1), "{what}: {stderr}");
        assert!(stderr.contains("cannot listen on descriptor "), "{what}: {stderr}");
    }
    // The control: a bound stream socket is served (stdin at its end: sandboxd ends at once).
    let (code, stderr) = run(Some(bound_socket(&dir.0.join("s"))));
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn after_detach_the_first_stream_ending_leaves_sandboxd_serving_its_socket() {
    let dir = Scratch::new("detach");
    let socket = dir.0.join("s");
    let started = Instant::now();
    let Some(mut main) = Client::start_listening(&["--ttl-ms", "5000"], &socket) else { return };
    let marker = "4022.25";
    main.start_sleeper(1, marker);
    main.detach();
    main.to = None; // the owner's stream ends
    // That session's commands end: nobody can read them any more.
    wait_for("the detached session's command to end", || processes_with(marker).is_empty());
    // sandboxd does not: a connection gets a session that runs commands.
    let mut extra = Client::connect(&socket);
    let out = extra.run(1, &["echo", "served"]);
    assert_eq!((out.stdout, out.status), (b"served\n".to_vec(), Some(Status::Code(0))));
    assert!(main.child().try_wait().unwrap().is_none(), "sandboxd ended with its first stream");
    // Detach in an extra session is answered and changes nothing: its end kills its commands.
    extra.detach();
    let marker = "4023.25";
    extra.start_sleeper(2, marker);
    drop(extra);
    wait_for("the extra session's command to end", || processes_with(marker).is_empty());
    // The TTL still ends sandboxd; the socket (the host's file) then refuses connections: no
    // one else held its descriptor.
    let status = exit_status(&mut main, Duration::from_secs(15));
    assert!(status.success(), "{status}");
    assert!(started.elapsed() >= Duration::from_secs(5), "ended after {:?}", started.elapsed());
    let late = UnixStream::connect(&socket).map_err(|e| e.kind());
    assert_eq!(late.err(), Some(std::io::ErrorKind::ConnectionRefused), "the socket outlived sandboxd");
}

#[test]
fn without_detach_the_first_stream_ending_ends_every_session_and_its_commands() {
    let dir = Scratch::new("nodetach");
    let socket = dir.0.join("s");
    let Some(mut main) = Client::start_listening(&[], &socket) else { return };
    let mut extra = Client::connect(&socket);
    let marker = "4024.25";
    // The command runs first (it printed, and the scan finds it) ...
    extra.start_sleeper(1, marker);
    let pids = processes_with(marker);
    assert!(!pids.is_empty());
    let session = i32::try_from(extra.pid).unwrap();
    assert!(wrapped() || alive(session), "the session child runs");
    // ... then the owner's stream ends, with the extra connection still open.
    main.to = None;
    let status = exit_status(&mut main, Duration::from_secs(10));
    assert!(status.success(), "{status}");
    wait_for("the session child's command to end", || pids.iter().all(|&p| !alive(p)));
    assert!(wrapped() || !alive(session), "the session child outlived sandboxd");
    // The connection ends too (frames sent before, such as a late `Spawned`, may come first).
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Ok(frame) = extra.from.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        assert!(matches!(frame.message, Message::Spawned { .. }), "{frame:?} after sandboxd ended");
    }
    assert!(Instant::now() < deadline, "the connection outlived sandboxd");
}

#[test]
fn the_65th_concurrent_connection_is_closed() {
    let dir = Scratch::new("limit");
    let socket = dir.0.join("s");
    let Some(_main) = Client::start_listening(&[], &socket) else { return };
    let mut sessions: Vec<Client> = (0..64).map(|_| Client::connect(&socket)).collect();
    assert!(Client::try_connect(&socket).is_none(), "a 65th concurrent session was served");
    // The control: once a session ends (and sandboxd reaped its child), a connection is served.
    drop(sessions.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(c) = Client::try_connect(&socket) {
            sessions.push(c);
            break;
        }
        assert!(Instant::now() < deadline, "no session after one of 64 ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A field of a `/proc/<pid>/status` text, such as `CapEff`, without its tab.
fn status_field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {name} in {status}"))
        .trim()
}

#[test]
fn a_root_command_holds_no_capability() {
    const NONE: &str = "0000000000000000";
    if euid() != 0 {
        eprintln!("skipped: a command as uid 0 with capabilities to drop needs root");
        return;
    }
    let mut c = Client::start();
    // The positive control: sandboxd itself holds capabilities. Read by its pid inside the
    // sandbox, and where sandboxd is this test's own child, from here too.
    let ours = String::from_utf8(c.run(1, &["cat", &format!("/proc/{}/status", c.pid)]).stdout).unwrap();
    assert_ne!(status_field(&ours, "CapEff"), NONE, "{ours}");
    if !wrapped() {
        let direct = std::fs::read_to_string(format!("/proc/{}/status", c.child().id())).unwrap();
        assert_ne!(status_field(&direct, "CapEff"), NONE, "{direct}");
    }
    c.user = Some((0, 0));
    let out = c.run(2, &["cat", "/proc/self/status"]);
    assert_eq!(out.status, Some(Status::Code(0)));
    let status = String::from_utf8(out.stdout).unwrap();
    assert_eq!(status_field(&status, "Uid"), "0\t0\t0\t0", "{status}");
    for set in ["CapEff", "CapPrm", "CapInh", "CapAmb"] {
        assert_eq!(status_field(&status, set), NONE, "{set}: {status}");
    }
    assert_eq!(status_field(&status, "NoNewPrivs"), "1", "{status}");
}
