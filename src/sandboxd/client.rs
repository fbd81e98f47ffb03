//! The host's end of a sandboxd session, over any byte stream (a `bwrap` child's Unix socket, a
//! container's attach stream), usable from any executor.
//!
//! One reader decodes frames and routes them to commands ([`Feed`]: a thread of the session's
//! own, or for `local://` one thread shared by every sandbox); writes go straight to the
//! stream under a lock (sandboxd reads its input at once, and this side always reads, so a
//! write never waits long). Memory is bounded per command: the client grants sandboxd output
//! credit of at most [`OUTPUT_WINDOW`] bytes beyond what the caller has taken, so sandboxd
//! never sends more than that, and the command blocks in `write` while the caller is slow.
//! A session that sandboxd breaks (a malformed frame, output past the credit) or that ends
//! (sandboxd died, the sandbox is gone) ends every command with [`Event::Gone`].

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use event_listener::{Event as Notify, EventListener};

use super::proto::{
    Decoder, Entry, Failure, FileType, Frame, Kind, MAX_CHUNK, MAX_FILE_CHUNK, Message, Spawn, Status,
    Stream, VERSION, data_prefix, frame_credit,
};

/// The most output bytes a command may have queued on the host, in bytes (8 MiB: a window
/// this deep keeps a fast producer busy across the round trip of a container's attach
/// stream; 1 MiB streamed 100 MB at a third of the exec API's rate).
pub(crate) const OUTPUT_WINDOW: u32 = 8 * 1024 * 1024;

/// The stdin bytes sandboxd accepts for a command before it returns credit (its
/// `STDIN_WINDOW`, 256 KiB).
pub(crate) const STDIN_WINDOW: usize = 256 * 1024;

/// The file bytes a write may have in flight to sandboxd before it returns credit (8 MiB, as
/// [`OUTPUT_WINDOW`] the other way). sandboxd writes each `FsData` frame into the file as
/// it decodes it and never queues one, so this bounds only what the transport holds (a
/// pipe, the engine's attach stream); 256 KiB left the pipe empty for most of each round
/// trip through the engine.
pub(crate) const FILE_WINDOW: usize = 8 * 1024 * 1024;

/// The most bytes the reader thread takes from the stream in one read (256 KiB: a file data
/// frame of [`MAX_FILE_CHUNK`] in four reads).
const READ_BUF: usize = 256 * 1024;

/// The most bytes one queued output chunk grows to when frames are joined (256 KiB).
const MERGE_LIMIT: usize = 256 * 1024;

/// Credit is returned to sandboxd in batches of at least this many bytes (1 MiB, an eighth
/// of the window: sandboxd still holds most of it when a batch comes back, and 100 MB of
/// output costs a hundred `Credit` frames instead of 1,500 trips through the engine).
const CREDIT_BATCH: usize = OUTPUT_WINDOW as usize / 8;

/// What happens to a command, in order: `Spawned`, then `Output`s, then one of `Exit`,
/// `Failed` or `Gone`; and to a file request: `Chunk`s or `Entries`, then one of `Done`,
/// `Stat`, `Failed` or `Gone`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// Bytes of a file being read.
    Chunk(Vec<u8>),
    /// Entries of a directory being listed.
    Entries(Vec<Entry>),
    /// A file request completed.
    Done,
    /// sandboxd opened the file of an open-read or open-write request: its descriptor, when
    /// sandboxd handed it over (else the request goes on as a read or write: chunks follow,
    /// or the host sends data), and a read's size.
    Handle(Option<Passed>, u64),
    /// The answer to a stat request.
    Stat {
        /// What the path is.
        file_type: FileType,
        /// Its size in bytes.
        size: u64,
        /// Its permission bits.
        mode: u32,
    },
    /// The command started, with this pid inside the sandbox.
    Spawned(u32),
    /// Bytes the command wrote.
    Output(Stream, Vec<u8>),
    /// The command ended, and every process it started is gone.
    Exit {
        /// How its first process ended.
        status: Status,
        /// The kernel's out-of-memory killer ended a process of the command.
        oom_killed: bool,
    },
    /// sandboxd refused or lost the command.
    Failed(Failure, String),
    /// The session ended before the command did; why.
    Gone(String),
}

/// A descriptor sandboxd handed over (`FsHandle`); compared by identity.
#[derive(Debug, Clone)]
pub(crate) struct Passed(Arc<OwnedFd>);

impl Passed {
    /// The descriptor, for this process's own use.
    pub(crate) fn into_file(self) -> std::io::Result<std::fs::File> {
        match Arc::try_unwrap(self.0) {
            Ok(fd) => Ok(fd.into()),
            Err(shared) => shared.try_clone().map(std::fs::File::from),
        }
    }
}

impl PartialEq for Passed {
    fn eq(&self, other: &Passed) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Passed {}

impl CmdState {
    /// Counts `bytes` of credited data queued for request `id`; more than was granted breaks
    /// the protocol.
    fn count(&mut self, id: u32, bytes: usize) -> Result<(), String> {
        self.queued += bytes;
        if self.queued > OUTPUT_WINDOW as usize {
            return Err(format!("sandboxd sent request {id} more data than it was granted"));
        }
        Ok(())
    }
}

struct CmdState {
    /// Rung when this request's state changes, and only then: with one event for the whole
    /// session, every frame woke every waiting command (issue #28 measured 1,163 commands/s
    /// at 16 at once and 593/s at 64).
    notify: Arc<Notify>,
    /// Events not yet taken, each with the credit it took (output frames take at least
    /// [`MIN_FRAME_CREDIT`](super::proto::MIN_FRAME_CREDIT) each, joined ones the sum).
    events: VecDeque<(Event, usize)>,
    /// Output bytes queued here, and taken since credit was last returned.
    queued: usize,
    taken: usize,
    /// Stdin bytes sandboxd will still accept.
    stdin_window: usize,
    finished: bool,
}

#[derive(Default)]
struct State {
    ended: Option<String>,
    greeted: Option<u32>,
    /// sandboxd answered `Detach`.
    detached: bool,
    cmds: HashMap<u32, CmdState>,
    pongs: HashMap<u32, u64>,
}

struct Inner {
    writer: Mutex<Box<dyn Write + Send>>,
    /// Descriptors received with sandboxd's frames, in order, not yet claimed by their
    /// `FsHandle`; `None` when the stream cannot carry them (no socket).
    passed: Option<Inbox>,
    state: Mutex<State>,
    /// Rung when the session's own state changes (greeted, pongs, detached, ended); each
    /// request has its own ([`CmdState::notify`]).
    changed: Notify,
    next_id: AtomicU32,
}

/// A session with one sandboxd. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("sandboxd::Client").finish_non_exhaustive()
    }
}

/// How many bytes a stdin or file write sends before it yields to its executor.
const YIELD_EVERY: usize = 1 << 20;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Client {
    /// Starts a session over `read`/`write` for a sandbox whose user is `user` (uid, gid):
    /// sends `Hello` and starts a reader thread.
    /// Call [`Client::hello`] to wait for sandboxd's answer.
    ///
    /// # Errors
    ///
    /// The stream could not be written, or the thread could not start.
    pub(crate) fn start(
        read: impl Read + Send + 'static,
        write: impl Write + Send + 'static,
        user: Option<(u32, u32)>,
    ) -> std::io::Result<Client> {
        let (client, feed) = Client::start_fed(write, user, None)?;
        std::thread::Builder::new()
            .name("sandboxio-sandboxd-rx".into())
            .spawn(move || read_loop(feed, read))?;
        Ok(client)
    }

    /// [`Client::start`] over a Unix socket, which can carry descriptors, read by a thread
    /// of its own (the tests'; `local://` reads its sockets on one thread, see
    /// [`Client::start_socket_fed`]).
    ///
    /// # Errors
    ///
    /// The stream could not be written or copied, or the thread could not start.
    #[cfg(test)]
    pub(crate) fn start_socket(stream: UnixStream, user: Option<(u32, u32)>) -> std::io::Result<Client> {
        let inbox = Inbox::default();
        let read = FdReader { stream: stream.try_clone()?, inbox: inbox.clone() };
        let (client, feed) = Client::start_fed(stream, user, Some(inbox))?;
        std::thread::Builder::new()
            .name("sandboxio-sandboxd-rx".into())
            .spawn(move || read_loop(feed, read))?;
        Ok(client)
    }

    /// Starts a session over a Unix socket whose bytes the caller reads with
    /// [`Feed::recv`] (`local://` reads every sandbox's socket on one thread): sandboxd then
    /// hands files over for [`Client::passes_fds`]'s requests, and the host moves their bytes.
    ///
    /// # Errors
    ///
    /// The stream could not be written.
    #[cfg_attr(not(feature = "local"), expect(dead_code, reason = "local:// feeds its sessions itself"))]
    pub(crate) fn start_socket_fed(
        stream: UnixStream,
        user: Option<(u32, u32)>,
    ) -> std::io::Result<(Client, Feed)> {
        Client::start_fed(stream, user, Some(Inbox::default()))
    }

    /// Whether sandboxd can hand files over on this session (its stream is a Unix socket):
    /// then `FsOpenRead` and `FsOpenWrite` are worth asking for.
    pub(crate) fn passes_fds(&self) -> bool {
        self.inner.passed.is_some()
    }

    /// Starts a session whose stream the caller reads: sends `Hello` on `write`; the bytes
    /// read from sandboxd go to the returned [`Feed`], and descriptors that come with them to
    /// `passed`.
    fn start_fed(
        write: impl Write + Send + 'static,
        user: Option<(u32, u32)>,
        passed: Option<Inbox>,
    ) -> std::io::Result<(Client, Feed)> {
        let inner = Arc::new(Inner {
            writer: Mutex::new(Box::new(write)),
            passed,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            next_id: AtomicU32::new(1),
        });
        let client = Client { inner };
        client.send(0, Message::Hello { version: VERSION, user }).map_err(std::io::Error::other)?;
        let feed = Feed { inner: Arc::clone(&client.inner), decoder: Decoder::new(), ended: false };
        Ok((client, feed))
    }

    fn send(&self, id: u32, message: Message) -> Result<(), String> {
        self.send_frames([Frame::new(id, message)])
    }

    /// Writes `frames` in one write: a spawn and its credit reach sandboxd together, so it
    /// handles both in one turn.
    fn send_frames(&self, frames: impl IntoIterator<Item = Frame>) -> Result<(), String> {
        let mut bytes = Vec::new();
        for frame in frames {
            frame.encode(&mut bytes).map_err(|e| e.to_string())?;
        }
        self.write_parts(&[&bytes])
    }

    /// Sends a frame of `kind` whose body is `data` alone, written from where it lies (no
    /// copy into a frame first).
    fn send_data(&self, id: u32, kind: Kind, data: &[u8]) -> Result<(), String> {
        let prefix = data_prefix(kind, id, data.len()).ok_or("a data frame over the body limit")?;
        self.write_parts(&[&prefix, data])
    }

    /// Writes `parts` as one frame, under the writer's lock; a failure ends the session.
    fn write_parts(&self, parts: &[&[u8]]) -> Result<(), String> {
        let written = {
            let mut w = lock(&self.inner.writer);
            parts.iter().try_for_each(|part| w.write_all(part)).and_then(|()| w.flush())
        };
        written.map_err(|e| {
            let why = format!("writing to sandboxd failed: {e}");
            end(&self.inner, why.clone());
            why
        })
    }

    /// Why the session ended, if it has.
    pub(crate) fn ended(&self) -> Option<String> {
        lock(&self.inner.state).ended.clone()
    }

    /// Waits for sandboxd's `HelloAck`; its pid inside the sandbox.
    ///
    /// # Errors
    ///
    /// Why the session ended before sandboxd answered.
    pub(crate) async fn hello(&self) -> Result<u32, String> {
        self.wait(|s| s.greeted.map(Ok).or_else(|| s.ended.clone().map(Err))).await
    }

    /// A round trip through sandboxd.
    ///
    /// # Errors
    ///
    /// Why the session ended before the answer.
    #[cfg_attr(not(test), expect(dead_code, reason = "a liveness check for the backends' next step"))]
    pub(crate) async fn ping(&self) -> Result<(), String> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        self.send(id, Message::Ping { nonce: u64::from(id) })?;
        self.wait(|s| s.pongs.remove(&id).map(|_| Ok(())).or_else(|| s.ended.clone().map(Err))).await
    }

    /// Detaches the session: from sandboxd's `Detached` on, the end of this stream kills the
    /// session's commands and file requests but no longer ends sandboxd, which runs until its
    /// TTL (`--ttl-ms`). In a session on sandboxd's `--listen-fd` socket it changes nothing.
    ///
    /// # Errors
    ///
    /// Why the session ended before sandboxd answered.
    pub(crate) async fn detach(&self) -> Result<(), String> {
        self.send(0, Message::Detach)?;
        self.wait(|s| if s.detached { Some(Ok(())) } else { s.ended.clone().map(Err) }).await
    }

    async fn wait<T>(&self, ready: impl FnMut(&mut State) -> Option<T>) -> T {
        self.wait_on(&self.inner.changed, ready).await
    }

    /// Waits until `ready` gives a value, looking again each time `notify` rings.
    async fn wait_on<T>(&self, notify: &Notify, mut ready: impl FnMut(&mut State) -> Option<T>) -> T {
        loop {
            let listener = notify.listen();
            if let Some(v) = ready(&mut lock(&self.inner.state)) {
                return v;
            }
            listener.await;
        }
    }

    /// Starts a command. Its events arrive on the returned handle.
    ///
    /// # Errors
    ///
    /// Why the session ended (the command was not sent).
    pub(crate) fn spawn(&self, spec: Spawn) -> Result<Cmd, String> {
        self.request(Message::Spawn(spec))
    }

    /// Sends a request (a spawn or a file operation) under a fresh id; its answers arrive on
    /// the returned handle. Reads, listings and commands are granted [`OUTPUT_WINDOW`] of
    /// credit at once; a write's data goes through [`Cmd::send_data`] and [`Cmd::finish`].
    ///
    /// # Errors
    ///
    /// Why the session ended (the request was not sent).
    pub(crate) fn request(&self, message: Message) -> Result<Cmd, String> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        {
            let mut state = lock(&self.inner.state);
            if let Some(why) = &state.ended {
                return Err(why.clone());
            }
            let window = if matches!(message, Message::FsWrite { .. }) { FILE_WINDOW } else { STDIN_WINDOW };
            let cmd = CmdState {
                notify: Arc::clone(&notify),
                events: VecDeque::new(),
                queued: 0,
                taken: 0,
                stdin_window: window,
                finished: false,
            };
            state.cmds.insert(id, cmd);
        }
        let cmd = Cmd { client: self.clone(), id, notify, listener: None };
        let credit = matches!(
            message,
            Message::Spawn(_) | Message::FsRead { .. } | Message::FsOpenRead { .. } | Message::FsList { .. }
        );
        let credit = credit.then(|| Frame::new(id, Message::Credit { bytes: OUTPUT_WINDOW }));
        self.send_frames(std::iter::once(Frame::new(id, message)).chain(credit))?;
        Ok(cmd)
    }
}

/// Descriptors received with sandboxd's frames, in order, until their `FsHandle` frame
/// claims them.
#[derive(Clone, Default)]
struct Inbox(Arc<Mutex<VecDeque<OwnedFd>>>);

/// The most descriptors received ahead of their `FsHandle` frames: each comes with its
/// frame's first byte and is claimed when that frame is routed, so more is a peer passing
/// descriptors it did not announce, and ends the session.
const INBOX_LIMIT: usize = 4;

/// Reads a Unix socket's bytes as [`Read`] does, keeping the descriptors that come with them
/// (close-on-exec) in the [`Inbox`] (the tests' reader thread, [`Client::start_socket`]).
#[cfg(test)]
struct FdReader {
    stream: UnixStream,
    inbox: Inbox,
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
fn end(inner: &Inner, why: String) {
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
    inner: Arc<Inner>,
    decoder: Decoder,
    ended: bool,
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

fn read_loop(mut feed: Feed, mut read: impl Read) {
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

/// One command of a session. Dropping it before it ended kills it.
pub(crate) struct Cmd {
    client: Client,
    id: u32,
    /// This request's [`CmdState::notify`].
    notify: Arc<Notify>,
    listener: Option<EventListener>,
}

impl std::fmt::Debug for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("sandboxd::Cmd").field("id", &self.id).finish_non_exhaustive()
    }
}

impl Cmd {
    /// Takes the next event, returning output credit to sandboxd as the caller takes bytes.
    fn take(&self) -> Option<Event> {
        let mut state = lock(&self.client.inner.state);
        let cmd = state.cmds.get_mut(&self.id)?;
        let (event, bytes) = cmd.events.pop_front()?;
        let mut grant = 0;
        if bytes > 0 {
            cmd.queued -= bytes;
            cmd.taken += bytes;
            if cmd.taken >= CREDIT_BATCH && !cmd.finished {
                grant = std::mem::take(&mut cmd.taken);
            }
        }
        drop(state);
        if grant > 0 {
            // A failed send ends the session, which the next take reports as Gone.
            let _ = self
                .client
                .send(self.id, Message::Credit { bytes: u32::try_from(grant).unwrap_or(u32::MAX) });
        }
        Some(event)
    }

    /// The next event; `Poll::Ready(None)` after the last one (`Exit`, `Failed` or `Gone`).
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        loop {
            if let Some(event) = self.take() {
                self.listener = None;
                return Poll::Ready(Some(event));
            }
            if self.is_over() {
                return Poll::Ready(None);
            }
            match &mut self.listener {
                None => self.listener = Some(self.notify.listen()),
                Some(l) => {
                    if std::pin::Pin::new(l).poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.listener = None;
                }
            }
        }
    }

    /// The next event, `None` after the last one.
    pub(crate) async fn next(&mut self) -> Option<Event> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    fn is_over(&self) -> bool {
        let state = lock(&self.client.inner.state);
        state.cmds.get(&self.id).is_none_or(|c| c.finished && c.events.is_empty())
    }

    /// Sends `data` to the command's stdin (it must have been spawned with a piped stdin),
    /// waiting while sandboxd's window for it is full.
    ///
    /// # Errors
    ///
    /// Why the session or the command ended first.
    pub(crate) async fn write_stdin(&self, data: &[u8]) -> Result<(), String> {
        self.send_window(data, Kind::Stdin, MAX_CHUNK).await
    }

    /// Sends `data` for a file write request, waiting while sandboxd's window is full.
    ///
    /// # Errors
    ///
    /// Why the session ended or the write failed first.
    pub(crate) async fn send_data(&self, data: &[u8]) -> Result<(), String> {
        self.send_window(data, Kind::FsData, MAX_FILE_CHUNK).await
    }

    /// Sends `data` to the command's control channel (it must have been spawned with
    /// `control`), sharing the stdin window.
    ///
    /// # Errors
    ///
    /// Why the session or the command ended first.
    pub(crate) async fn send_control(&self, data: &[u8]) -> Result<(), String> {
        self.send_window(data, Kind::ControlIn, MAX_CHUNK).await
    }

    /// Ends a file write: sandboxd renames the file into place and answers `Done`.
    ///
    /// # Errors
    ///
    /// Why the session ended.
    pub(crate) fn finish(&self) -> Result<(), String> {
        self.client.send(self.id, Message::FsEnd)
    }

    /// Sends `data` in frames of `kind` of at most `chunk` bytes, within the request's window.
    async fn send_window(&self, mut data: &[u8], kind: Kind, chunk: usize) -> Result<(), String> {
        // Bytes sent since this future last let its executor run.
        let mut since_yield = 0;
        while !data.is_empty() {
            // A sandboxd that keeps its window open would let a large write finish inside one
            // poll: the caller's deadline (a timer raced against this future) and its other
            // tasks would wait for all of it. Yield every MiB so that both get their turn.
            if since_yield >= YIELD_EVERY {
                since_yield = 0;
                futures_lite::future::yield_now().await;
            }
            let n = self
                .client
                .wait_on(&self.notify, |s| {
                    if let Some(why) = &s.ended {
                        return Some(Err(why.clone()));
                    }
                    match s.cmds.get_mut(&self.id) {
                        Some(c) if c.finished => Some(Err("the request has ended".to_owned())),
                        Some(c) if c.stdin_window > 0 => {
                            let n = c.stdin_window.min(data.len()).min(chunk);
                            c.stdin_window -= n;
                            Some(Ok(n))
                        }
                        Some(_) => None,
                        None => Some(Err("the request has ended".to_owned())),
                    }
                })
                .await?;
            self.client.send_data(self.id, kind, &data[..n])?;
            data = &data[n..];
            since_yield += n;
        }
        Ok(())
    }

    /// Ends the command's stdin.
    ///
    /// # Errors
    ///
    /// Why the session ended.
    pub(crate) fn close_stdin(&self) -> Result<(), String> {
        self.client.send(self.id, Message::StdinEof)
    }

    /// Sends `signal` to the command; `SIGKILL` (9) ends it and everything it started.
    ///
    /// # Errors
    ///
    /// Why the session ended.
    pub(crate) fn signal(&self, signal: i32) -> Result<(), String> {
        self.client.send(self.id, Message::Signal { signal })
    }
}

impl Cmd {
    /// A handle that writes to this command (stdin, signals) while `next` borrows the
    /// command mutably elsewhere. It does not keep the command alive: dropping the `Cmd`
    /// still kills it.
    pub(crate) fn input(&self) -> CmdInput {
        CmdInput {
            cmd: Cmd {
                client: self.client.clone(),
                id: self.id,
                notify: Arc::clone(&self.notify),
                listener: None,
            },
        }
    }
}

/// The writing half of a [`Cmd`] (see [`Cmd::input`]).
pub(crate) struct CmdInput {
    cmd: Cmd,
}

impl std::fmt::Debug for CmdInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("sandboxd::CmdInput").field("id", &self.cmd.id).finish_non_exhaustive()
    }
}

impl std::ops::Deref for CmdInput {
    type Target = Cmd;

    fn deref(&self) -> &Cmd {
        &self.cmd
    }
}

impl Drop for CmdInput {
    fn drop(&mut self) {
        // Only the `Cmd` itself ends the command: make the inner handle's drop a no-op.
        self.cmd.id = 0;
    }
}

impl Drop for Cmd {
    fn drop(&mut self) {
        if self.id == 0 {
            return;
        }
        let finished = lock(&self.client.inner.state).cmds.remove(&self.id).is_none_or(|c| c.finished);
        if !finished {
            let _ = self.client.send(self.id, Message::Signal { signal: 9 });
        }
    }
}

// The tests run the sandboxd that build.rs built; without it (its cargo warning says why) they
// cannot run.
#[cfg(all(test, sandboxd_embedded))]
mod tests {
    use std::process::{Child, Command, Stdio};

    use futures_lite::future::block_on;

    use super::*;

    struct Daemon {
        child: Child,
        client: Client,
        /// The directory holding the binary, removed on drop; `None` for a stand-in peer.
        dir: Option<std::path::PathBuf>,
    }

    impl Drop for Daemon {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            if let Some(dir) = &self.dir {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    fn daemon_with(program: &str, args: &[&str], dir: Option<std::path::PathBuf>) -> Daemon {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let client = Client::start(child.stdout.take().unwrap(), child.stdin.take().unwrap(), None).unwrap();
        Daemon { child, client, dir }
    }

    /// sandboxd as `build.rs` left it in `OUT_DIR`. Not a copy written here: writing an
    /// executable while another test thread forks lets the child hold the file open for
    /// writing, and executing it then fails with `ETXTBSY`.
    fn daemon() -> Daemon {
        static N: AtomicU32 = AtomicU32::new(0);
        let binary = env!("SANDBOXIO_SANDBOXD");
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("sandboxd-client-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let d = daemon_with(binary, &[], Some(dir));
        block_on(d.client.hello()).unwrap();
        d
    }

    fn spec(argv: &[&str]) -> Spawn {
        Spawn {
            argv: argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
            env: vec![(b"PATH".to_vec(), b"/usr/bin:/bin".to_vec())],
            ..Spawn::default()
        }
    }

    fn collect(mut cmd: Cmd) -> (Vec<u8>, Vec<u8>, Event) {
        block_on(async {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            loop {
                match cmd.next().await.expect("a last event") {
                    Event::Spawned(_) => {}
                    Event::Output(Stream::Stdout, d) => out.extend(d),
                    Event::Output(Stream::Stderr, d) => err.extend(d),
                    last => return (out, err, last),
                }
            }
        })
    }

    #[test]
    fn a_command_runs_with_exact_output_and_status() {
        let d = daemon();
        let cmd = d.client.spawn(spec(&["sh", "-c", "printf out; printf err >&2; exit 4"])).unwrap();
        let (out, err, last) = collect(cmd);
        assert_eq!((out.as_slice(), err.as_slice()), (&b"out"[..], &b"err"[..]));
        assert_eq!(last, Event::Exit { status: Status::Code(4), oom_killed: false });
        block_on(d.client.ping()).unwrap();
    }

    #[test]
    fn large_output_arrives_whole_through_a_bounded_window() {
        let d = daemon();
        let cmd = d.client.spawn(spec(&["head", "-c", "20000000", "/dev/zero"])).unwrap();
        let id = cmd.id;
        let mut cmd = cmd;
        let (mut total, mut most_queued) = (0usize, 0usize);
        block_on(async {
            while let Some(event) = cmd.next().await {
                most_queued =
                    most_queued.max(lock(&d.client.inner.state).cmds.get(&id).map_or(0, |c| c.queued));
                if let Event::Output(_, data) = event {
                    total += data.len();
                }
            }
        });
        assert_eq!(total, 20_000_000);
        assert!(most_queued <= OUTPUT_WINDOW as usize, "{most_queued} bytes queued");
    }

    #[test]
    fn stdin_larger_than_the_window_reaches_the_command() {
        let d = daemon();
        let mut s = spec(&["sh", "-c", "wc -c"]);
        s.stdin = super::super::proto::StdinMode::Pipe;
        let cmd = d.client.spawn(s).unwrap();
        let data = vec![7u8; 1_000_000];
        block_on(cmd.write_stdin(&data)).unwrap();
        cmd.close_stdin().unwrap();
        let (out, _, last) = collect(cmd);
        assert_eq!(String::from_utf8_lossy(&out).trim(), "1000000");
        assert_eq!(last, Event::Exit { status: Status::Code(0), oom_killed: false });
    }

    #[test]
    fn a_kill_is_a_signal_death_and_sandboxd_dying_is_gone() {
        let mut d = daemon();
        let cmd = d.client.spawn(spec(&["sleep", "1000"])).unwrap();
        cmd.signal(9).unwrap();
        let (_, _, last) = collect(cmd);
        assert_eq!(last, Event::Exit { status: Status::Signal(9), oom_killed: false });

        // sandboxd is no PID-namespace init here, so killing it orphans the command to the
        // host's init: a short sleep keeps that from outliving the test by much.
        let cmd = d.client.spawn(spec(&["sleep", "2"])).unwrap();
        block_on(d.client.ping()).unwrap();
        d.child.kill().unwrap();
        let (_, _, last) = collect(cmd);
        assert!(matches!(last, Event::Gone(_)), "{last:?}");
        assert!(d.client.spawn(spec(&["true"])).is_err(), "a spawn after the end is refused");
    }

    #[test]
    fn file_requests_round_trip_through_the_session() {
        let d = daemon();
        let dir = d.dir.clone().unwrap();
        let path = dir.join("data.bin");
        let path_bytes = path.to_str().unwrap().as_bytes().to_vec();
        let data: Vec<u8> = (0..700_000u32).map(|i| (i % 253) as u8).collect();
        let mut write = d.client.request(Message::FsWrite { path: path_bytes.clone(), mode: 0o600 }).unwrap();
        block_on(write.send_data(&data)).unwrap();
        write.finish().unwrap();
        assert_eq!(block_on(write.next()), Some(Event::Done));

        let mut read =
            d.client.request(Message::FsRead { path: path_bytes.clone(), limit: 1 << 30 }).unwrap();
        let mut back = Vec::new();
        let last = block_on(async {
            loop {
                match read.next().await.unwrap() {
                    Event::Chunk(bytes) => back.extend(bytes),
                    last => return last,
                }
            }
        });
        assert_eq!(last, Event::Done);
        assert_eq!(back, data);

        let mut stat = d.client.request(Message::FsStat { path: path_bytes }).unwrap();
        assert_eq!(
            block_on(stat.next()),
            Some(Event::Stat { file_type: FileType::File, size: 700_000, mode: 0o600 })
        );
        let missing = dir.join("missing").to_str().unwrap().as_bytes().to_vec();
        let mut read = d.client.request(Message::FsRead { path: missing, limit: 10 }).unwrap();
        assert!(matches!(block_on(read.next()), Some(Event::Failed(Failure::NotFound, _))));
    }

    /// sandboxd on a socket pair (its stdin and stdout), as `local://` runs it: files can be
    /// handed over.
    fn daemon_on_socket() -> Daemon {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("sandboxd-client-socket-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let (host, inside) = UnixStream::pair().unwrap();
        let inside = OwnedFd::from(inside);
        let child = Command::new(env!("SANDBOXIO_SANDBOXD"))
            .stdin(Stdio::from(inside.try_clone().unwrap()))
            .stdout(Stdio::from(inside))
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let client = Client::start_socket(host, None).unwrap();
        block_on(client.hello()).unwrap();
        Daemon { child, client, dir: Some(dir) }
    }

    /// Reads `path` with `FsOpenRead`: what came, and whether its descriptor was handed over.
    fn open_read(client: &Client, path: &std::path::Path, limit: u64) -> (Result<Vec<u8>, Event>, bool) {
        let path = path.to_str().unwrap().as_bytes().to_vec();
        let mut cmd = client.request(Message::FsOpenRead { path, limit }).unwrap();
        let (mut data, mut handed) = (Vec::new(), false);
        block_on(async {
            loop {
                match cmd.next().await.unwrap() {
                    Event::Handle(Some(file), _) => {
                        handed = true;
                        std::io::Read::read_to_end(&mut file.into_file().unwrap(), &mut data).unwrap();
                    }
                    Event::Chunk(bytes) => data.extend(bytes),
                    Event::Done => return (Ok(data), handed),
                    other => return (Err(other), handed),
                }
            }
        })
    }

    #[test]
    fn on_a_socket_files_are_handed_over_and_proc_files_are_streamed() {
        let d = daemon_on_socket();
        assert!(d.client.passes_fds());
        let path = d.dir.clone().unwrap().join("handed.bin");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut write = d
            .client
            .request(Message::FsOpenWrite { path: path.to_str().unwrap().as_bytes().to_vec(), mode: 0o640 })
            .unwrap();
        let Some(Event::Handle(Some(file), 0)) = block_on(write.next()) else {
            panic!("sandboxd did not hand the new file over");
        };
        std::io::Write::write_all(&mut file.into_file().unwrap(), &data).unwrap();
        // Not in place until the end: a new file is written under a temporary name.
        assert!(!path.exists(), "the file appeared before FsEnd");
        write.finish().unwrap();
        assert_eq!(block_on(write.next()), Some(Event::Done));
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o640);
        assert_eq!(open_read(&d.client, &path, 1 << 30), (Ok(data), true));

        // Over the limit: refused before anything is handed over.
        let (over, handed) = open_read(&d.client, &path, 10);
        assert!(matches!(over, Err(Event::Failed(Failure::TooLarge, _))), "{over:?}");
        assert!(!handed);
        // A /proc file (its contents depend on who reads) is streamed, never handed over;
        // the control: the same request on a disk file was handed over above.
        let (status, handed) = open_read(&d.client, std::path::Path::new("/proc/self/status"), 1 << 20);
        let (version, streamed) = open_read(&d.client, std::path::Path::new("/proc/version"), 1 << 20);
        assert!(matches!(status, Err(Event::Failed(Failure::PermissionDenied, _))), "{status:?}");
        assert!(!handed && !streamed, "a /proc file was handed over");
        assert!(version.unwrap().starts_with(b"Linux"));
    }

    #[test]
    fn a_write_dropped_after_its_handover_leaves_no_file() {
        let d = daemon_on_socket();
        let path = d.dir.clone().unwrap().join("dropped.bin");
        let mut write = d
            .client
            .request(Message::FsOpenWrite { path: path.to_str().unwrap().as_bytes().to_vec(), mode: 0o644 })
            .unwrap();
        let Some(Event::Handle(Some(file), _)) = block_on(write.next()) else { panic!("not handed over") };
        std::io::Write::write_all(&mut file.into_file().unwrap(), b"half").unwrap();
        drop(write);
        block_on(d.client.ping()).unwrap();
        let left: Vec<_> =
            std::fs::read_dir(d.dir.as_ref().unwrap()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "a dropped write left {left:?}");
    }

    #[test]
    fn a_peer_announcing_a_descriptor_it_did_not_pass_ends_the_session() {
        let (host, mut peer) = UnixStream::pair().unwrap();
        let client = Client::start_socket(host, None).unwrap();
        let mut write = client.request(Message::FsOpenWrite { path: b"/x".to_vec(), mode: 0o644 }).unwrap();
        let mut bytes = Frame::new(0, Message::HelloAck { version: VERSION, pid: 1 }).to_bytes().unwrap();
        bytes.extend(Frame::new(write.id, Message::FsHandle { size: 0, passed: true }).to_bytes().unwrap());
        peer.write_all(&bytes).unwrap();
        block_on(client.hello()).unwrap();
        let last = block_on(write.next());
        assert!(matches!(&last, Some(Event::Gone(why)) if why.contains("did not come")), "{last:?}");
        // The control: the same frame with its descriptor is a handover.
        let (host, peer) = UnixStream::pair().unwrap();
        let client = Client::start_socket(host, None).unwrap();
        let mut write = client.request(Message::FsOpenWrite { path: b"/x".to_vec(), mode: 0o644 }).unwrap();
        let hello = Frame::new(0, Message::HelloAck { version: VERSION, pid: 1 }).to_bytes().unwrap();
        (&peer).write_all(&hello).unwrap();
        let handle = Frame::new(write.id, Message::FsHandle { size: 0, passed: true }).to_bytes().unwrap();
        let file = std::fs::File::open("/dev/null").unwrap();
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
        let fds = [std::os::fd::AsFd::as_fd(&file)];
        assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
        let io = [std::io::IoSlice::new(&handle)];
        rustix::net::sendmsg(&peer, &io, &mut control, rustix::net::SendFlags::empty()).unwrap();
        block_on(client.hello()).unwrap();
        assert!(matches!(block_on(write.next()), Some(Event::Handle(Some(_), 0))));
    }

    #[test]
    fn detach_is_answered_and_the_session_goes_on() {
        let d = daemon();
        block_on(d.client.detach()).unwrap();
        let cmd = d.client.spawn(spec(&["echo", "still here"])).unwrap();
        let (out, _, last) = collect(cmd);
        assert_eq!(out, b"still here\n");
        assert_eq!(last, Event::Exit { status: Status::Code(0), oom_killed: false });
        // A peer that ends instead of answering: detach reports the end, it does not hang.
        let gone = daemon_with("sh", &["-c", "head -c 12 >/dev/null"], None);
        assert!(block_on(gone.client.detach()).is_err());
    }

    /// A peer that sends `frames` one-byte output frames for request 1 (stdout and stderr in
    /// turn, so none can be joined) within the credit the client grants it, and what the
    /// client then says: `None` while the session lives, else why it ended.
    fn one_byte_frames(frames: usize) -> Option<String> {
        let (read, mut write) = std::io::pipe().unwrap();
        let client = Client::start(read, std::io::sink(), None).unwrap();
        let cmd = client.spawn(spec(&["true"])).unwrap();
        let mut bytes = Frame::new(0, Message::HelloAck { version: VERSION, pid: 1 }).to_bytes().unwrap();
        for i in 0..frames {
            let stream = if i % 2 == 0 { Stream::Stdout } else { Stream::Stderr };
            bytes
                .extend(Frame::new(cmd.id, Message::Output { stream, data: vec![b'x'] }).to_bytes().unwrap());
        }
        write.write_all(&bytes).unwrap();
        drop(write);
        block_on(client.hello()).unwrap();
        // The stream's end ends the session after the frames: wait for it.
        while client.ended().is_none() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let queued = lock(&client.inner.state).cmds.get(&cmd.id).map_or(0, |c| c.events.len());
        let why = client.ended().unwrap_or_default();
        if why.contains("more data than it was granted") {
            Some(why)
        } else {
            assert!(queued > frames);
            None
        }
    }

    #[test]
    fn one_byte_output_frames_take_their_minimum_credit() {
        // Each frame takes MIN_FRAME_CREDIT of the window: a peer may send the window's worth
        // of them (the control: all are queued, nothing is refused) and not one more, so a
        // command writing a byte at a time holds the host to a bounded number of events.
        let allowed = OUTPUT_WINDOW as usize / super::super::proto::MIN_FRAME_CREDIT as usize;
        assert_eq!(one_byte_frames(allowed), None, "control: {allowed} frames fit the window");
        let why = one_byte_frames(allowed + 1).expect("a frame past the window's worth ends the session");
        assert!(why.contains("request 1"), "{why}");
    }

    #[test]
    fn a_peer_that_sends_garbage_ends_the_session_with_a_reason() {
        let d = daemon_with("sh", &["-c", "printf '\\377\\377\\377\\377garbage'; sleep 5"], None);
        let why = block_on(d.client.hello()).unwrap_err();
        assert!(why.contains("malformed"), "{why}");
    }
}
