//! Running one command in a fresh set of namespaces with `bwrap`, off the caller's
//! executor.
//!
//! Every `bwrap` is spawned from one long-lived thread: `--die-with-parent` (a parent-death
//! signal) fires when the *thread* that spawned bwrap exits, and short-lived helper threads
//! would kill sandboxes as they retire.
//!
//! **The start gate.** bwrap arms its parent-death signals only after it has cloned the
//! sandbox's first process, so a bwrap killed (or an owner that dies) during setup could
//! orphan a half-made sandbox that then runs the command with nothing bound to it. So the
//! command never starts on its own: inside the namespaces, [`GATE`] first prints
//! [`READY`] on stdout, then waits for its environment block on stdin, and only then
//! `exec`s the command. The stdout reader sees `READY` (every parent-death link is armed by
//! then: bwrap's setup is over) and only then writes the block. A kill, a timeout or an
//! owner's death before that closes the pipe instead: the gate reads end-of-file and exits
//! without running anything.
//!
//! **Environment.** The block carries every variable the caller gave, secrets included, as
//! `export NAME='value'` lines the gate `eval`s inside the namespaces. No caller-given value
//! is ever in a host process's environment or argv (where `LD_PRELOAD` or `GCONV_PATH`
//! would act on the host, and `ps eww` would show secrets).
//!
//! **Output** is read by helper threads into a queue bounded at [`QUEUE_BYTES`]: a reader
//! that gets ahead of the consumer waits, the pipe fills and the command blocks in `write`,
//! so an unread stream costs the host nothing beyond the bound.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command as OsCommand, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};

use event_listener::Event;

use crate::exec::StreamKind;

/// The line the gate prints before it reads its environment block.
pub(super) const READY: &[u8] = b"sandboxio-ready\n";

/// The `sh -c` script that runs first inside the namespaces (see the module docs):
/// `sh -c GATE sandboxio <waiter> <argv>...`. Exit 125: the block never came (the command
/// was cancelled, or its owner died). With a waiter (perl code, see [`WAITER`]) the
/// command runs under it; with an empty one the gate becomes the command.
pub(super) const GATE: &str = r#"__sbx_w=$1; shift
printf 'sandboxio-ready\n'
IFS= read -r __sbx_n || exit 125
__sbx_s=
while [ "$__sbx_n" -gt 0 ]; do
  IFS= read -r __sbx_l || exit 125
  __sbx_s="$__sbx_s$__sbx_l
"
  __sbx_n=$((__sbx_n - 1))
done
eval "$__sbx_s"
unset __sbx_n __sbx_s __sbx_l
[ -n "$__sbx_w" ] && exec /usr/bin/perl -e "$__sbx_w" -- "$@"
exec "$@""#;

/// Runs the command as its child and writes its exact end (`exit <code>` or `signal <n>`) to
/// the command's private directory, then exits as bwrap would report it. bwrap (and any
/// shell) folds a signal death into exit code 128 + n; only a parent's `waitpid` can tell
/// `kill -9` from `exit 137`. A program that cannot be started exits 127 (not found, with
/// `<program>: not found` on stderr, in the words every backend uses) or 126, as in a shell.
pub(super) const WAITER: &str = r#"my $pid = fork;
defined $pid or exit 126;
if ($pid == 0) {
  exec { $ARGV[0] } @ARGV;
  print STDERR ($!{ENOENT} ? "sandboxio: $ARGV[0]: not found\n" : "sandboxio: $ARGV[0]: $!\n");
  exit($!{ENOENT} ? 127 : 126);
}
waitpid($pid, 0);
my $st = $?;
if (open(my $f, '>', '/run/sandboxio-private/status')) {
  print $f (($st & 127) ? 'signal ' . ($st & 127) : 'exit ' . ($st >> 8));
  close $f;
}
exit(($st & 127) ? 128 + ($st & 127) : $st >> 8);"#;

/// The most output bytes held between the pipe and the consumer, per command.
pub(super) const QUEUE_BYTES: usize = 1 << 20;

/// The environment block [`GATE`] reads: its line count, then one `export` line per
/// variable, the value single-quoted (the only character a single-quoted word cannot hold,
/// `'`, is written `'\''`). Names must be shell names: the caller checks that.
pub(super) fn env_block<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<u8> {
    let mut script = String::new();
    for (name, value) in vars {
        script.push_str("export ");
        script.push_str(name);
        script.push_str("='");
        script.push_str(&value.replace('\'', r"'\''"));
        script.push_str("'\n");
    }
    let lines = script.matches('\n').count();
    let mut block = format!("{lines}\n").into_bytes();
    block.extend_from_slice(script.as_bytes());
    block
}

/// What the output readers deliver.
#[derive(Debug)]
pub(super) enum Piece {
    Output(StreamKind, Vec<u8>),
    /// Both pipes are closed.
    End,
}

/// A queue of output pieces, filled by reader threads and drained by async code. Readers
/// wait while it holds more than [`QUEUE_BYTES`], unless it is discarding.
#[derive(Debug, Default)]
pub(super) struct Pieces {
    queue: Mutex<Queue>,
    room: Condvar,
    ready: Event,
}

#[derive(Debug, Default)]
struct Queue {
    pieces: VecDeque<Piece>,
    bytes: usize,
    /// Set when nobody will read again (the command was killed): output is dropped.
    discard: bool,
}

impl Pieces {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a piece, waiting while the queue is full (backpressure on the command).
    fn push(&self, piece: Piece) {
        let mut queue = self.lock();
        if let Piece::Output(_, data) = &piece {
            while !queue.discard && queue.bytes >= QUEUE_BYTES {
                queue = self.room.wait(queue).unwrap_or_else(PoisonError::into_inner);
            }
            if queue.discard {
                return;
            }
            queue.bytes += data.len();
        }
        queue.pieces.push_back(piece);
        drop(queue);
        self.ready.notify(usize::MAX);
    }

    /// Drops what is queued and everything that comes later, releasing waiting readers.
    pub(super) fn discard(&self) {
        let mut queue = self.lock();
        queue.discard = true;
        queue.pieces.retain(|p| matches!(p, Piece::End));
        queue.bytes = 0;
        drop(queue);
        self.room.notify_all();
    }

    pub(super) fn try_pop(&self) -> Option<Piece> {
        let mut queue = self.lock();
        let piece = queue.pieces.pop_front()?;
        if let Piece::Output(_, data) = &piece {
            queue.bytes -= data.len();
        }
        drop(queue);
        self.room.notify_all();
        Some(piece)
    }

    pub(super) fn listen(&self) -> event_listener::EventListener {
        self.ready.listen()
    }

    pub(super) async fn pop(&self) -> Piece {
        loop {
            if let Some(p) = self.try_pop() {
                return p;
            }
            let listener = self.listen();
            if let Some(p) = self.try_pop() {
                return p;
            }
            listener.await;
        }
    }
}

/// The command's stdin, behind the start gate.
#[derive(Debug)]
enum Gate {
    /// The gate has not printed [`READY`] yet: the block goes first, then (unless `close`)
    /// the pipe opens for the caller.
    Waiting {
        pipe: ChildStdin,
        block: Vec<u8>,
        close: bool,
    },
    Open(ChildStdin),
    /// A write is in flight on a library thread; `close` once it is back.
    Writing {
        close: bool,
    },
    Closed,
}

#[derive(Debug)]
struct Stdin {
    gate: Mutex<Gate>,
    changed: Event,
}

impl Stdin {
    fn lock(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, gate: Gate) {
        *self.lock() = gate;
        self.changed.notify(usize::MAX);
    }

    /// Called by the stdout reader when the gate is ready: writes the block.
    fn open(&self) {
        let mut gate = self.lock();
        if let Gate::Waiting { .. } = &*gate {
            let Gate::Waiting { mut pipe, block, close } = std::mem::replace(&mut *gate, Gate::Closed) else {
                return;
            };
            // The gate reads the whole block before it does anything else; a failure means
            // the sandbox died, and the command then never starts.
            if pipe.write_all(&block).and_then(|()| pipe.flush()).is_ok() && !close {
                *gate = Gate::Open(pipe);
            }
        }
        drop(gate);
        self.changed.notify(usize::MAX);
    }
}

/// A running `bwrap`.
#[derive(Debug)]
pub(super) struct Running {
    child: Arc<Mutex<Option<Child>>>,
    stdin: Arc<Stdin>,
    pub(super) pieces: Arc<Pieces>,
}

type SpawnRequest = (OsCommand, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("sandboxio-local-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("the OS refused to start the local spawner thread");
        Mutex::new(tx)
    })
}

/// Reads the gate's [`READY`] line from the start of stdout. `Ok(true)`: it came; `Ok(false)`:
/// stdout ended or said something else first (bwrap failed before the gate ran), with what
/// was read in `seen`.
fn read_ready(reader: &mut dyn Read, seen: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut byte = [0u8; 1];
    while seen.len() < READY.len() {
        if reader.read(&mut byte)? == 0 {
            return Ok(false);
        }
        seen.push(byte[0]);
        if !READY.starts_with(seen) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Spawns `cmd` (a `bwrap` invocation whose command is [`GATE`]) from the long-lived
/// spawner thread with piped stdio, starts its output readers, and hands the gate `block`
/// once it is ready; `close_stdin` ends the command's stdin right after the block.
pub(super) fn spawn(mut cmd: OsCommand, block: Vec<u8>, close_stdin: bool) -> std::io::Result<Running> {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send((cmd, reply_tx))
        .map_err(|_| std::io::Error::other("the local spawner thread is gone"))?;
    let mut child =
        reply_rx.recv().map_err(|_| std::io::Error::other("the local spawner thread is gone"))??;
    let pipe = child.stdin.take().ok_or_else(|| std::io::Error::other("bwrap's stdin is not piped"))?;
    let stdin = Arc::new(Stdin {
        gate: Mutex::new(Gate::Waiting { pipe, block, close: close_stdin }),
        changed: Event::new(),
    });
    let pieces = Arc::new(Pieces::default());
    let open = Arc::new(Mutex::new(2u8));
    for (stream, reader) in [
        (StreamKind::Stdout, child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>)),
        (StreamKind::Stderr, child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>)),
    ] {
        let (pieces, open, stdin) = (Arc::clone(&pieces), Arc::clone(&open), Arc::clone(&stdin));
        let Some(mut reader) = reader else { continue };
        std::thread::Builder::new().name("sandboxio-local-io".into()).spawn(move || {
            if stream == StreamKind::Stdout {
                let mut seen = Vec::new();
                if let Ok(true) = read_ready(&mut reader, &mut seen) {
                    stdin.open();
                } else {
                    // bwrap itself failed: what it printed is output, and the gate never opens.
                    stdin.set(Gate::Closed);
                    if !seen.is_empty() {
                        pieces.push(Piece::Output(stream, seen));
                    }
                }
            }
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => pieces.push(Piece::Output(stream, buf[..n].to_vec())),
                }
            }
            let mut left = open.lock().unwrap_or_else(PoisonError::into_inner);
            *left -= 1;
            if *left == 0 {
                pieces.push(Piece::End);
            }
        })?;
    }
    Ok(Running { child: Arc::new(Mutex::new(Some(child))), stdin, pieces })
}

impl Running {
    /// Kills bwrap, and with it the command's whole PID namespace; closes the gate (a
    /// command not yet started never starts) and drops all further output.
    pub(super) fn kill(&self) {
        if let Some(child) = self.child.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            let _ = child.kill();
        }
        self.stdin.set(Gate::Closed);
        self.pieces.discard();
    }

    /// Waits for the exit status on a library thread.
    pub(super) async fn wait(&self) -> crate::Result<std::process::ExitStatus> {
        let child = Arc::clone(&self.child);
        crate::runtime::unblock(move || {
            let mut guard = child.lock().unwrap_or_else(PoisonError::into_inner);
            match guard.as_mut() {
                Some(c) => {
                    c.wait().map_err(|e| crate::Error::provider("local", "waiting for bwrap failed", e))
                }
                None => Err(crate::Error::provider_message("local", "the process was already reaped")),
            }
        })
        .await
    }

    /// Whether bwrap is still running.
    pub(super) fn is_running(&self) -> bool {
        match self.child.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Writes to the command's stdin on a library thread, once the gate is open.
    pub(super) async fn write_stdin(&self, data: Vec<u8>) -> crate::Result<()> {
        let closed = || crate::Error::provider_message("local", "stdin is closed");
        let mut pipe = loop {
            let listener = self.stdin.changed.listen();
            {
                let mut gate = self.stdin.lock();
                match std::mem::replace(&mut *gate, Gate::Writing { close: false }) {
                    Gate::Open(pipe) => break pipe,
                    Gate::Closed => {
                        *gate = Gate::Closed;
                        return Err(closed());
                    }
                    other => *gate = other,
                }
            }
            listener.await;
        };
        let (result, pipe) = crate::runtime::unblock(move || {
            let r = pipe.write_all(&data).and_then(|()| pipe.flush());
            Ok((r, pipe))
        })
        .await?;
        let mut gate = self.stdin.lock();
        if let Gate::Writing { close: false } = &*gate {
            *gate = Gate::Open(pipe);
        } else if let Gate::Writing { close: true } = &*gate {
            *gate = Gate::Closed;
        }
        drop(gate);
        self.stdin.changed.notify(usize::MAX);
        result.map_err(|e| crate::Error::provider("local", "writing to the command's stdin failed", e))
    }

    /// Closes stdin (end-of-file for the command, after its environment block).
    pub(super) fn close_stdin(&self) {
        let mut gate = self.stdin.lock();
        match &mut *gate {
            Gate::Waiting { close, .. } | Gate::Writing { close } => *close = true,
            Gate::Open(_) => *gate = Gate::Closed,
            Gate::Closed => {}
        }
        drop(gate);
        self.stdin.changed.notify(usize::MAX);
    }
}

/// Finding and killing a sandbox's processes by a mark they cannot shed: a mount point
/// that bwrap makes in every command's mount namespace. Sandboxed code has no capability to
/// unmount it, to leave its mount namespace or to make a new one (nested user namespaces
/// are refused), so the mark stays with every process the command starts, whatever it was
/// re-parented to, and whether or not it called `setsid`. bwrap's own processes carry the
/// mark in their argv (`--tmpfs <mark>`) from the start, before any mount exists: a bwrap
/// child orphaned while it waits for its parent (it never runs anything, but would wait
/// forever) is found that way.
pub(super) mod marked {
    use std::time::{Duration, Instant};

    /// Whether one line of `/proc/<pid>/mountinfo` has a mount point equal to `mark`, or
    /// (with `prefix`) under `mark`.
    fn has_mark(mountinfo: &str, mark: &str, prefix: bool) -> bool {
        mountinfo.lines().any(|line| {
            // Field 5 is the mount point (octal escapes for spaces; our marks have none).
            let Some(point) = line.split(' ').nth(4) else { return false };
            if prefix { point.starts_with(mark) } else { point == mark }
        })
    }

    /// Whether one of the NUL-separated arguments in `cmdline` is `mark` (or starts with it).
    fn has_mark_arg(cmdline: &[u8], mark: &str, prefix: bool) -> bool {
        // Only bwrap's own `--tmpfs <mark>` pair: an unrelated process that merely names
        // the path (an administrator's `ls`) is not the sandbox's.
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        args.windows(2).any(|pair| {
            pair[0] == b"--tmpfs"
                && if prefix { pair[1].starts_with(mark.as_bytes()) } else { pair[1] == mark.as_bytes() }
        })
    }

    /// The real uid of process `pid`.
    fn uid_of(pid: i32) -> Option<u32> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
    }

    /// Whether process `pid` carries the mark, in its mount table or its argv, and runs as
    /// the uid sandboxes run as (a process of any other user is never the sandbox's).
    fn carries(pid: i32, mark: &str, prefix: bool) -> bool {
        uid_of(pid) == Some(super::super::sandbox_uid())
            && (std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
                .is_ok_and(|m| has_mark(&m, mark, prefix))
                || std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| has_mark_arg(&c, mark, prefix)))
    }

    /// The host pids of the live processes carrying `mark` (with `prefix`: any mark that
    /// starts with it), with their command names.
    pub(in crate::backends::local) fn find(mark: &str, prefix: bool) -> Vec<(i32, String)> {
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        let mut found = Vec::new();
        let me = i32::try_from(std::process::id()).unwrap_or(0);
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            if pid != me && carries(pid, mark, prefix) {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                found.push((pid, comm.trim().to_owned()));
            }
        }
        found
    }

    /// Sends `SIGKILL` to `pid` if it still carries the mark. The pid is pinned with a
    /// pidfd before the mark is checked again, so a pid reused meanwhile is never hit.
    fn kill(pid: i32, mark: &str, prefix: bool) {
        let Some(id) = rustix::process::Pid::from_raw(pid) else { return };
        let Ok(pidfd) = rustix::process::pidfd_open(id, rustix::process::PidfdFlags::empty()) else { return };
        if carries(pid, mark, prefix) {
            let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
        }
    }

    /// The bwrap processes of the sandbox uid on this host, as `(sandbox id, the host
    /// directory of its workspace)`: read from their argv (`--tmpfs <root>/<id>/<n>` and
    /// `--bind <dir>/workspace /workspace`), each sandbox once.
    pub(in crate::backends::local) fn bwraps(root: &str) -> Vec<(String, std::path::PathBuf)> {
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        let mut found: Vec<(String, std::path::PathBuf)> = Vec::new();
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            if uid_of(pid) != Some(super::super::sandbox_uid()) {
                continue;
            }
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let id = args.windows(2).find_map(|pair| {
                let rest = (pair[0] == b"--tmpfs").then_some(pair[1])?.strip_prefix(root.as_bytes())?;
                let id = rest.split(|b| *b == b'/').next()?;
                String::from_utf8(id.to_vec()).ok()
            });
            let workspace = args.windows(3).find_map(|w| {
                (w[0] == b"--bind" && w[2] == b"/workspace")
                    .then(|| std::path::PathBuf::from(String::from_utf8_lossy(w[1]).into_owned()))
            });
            if let (Some(id), Some(workspace)) = (id, workspace)
                && !found.iter().any(|(known, _)| *known == id)
            {
                found.push((id, workspace));
            }
        }
        found
    }

    /// Kills every process carrying the mark until a scan finds none, for at most `within`.
    /// Returns the processes still found at the end (empty: none left).
    pub(in crate::backends::local) fn kill_all(
        mark: &str,
        prefix: bool,
        within: Duration,
    ) -> Vec<(i32, String)> {
        let started = Instant::now();
        loop {
            let found = find(mark, prefix);
            if found.is_empty() || started.elapsed() > within {
                return found;
            }
            for (pid, _) in &found {
                kill(*pid, mark, prefix);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn marks_match_the_mount_point_field_only() {
            let line = "36 35 0:31 / /run/sandboxio/local-ab/3 rw,nosuid - tmpfs tmpfs rw\n";
            assert!(super::has_mark(line, "/run/sandboxio/local-ab/3", false));
            assert!(super::has_mark(line, "/run/sandboxio/local-ab/", true));
            assert!(!super::has_mark(line, "/run/sandboxio/local-ab/31", false));
            assert!(!super::has_mark(line, "/run/sandboxio/local-cd/", true));
            assert!(!super::has_mark(
                "36 35 0:31 /run/sandboxio/local-ab/3 / rw - tmpfs x rw",
                "/run/sandboxio/local-ab/3",
                false
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_env_block_counts_lines_and_quotes_values() {
        let block = super::env_block([("A", "x'y"), ("B", "two\nlines\n")]);
        assert_eq!(String::from_utf8(block).unwrap(), "4\nexport A='x'\\''y'\nexport B='two\nlines\n'\n");
        assert_eq!(super::env_block([]), b"0\n");
    }
}
