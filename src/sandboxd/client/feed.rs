//! The receiving half of a session: what is read from sandboxd (with the descriptors that
//! come with it, on a socket) is decoded into frames and routed to the session's state or
//! to the request it concerns.

use std::collections::VecDeque;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
#[cfg(test)]
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use super::super::proto::{Decoder, Entry, Frame, Message, Stream, VERSION, frame_credit};
use super::{Event, Inner, MERGE_LIMIT, Passed, READ_BUF, lock};

/// Descriptors received with sandboxd's frames, in order, until their `FsHandle` frame
/// claims them.
#[derive(Clone, Default)]
pub(super) struct Inbox(Arc<Mutex<VecDeque<OwnedFd>>>);

/// The most descriptors received ahead of their `FsHandle` frames: each comes with its
/// frame's first byte and is claimed when that frame is routed, so more is a peer passing
/// descriptors it did not announce, and ends the session.
const INBOX_LIMIT: usize = 4;

/// Reads a Unix socket's bytes as [`Read`] does, keeping the descriptors that come with them
/// (close-on-exec) in the [`Inbox`] (the tests' reader thread, [`Client::start_socket`]).
#[cfg(test)]
pub(super) struct FdReader {
    pub(super) stream: UnixStream,
    pub(super) inbox: Inbox,
}

#[cfg(test)]
impl Read for FdReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        recv_with_fds(&self.stream, buf, &self.inbox)
    }
}

/// Reads `socket`'s bytes into `buf` once, as `read` does, and puts the descriptors that
/// come with them (close-on-exec) in `inbox` first: a descriptor is there before the frame
/// announcing it is decoded.
fn recv_with_fds(socket: impl AsFd, buf: &mut [u8], inbox: &Inbox) -> std::io::Result<usize> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(INBOX_LIMIT))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        socket,
        &mut [std::io::IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut inbox = lock(&inbox.0);
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            inbox.extend(fds);
        }
    }
    if got.flags.contains(ReturnFlags::CTRUNC) || inbox.len() > INBOX_LIMIT {
        return Err(std::io::Error::other("sandboxd passed descriptors it did not announce"));
    }
    Ok(got.bytes)
}

/// The output credit a listing entry takes (its bytes on the wire).
fn entry_len(entry: &Entry) -> usize {
    usize::try_from(entry.wire_len()).unwrap_or(usize::MAX)
}

/// Marks the session ended and ends every command that has not finished.
pub(super) fn end(inner: &Inner, why: String) {
    let mut state = lock(&inner.state);
    let mut wake = Vec::new();
    if state.ended.is_none() {
        for cmd in state.cmds.values_mut().filter(|c| !c.finished) {
            cmd.events.push_back((Event::Gone(why.clone()), 0));
            cmd.finished = true;
            wake.push(Arc::clone(&cmd.notify));
        }
        state.ended = Some(why);
    }
    drop(state);
    inner.changed.notify(usize::MAX);
    for notify in wake {
        notify.notify(usize::MAX);
    }
}

/// The receiving half of a session: decodes what is read from sandboxd and delivers it.
/// Dropped before [`Feed::end`], it ends the session.
pub(crate) struct Feed {
    pub(super) inner: Arc<Inner>,
    pub(super) decoder: Decoder,
    pub(super) ended: bool,
}

impl Feed {
    /// Delivers `bytes` read from sandboxd. `false` once the session has ended (a malformed
    /// frame, a frame past its credit): stop reading then.
    pub(crate) fn push(&mut self, mut bytes: &[u8]) -> bool {
        while !self.ended && !bytes.is_empty() {
            // At most what the decoder wants at a time: it then holds at most one frame, and
            // never moves a long tail of frames after each one it takes.
            let n = self.decoder.wants().clamp(1, bytes.len());
            self.decoder.push(&bytes[..n]);
            bytes = &bytes[n..];
            loop {
                let why = match self.decoder.next_frame() {
                    Ok(Some(frame)) => match route(&self.inner, frame) {
                        Ok(()) => continue,
                        Err(why) => why,
                    },
                    Ok(None) => break,
                    Err(e) => format!("sandboxd sent a malformed frame: {e}"),
                };
                self.end(why);
                break;
            }
        }
        !self.ended
    }

    /// Reads the session's stream `socket` once into `buf`: with `recvmsg` where the session
    /// takes descriptors ([`Client::start_socket_fed`]), so they reach its inbox before the
    /// bytes announcing them are [pushed](Feed::push); else with `read`.
    ///
    /// # Errors
    ///
    /// The read failed, or sandboxd passed descriptors it did not announce.
    #[cfg_attr(not(feature = "local"), expect(dead_code, reason = "local:// feeds its sessions itself"))]
    pub(crate) fn recv(&self, socket: impl AsFd, buf: &mut [u8]) -> std::io::Result<usize> {
        match &self.inner.passed {
            Some(inbox) => recv_with_fds(socket, buf, inbox),
            None => Ok(rustix::io::read(socket, buf)?),
        }
    }

    /// How many bytes the next read should ask for at most to complete a frame.
    pub(crate) fn wants(&self) -> usize {
        self.decoder.wants()
    }

    /// The stream ended or failed: ends the session with `why` (once).
    pub(crate) fn end(&mut self, why: String) {
        if !self.ended {
            self.ended = true;
            end(&self.inner, why);
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.end("the session's reader stopped".to_owned());
    }
}

pub(super) fn read_loop(mut feed: Feed, mut read: impl Read) {
    let mut buf = vec![0; READ_BUF];
    loop {
        let want = feed.wants().clamp(1, buf.len());
        match read.read(&mut buf[..want]) {
            Ok(0) => return feed.end("sandboxd's stream ended".to_owned()),
            Ok(n) => {
                if !feed.push(&buf[..n]) {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return feed.end(format!("reading from sandboxd failed: {e}")),
        }
    }
}

/// Delivers one frame; an `Err` ends the session.
fn route(inner: &Inner, Frame { id, message }: Frame) -> Result<(), String> {
    // A handed-over descriptor is claimed first, whether or not its request still waits.
    let passed = match &message {
        Message::FsHandle { passed: true, .. } => {
            let fd = inner.passed.as_ref().and_then(|inbox| lock(&inbox.0).pop_front());
            Some(fd.ok_or("sandboxd announced a descriptor that did not come")?)
        }
        _ => None,
    };
    let mut state = lock(&inner.state);
    // Whom this frame concerns: the session (`None`) or one request.
    let mut request = None;
    match message {
        Message::HelloAck { version, pid } if version == VERSION => state.greeted = Some(pid),
        Message::HelloAck { version, .. } => {
            return Err(format!("sandboxd speaks version {version}, not {VERSION}"));
        }
        Message::Pong { nonce } => {
            state.pongs.insert(id, nonce);
        }
        Message::Detached => state.detached = true,
        message => {
            // Frames for a command the caller dropped are discarded.
            let Some(cmd) = state.cmds.get_mut(&id) else { return Ok(()) };
            request = Some(Arc::clone(&cmd.notify));
            match message {
                Message::Spawned { pid } => cmd.events.push_back((Event::Spawned(pid), 0)),
                Message::Output { stream, data } => {
                    let cost = usize::try_from(frame_credit(data.len())).unwrap_or(usize::MAX);
                    cmd.count(id, cost)?;
                    // Bytes of the same stream waiting behind a slow caller are joined (up to
                    // MERGE_LIMIT): one wake-up and one chunk for many small frames.
                    match cmd.events.back_mut() {
                        Some((Event::Output(last, queued), credit))
                            if *last == stream
                                && stream != Stream::Control
                                && queued.len() + data.len() <= MERGE_LIMIT =>
                        {
                            queued.extend_from_slice(&data);
                            *credit += cost;
                        }
                        _ => cmd.events.push_back((Event::Output(stream, data), cost)),
                    }
                }
                Message::FsChunk { data } => {
                    let cost = data.len();
                    cmd.count(id, cost)?;
                    cmd.events.push_back((Event::Chunk(data), cost));
                }
                Message::FsEntries { entries } => {
                    let cost = entries.iter().map(entry_len).sum();
                    cmd.count(id, cost)?;
                    cmd.events.push_back((Event::Entries(entries), cost));
                }
                Message::FsDone => {
                    cmd.events.push_back((Event::Done, 0));
                    cmd.finished = true;
                }
                Message::FsStatReply { file_type, size, mode } => {
                    cmd.events.push_back((Event::Stat { file_type, size, mode }, 0));
                    cmd.finished = true;
                }
                Message::FsHandle { size, .. } => {
                    cmd.events.push_back((Event::Handle(passed.map(|fd| Passed(Arc::new(fd))), size), 0));
                }
                Message::Credit { bytes } => cmd.stdin_window += bytes as usize,
                Message::Exit { status, oom_killed } => {
                    cmd.events.push_back((Event::Exit { status, oom_killed }, 0));
                    cmd.finished = true;
                }
                Message::Failed { failure, message } => {
                    let message = String::from_utf8_lossy(&message).into_owned();
                    cmd.events.push_back((Event::Failed(failure, message), 0));
                    cmd.finished = true;
                }
                other => {
                    return Err(format!("sandboxd sent {:?}, which is the host's to send", other.kind()));
                }
            }
        }
    }
    drop(state);
    // A request's frame wakes that request's waiters alone (its `Cmd` and a `CmdInput`).
    request.as_deref().unwrap_or(&inner.changed).notify(usize::MAX);
    Ok(())
}
