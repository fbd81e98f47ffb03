//! What a connection to the gate's socket opens with: a client's TCP socket handed over by
//! `sandboxd relay`, or a client speaking HTTP on the socket itself.
//!
//! The relay inside the sandbox accepts each proxy client on the sandbox's loopback and sends
//! the gate one byte, [`HANDOVER`], with the client's socket attached (`SCM_RIGHTS`,
//! `sandboxd/src/relay.rs`). The gate then serves that socket as its client, and a tunnel's
//! bytes move between two TCP sockets by `splice(2)` without entering either process: a copy
//! in the relay made a download through the gate a third as fast as a direct one.
//!
//! Anything the sandbox's code sends is untrusted, a hand-over included: the socket must be a
//! connected TCP socket (IPv4 or IPv6) and come alone, with the one byte and nothing else, or
//! the connection is refused as malformed. The gate only reads and writes it, as it would the
//! Unix stream; a socket of the sandbox gives it nothing the sandbox could not do itself.
//! Descriptors beyond the one there is room for are closed by the kernel (the message is
//! marked truncated); what is received is owned and closed here whatever happens.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SocketType,
};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// The byte a hand-over carries (`sandboxd`'s `relay::HANDOVER`): no proxy request starts with
/// it.
pub(crate) const HANDOVER: u8 = 0;

/// How a connection to the gate's socket opened.
#[derive(Debug)]
pub(crate) enum Opening {
    /// A client socket handed over: the gate's client from now on.
    HandedOver(TcpStream),
    /// A client on the socket itself, and the first bytes it sent (the start of its request).
    Direct(Vec<u8>),
    /// The client closed the connection before sending anything.
    Closed,
}

/// Reads the connection's first message and tells which kind of client it is.
///
/// # Errors
///
/// A malformed hand-over (a socket that is not a connected TCP one, more than one, or the
/// hand-over byte without one), in words for the client; or the socket failed.
pub(crate) async fn open(stream: &UnixStream) -> Result<Opening, String> {
    loop {
        stream.readable().await.map_err(|e| e.to_string())?;
        match stream.try_io(Interest::READABLE, || receive(stream)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.to_string()),
            Ok(received) => return judge(received),
        }
    }
}

/// The same as [`open`] without waiting: `None` when nothing has arrived yet.
pub(crate) fn open_now(stream: &UnixStream) -> Option<Result<Opening, String>> {
    match stream.try_io(Interest::READABLE, || receive(stream)) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(e) => Some(Err(e.to_string())),
        Ok(received) => Some(judge(received)),
    }
}

/// One `recvmsg`'s bytes and descriptors, and whether descriptors were lost for want of room.
struct Received {
    data: Vec<u8>,
    fds: Vec<OwnedFd>,
    truncated: bool,
}

fn receive(stream: &UnixStream) -> io::Result<Received> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut data = vec![0u8; 4096];
    let got = rustix::net::recvmsg(
        stream,
        &mut [io::IoSliceMut::new(&mut data)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
    )?;
    data.truncate(got.bytes);
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    Ok(Received { data, fds, truncated: got.flags.contains(ReturnFlags::CTRUNC) })
}

/// What the first message says: a well-formed hand-over, the start of a direct client's
/// request, or a refusal's words.
fn judge(received: Received) -> Result<Opening, String> {
    let Received { data, mut fds, truncated } = received;
    match (data.as_slice(), fds.len()) {
        ([], 0) if !truncated => Ok(Opening::Closed),
        ([HANDOVER], 1) if !truncated => {
            let fd = fds.pop().expect("one descriptor");
            Ok(Opening::HandedOver(client_socket(fd)?))
        }
        (_, 0) if !truncated && data.first() != Some(&HANDOVER) => Ok(Opening::Direct(data)),
        _ => Err(format!(
            "a hand-over is the byte 0 with one TCP socket attached; this one had {} bytes and {}{} descriptors",
            data.len(),
            fds.len(),
            if truncated { " (and more)" } else { "" }
        )),
    }
}

/// The handed-over descriptor as the gate's client, once it is seen to be a connected TCP
/// socket.
fn client_socket(fd: OwnedFd) -> Result<TcpStream, String> {
    let kind =
        rustix::net::sockopt::socket_type(&fd).map_err(|_| "the descriptor handed over is not a socket")?;
    let family = rustix::net::sockopt::socket_domain(&fd).map_err(|e| e.to_string())?;
    if kind != SocketType::STREAM || !(family == AddressFamily::INET || family == AddressFamily::INET6) {
        return Err("the socket handed over is not a TCP socket".to_owned());
    }
    if rustix::net::getpeername(&fd).is_err() {
        return Err("the TCP socket handed over is not connected".to_owned());
    }
    let socket = std::net::TcpStream::from(fd);
    socket.set_nonblocking(true).map_err(|e| e.to_string())?;
    TcpStream::from_std(socket).map_err(|e| e.to_string())
}
