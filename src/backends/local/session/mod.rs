//! The session with a sandbox's sandboxd: over a socket pair for the owner (bwrap's stdin
//! and stdout, started with the sandbox), or over sandboxd's `--listen` socket for a
//! `connect`ed handle. Both are Unix sockets, so sandboxd can hand the files of reads and
//! writes over to the host (`sandboxd/session/fs.rs`).
//!
//! **The owner's link.** sandboxd's stdin and stdout are one end of a socket pair whose other
//! end only the owner holds: when the owner shuts it ([`Link::close`]: `close()`, `kill()`,
//! the last handle gone) or dies, sandboxd kills every process of the sandbox and exits,
//! unless the owner detached first.
//!
//! **The socket** ([`bind_socket`]) is bound by the host in the sandbox's host directory,
//! which sits in the caller's private root and is never bound into the sandbox: another
//! process of the same host user reaches it, no other user can, and neither can the
//! sandbox's code. sandboxd gets it as a descriptor and listens on it (`launch.rs`). Why not
//! a socket inside, as before issue #27: code inside opened a session of its own there and
//! spawned a process in it that outlived its command (it held that session's connection).
//! The other two ways out the issue weighed are weaker: a secret the host must show leaves
//! the socket reachable (code inside could fill its sessions or replace it, denying
//! `connect`), and counting an inside session's commands as the caller's command's needs
//! sandboxd to tell which command a connection came from, which it cannot. With no path
//! inside, the class is closed, not this one payload: every session is a host process's.
//! A connection is still trusted only when the kernel says its listener is the sandbox's
//! sandboxd process, recorded at `create` (pid and start time).

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Child;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::backends::owner::Owner;
use crate::error::{Error, Result};
use crate::sandboxd::client::Client;

mod binary;

use super::SCHEME;
use super::launch::{self, Launch};
use super::reactor::{self, Watch};

pub(super) use binary::installed as installed_binary;

/// How many times a start whose sandboxd was busy (`ETXTBSY`, see [`binary`]) is retried.
const TEXT_BUSY_TRIES: usize = 20;

/// The most bytes of bwrap's and sandboxd's stderr kept for an error message.
const DIAGNOSTICS_LIMIT: usize = 4096;

/// How long a `connect`ed session may take to answer `Hello`.
const CONNECT_HELLO: Duration = Duration::from_secs(10);

/// sandboxd's socket's name in the sandbox's host directory (not in any directory bound
/// into the sandbox).
pub(super) const SOCKET: &str = "sandboxd.sock";

/// Binds sandboxd's socket in the sandbox's host directory `dir`, `0600`, without listening:
/// sandboxd listens on it (the kernel then reports sandboxd as its listener to `connect`'s
/// check). Until then a connection is refused, so the mode set after `bind` leaves no
/// window.
///
/// # Errors
///
/// When the socket cannot be made or bound there (a path too long for a Unix socket's
/// address: 107 bytes).
pub(super) fn bind_socket(dir: &Path) -> std::io::Result<OwnedFd> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(SOCKET);
    let socket =
        rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    rustix::net::bind(&socket, &SocketAddrUnix::new(&path)?)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(socket)
}

/// The host's end of a session (the owner's socket pair end, or a connection to sandboxd's
/// socket): shutting its writing side ends the session (see the module docs).
#[derive(Debug)]
pub(super) struct Link(UnixStream);

impl Link {
    /// Ends the session's input (idempotent).
    pub(super) fn close(&self) {
        let _ = self.0.shutdown(std::net::Shutdown::Write);
    }
}

/// A sandbox whose sandboxd answered `Hello`.
pub(super) struct Started {
    pub bwrap: Child,
    pub client: Client,
    pub link: Link,
    /// sandboxd on the host.
    pub sandboxd: Owner,
}

/// A bwrap being started: its session is closed if the start fails or is dropped.
struct Starting {
    bwrap: Option<Child>,
    link: Option<Link>,
}

impl Drop for Starting {
    fn drop(&mut self) {
        // sandboxd (once it runs) reads end-of-file and ends; bwrap goes with it. bwrap is
        // never killed here: its namespace child waits for it during setup, and would wait
        // forever for a bwrap killed then.
        if let Some(link) = &self.link {
            link.close();
        }
        if let Some(mut bwrap) = self.bwrap.take() {
            let _ =
                std::thread::Builder::new().name("sandboxio-local-reap".into()).spawn(move || bwrap.wait());
        }
    }
}

/// Starts the sandbox's bwrap with sandboxd as its init and waits (at most `timeout`) for
/// sandboxd's answer to `Hello`. The session names no user: sandboxd already is the sandbox's
/// user, and could not switch (see `Identity::switch_user`).
///
/// # Errors
///
/// [`Error::Configuration`] when bwrap cannot make the namespaces here (too old, user
/// namespaces disabled) or is not installed; [`Error::CreateTimeout`] past `timeout`;
/// [`Error::Provider`] for anything else, with what bwrap and sandboxd said.
pub(super) async fn start(launch: &Launch<'_>, timeout: Duration) -> Result<Started> {
    let started = std::time::Instant::now();
    let mut tries = 0;
    loop {
        tries += 1;
        let io = |e| Error::provider(SCHEME, "starting the sandboxd session", e);
        let (host, inside) = UnixStream::pair().map_err(io)?;
        let inside = OwnedFd::from(inside);
        let mut command = launch
            .command(&inside)
            .map_err(|e| Error::provider(SCHEME, "cannot hand sandboxd its socket", e))?;
        let spawned = command.spawn();
        // Its copy of sandboxd's socket: sandboxd's must be the only one, so that a `connect`
        // after sandboxd's end is refused at once rather than queued. The same for the
        // session's inside end: sandboxd's end must read as the end of its stream.
        drop(command);
        drop(inside);
        let mut bwrap = spawned.map_err(|e| launch::spawn_error(launch.bwrap, e))?;
        let Some(stderr) = bwrap.stderr.take() else {
            return Err(Error::provider_message(SCHEME, "bwrap's stderr is not piped"));
        };
        let mut starting = Starting { bwrap: Some(bwrap), link: Some(Link(host.try_clone().map_err(io)?)) };
        let said = Arc::new(Mutex::new(Vec::new()));
        let stderr_done = keep_stderr(stderr, Arc::clone(&said));
        let client = fed_client(host).map_err(io)?;
        let left = timeout.saturating_sub(started.elapsed());
        let answered = futures_lite::future::or(async { Some(client.hello().await) }, async {
            futures_timer::Delay::new(crate::duration::saturate(left)).await;
            None
        })
        .await;
        let why = match answered {
            Some(Ok(_)) => {
                // On an error here, `starting` ends the sandbox as it goes.
                let sandboxd = starting.bwrap.as_ref().and_then(launch::sandboxd_pid).and_then(Owner::of);
                let (Some(sandboxd), Some(bwrap)) = (sandboxd, starting.bwrap.take()) else {
                    return Err(Error::provider_message(
                        SCHEME,
                        "sandboxd answered but is not bwrap's child",
                    ));
                };
                let Some(link) = starting.link.take() else {
                    return Err(Error::provider_message(SCHEME, "the session's link is gone"));
                };
                return Ok(Started { bwrap, client, link, sandboxd });
            }
            Some(Err(why)) => why,
            None => return Err(Error::CreateTimeout { timeout }),
        };
        // sandboxd ended before it answered: bwrap failed, or could not run it. Its words are
        // complete once its stderr closes.
        drop(starting);
        let _ = crate::runtime::unblock(move || Ok(stderr_done.recv())).await;
        let said =
            String::from_utf8_lossy(&said.lock().unwrap_or_else(PoisonError::into_inner)).trim().to_owned();
        if binary::is_text_busy(&said) && tries < TEXT_BUSY_TRIES {
            futures_timer::Delay::new(Duration::from_millis(10)).await;
            continue;
        }
        return Err(start_error(&said, &why));
    }
}

/// A session over the Unix socket `stream`, read on the reactor's thread (`reactor.rs`),
/// not on a thread of its own, with `recvmsg`: descriptors sandboxd hands over
/// (`FsHandle`) reach the session's inbox before the frame announcing them is decoded.
fn fed_client(stream: UnixStream) -> std::io::Result<Client> {
    let read = OwnedFd::from(stream.try_clone()?);
    let (client, mut feed) = Client::start_socket_fed(stream, None)?;
    // A failed `watch` drops the feed, which ends the session.
    reactor::watch(read, move |fd, buf| match feed.recv(fd, &mut *buf) {
        Ok(0) => {
            feed.end("sandboxd's stream ended".to_owned());
            Watch::Done
        }
        Ok(n) if feed.push(&buf[..n]) => Watch::Keep,
        Ok(_) => Watch::Done,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock) => {
            Watch::Keep
        }
        Err(e) => {
            feed.end(format!("reading from sandboxd failed: {e}"));
            Watch::Done
        }
    })?;
    Ok(client)
}

/// Reads `stderr` to its end on the reactor's thread, keeping its first [`DIAGNOSTICS_LIMIT`]
/// bytes in `said`; the receiver hears when it is done.
fn keep_stderr(stderr: impl Into<OwnedFd>, said: Arc<Mutex<Vec<u8>>>) -> std::sync::mpsc::Receiver<()> {
    let (done, finished) = std::sync::mpsc::channel();
    // A failed `watch` drops `done`: the receiver hears at once, with nothing said.
    let _ = reactor::watch(stderr.into(), move |fd, buf| match rustix::io::read(fd, &mut *buf) {
        Ok(n @ 1..) => {
            let mut kept = said.lock().unwrap_or_else(PoisonError::into_inner);
            let room = DIAGNOSTICS_LIMIT.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
            Watch::Keep
        }
        Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => Watch::Keep,
        Ok(0) | Err(_) => {
            let _ = done.send(());
            Watch::Done
        }
    });
    finished
}

/// The error for a sandbox whose sandboxd never answered.
fn start_error(said: &str, why: &str) -> Error {
    // bwrap says "Unknown option --disable-userns" (or another option) when it is too old.
    if said.contains("Unknown option") {
        return Error::configuration(format!(
            "this bwrap is too old for local:// ({said}); it needs bubblewrap 0.8 or newer (--disable-userns, --as-pid-1)"
        ));
    }
    if said.starts_with("bwrap:") {
        return Error::configuration(format!(
            "bwrap cannot create the sandbox's namespaces on this host ({said}); if unprivileged user namespaces are disabled, enable them (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, or on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0), or use docker://"
        ));
    }
    Error::provider_message(
        SCHEME,
        format!("sandboxd did not start in the sandbox ({why}); it said: {said:?}"),
    )
}

/// A session of a `connect`ed handle on the socket in the sandbox directory `dir`, whose
/// sandboxd must be `sandboxd` (see the module docs).
///
/// # Errors
///
/// [`Error::Connect`] when the socket cannot be reached or its listener is not the
/// sandbox's sandboxd; [`Error::SandboxGone`] when sandboxd ends before it answers.
pub(super) async fn connect(id: &str, dir: &Path, sandboxd: &Owner) -> Result<(Client, Link)> {
    let refused = |why: String| Error::connect(SCHEME, format!("sandbox {id}: {why}"));
    let socket = dir.join(SOCKET);
    let stream =
        UnixStream::connect(&socket).map_err(|e| refused(format!("cannot reach its sandboxd ({e})")))?;
    let peer = rustix::net::sockopt::socket_peercred(&stream)
        .map_err(|e| refused(format!("cannot identify its socket's listener ({e})")))?;
    let listener = u32::try_from(peer.pid.as_raw_nonzero().get()).ok().and_then(Owner::of);
    if listener.as_ref() != Some(sandboxd) {
        return Err(refused("the process listening on its socket is not its sandboxd".into()));
    }
    let io = |e| Error::provider(SCHEME, "starting the sandboxd session", e);
    let client = fed_client(stream.try_clone().map_err(io)?).map_err(io)?;
    let answered = futures_lite::future::or(async { Some(client.hello().await) }, async {
        futures_timer::Delay::new(CONNECT_HELLO).await;
        None
    })
    .await;
    match answered {
        Some(Ok(_)) => Ok((client, Link(stream))),
        Some(Err(why)) => {
            Err(Error::SandboxGone { id: id.to_owned(), message: format!("its sandboxd ended ({why})") })
        }
        None => Err(refused(format!("its sandboxd did not answer within {} s", CONNECT_HELLO.as_secs()))),
    }
}

/// Kills sandboxd (and with it every process of the sandbox: it is their PID namespace's
/// init) through a pidfd, so a pid reused since cannot be hit.
pub(super) fn kill(sandboxd: &Owner) {
    let Some(pid) = i32::try_from(sandboxd.pid).ok().and_then(rustix::process::Pid::from_raw) else { return };
    let Ok(pidfd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) else { return };
    // Checked after the pidfd is open: from here the pid cannot be reused under us.
    if Owner::of(sandboxd.pid).as_ref() == Some(sandboxd) {
        let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
    }
}

/// Waits (at most [`KILL_BOUND`](super::KILL_BOUND)) until `process` is gone.
pub(super) fn wait_gone(process: &Owner) {
    let deadline = Instant::now() + super::KILL_BOUND;
    while process.is_dead_here() == Some(false) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}
