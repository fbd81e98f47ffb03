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

mod cmd;
mod feed;

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use event_listener::Event as Notify;

pub(crate) use cmd::{Cmd, CmdInput};
#[cfg(test)]
use feed::FdReader;
pub(crate) use feed::Feed;
use feed::{Inbox, end, read_loop};

use super::proto::{
    Decoder, Entry, Failure, FileType, Frame, Kind, Message, Spawn, Status, Stream, VERSION, data_prefix,
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

// The tests run the sandboxd that build.rs built; without it (its cargo warning says why) they
// cannot run.
#[cfg(all(test, sandboxd_embedded))]
mod tests;
