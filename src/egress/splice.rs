//! An open tunnel relayed by the kernel: `splice(2)` moves each direction's bytes from one
//! socket into a pipe and from the pipe into the other socket, so they never enter this
//! process's memory. A copy through a user-space buffer held the gate to a quarter of a
//! direct connection's throughput on loopback (`benches/egress.rs`).
//!
//! Each direction owns one pipe of the tunnel's buffer size: what the kernel holds for a
//! tunnel is bounded as a copy's buffers were. The pipe is emptied before it is filled
//! again, so a `splice` that would block names the socket's readiness, never the pipe's.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::Shutdown;
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// One end of a tunnel: a socket tokio watches.
pub(crate) trait End: AsFd {
    /// Waits until the socket may be ready for `interest`.
    fn ready_for(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    /// Runs `f` on the socket, clearing its readiness when `f` would block.
    fn attempt<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

macro_rules! end {
    ($ty:ty) => {
        impl End for $ty {
            async fn ready_for(&self, interest: Interest) -> io::Result<()> {
                self.ready(interest).await.map(drop)
            }

            fn attempt<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
                self.try_io(interest, f)
            }
        }
    };
}

end!(TcpStream);
end!(UnixStream);

/// Relays `a` and `b` to each other until both directions ended (each end's write side is
/// shut when the other's read side ends), or either fails. `size` is each pipe's capacity.
///
/// # Errors
///
/// A pipe cannot be made, or a socket fails (reset, gone).
pub(crate) async fn relay(a: &impl End, b: &impl End, size: usize) -> io::Result<()> {
    let (up, down) = (Pipe::new(size)?, Pipe::new(size)?);
    tokio::try_join!(one_way(a, &up, b), one_way(b, &down, a)).map(drop)
}

/// A pipe's two ends.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    size: usize,
}

impl Pipe {
    fn new(size: usize) -> io::Result<Pipe> {
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        // The kernel may round the size up, or refuse above its limit: keep what it gives.
        let size = rustix::pipe::fcntl_setpipe_size(&write, size).unwrap_or(16 * 4096);
        Ok(Pipe { read, write, size })
    }
}

/// Moves `from`'s bytes through `pipe` to `to` until `from` ends, then shuts `to`'s write
/// side.
async fn one_way(from: &impl End, pipe: &Pipe, to: &impl End) -> io::Result<()> {
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    loop {
        let filled = retry(from, Interest::READABLE, || {
            Ok(rustix::pipe::splice(from.as_fd(), None, &pipe.write, None, pipe.size, flags)?)
        })
        .await?;
        if filled == 0 {
            shut_write(to.as_fd());
            return Ok(());
        }
        let mut left = filled;
        while left > 0 {
            let moved = retry(to, Interest::WRITABLE, || {
                Ok(rustix::pipe::splice(&pipe.read, None, to.as_fd(), None, left, flags)?)
            })
            .await?;
            if moved == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            left -= moved;
        }
    }
}

/// Runs `f` once `end` is ready for `interest`, again whenever it would block.
async fn retry(
    end: &impl End,
    interest: Interest,
    mut f: impl FnMut() -> io::Result<usize>,
) -> io::Result<usize> {
    loop {
        end.ready_for(interest).await?;
        match end.attempt(interest, &mut f) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            other => return other,
        }
    }
}

fn shut_write(fd: BorrowedFd<'_>) {
    let _ = rustix::net::shutdown(fd, Shutdown::Write);
}
