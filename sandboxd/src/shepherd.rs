//! The shepherd: one forked process per command that the command cannot leave.
//!
//! sandboxd forks a shepherd for every command. The shepherd marks itself a child subreaper,
//! so every process the command starts that loses its parent (a double fork, `setsid`,
//! `nohup`, a daemon) is reparented to the shepherd, not to sandboxd. When the command's first
//! process ends, or sandboxd asks for `SIGKILL`, or sandboxd goes away, the shepherd kills its
//! children until it has none: whatever the command started is gone before the shepherd
//! reports the exit. The report travels on a pipe only the shepherd holds (close-on-exec, and
//! the shepherd is not dumpable, so the command cannot reach it through `/proc`), so a command
//! cannot forge its own or another command's result.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::proto::Spawn;
use crate::sys::{self, Ended, Fork, PollFd};
use crate::undumpable::{self, Image, Why};

/// The size of one report from a shepherd to sandboxd, in bytes.
pub const REPORT_LEN: usize = 12;

/// What a shepherd tells sandboxd, in order: `Spawned` or `SpawnFailed`, then `Exited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The command's first process started with this pid.
    Spawned(i32),
    /// The command could not start; the `errno`.
    SpawnFailed(i32),
    /// The command's first process ended this way, and every process it started is gone.
    Exited { ended: Ended, oom_killed: bool },
    /// The shepherd's own machinery failed (the kernel refused a call it needs: gVisor's
    /// release 20221219 refuses `PR_SET_CHILD_SUBREAPER` to any process but init); the
    /// `errno`. Before `Spawned`, the command was never started.
    SetupFailed(i32),
    /// A [`Spawn::undumpable`] command could not be started out of the other processes'
    /// reach; instead of `Spawned`. Whatever had started is gone.
    Exposed(Why),
}

impl Report {
    pub fn encode(self) -> [u8; REPORT_LEN] {
        let (tag, value, oom) = match self {
            Report::Spawned(pid) => (1, pid, false),
            Report::SpawnFailed(errno) => (2, errno, false),
            Report::Exited { ended: Ended::Code(c), oom_killed } => (3, c, oom_killed),
            Report::Exited { ended: Ended::Signal(s), oom_killed } => (4, s, oom_killed),
            Report::SetupFailed(errno) => (5, errno, false),
            Report::Exposed(why) => (6, why.code().1, false),
        };
        let mut out = [0; REPORT_LEN];
        out[0] = tag;
        out[1] = u8::from(oom);
        if let Report::Exposed(why) = self {
            out[2] = why.code().0;
        }
        out[4..8].copy_from_slice(&value.to_be_bytes());
        out
    }

    pub fn decode(bytes: [u8; REPORT_LEN]) -> Option<Report> {
        let value = i32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        let oom_killed = bytes[1] == 1;
        match bytes[0] {
            1 => Some(Report::Spawned(value)),
            2 => Some(Report::SpawnFailed(value)),
            3 => Some(Report::Exited { ended: Ended::Code(value), oom_killed }),
            4 => Some(Report::Exited { ended: Ended::Signal(value), oom_killed }),
            5 => Some(Report::SetupFailed(value)),
            6 => Why::from_code(bytes[2], value).map(Report::Exposed),
            _ => None,
        }
    }
}

/// The descriptors a shepherd is given; everything else is closed in it.
pub struct Fds {
    /// The command's stdin (a pipe's read end, or `/dev/null`).
    pub stdin: OwnedFd,
    /// The write ends of the command's stdout and stderr pipes.
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// Signals from sandboxd, 4 bytes each; end-of-file means "kill everything".
    pub control: OwnedFd,
    /// Reports to sandboxd.
    pub report: OwnedFd,
    /// The command's end of its control channel, placed at its descriptor 3.
    pub control_channel: Option<OwnedFd>,
}

/// The descriptor numbers inside the shepherd.
const CONTROL: RawFd = 3;
const REPORT: RawFd = 4;
/// Where the command's control channel waits in the shepherd (close-on-exec); the command's
/// pre-exec step copies it to descriptor 3.
const CHANNEL: RawFd = 5;

/// Forks a shepherd for `spec`; returns its pid in the parent. Never returns in the child.
pub fn start(spec: &Spawn, fds: Fds) -> io::Result<i32> {
    match sys::fork_process()? {
        Fork::Parent(pid) => Ok(pid),
        Fork::Child => {
            // Nothing in the child may return into sandboxd's loop: any failure ends it with a
            // report if one can still be written. The descriptors go into place first, so that
            // a report written after a failure reaches sandboxd's end of the report pipe.
            if arrange(fds).is_err() {
                sys::exit_now(111)
            }
            let code = match setup().and_then(|()| run(spec)) {
                Ok(()) => 0,
                Err(Setup(e)) => {
                    let _ = write_report(Report::SetupFailed(e.raw_os_error().unwrap_or(5)));
                    111
                }
            };
            sys::exit_now(code)
        }
    }
}

fn write_report(report: Report) -> io::Result<()> {
    // REPORT is the shepherd's own descriptor; ManuallyDrop keeps it open.
    let mut file = std::mem::ManuallyDrop::new(unsafe_file(REPORT));
    file.write_all(&report.encode())
}

#[expect(unsafe_code, reason = "a File over a descriptor the shepherd owns, never closed by it")]
fn unsafe_file(fd: RawFd) -> File {
    // SAFETY: only called with CONTROL and REPORT, which the shepherd set up and owns; callers
    // wrap the File in ManuallyDrop so it never closes them.
    unsafe { File::from_raw_fd(fd) }
}

/// Places the shepherd's descriptors at 0..=4 and closes everything else it inherited from
/// sandboxd (other commands' pipes, the protocol stream), so that nothing here keeps another
/// command's stdin open or the session's stream alive.
fn arrange(fds: Fds) -> io::Result<()> {
    let mut sources = vec![&fds.stdin, &fds.stdout, &fds.stderr, &fds.control, &fds.report];
    sources.extend(fds.control_channel.as_ref());
    let keep = u32::try_from(sources.len()).unwrap_or(5);
    // First out of the way (a source may sit on a target number), then into place. The copies
    // go above every source and every target, on numbers the kernel picks free (`F_DUPFD`):
    // copying onto fixed numbers (it was 100..=105) overwrote a source that sat there once
    // sandboxd held about 100 descriptors (some 20 commands at once), and that command's
    // shepherd lost its report pipe (issue #28).
    let floor =
        sources.iter().map(|fd| fd.as_raw_fd()).max().unwrap_or(0).max(RawFd::try_from(keep).unwrap_or(6))
            + 1;
    let mut high = Vec::with_capacity(sources.len());
    for fd in &sources {
        high.push(sys::dup_at_least(fd.as_raw_fd(), floor)?);
    }
    for (target, from) in high.iter().enumerate() {
        sys::dup_to(*from, RawFd::try_from(target).unwrap_or(0))?;
    }
    // The OwnedFds are closed by close_from below; forget them so nothing closes twice.
    let channel = fds.control_channel.is_some();
    std::mem::forget(fds);
    sys::close_from(keep)?;
    sys::set_cloexec(CONTROL, true)?;
    sys::set_cloexec(REPORT, true)?;
    if channel {
        sys::set_cloexec(CHANNEL, true)?;
    }
    Ok(())
}

/// A failure of the shepherd's own machinery, not of the command.
struct Setup(io::Error);

impl From<io::Error> for Setup {
    fn from(e: io::Error) -> Self {
        Setup(e)
    }
}

/// What makes this process a shepherd: it dies with sandboxd and inherits the command's orphans.
fn setup() -> Result<(), Setup> {
    // The handler inherited from sandboxd writes to sandboxd's own self-pipe: off first.
    sys::default_signal(sys::SIGCHLD);
    sys::die_with_parent(sys::SIGKILL)?;
    sys::become_subreaper()?;
    Ok(())
}

fn run(spec: &Spawn) -> Result<(), Setup> {
    let children = sys::child_events()?;
    let oom_before = oom_kills();

    let image = if spec.undumpable {
        let path = spec.env.iter().rev().find(|(k, _)| k == b"PATH").map(|(_, v)| v.as_slice());
        match undumpable::prepare(spec.argv.first().map_or(&[][..], Vec::as_slice), path) {
            Ok(image) => Some(image),
            Err(Ok(errno)) => {
                write_report(Report::SpawnFailed(errno))?;
                return Ok(());
            }
            Err(Err(why)) => {
                write_report(Report::Exposed(why))?;
                return Ok(());
            }
        }
    } else {
        None
    };
    let mut cmd = command(spec, image.as_ref());
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            write_report(Report::SpawnFailed(e.raw_os_error().unwrap_or(2)))?;
            return Ok(());
        }
    };
    let main = i32::try_from(child.id()).unwrap_or(i32::MAX);
    // `spawn` returned once `execve` succeeded: the program's image is in place, and the
    // kernel has decided whether it is dumpable.
    drop(image);
    if spec.undumpable
        && let Err(why) = undumpable::check(main, spec.user)
    {
        end_all(main, None)?;
        write_report(Report::Exposed(why))?;
        return Ok(());
    }
    // The command holds its stdio now; the shepherd's copies would keep the pipes open.
    let null = File::open("/dev/null")?;
    for fd in 0..3 {
        sys::dup_to(null.as_raw_fd(), fd)?;
    }
    drop(null);
    write_report(Report::Spawned(main))?;

    let ended = supervise(main, &children)?;
    let oom_killed = ended == Ended::Signal(sys::SIGKILL) && oom_kills() > oom_before;
    write_report(Report::Exited { ended, oom_killed })?;
    Ok(())
}

/// The command for `spec`; with an `image`, its execute-only copy runs in the program's place
/// (`undumpable.rs`): the interpreter with the program as its first argument, or the copy of
/// a static program under the program's `argv[0]`.
fn command(spec: &Spawn, image: Option<&Image>) -> Command {
    let program = spec.argv.first().map_or(OsStr::new(""), |p| OsStr::from_bytes(p));
    let mut cmd = match image {
        Some(image) => {
            let mut cmd = Command::new(image.exec_path());
            cmd.arg0(OsStr::from_bytes(&image.arg0));
            cmd.args(image.program.iter());
            cmd
        }
        None => Command::new(program),
    };
    cmd.args(spec.argv.iter().skip(1).map(|a| OsStr::from_bytes(a)));
    cmd.env_clear();
    for (k, v) in spec.env.iter().chain(&spec.secrets) {
        cmd.env(OsStr::from_bytes(k), OsStr::from_bytes(v));
    }
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(OsStr::from_bytes(cwd));
    }
    cmd.stdin(Stdio::inherit()).stdout(Stdio::inherit()).stderr(Stdio::inherit());
    let user = spec.user;
    let channel = spec.control;
    #[expect(unsafe_code, reason = "pre_exec: setsid, dup2, the uid switch and the capability drop")]
    // SAFETY: the closure runs between fork and exec in the child and calls only setsid,
    // dup2, setgroups, setgid, setuid, prctl and capset, which are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            sys::new_session()?;
            if channel {
                // Replaces the child's copy of the shepherd's control pipe, not the shepherd's.
                sys::dup_to(CHANNEL, 3)?;
            }
            if let Some((uid, gid)) = user {
                sys::drop_to(uid, gid)?;
            }
            // Last, since the uid switch needs CAP_SETUID and CAP_SETGID: a command never
            // holds a capability, not even as uid 0 in a container whose sandboxd keeps
            // CAP_SETUID, CAP_SETGID and CAP_KILL (the shepherd and sandboxd keep theirs).
            sys::drop_capabilities()
        });
    }
    cmd
}

/// Waits for the command's first process, forwarding signals from sandboxd, then kills
/// everything left. Returns how the first process ended.
fn supervise(main: i32, children: &OwnedFd) -> io::Result<Ended> {
    let mut control = std::mem::ManuallyDrop::new(unsafe_file(CONTROL));
    sys::set_nonblocking(&*control)?;
    let mut ended = None;
    let mut kill_all = false;
    while ended.is_none() && !kill_all {
        let mut fds = [
            PollFd { fd: CONTROL, events: sys::POLLIN, revents: 0 },
            PollFd { fd: children.as_raw_fd(), events: sys::POLLIN, revents: 0 },
        ];
        sys::poll_fds(&mut fds, -1)?;
        if fds[1].revents != 0 {
            drain(children);
            ended = reap(main, ended);
        }
        if fds[0].revents != 0 {
            let mut buf = [0u8; 64];
            match control.read(&mut buf) {
                Ok(0) => kill_all = true,
                Ok(n) => {
                    for chunk in buf[..n].chunks_exact(4) {
                        let sig = i32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                        if sig == sys::SIGKILL {
                            kill_all = true;
                        } else {
                            // The command leads its own process group (setsid in pre_exec).
                            sys::signal_process(-main, sig);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => kill_all = true,
            }
        }
    }
    end_all(main, ended)
}

/// Kills until no child is left: each round kills the shepherd's current children; their
/// own children are reparented to the shepherd (a subreaper) and die in the next round.
/// Returns how `main` ended (`ended` if it was reaped before).
fn end_all(main: i32, mut ended: Option<Ended>) -> io::Result<Ended> {
    loop {
        for pid in children_of(sys::pid()) {
            sys::signal_process(pid, sys::SIGKILL);
        }
        loop {
            match sys::reap_any() {
                Ok(Some((pid, how))) if pid == main => ended = Some(how),
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) if sys::no_children(&e) => return Ok(ended.unwrap_or(Ended::Signal(sys::SIGKILL))),
                Err(e) => return Err(e),
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn reap(main: i32, mut ended: Option<Ended>) -> Option<Ended> {
    while let Ok(Some((pid, how))) = sys::reap_any() {
        if pid == main {
            ended = Some(how);
        }
    }
    ended
}

fn drain(fd: &OwnedFd) {
    let mut file = std::mem::ManuallyDrop::new(unsafe_file(fd.as_raw_fd()));
    let mut buf = [0u8; 64];
    while matches!(file.read(&mut buf), Ok(n) if n > 0) {}
}

/// The pids whose parent is `parent` (a single-threaded process: sandboxd or a shepherd):
/// the kernel's list of its children, or where the kernel has none (no
/// `CONFIG_PROC_CHILDREN`; gVisor), every `/proc/<pid>/stat` read. Like the scan, the list is
/// a snapshot: callers kill what it names and look again until nothing is left.
pub fn children_of(parent: i32) -> Vec<i32> {
    // One read instead of one per process of the sandbox: each command's end costs this,
    // and with 256 commands at once the scan read some 500 files per end (issue #28).
    match std::fs::read(format!("/proc/{parent}/task/{parent}/children")) {
        Ok(list) => parse_pids(&list),
        Err(_) => scan_children_of(parent),
    }
}

/// The pids of a `/proc/<pid>/task/<tid>/children` text: decimal numbers separated by spaces.
fn parse_pids(list: &[u8]) -> Vec<i32> {
    list.split(u8::is_ascii_whitespace).filter_map(|p| std::str::from_utf8(p).ok()?.parse().ok()).collect()
}

/// [`children_of`] by reading every `/proc/<pid>/stat`.
fn scan_children_of(parent: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read(entry.path().join("stat")) else { continue };
        if parent_of(&stat) == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// The parent pid in a `/proc/<pid>/stat` line: the field after the state, after the last `)`
/// (the command name before it may hold spaces and parentheses).
fn parent_of(stat: &[u8]) -> Option<i32> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// The kernel's count of out-of-memory kills in this cgroup (cgroup v2 `memory.events`), or 0
/// where it cannot be read (no cgroup namespace, cgroup v1).
/// The out-of-memory kills in the sandbox's memory cgroup so far: `oom_kill` of
/// `memory.events` (cgroup v2) or of `memory.oom_control` (v1, Linux 4.13 and later); 0
/// where neither can be read.
fn oom_kills() -> u64 {
    ["/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| oom_kill_count(&text))
        .unwrap_or(0)
}

/// The `oom_kill` count of a `memory.events` or `memory.oom_control` text.
fn oom_kill_count(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_kills_are_counted_from_either_cgroup_version() {
        assert_eq!(oom_kill_count("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n"), Some(2));
        assert_eq!(oom_kill_count("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"), Some(5));
        assert_eq!(oom_kill_count("oom_kill_disable 0\n"), None);
    }

    #[test]
    fn reports_round_trip() {
        for r in [
            Report::Spawned(42),
            Report::SpawnFailed(2),
            Report::Exited { ended: Ended::Code(3), oom_killed: false },
            Report::Exited { ended: Ended::Signal(9), oom_killed: true },
            Report::SetupFailed(22),
            Report::Exposed(Why::Copy(24)),
            Report::Exposed(Why::Reachable),
        ] {
            assert_eq!(Report::decode(r.encode()), Some(r));
        }
        assert_eq!(Report::decode([9; REPORT_LEN]), None);
    }

    #[test]
    fn the_kernels_children_list_and_the_scan_agree() {
        assert_eq!(parse_pids(b"12 345 6 "), vec![12, 345, 6]);
        assert_eq!(parse_pids(b""), Vec::<i32>::new());
        let mut kids: Vec<std::process::Child> =
            (0..3).map(|_| std::process::Command::new("sleep").arg("30").spawn().unwrap()).collect();
        let mut want: Vec<i32> = kids.iter().map(|k| i32::try_from(k.id()).unwrap()).collect();
        let me = i32::try_from(std::process::id()).unwrap();
        // The test harness runs tests on threads: the kernel's list is per thread, so the
        // scan (per process) is the reference here, filtered to this test's children.
        let mut scanned: Vec<i32> = scan_children_of(me).into_iter().filter(|p| want.contains(p)).collect();
        let mut listed: Vec<i32> =
            children_of_thread().unwrap_or_default().into_iter().filter(|p| want.contains(p)).collect();
        for k in &mut kids {
            let _ = k.kill();
            let _ = k.wait();
        }
        want.sort_unstable();
        scanned.sort_unstable();
        listed.sort_unstable();
        assert_eq!(scanned, want);
        if std::path::Path::new("/proc/thread-self/children").exists() {
            assert_eq!(listed, want);
        }
    }

    /// The kernel's children list of the calling thread.
    fn children_of_thread() -> Option<Vec<i32>> {
        std::fs::read("/proc/thread-self/children").ok().map(|l| parse_pids(&l))
    }

    #[test]
    fn parent_pid_survives_odd_command_names() {
        assert_eq!(parent_of(b"12 (a) b) c) S 7 12 12 0"), Some(7));
        assert_eq!(parent_of(b"12 (sh) R 1 12"), Some(1));
        assert_eq!(parent_of(b"garbage"), None);
    }
}
