//! `sandboxd relay`: forwards every TCP connection accepted on a loopback address inside the
//! sandbox to a Unix socket, byte for byte, in both directions.
//!
//! It carries the sandbox's proxy traffic to the egress gate, which sandboxio binds into the
//! sandbox as a Unix socket: tools read `HTTPS_PROXY=http://127.0.0.1:PORT` and speak TCP, and
//! the sandbox's network namespace has no route anywhere else. The relay decides nothing and
//! holds no privilege: it runs as a command of the sandbox, as the sandbox's user, and code in
//! the sandbox could reach the socket without it. Every decision is the gate's.
//!
//! One process, one thread, one `poll` loop; at most [`MAX_CONNECTIONS`] pairs, each with a
//! fixed [`BUFFER`] per direction, so its memory is bounded whatever the clients do.
//!
//! It copies through those buffers rather than `splice(2)` as the gate does: a Unix stream's
//! bytes are not in pages a pipe can take over, so a splice from the gate's socket into a pipe
//! copies them anyway, and on a 6.18 kernel the relay spent about 1.8 times the CPU per byte
//! spliced that it spends copied (0.38 against 0.21 CPU seconds per GB, loopback).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::sys::{self, PollFd};

/// The most connections relayed at once; more wait in the listener's backlog.
pub const MAX_CONNECTIONS: usize = 256;

/// Bytes buffered per direction of a connection.
pub const BUFFER: usize = 64 * 1024;

/// The most reads one direction of a pair makes per wake-up.
const ROUNDS: usize = 16;

/// One direction of a pair: bytes read from one side, waiting to be written to the other
/// (`buf[start..end]`; the buffer is allocated at its first read and never moves bytes).
#[derive(Default)]
struct Half {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The reading side ended; once the buffer is written, the writing side is shut.
    eof: bool,
    shut: bool,
}

impl Half {
    fn wants_read(&self) -> bool {
        !self.eof && self.end < BUFFER
    }

    fn wants_write(&self) -> bool {
        self.start < self.end
    }

    fn done(&self) -> bool {
        self.shut
    }

    /// Forgets what is buffered.
    fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }
}

struct Pair {
    tcp: TcpStream,
    unix: UnixStream,
    /// TCP to Unix, and Unix to TCP.
    up: Half,
    down: Half,
}

/// Runs the relay until the listener fails: accepts on `listen`, connects each client to
/// `to`. Prints `listening` and a newline on stdout once clients can connect.
///
/// # Errors
///
/// Binding the listener, or polling, failed.
pub fn run(listen: &str, to: &Path) -> io::Result<()> {
    let listener = TcpListener::bind(listen)?;
    listener.set_nonblocking(true)?;
    let mut stdout = io::stdout();
    stdout.write_all(b"listening\n")?;
    stdout.flush()?;
    let mut pairs: Vec<Pair> = Vec::new();
    loop {
        let mut fds = Vec::with_capacity(1 + 2 * pairs.len());
        let accepting = pairs.len() < MAX_CONNECTIONS;
        fds.push(PollFd {
            fd: listener.as_raw_fd(),
            events: if accepting { sys::POLLIN } else { 0 },
            revents: 0,
        });
        for p in &pairs {
            let tcp = interest(&p.up, &p.down);
            let unix = interest(&p.down, &p.up);
            // A side nothing is asked of is left out (a negative descriptor): poll reports a
            // hang-up whatever was asked, which would wake this loop for ever.
            fds.push(PollFd { fd: if tcp == 0 { -1 } else { p.tcp.as_raw_fd() }, events: tcp, revents: 0 });
            fds.push(PollFd {
                fd: if unix == 0 { -1 } else { p.unix.as_raw_fd() },
                events: unix,
                revents: 0,
            });
        }
        sys::poll_fds(&mut fds, -1)?;
        for (i, p) in pairs.iter_mut().enumerate() {
            if fds[1 + 2 * i].revents != 0 || fds[2 + 2 * i].revents != 0 {
                pump(p);
            }
        }
        pairs.retain(|p| !(p.up.done() && p.down.done()));
        if fds[0].revents != 0 {
            accept(&listener, to, &mut pairs);
        }
    }
}

/// What a side waits for: reading while its outgoing half has room, writing while its
/// incoming half has bytes.
fn interest(reading: &Half, writing: &Half) -> i16 {
    let mut events = 0;
    if reading.wants_read() {
        events |= sys::POLLIN;
    }
    if writing.wants_write() {
        events |= sys::POLLOUT;
    }
    events
}

fn accept(listener: &TcpListener, to: &Path, pairs: &mut Vec<Pair>) {
    while pairs.len() < MAX_CONNECTIONS {
        let Ok((tcp, _)) = listener.accept() else { return };
        // A gate that is gone refuses the client at once (its connection closes).
        let Ok(unix) = UnixStream::connect(to) else { continue };
        if tcp.set_nonblocking(true).is_err() || unix.set_nonblocking(true).is_err() {
            continue;
        }
        pairs.push(Pair { tcp, unix, up: Half::default(), down: Half::default() });
    }
}

/// Moves what can move without blocking, in both directions.
fn pump(p: &mut Pair) {
    transfer(&mut p.tcp, &mut p.up, &mut p.unix);
    transfer(&mut p.unix, &mut p.down, &mut p.tcp);
}

/// Reads from `from` into `half` and writes `half` to `to` until neither can go on without
/// blocking, or [`ROUNDS`] buffers moved (one wake-up moves as much as the sockets take, not
/// one buffer, and one busy pair cannot keep the others waiting long), then shuts
/// `to`'s write side once `from` ended and everything is written. An error on either side
/// ends both halves.
fn transfer<R, W>(from: &mut R, half: &mut Half, to: &mut W)
where
    R: Read + Shut,
    W: Write + Shut,
{
    for _ in 0..ROUNDS {
        let mut moved = false;
        if half.wants_read() {
            if half.buf.is_empty() {
                half.buf = vec![0; BUFFER];
            }
            match from.read(&mut half.buf[half.end..]) {
                Ok(0) => half.eof = true,
                Ok(n) => {
                    half.end += n;
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {
                }
                Err(_) => {
                    half.clear();
                    half.eof = true;
                }
            }
        }
        while half.wants_write() {
            match to.write(&half.buf[half.start..half.end]) {
                Ok(n) if n > 0 => {
                    half.start += n;
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {
                    break;
                }
                Ok(_) | Err(_) => {
                    // The other side is gone: nothing more can be delivered either way.
                    half.clear();
                    half.eof = true;
                    from.shut_read();
                }
            }
        }
        if half.start == half.end {
            half.clear();
        }
        if !moved || half.eof {
            break;
        }
    }
    if half.eof && !half.wants_write() && !half.shut {
        to.shut_write();
        half.shut = true;
    }
}

/// Half-closing a stream, the same for both socket kinds.
trait Shut {
    fn shut_write(&mut self);
    fn shut_read(&mut self);
}

impl Shut for TcpStream {
    fn shut_write(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }

    fn shut_read(&mut self) {
        let _ = self.shutdown(Shutdown::Read);
    }
}

impl Shut for UnixStream {
    fn shut_write(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }

    fn shut_read(&mut self) {
        let _ = self.shutdown(Shutdown::Read);
    }
}
