//! The few Linux calls `std` does not offer, declared by hand: sandboxd depends on nothing but
//! `std`, so that a bare `rustc` can build it (docs/adr/0006-sandboxd.md). The constants are
//! the kernel's generic ABI values, the same on `x86_64` and `aarch64`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

pub const SIGKILL: i32 = 9;
pub const SIGCONT: i32 = 18;
pub const SIGCHLD: i32 = 17;

const PR_SET_PDEATHSIG: i32 = 1;
const PR_SET_DUMPABLE: i32 = 4;
const PR_SET_CHILD_SUBREAPER: i32 = 36;
const PR_SET_NO_NEW_PRIVS: i32 = 38;
const PR_CAP_AMBIENT: i32 = 47;
const PR_CAP_AMBIENT_CLEAR_ALL: u64 = 4;
/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit sets, passed as two 32-bit halves.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const EINVAL: i32 = 22;
const WNOHANG: i32 = 1;
const WUNTRACED: i32 = 2;
const O_NONBLOCK: i32 = 0o4000;
const O_CLOEXEC: i32 = 0o2_000_000;
const F_DUPFD: i32 = 0;
const F_GETFD: i32 = 1;
const F_SETFD: i32 = 2;
const F_GETFL: i32 = 3;
const F_SETFL: i32 = 4;
const FD_CLOEXEC: i32 = 1;
const ECHILD: i32 = 10;
const ENOSYS: i32 = 38;

pub const POLLIN: i16 = 0x1;
pub const POLLOUT: i16 = 0x4;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`: one 32-bit half of each set.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PollFd {
    pub fd: RawFd,
    pub events: i16,
    pub revents: i16,
}

unsafe extern "C" {
    fn fork() -> i32;
    fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
    fn kill(pid: i32, sig: i32) -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn poll(fds: *mut PollFd, nfds: u64, timeout: i32) -> i32;
    fn pipe2(fds: *mut i32, flags: i32) -> i32;
    fn socketpair(domain: i32, kind: i32, protocol: i32, fds: *mut i32) -> i32;
    fn ioctl(fd: i32, request: u64, arg: *mut i32) -> i32;
    fn fcntl(fd: i32, cmd: i32, arg: i32) -> i32;
    fn dup2(old: i32, new: i32) -> i32;
    fn close_range(first: u32, last: u32, flags: i32) -> i32;
    fn close(fd: i32) -> i32;
    fn signal(sig: i32, handler: usize) -> usize;
    fn write(fd: i32, buf: *const u8, count: usize) -> isize;
    fn sendmsg(fd: i32, msg: *const MsgHdr, flags: i32) -> isize;
    fn fstatfs(fd: i32, buf: *mut u64) -> i32;
    fn getsockopt(fd: i32, level: i32, name: i32, value: *mut i32, len: *mut u32) -> i32;
    fn listen(fd: i32, backlog: i32) -> i32;
    fn getpid() -> i32;
    fn getppid() -> i32;
    fn capset(header: *mut CapHeader, data: *const CapData) -> i32;
    fn setsid() -> i32;
    fn setgroups(size: usize, list: *const u32) -> i32;
    fn getgroups(size: i32, list: *mut u32) -> i32;
    fn geteuid() -> u32;
    fn setfsuid(uid: u32) -> i32;
    fn setfsgid(gid: u32) -> i32;
    fn setgid(gid: u32) -> i32;
    fn setuid(uid: u32) -> i32;
    fn memfd_create(name: *const u8, flags: u32) -> i32;
    fn _exit(code: i32) -> !;
}

/// `struct iovec`.
#[repr(C)]
struct IoVec {
    base: *const u8,
    len: usize,
}

/// `struct msghdr` (LP64: `repr(C)` puts the kernel's padding after `namelen` and `flags`).
#[repr(C)]
struct MsgHdr {
    name: *mut u8,
    namelen: u32,
    iov: *const IoVec,
    iovlen: usize,
    control: *mut u8,
    controllen: usize,
    flags: i32,
}

/// A `cmsghdr` carrying one descriptor, padded to `CMSG_SPACE(sizeof(int))` (24 bytes).
#[repr(C)]
struct OneFd {
    len: usize,
    level: i32,
    kind: i32,
    fd: i32,
    pad: i32,
}

fn check(r: i32) -> io::Result<i32> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// A pipe, both ends close-on-exec: `(read, write)`.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    check(unsafe { pipe2(fds.as_mut_ptr(), O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded, so both are fresh descriptors this process owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A connected pair of Unix stream sockets, both close-on-exec.
pub fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    const AF_UNIX: i32 = 1;
    const SOCK_STREAM: i32 = 1;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    check(unsafe { socketpair(AF_UNIX, SOCK_STREAM | O_CLOEXEC, 0, fds.as_mut_ptr()) })?;
    // SAFETY: socketpair succeeded, so both are fresh descriptors this process owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Takes descriptor `fd`, inherited from whoever started sandboxd, as a Unix stream socket
/// that is bound but need not listen yet, and listens on it: close-on-exec from here, so no
/// command can inherit it. The `listen` here is what makes sandboxd the socket's listener
/// as `SO_PEERCRED` reports it to a connecting process (the kernel records the credentials
/// at `listen`, not at `bind`). Refuses 0, 1 and 2 (the protocol's stdio), a closed
/// descriptor (`EBADF`), anything but a Unix stream socket (`ENOTSOCK`), and an unbound
/// socket (`EINVAL`, from `listen`).
pub fn adopt_listener(fd: RawFd) -> io::Result<OwnedFd> {
    const SOL_SOCKET: i32 = 1;
    const SO_TYPE: i32 = 3;
    const SO_DOMAIN: i32 = 39;
    const AF_UNIX: i32 = 1;
    const SOCK_STREAM: i32 = 1;
    const ENOTSOCK: i32 = 88;
    /// `SOMAXCONN`'s historical value; `listen.rs` serves at most 64 sessions anyway.
    const BACKLOG: i32 = 128;
    if fd <= 2 {
        return Err(io::Error::from_raw_os_error(EINVAL));
    }
    set_cloexec(fd, true)?;
    let option = |name: i32| -> io::Result<i32> {
        let mut value = 0;
        let mut len = 4u32;
        // SAFETY: getsockopt writes at most `len` (4) bytes into `value`, an i32.
        check(unsafe { getsockopt(fd, SOL_SOCKET, name, &raw mut value, &raw mut len) })?;
        Ok(value)
    };
    if option(SO_DOMAIN)? != AF_UNIX || option(SO_TYPE)? != SOCK_STREAM {
        return Err(io::Error::from_raw_os_error(ENOTSOCK));
    }
    // SAFETY: listen with integer arguments on a descriptor just checked to be a socket.
    check(unsafe { listen(fd, BACKLOG) })?;
    // SAFETY: sandboxd's command line names this descriptor as its own (`--listen-fd`); it
    // is open (fcntl succeeded), and nothing else in sandboxd owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `byte` on the Unix socket `socket` with `fd` attached (`SCM_RIGHTS`): the receiver
/// gets its own descriptor for the same open file. Never raises `SIGPIPE`.
pub fn send_fd(socket: &impl AsRawFd, byte: u8, fd: &impl AsRawFd) -> io::Result<()> {
    match send_with_fd(socket, &[byte], fd)? {
        0 => Err(io::ErrorKind::WriteZero.into()),
        _ => Ok(()),
    }
}

/// Sends the start of `bytes` (at least one byte, as many as the socket takes) on the Unix
/// socket `socket` with `fd` attached to them (`SCM_RIGHTS`); how many were sent. A
/// non-blocking socket that is full gives `WouldBlock`, and nothing was sent. Never raises
/// `SIGPIPE`.
pub fn send_with_fd(socket: &impl AsRawFd, bytes: &[u8], fd: &impl AsRawFd) -> io::Result<usize> {
    const SOL_SOCKET: i32 = 1;
    const SCM_RIGHTS: i32 = 1;
    const MSG_NOSIGNAL: i32 = 0x4000;
    let iov = IoVec { base: bytes.as_ptr(), len: bytes.len() };
    // `CMSG_LEN(sizeof(int))`: the header (16 bytes on LP64) and the descriptor.
    let mut control = OneFd { len: 16 + 4, level: SOL_SOCKET, kind: SCM_RIGHTS, fd: fd.as_raw_fd(), pad: 0 };
    let msg = MsgHdr {
        name: std::ptr::null_mut(),
        namelen: 0,
        iov: &raw const iov,
        iovlen: 1,
        control: (&raw mut control).cast(),
        controllen: size_of::<OneFd>(),
        flags: 0,
    };
    loop {
        // SAFETY: `msg` points at one valid iovec over `bytes` and a control buffer of
        // `controllen` bytes holding one well-formed SCM_RIGHTS header; all outlive the call.
        let sent = unsafe { sendmsg(socket.as_raw_fd(), &raw const msg, MSG_NOSIGNAL) };
        if let Ok(n) = usize::try_from(sent) {
            return Ok(n);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Whether `fd` is a Unix stream socket (one that can carry descriptors).
pub fn is_unix_stream(fd: &impl AsRawFd) -> bool {
    const SOL_SOCKET: i32 = 1;
    const SO_TYPE: i32 = 3;
    const SO_DOMAIN: i32 = 39;
    const AF_UNIX: i32 = 1;
    const SOCK_STREAM: i32 = 1;
    let option = |name: i32| {
        let (mut value, mut len) = (0, 4u32);
        // SAFETY: getsockopt writes at most `len` (4) bytes into `value`, an i32.
        let r = unsafe { getsockopt(fd.as_raw_fd(), SOL_SOCKET, name, &raw mut value, &raw mut len) };
        (r == 0).then_some(value)
    };
    option(SO_DOMAIN) == Some(AF_UNIX) && option(SO_TYPE) == Some(SOCK_STREAM)
}

/// The magic number of the file system `fd` is on (`statfs`'s `f_type`).
pub fn fs_magic(fd: &impl AsRawFd) -> io::Result<u64> {
    // `struct statfs` is 120 bytes on LP64 Linux, `f_type` (a long) first; room to spare.
    let mut buf = [0u64; 32];
    // SAFETY: fstatfs writes one `struct statfs`, smaller than `buf`.
    check(unsafe { fstatfs(fd.as_raw_fd(), buf.as_mut_ptr()) })?;
    Ok(buf[0])
}

/// How many bytes are waiting to be read on a pipe or socket (`FIONREAD`); 0 on error.
pub fn pending(fd: &impl AsRawFd) -> usize {
    const FIONREAD: u64 = 0x541B;
    let mut n = 0;
    // SAFETY: FIONREAD writes one int into `n`.
    let r = unsafe { ioctl(fd.as_raw_fd(), FIONREAD, &raw mut n) };
    if r < 0 { 0 } else { usize::try_from(n).unwrap_or(0) }
}

pub fn set_nonblocking(fd: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own, with integer arguments.
    unsafe {
        let flags = check(fcntl(fd.as_raw_fd(), F_GETFL, 0))?;
        check(fcntl(fd.as_raw_fd(), F_SETFL, flags | O_NONBLOCK))?;
    }
    Ok(())
}

/// Asks the kernel for a pipe buffer of `bytes` on `fd`, when it is a pipe or a FIFO; what it
/// cannot grant (not a pipe, over `/proc/sys/fs/pipe-max-size` or the user's pipe budget)
/// leaves the pipe as it was.
pub fn grow_pipe(fd: &impl AsRawFd, bytes: i32) {
    const F_SETPIPE_SZ: i32 = 1031;
    // SAFETY: fcntl with integer arguments; a descriptor that is no pipe gives EBADF or EINVAL.
    let _ = unsafe { fcntl(fd.as_raw_fd(), F_SETPIPE_SZ, bytes) };
}

pub fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl with integer arguments; a bad fd gives EBADF, nothing else.
    unsafe {
        let flags = check(fcntl(fd, F_GETFD, 0))?;
        let flags = if on { flags | FD_CLOEXEC } else { flags & !FD_CLOEXEC };
        check(fcntl(fd, F_SETFD, flags))?;
    }
    Ok(())
}

/// Opens a copy of `fd` on the lowest free descriptor number at or above `floor` (without
/// close-on-exec) and returns that number. Unlike [`dup_to`], it never replaces an open
/// descriptor.
pub fn dup_at_least(fd: RawFd, floor: RawFd) -> io::Result<RawFd> {
    // SAFETY: fcntl(F_DUPFD) with integer arguments only adds to the descriptor table.
    check(unsafe { fcntl(fd, F_DUPFD, floor) })
}

/// Makes `fd` also open as `target` (without close-on-exec).
pub fn dup_to(fd: RawFd, target: RawFd) -> io::Result<()> {
    // SAFETY: dup2 only manipulates the descriptor table.
    check(unsafe { dup2(fd, target) })?;
    Ok(())
}

/// Closes every descriptor from 3 up but `keep`.
pub fn close_except(keep: RawFd) -> io::Result<()> {
    let keep = u32::try_from(keep).map_err(|_| io::Error::from_raw_os_error(EINVAL))?;
    if keep > 3 {
        close_between(3, keep - 1)?;
    }
    close_from(keep + 1)
}

/// Closes every descriptor from `first` up.
pub fn close_from(first: u32) -> io::Result<()> {
    close_between(first, u32::MAX)
}

/// Closes the descriptors `first..=last`: `close_range(2)`, or where the kernel lacks it
/// (`ENOSYS`: Linux before 5.9) or refuses an open-ended range (`EINVAL`: gVisor's release
/// 20221219), each open one listed in `/proc/self/fd`.
fn close_between(first: u32, last: u32) -> io::Result<()> {
    // SAFETY: closing descriptors: whatever owned them must not be used after this, which the
    // callers (a freshly forked child that never returns into the code that owned them)
    // guarantee.
    match check(unsafe { close_range(first, last, 0) }) {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(ENOSYS | EINVAL)) => {
            // Collected before closing: the directory's own descriptor is among them, and is
            // closed when `read_dir`'s handle drops (a second close then fails harmlessly).
            let open: Vec<u32> = std::fs::read_dir("/proc/self/fd")?
                .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
                .filter(|fd| (first..=last).contains(fd))
                .collect();
            for fd in open {
                // SAFETY: as above; EBADF (the directory's descriptor, already closed) is harmless.
                unsafe {
                    close(i32::try_from(fd).unwrap_or(-1));
                }
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

pub enum Fork {
    Child,
    Parent(i32),
}

/// `fork()`. Sound only in a single-threaded process, which sandboxd is: it never starts a
/// thread, so the child cannot inherit a lock some other thread held.
pub fn fork_process() -> io::Result<Fork> {
    // SAFETY: sandboxd is single-threaded (see above).
    match check(unsafe { fork() })? {
        0 => Ok(Fork::Child),
        pid => Ok(Fork::Parent(pid)),
    }
}

pub fn exit_now(code: i32) -> ! {
    // SAFETY: ends the process without running destructors, as a forked child must.
    unsafe { _exit(code) }
}

pub fn pid() -> i32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { getpid() }
}

pub fn parent_pid() -> i32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { getppid() }
}

/// Sends `sig` to `pid`; a process that is already gone is not an error.
pub fn signal_process(pid: i32, sig: i32) {
    // SAFETY: kill with integer arguments; failure (ESRCH) is harmless.
    unsafe {
        kill(pid, sig);
    }
}

/// This process reaps the orphans of its descendants (they reparent to it, not to init).
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    check(unsafe { prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) })?;
    Ok(())
}

/// No core dumps, no ptrace attach and no `/proc/<pid>/mem` or `environ` for processes of the
/// same uid without `CAP_SYS_PTRACE`.
pub fn become_undumpable() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    check(unsafe { prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) })?;
    Ok(())
}

/// Leaves this process with no capability and unable to gain any: sets `no_new_privs` (so an
/// exec, even root's or a set-user-ID program's, grants nothing) and empties the ambient,
/// effective, permitted and inheritable sets. The bounding set stays; with no permitted
/// capability and `no_new_privs` it grants nothing. For a command just before `execve`.
pub fn drop_capabilities() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    check(unsafe { prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
    // SAFETY: prctl with integer arguments. EINVAL means a kernel without ambient capabilities
    // (before 4.3): there is no ambient set to clear.
    let r = unsafe { prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    if r < 0 && io::Error::last_os_error().raw_os_error() != Some(EINVAL) {
        return Err(io::Error::last_os_error());
    }
    let mut header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
    let empty = [CapData::default(); 2];
    // SAFETY: a version-3 header and the two data structs version 3 reads, both live for the
    // call; pid 0 is this thread. Lowering every set needs no privilege.
    check(unsafe { capset(&raw mut header, empty.as_ptr()) })?;
    Ok(())
}

/// This process gets `sig` when its parent dies.
pub fn die_with_parent(sig: i32) -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    check(unsafe { prctl(PR_SET_PDEATHSIG, u64::try_from(sig).unwrap_or(9), 0, 0, 0) })?;
    Ok(())
}

/// How a reaped child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Code(i32),
    Signal(i32),
}

/// Reaps one child that has ended, without blocking: `Ok(None)` when children remain but none
/// has ended, `Err` with `ECHILD` when there are no children.
pub fn reap_any() -> io::Result<Option<(i32, Ended)>> {
    let mut status = 0;
    // SAFETY: waitpid writes the status into our local.
    let pid = check(unsafe { waitpid(-1, &raw mut status, WNOHANG) })?;
    if pid == 0 {
        return Ok(None);
    }
    // The wait status encoding: low 7 bits the terminating signal (0 for a normal exit),
    // bits 8..16 the exit code.
    let sig = status & 0x7f;
    let ended = if sig == 0 { Ended::Code((status >> 8) & 0xff) } else { Ended::Signal(sig) };
    Ok(Some((pid, ended)))
}

/// Like [`reap_any`], and a child that was stopped is continued at once (and reported
/// as `(pid, None)`): a command of the same uid as its shepherd (a root sandbox user's) can
/// stop the shepherd, which then could neither report nor end the command.
pub fn reap_or_continue() -> io::Result<Option<(i32, Option<Ended>)>> {
    let mut status = 0;
    // SAFETY: waitpid writes the status into our local.
    let pid = check(unsafe { waitpid(-1, &raw mut status, WNOHANG | WUNTRACED) })?;
    if pid == 0 {
        return Ok(None);
    }
    // A stopped child's status has 0x7f in its low byte.
    if status & 0xff == 0x7f {
        signal_process(pid, SIGCONT);
        return Ok(Some((pid, None)));
    }
    let sig = status & 0x7f;
    let ended = if sig == 0 { Ended::Code((status >> 8) & 0xff) } else { Ended::Signal(sig) };
    Ok(Some((pid, Some(ended))))
}

/// An anonymous file in memory (`memfd_create`), close-on-exec, that may be executed: the
/// kernel's `MFD_EXEC` where it knows it (Linux 6.3 and later, which otherwise warns, or
/// under `vm.memfd_noexec=1` makes it not executable), none before.
pub fn exec_memfd() -> io::Result<OwnedFd> {
    const MFD_CLOEXEC: u32 = 1;
    const MFD_EXEC: u32 = 0x10;
    let name = b"sandboxd-exec-only\0";
    // SAFETY: a NUL-terminated name that outlives the call, integer flags.
    let fd = match check(unsafe { memfd_create(name.as_ptr(), MFD_CLOEXEC | MFD_EXEC) }) {
        Err(e) if e.raw_os_error() == Some(EINVAL) => {
            // SAFETY: as above.
            check(unsafe { memfd_create(name.as_ptr(), MFD_CLOEXEC) })?
        }
        other => other?,
    };
    // SAFETY: memfd_create succeeded, so `fd` is a fresh descriptor this process owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Waits for child `pid` to end, reaps it and says how it ended (`None`: it is no child).
pub fn wait_ended(pid: i32) -> Option<Ended> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status into our local.
        if unsafe { waitpid(pid, &raw mut status, 0) } == pid {
            let sig = status & 0x7f;
            return Some(if sig == 0 { Ended::Code((status >> 8) & 0xff) } else { Ended::Signal(sig) });
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return None;
        }
    }
}

/// Waits for child `pid` to end and reaps it; returns at once if it is no child (any more).
pub fn wait_for(pid: i32) {
    let mut status = 0;
    // SAFETY: waitpid writes the status into our local.
    while unsafe { waitpid(pid, &raw mut status, 0) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
}

/// Reaps child `pid` if it has ended, without waiting: `true` once it is reaped, or is no
/// child (any more).
pub fn try_reap(pid: i32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid writes the status into our local.
    let reaped = unsafe { waitpid(pid, &raw mut status, WNOHANG) };
    reaped > 0 || (reaped < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted)
}

pub fn no_children(e: &io::Error) -> bool {
    e.raw_os_error() == Some(ECHILD)
}

/// `poll()` over `fds`, retrying on `EINTR`; `timeout_ms` < 0 waits forever.
pub fn poll_fds(fds: &mut [PollFd], timeout_ms: i32) -> io::Result<usize> {
    loop {
        // SAFETY: `fds` is a valid slice of pollfd structs of the given length.
        let r = unsafe { poll(fds.as_mut_ptr(), fds.len() as u64, timeout_ms) };
        if r >= 0 {
            return Ok(usize::try_from(r).unwrap_or(0));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The write end of the SIGCHLD self-pipe, for the handler.
static CHILD_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_child(_sig: i32) {
    let fd = CHILD_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = 1u8;
        // SAFETY: write(2) is async-signal-safe; a full pipe (EAGAIN) already holds a wake-up.
        unsafe {
            write(fd, &raw const byte, 1);
        }
    }
}

/// A pipe that becomes readable whenever a child ends: the handler writes one byte into a
/// non-blocking pipe, so `poll()` can wait for children and descriptors at once.
///
/// Called again in a forked child (after it closed the inherited pipe), it points the handler
/// at a pipe of the child's own.
pub fn child_events() -> io::Result<OwnedFd> {
    let (r, w) = pipe()?;
    set_nonblocking(&r)?;
    set_nonblocking(&w)?;
    CHILD_PIPE.store(w.as_raw_fd(), Ordering::Relaxed);
    // The write end lives as long as the process: the handler may run at any time.
    std::mem::forget(w);
    // SAFETY: installs a handler that only calls write(2) on a descriptor kept open for good.
    unsafe {
        signal(SIGCHLD, on_child as *const () as usize);
    }
    Ok(r)
}

/// Restores the default action of `sig` (before exec: a handler does not survive exec, but an
/// ignored signal stays ignored).
pub fn default_signal(sig: i32) {
    // SAFETY: SIG_DFL is 0.
    unsafe {
        signal(sig, 0);
    }
}

/// Starts a new session (the child leads its own process group).
pub fn new_session() -> io::Result<()> {
    // SAFETY: no arguments.
    check(unsafe { setsid() })?;
    Ok(())
}

/// Drops to `uid`/`gid` with `gid` as the only group.
pub fn drop_to(uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: a one-element group list that outlives the call.
    unsafe {
        check(setgroups(1, &raw const gid))?;
        check(setgid(gid))?;
        check(setuid(uid))?;
    }
    Ok(())
}

pub fn is_root() -> bool {
    // SAFETY: no arguments, cannot fail.
    unsafe { geteuid() == 0 }
}

/// What [`enter_fs_identity`] changed, for [`leave_fs_identity`].
pub struct FsIdentity {
    groups: Vec<u32>,
}

/// Switches this (single-threaded) process's filesystem identity to `uid`/`gid`, with `gid` as
/// the only supplementary group. Needs root; the kernel drops root's file capabilities while
/// the filesystem uid is not 0.
pub fn enter_fs_identity(uid: u32, gid: u32) -> FsIdentity {
    let mut groups = vec![0u32; 256];
    // SAFETY: `groups` has room for the 256 entries getgroups may write.
    let n = unsafe { getgroups(256, groups.as_mut_ptr()) };
    groups.truncate(usize::try_from(n).unwrap_or(0));
    // SAFETY: integer arguments and a one-element list that outlives the call.
    unsafe {
        setgroups(1, &raw const gid);
        setfsgid(gid);
        setfsuid(uid);
    }
    FsIdentity { groups }
}

/// Restores root's filesystem identity and groups.
pub fn leave_fs_identity(saved: &FsIdentity) {
    // SAFETY: integer arguments and a list that outlives the call.
    unsafe {
        setfsuid(0);
        setfsgid(0);
        setgroups(saved.groups.len(), saved.groups.as_ptr());
    }
}
