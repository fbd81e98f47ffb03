//! sandboxd's command round trip against the per-command baselines it replaces, side by side
//! in one run (`cargo bench -p sandboxd --bench round_trip`):
//!
//! - `local/bwrap_per_command`: one bare `bwrap --unshare-all … true`, as `local://` runs each
//!   command today; `local/sandboxd_in_bwrap`: `true` through a sandboxd that is the PID 1 of
//!   one long-lived bwrap sandbox.
//! - `docker/exec_cli`: `docker exec <container> true` on a running container;
//!   `docker/sandboxd_attach`: `true` through a sandboxd that is that kind of container's main
//!   process, over the attach stream of `docker run -i`. Both go through the docker CLI, so
//!   the comparison is like for like; the library's own benchmarks (`benches/docker.rs`)
//!   measure the exec API through bollard. Needs an engine and `sandboxio/busybox:1`, and is
//!   skipped with a message otherwise.
//!
//! - `concurrent/{16,64,256}`: 256 `true` through sandboxd in bwrap, 16, 64 or 256 in flight
//!   at once (a new one sent as each exits), in commands per second: sandboxd's session loop
//!   and shepherds alone, without the library's host side (issue #28: the rate at 64 at least
//!   the rate at 16).
//!
//! Quote the ratios, not the times: the machines are shared and noisy.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use criterion::{Criterion, criterion_group, criterion_main};
use sandboxd::proto::{Decoder, Frame, Message, Spawn, VERSION};

struct Session {
    child: Child,
    to: Option<ChildStdin>,
    from: ChildStdout,
    decoder: Decoder,
    next: u32,
}

impl Session {
    fn start(mut command: Command) -> Session {
        let mut child =
            command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("sandboxd starts");
        let to = child.stdin.take().unwrap();
        let from = child.stdout.take().unwrap();
        let mut s = Session { child, to: Some(to), from, decoder: Decoder::new(), next: 1 };
        s.send(0, Message::Hello { version: VERSION, user: None });
        assert!(matches!(s.recv().message, Message::HelloAck { .. }));
        s
    }

    fn send(&mut self, id: u32, message: Message) {
        self.to.as_mut().unwrap().write_all(&Frame::new(id, message).to_bytes().unwrap()).unwrap();
    }

    fn recv(&mut self) -> Frame {
        loop {
            if let Some(f) = self.decoder.next_frame().unwrap() {
                return f;
            }
            let mut buf = [0u8; 4096];
            let n = self.from.read(&mut buf).unwrap();
            assert!(n > 0, "sandboxd ended");
            self.decoder.push(&buf[..n]);
        }
    }

    /// Sends a `true`; returns its id.
    fn start_true(&mut self) -> u32 {
        let id = self.next;
        self.next += 1;
        let spec = Spawn {
            argv: vec![b"true".to_vec()],
            env: vec![(b"PATH".to_vec(), b"/usr/bin:/bin".to_vec())],
            ..Spawn::default()
        };
        self.send(id, Message::Spawn(spec));
        self.send(id, Message::Credit { bytes: 65536 });
        id
    }

    /// Runs `total` `true`s, `at_once` in flight, and waits for every exit.
    fn run_many(&mut self, total: usize, at_once: usize) {
        let (mut sent, mut done) = (0, 0);
        while done < total {
            while sent < total && sent - done < at_once {
                self.start_true();
                sent += 1;
            }
            let f = self.recv();
            match f.message {
                Message::Exit { .. } => done += 1,
                Message::Spawned { .. } => {}
                other => panic!("command {}: {other:?}", f.id),
            }
        }
    }

    /// Runs `true` and waits for its exit.
    fn run_true(&mut self) {
        let id = self.start_true();
        loop {
            let f = self.recv();
            if f.id == id && matches!(f.message, Message::Exit { .. }) {
                return;
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Closing stdin ends the session; sandboxd kills what is left and exits.
        self.to = None;
        let _ = self.child.wait();
    }
}

fn sandboxd() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sandboxd"))
}

/// sandboxd linked statically, as `build.rs` builds it for the library: the busybox image has
/// no C library for the dynamically linked bench build.
fn static_sandboxd() -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sandboxd-static");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../../sandboxd/src/main.rs");
    let status = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--edition", "2024", "--crate-name", "sandboxd", "-C", "opt-level=2", "-C", "panic=abort"])
        .args(["-C", "target-feature=+crt-static", "-o"])
        .arg(&out)
        .arg(src)
        .status()
        .unwrap();
    assert!(status.success(), "static sandboxd build failed");
    out
}

fn bwrap_args(cmd: &mut Command) -> &mut Command {
    cmd.args([
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
    ])
}

fn local(c: &mut Criterion) {
    if Command::new("bwrap").arg("--version").output().is_err() {
        eprintln!("[skip] local: no bwrap");
        return;
    }
    let mut group = c.benchmark_group("local");
    group.bench_function("bwrap_per_command", |b| {
        b.iter(|| {
            let mut cmd = Command::new("bwrap");
            bwrap_args(&mut cmd).arg("true");
            assert!(cmd.status().unwrap().success());
        });
    });
    let mut cmd = Command::new("bwrap");
    bwrap_args(&mut cmd).arg("--as-pid-1").arg(sandboxd());
    let mut session = Session::start(cmd);
    group.bench_function("sandboxd_in_bwrap", |b| b.iter(|| session.run_true()));
    group.finish();

    let mut group = c.benchmark_group("concurrent");
    group.sample_size(10);
    group.throughput(criterion::Throughput::Elements(BURST as u64));
    for at_once in [16, 64, 256] {
        group.bench_function(at_once.to_string(), |b| b.iter(|| session.run_many(BURST, at_once)));
    }
    group.finish();
}

/// Commands per `concurrent` iteration.
const BURST: usize = 256;

fn docker(c: &mut Criterion) {
    let ready = Command::new("docker")
        .args(["image", "inspect", "sandboxio/busybox:1"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        eprintln!("[skip] docker: no engine or no sandboxio/busybox:1");
        return;
    }
    let mut group = c.benchmark_group("docker");
    group.sample_size(20);
    let out = Command::new("docker")
        .args(["run", "-d", "--rm", "--network", "none", "sandboxio/busybox:1", "sleep", "600"])
        .output()
        .unwrap();
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    group.bench_function("exec_cli", |b| {
        b.iter(|| assert!(Command::new("docker").args(["exec", &id, "true"]).status().unwrap().success()));
    });
    let _ = Command::new("docker").args(["rm", "-f", &id]).output();
    let mut cmd = Command::new("docker");
    let mount = format!("{}:/sandboxd:ro", static_sandboxd().display());
    cmd.args([
        "run",
        "-i",
        "--rm",
        "--network",
        "none",
        "--user",
        "0",
        "-v",
        &mount,
        "sandboxio/busybox:1",
        "/sandboxd",
    ]);
    let mut session = Session::start(cmd);
    group.bench_function("sandboxd_attach", |b| b.iter(|| session.run_true()));
    group.finish();
}

criterion_group!(benches, local, docker);
criterion_main!(benches);
