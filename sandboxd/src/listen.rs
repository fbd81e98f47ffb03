//! Extra sessions: connections on the `--listen-fd N` socket, each served by a forked child
//! of sandboxd.
//!
//! **Whose socket.** The host creates the socket, binds it in a directory of its own that is
//! never part of the sandbox's filesystem, and hands it to sandboxd as an inherited
//! descriptor; sandboxd listens on it and keeps it close-on-exec. sandboxd never creates a
//! socket at a path: a session opened from inside the sandbox (issue #27: code that reached
//! a socket in its own filesystem spawned a process in a session of its own and handed it
//! the connection, so the process outlived its command's timeout, end and dropped stream)
//! needs a way to the socket, and there is none: not by path (it is not in the sandbox's
//! mounts), not by inheritance (close-on-exec, and shepherds and session children close
//! every descriptor they do not use), not through `/proc/1/fd` or `pidfd_getfd` (sandboxd
//! is not dumpable). So every session sandboxd serves was opened by a host process that
//! can reach the sandbox's host directory, and every process inside the sandbox started
//! from a command's session, ending with it.
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

use crate::session::Session;
use crate::sys::{self, Fork};

/// The most extra sessions served at once; a connection past that is closed at once.
pub const MAX_SESSIONS: usize = 64;

/// The listening socket and the session children serving its connections.
pub struct Listener {
    socket: UnixListener,
    sessions: BTreeSet<i32>,
}

impl Listener {
    /// Listens on the inherited descriptor `fd`, a Unix stream socket the host bound
    /// (`sys::adopt_listener` says what is refused).
    pub fn adopt(fd: RawFd) -> io::Result<Listener> {
        let socket = UnixListener::from(
            sys::adopt_listener(fd)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on descriptor {fd}: {e}")))?,
        );
        socket.set_nonblocking(true)?;
        Ok(Listener { socket, sessions: BTreeSet::new() })
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
