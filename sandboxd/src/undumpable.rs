//! Starting a program out of the other processes' reach from its first instruction
//! ([`Spawn::undumpable`](crate::proto::Spawn), the code-cell runner's spawn).
//!
//! On `local://` every command runs as one uid with no capability, and the kernel lets such a
//! process take a same-uid process's descriptors (`pidfd_getfd`), read or write its memory
//! (`/proc/<pid>/mem`, ptrace) and read its environment, unless the target is not dumpable.
//! `execve` makes every new program dumpable, and a program that turns that off itself
//! (`prctl(PR_SET_DUMPABLE, 0)`) does so only after its start: a command watching for new
//! processes took the runner's result channel in that window, and a `/proc/<pid>/mem`
//! descriptor opened in it stays usable for the process's life, whatever it does later.
//!
//! The kernel has one rule that applies at `execve` itself: a process whose executable, or
//! the ELF interpreter the executable names, it may not read is not dumpable (`would_dump`,
//! the protection of execute-only programs). So sandboxd copies the program's ELF
//! interpreter (its dynamic loader; a static program itself) into an anonymous file
//! (`memfd`) with mode `0111`, and executes that with the program as its argument
//! (`ld.so /usr/bin/python3 ARGS`): the command, holding no capability, may execute the copy
//! but not read it, so it is never dumpable. Nothing in the sandbox can reach the copy: it is
//! open only in the shepherd (not dumpable) until `execve`, and close-on-exec.
//!
//! Then it checks rather than trusts: a probe with the command's identity and no capability
//! (what any other command has) opens `/proc/<pid>/mem` of the started program. Where the
//! kernel allows it (`fs.suid_dumpable=1` on the host makes every such process dumpable; a
//! runtime may not implement the rule), the program is killed and the spawn fails with
//! [`Failure::Exposed`](crate::proto::Failure): never a reachable process.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::sys::{self, Ended, Fork};

/// The largest file copied, in bytes (256 MiB): a dynamic loader is about 250 KiB, a static
/// Python 20 to 100 MiB.
const MAX_COPY: u64 = 256 * 1024 * 1024;

/// The `PATH` searched when the command's environment has none (glibc's `execvp` default).
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// Why a program could not be started undumpable; [`Why::code`] travels in the shepherd's
/// report, [`Why::message`] is what sandboxd tells the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The program is a script (`#!`): its interpreter would start dumpable.
    Script,
    /// The program is not an ELF executable of this machine's kind.
    NotElf,
    /// The copy could not be made or was refused (the `errno`).
    Copy(i32),
    /// The kernel let a process with the command's identity open the program's memory.
    Reachable,
    /// The probe could not run (the `errno`).
    Unchecked(i32),
}

impl Why {
    /// `(reason, errno)` for the shepherd's report.
    pub fn code(self) -> (u8, i32) {
        match self {
            Why::Script => (1, 0),
            Why::NotElf => (2, 0),
            Why::Copy(e) => (3, e),
            Why::Reachable => (4, 0),
            Why::Unchecked(e) => (5, e),
        }
    }

    /// The inverse of [`Why::code`]; `None` for an unknown reason.
    pub fn from_code(reason: u8, errno: i32) -> Option<Why> {
        Some(match reason {
            1 => Why::Script,
            2 => Why::NotElf,
            3 => Why::Copy(errno),
            4 => Why::Reachable,
            5 => Why::Unchecked(errno),
            _ => return None,
        })
    }

    /// What the host is told: why, and what to do.
    pub fn message(self) -> String {
        let os = |e: i32| io::Error::from_raw_os_error(e).to_string();
        let why = match self {
            Why::Script => "the program is a script (#!), so its interpreter would start dumpable; \
                            put the interpreter's own binary first on PATH"
                .to_owned(),
            Why::NotElf => "the program is not an ELF executable this kernel runs".to_owned(),
            Why::Copy(e) => format!(
                "its execute-only copy could not be made or run ({}): the sandbox needs memfd_create, \
                 /proc and executable memfds (vm.memfd_noexec below 2)",
                os(e)
            ),
            Why::Reachable => "the kernel let another process of the sandbox's user open its memory \
                               (the host's fs.suid_dumpable is 1, or the runtime ignores execute-only \
                               programs); it was killed. Set fs.suid_dumpable to 0 or 2"
                .to_owned(),
            Why::Unchecked(e) => {
                format!("whether another process could reach it could not be checked ({})", os(e))
            }
        };
        format!("sandboxd would not start it out of the other processes' reach: {why}")
    }
}

/// What the shepherd executes instead of the program: an execute-only copy of the first
/// file the kernel maps.
pub struct Image {
    /// The copy, read-only and mode `0111`, close-on-exec.
    pub file: OwnedFd,
    /// `argv[0]` of the copy: the interpreter's path, or the program's `argv[0]`.
    pub arg0: Vec<u8>,
    /// The program the interpreter loads (its first argument); `None` for a static program.
    pub program: Option<PathBuf>,
}

impl Image {
    /// The path `execve` is given: the copy, through this process's descriptor table.
    pub fn exec_path(&self) -> String {
        format!("/proc/self/fd/{}", self.file.as_raw_fd())
    }
}

/// Finds `argv0` the way `execvp` would (on `path`, the command's `PATH`) and makes the
/// execute-only copy of what the kernel would map first.
///
/// # Errors
///
/// `Err(Ok(errno))` when the program is not found (`ENOENT`, as a spawn would fail);
/// `Err(Err(why))` when it cannot be started undumpable.
pub fn prepare(argv0: &[u8], path: Option<&[u8]>) -> Result<Image, Result<i32, Why>> {
    let program = find(argv0, path.unwrap_or(DEFAULT_PATH)).ok_or(Ok(2))?;
    let mut file = File::open(&program).map_err(|e| Ok(e.raw_os_error().unwrap_or(2)))?;
    let interpreter = interpreter_of(&mut file).map_err(Err)?;
    let (source, first, program) = match interpreter {
        Some(interp) => (PathBuf::from(OsStr::from_bytes(&interp)), interp, Some(program)),
        None => (program, argv0.to_vec(), None),
    };
    let file = execute_only_copy(&source).map_err(|e| Err(Why::Copy(e.raw_os_error().unwrap_or(5))))?;
    Ok(Image { file, arg0: first, program })
}

/// `argv0` itself when it holds a `/`, else the first executable regular file named so in a
/// directory of `path`.
fn find(argv0: &[u8], path: &[u8]) -> Option<PathBuf> {
    if argv0.contains(&b'/') {
        return Some(PathBuf::from(OsStr::from_bytes(argv0)));
    }
    path.split(|&b| b == b':').find_map(|dir| {
        let dir = if dir.is_empty() { Path::new(".") } else { Path::new(OsStr::from_bytes(dir)) };
        let candidate = dir.join(OsStr::from_bytes(argv0));
        let meta = std::fs::metadata(&candidate).ok()?;
        (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(candidate)
    })
}

/// The ELF interpreter (`PT_INTERP`) `file` names, `None` for a static executable.
fn interpreter_of(file: &mut File) -> Result<Option<Vec<u8>>, Why> {
    const PT_INTERP: u64 = 3;
    let mut head = [0u8; 64];
    let n = read_at_most(file, &mut head, 0);
    if head[..n].starts_with(b"#!") {
        return Err(Why::Script);
    }
    if n < 52 || &head[..4] != b"\x7fELF" {
        return Err(Why::NotElf);
    }
    let wide = match head[4] {
        1 => false,
        2 if n == 64 => true,
        _ => return Err(Why::NotElf),
    };
    let little = match head[5] {
        1 => true,
        2 => false,
        _ => return Err(Why::NotElf),
    };
    let int = |at: usize, len: usize| -> u64 {
        let mut bytes = [0u8; 8];
        bytes[..len].copy_from_slice(&head[at..at + len]);
        if !little {
            bytes[..len].reverse();
        }
        u64::from_le_bytes(bytes)
    };
    // e_phoff, e_phentsize, e_phnum.
    let (phoff, phentsize, phnum) =
        if wide { (int(32, 8), int(54, 2), int(56, 2)) } else { (int(28, 4), int(42, 2), int(44, 2)) };
    let entry_len = if wide { 56 } else { 32 };
    if phentsize < entry_len || phnum > 256 {
        return Err(Why::NotElf);
    }
    for i in 0..phnum {
        let mut ph = [0u8; 56];
        let at = phoff.saturating_add(i * phentsize);
        if read_at_most(file, &mut ph[..usize::try_from(entry_len).unwrap_or(56)], at)
            < usize::try_from(entry_len).unwrap_or(56)
        {
            return Err(Why::NotElf);
        }
        let field = |at: usize, len: usize| -> u64 {
            let mut bytes = [0u8; 8];
            bytes[..len].copy_from_slice(&ph[at..at + len]);
            if !little {
                bytes[..len].reverse();
            }
            u64::from_le_bytes(bytes)
        };
        if field(0, 4) != PT_INTERP {
            continue;
        }
        // p_offset and p_filesz.
        let (offset, size) = if wide { (field(8, 8), field(32, 8)) } else { (field(4, 4), field(16, 4)) };
        if size == 0 || size > 4096 {
            return Err(Why::NotElf);
        }
        let mut path = vec![0u8; usize::try_from(size).unwrap_or(0)];
        if read_at_most(file, &mut path, offset) < path.len() {
            return Err(Why::NotElf);
        }
        let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
        path.truncate(end);
        if !path.starts_with(b"/") {
            return Err(Why::NotElf);
        }
        return Ok(Some(path));
    }
    Ok(None)
}

/// Reads into `buf` from `offset` until it is full or the file ends; returns how much it read.
fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> usize {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    done
}

/// A copy of `source` in memory, mode `0111`, open read-only (no writer left: `execve`
/// refuses a file open for writing).
fn execute_only_copy(source: &Path) -> io::Result<OwnedFd> {
    let mut from = File::open(source)?;
    if from.metadata()?.len() > MAX_COPY {
        return Err(io::Error::from_raw_os_error(27)); // EFBIG
    }
    let mut to = File::from(sys::exec_memfd()?);
    io::copy(&mut (&mut from).take(MAX_COPY), &mut to)?;
    let copy = File::open(format!("/proc/self/fd/{}", to.as_raw_fd()))?;
    drop(to);
    copy.set_permissions(std::fs::Permissions::from_mode(0o111))?;
    sys::set_cloexec(copy.as_raw_fd(), true)?;
    Ok(OwnedFd::from(copy))
}

/// Whether a process with the command's identity (`user`, or the shepherd's own) and no
/// capability may open the memory of process `pid` (`/proc/<pid>/mem`, the kernel's ptrace
/// check): `Ok(())` when refused, or when `pid` is gone already (its end is reported as any
/// command's).
///
/// # Errors
///
/// [`Why::Reachable`] when it opened it; [`Why::Unchecked`] when the probe could not run.
pub fn check(pid: i32, user: Option<(u32, u32)>) -> Result<(), Why> {
    const REFUSED: i32 = 0;
    const REACHABLE: i32 = 1;
    const GONE: i32 = 2;
    const BROKEN: i32 = 3;
    /// Added to the `errno` of an open that failed for another reason than the process's
    /// end or the kernel's refusal.
    const FAILED: i32 = 16;
    let probe = match sys::fork_process() {
        Ok(Fork::Parent(probe)) => probe,
        Ok(Fork::Child) => {
            // The command's identity, and no capability: what every other command has.
            let became = user
                .map_or(Ok(()), |(uid, gid)| sys::drop_to(uid, gid))
                .and_then(|()| sys::drop_capabilities());
            if became.is_err() {
                sys::exit_now(BROKEN);
            }
            let code = match File::open(format!("/proc/{pid}/mem")) {
                // EACCES or EPERM: the kernel's ptrace check refused it.
                Err(e) if matches!(e.raw_os_error(), Some(1 | 13)) => REFUSED,
                // ENOENT or ESRCH: the process is gone (reaped already).
                Err(e) if matches!(e.raw_os_error(), Some(2 | 3)) => GONE,
                // Anything else (EMFILE: no descriptor to spare, ENOMEM) proves nothing
                // either way: it was read as "gone", so a probe short of descriptors passed
                // a runner it never looked at.
                Err(e) => FAILED + e.raw_os_error().map_or(5, |errno| errno.clamp(1, 200)),
                Ok(mem) => {
                    // A process that already ended has no memory to read: the read finds
                    // nothing (0 bytes), where a live one's fails at the unmapped address 0.
                    let mut byte = [0u8; 1];
                    match mem.read_at(&mut byte, 0) {
                        Ok(0) => GONE,
                        _ => REACHABLE,
                    }
                }
            };
            sys::exit_now(code)
        }
        Err(e) => return Err(Why::Unchecked(e.raw_os_error().unwrap_or(5))),
    };
    match sys::wait_ended(probe) {
        Some(Ended::Code(REFUSED | GONE)) => Ok(()),
        Some(Ended::Code(REACHABLE)) => Err(Why::Reachable),
        Some(Ended::Code(code)) if code > FAILED => Err(Why::Unchecked(code - FAILED)),
        _ => Err(Why::Unchecked(5)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_survives_its_code() {
        for why in [Why::Script, Why::NotElf, Why::Copy(24), Why::Reachable, Why::Unchecked(12)] {
            let (reason, errno) = why.code();
            assert_eq!(Why::from_code(reason, errno), Some(why));
        }
        assert_eq!(Why::from_code(0, 0), None);
    }

    #[test]
    fn a_probe_that_cannot_open_the_memory_file_proves_nothing() {
        use std::io::{Read as _, Write as _};
        use std::os::unix::process::CommandExt as _;
        // The control: a live child of this test is dumpable, and the probe says so. As root,
        // both are `nobody`, so that the target holds no capability the probe lacks.
        let user = sys::is_root().then_some((65534, 65534));
        let mut target = std::process::Command::new("sleep");
        if let Some((uid, gid)) = user {
            target.uid(uid).gid(gid);
        }
        let mut target = target.arg("30").spawn().unwrap();
        let pid = i32::try_from(target.id()).unwrap();
        assert_eq!(check(pid, user), Err(Why::Reachable), "control: a dumpable process is reachable");
        // The same probe from a process left no descriptor to spare (its RLIMIT_NOFILE set to
        // 3 from outside, as any process of its uid may): the open fails with EMFILE. On
        // ce3d8bd that read as "the process is gone", and the check passed.
        let (mut go_read, mut go_write) = std::io::pipe().unwrap();
        let verdict = match sys::fork_process().unwrap() {
            Fork::Child => {
                let mut byte = [0u8; 1];
                let _ = go_read.read(&mut byte);
                sys::exit_now(match check(pid, user) {
                    Ok(()) => 0,
                    Err(Why::Unchecked(24)) => 1,
                    Err(_) => 2,
                })
            }
            Fork::Parent(child) => {
                let limited = std::process::Command::new("prlimit")
                    .args(["--pid", &child.to_string(), "--nofile=3:3"])
                    .status();
                go_write.write_all(b"g").unwrap();
                let verdict = sys::wait_ended(child);
                assert!(limited.is_ok_and(|s| s.success()), "prlimit could not limit the prober");
                verdict
            }
        };
        let _ = target.kill();
        let _ = target.wait();
        assert_eq!(
            verdict,
            Some(Ended::Code(1)),
            "a probe that could not open the memory file passed (0) or failed otherwise (2)"
        );
    }
}
