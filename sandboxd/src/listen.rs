//! Extra sessions: `--listen PATH` connections, each served by a forked child of sandboxd.
//!
//! The main sandboxd accepts from its poll loop and forks one session child per connection.
//! The child closes every descriptor it inherited but the connection (the listening socket,
//! the main stream, the main session's pipes), becomes a subreaper and undumpable like its
//! parent, speaks the same protocol starting with `Hello`, and when its connection ends kills
//! its commands and exits. The main sandboxd reaps the children; when it ends it kills them
//! and everything they run (`Session::kill_everything`).

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use crate::session::Session;
use crate::sys::{self, Fork};

/// The most extra sessions served at once; a connection past that is closed at once.
pub const MAX_SESSIONS: usize = 64;

/// The listening socket and the session children serving its connections.
pub struct Listener {
    socket: UnixListener,
    path: PathBuf,
    sessions: BTreeSet<i32>,
}

impl Listener {
    /// Binds a Unix stream socket at `path`, mode 0600. An existing file at `path` is an
    /// error (`EADDRINUSE`): sandboxd never replaces what it did not create.
    pub fn bind(path: &Path) -> io::Result<Listener> {
        // The umask makes the socket 0600 from its creation: no window in which another
        // user could connect before a chmod.
        let before = sys::set_umask(0o177);
        let bound = UnixListener::bind(path);
        sys::set_umask(before);
        let socket = bound
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen at {}: {e}", path.display())))?;
        socket.set_nonblocking(true)?;
        Ok(Listener { socket, path: path.to_owned(), sessions: BTreeSet::new() })
    }

    pub fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Accepts every pending connection, forking a session child for each (or closing it
    /// when [`MAX_SESSIONS`] are running). Never returns in a child.
    pub fn accept(&mut self) {
        loop {
            // WouldBlock: none left. Anything else (no descriptors left, a connection
            // reset before it was accepted) concerns that connection, not sandboxd.
            let Ok((conn, _)) = self.socket.accept() else { return };
            if self.sessions.len() >= MAX_SESSIONS {
                drop(conn);
                continue;
            }
            let main = sys::pid();
            match sys::fork_process() {
                Ok(Fork::Parent(pid)) => {
                    self.sessions.insert(pid);
                }
                Ok(Fork::Child) => sys::exit_now(serve(&conn, main)),
                // Out of processes: this connection goes unserved, sandboxd goes on.
                Err(_) => {}
            }
        }
    }

    /// Whether `pid` is a session child (not an orphan to kill).
    pub fn is_session(&self, pid: i32) -> bool {
        self.sessions.contains(&pid)
    }

    /// Forgets a session child that was reaped.
    pub fn reaped(&mut self, pid: i32) {
        self.sessions.remove(&pid);
    }

    /// Sends `SIGKILL` to every session child. Their shepherds die with them (parent-death
    /// signal), and the commands' processes are reparented to the main sandboxd, which kills
    /// them as orphans.
    pub fn kill_sessions(&mut self) {
        for pid in std::mem::take(&mut self.sessions) {
            sys::signal_process(pid, sys::SIGKILL);
        }
    }
}

impl Drop for Listener {
    /// Only the main sandboxd drops it (session children leave with `_exit`): the socket file
    /// goes with the sandboxd that created it, so a later one may bind the same path.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The session child's whole life; returns its exit code.
fn serve(conn: &UnixStream, main: i32) -> i32 {
    match session_child(conn, main) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

fn session_child(conn: &UnixStream, main: i32) -> io::Result<()> {
    // Nothing of the main session may stay open here: its pipes would keep commands' stdin
    // open, and its stream and listening socket are not this session's. The main session's
    // objects in this copy of memory are never dropped (the child leaves with `_exit`).
    sys::close_except(conn.as_raw_fd())?;
    sys::become_undumpable()?;
    sys::become_subreaper()?;
    sys::die_with_parent(sys::SIGKILL)?;
    if sys::parent_pid() != main {
        // The main sandboxd ended before the parent-death signal was armed.
        return Ok(());
    }
    let children = File::from(sys::child_events()?);
    let input = File::from(std::os::fd::OwnedFd::from(conn.try_clone()?));
    let output = File::from(std::os::fd::OwnedFd::from(conn.try_clone()?));
    Session::new(input, output, children).run();
    Ok(())
}
