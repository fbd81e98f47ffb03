//! File operations as sandboxd's own file requests (`FsRead`, `FsWrite` with its `FsData`
//! chunks and `FsEnd`, `FsList`, `FsMkdir`, `FsRemove`): no process is started in the
//! sandbox and no program of its image is needed. sandboxd does each as the sandbox's user,
//! in the sandbox's own view of its files (`sandboxd/src/fs.rs` says how), and this side
//! turns its answers into sandboxio's results and errors.
//!
//! Paths arrive absolute and checked: the core refused `..` and NUL bytes before the
//! backend was called, and the backend applied its own rules for its root directories.
//! What the host takes is bounded: a read by its limit (sandboxd refuses a larger file
//! before sending a byte, and one that grows past the limit as it is read), a listing by
//! [`LIST_LIMIT`] bytes of entries; sandboxd sends either only within the session's output
//! window. Dropping an operation drops its request, which cancels it in sandboxd.
//!
//! Where the session runs over a Unix socket (`local://`), a read or write asks sandboxd to
//! hand the opened file over (`FsOpenRead`, `FsOpenWrite`): sandboxd still resolves the path
//! in the sandbox's view, as its user, with every check of a plain read or write, and this
//! side only moves the bytes through the descriptor, at the speed of a local copy (issue
//! #28 measured 100 MB through the frames at 6.5 times a plain host write). A read takes at
//! most its limit from the descriptor whatever the file does meanwhile; a write that fails
//! on the host drops its request, so sandboxd removes a new file's temporary file.

use crate::backends::file_errors::{self, LIST_LIMIT};
use crate::error::{Error, Result};
use crate::fs::{DirEntry, FileKind};
use crate::sandboxd::client::{Cmd, Event, Passed};
use crate::sandboxd::proto::{Entry, Failure, FileType, Message};

use super::Session;

/// Which operation a refusal answered: each words `InvalidInput` its own way.
#[derive(Clone, Copy)]
enum Op {
    Read(u64),
    Write,
    List,
    Mkdir,
    Remove,
}

impl Session {
    /// Sends a file request, or says why the session cannot take one.
    fn file_request(&self, message: Message) -> Result<Cmd> {
        self.check_alive()?;
        self.client.request(message).map_err(|why| self.gone_error(&why))
    }

    /// The error for a request on `abs` that sandboxd refused with `failure`.
    fn file_error(&self, op: Op, abs: &str, failure: Failure, said: &str) -> Error {
        let path = abs.to_owned();
        match (failure, op) {
            (Failure::NotFound, _) => Error::NotFound { path },
            (Failure::PermissionDenied, _) => Error::PermissionDenied { path },
            (Failure::IsADirectory, _) => Error::IsADirectory { path },
            (Failure::TooLarge, Op::Read(limit)) => crate::transfer::over_read_limit(abs, limit),
            (Failure::InvalidInput, Op::Read(_)) => file_errors::not_a_regular_file(abs),
            (Failure::InvalidInput, Op::Write) => file_errors::a_special_file(abs),
            (Failure::InvalidInput, Op::List) => file_errors::not_a_directory(abs),
            (Failure::InvalidInput, Op::Mkdir) => file_errors::exists_not_a_directory(abs),
            (Failure::InvalidInput, Op::Remove) => Error::invalid_input(format!("removing {abs}: {said}")),
            _ => file_errors::failed(self.scheme, abs, said),
        }
    }

    /// The last event of a request that has no data to give, as a result.
    fn outcome(&self, op: Op, abs: &str, last: Option<Event>) -> Result<()> {
        match last {
            Some(Event::Done) => Ok(()),
            other => Err(self.unexpected(op, abs, other)),
        }
    }

    /// The error for an event that ends a request without its answer.
    fn unexpected(&self, op: Op, abs: &str, event: Option<Event>) -> Error {
        match event {
            Some(Event::Failed(failure, said)) => self.file_error(op, abs, failure, &said),
            Some(Event::Gone(why)) => self.gone_error(&why),
            None => self.gone_error("the request ended without an answer"),
            Some(other) => Error::provider_message(
                self.scheme,
                format!("sandboxd answered a file request on {abs} with {other:?}"),
            ),
        }
    }

    /// Reads the regular file `abs` (links followed inside the sandbox), at most `limit`
    /// bytes: a larger file is [`Error::TooLarge`].
    ///
    /// # Errors
    ///
    /// `NotFound`, `PermissionDenied`, `IsADirectory`, `InvalidInput` (not a regular file),
    /// `TooLarge`, `SandboxGone`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future cancels the read in sandboxd.
    pub(crate) async fn read_file(&self, abs: &str, limit: u64) -> Result<Vec<u8>> {
        let op = Op::Read(limit);
        let path = abs.as_bytes().to_vec();
        let request = if self.client.passes_fds() {
            Message::FsOpenRead { path, limit }
        } else {
            Message::FsRead { path, limit }
        };
        let mut cmd = self.file_request(request)?;
        let mut data = Vec::new();
        loop {
            match cmd.next().await {
                Some(Event::Handle(Some(file), size)) => {
                    data = self.read_handed(abs, file, size, limit).await?;
                }
                // Not handed over: its chunks follow.
                Some(Event::Handle(None, _)) => {}
                Some(Event::Chunk(chunk)) => {
                    // sandboxd keeps to the limit; the host does not rely on it.
                    if (data.len() + chunk.len()) as u64 > limit {
                        return Err(crate::transfer::over_read_limit(abs, limit));
                    }
                    if data.is_empty() {
                        data = chunk;
                    } else {
                        data.extend_from_slice(&chunk);
                    }
                }
                Some(Event::Done) => return Ok(data),
                other => return Err(self.unexpected(op, abs, other)),
            }
        }
    }

    /// Writes `data` to `abs` as the sandbox user's own write would (`sandboxd/src/fs.rs`:
    /// an existing file in place, a new one through an exclusive temporary file renamed
    /// into place with mode `mode`, `0o644` without). The data goes in chunks within
    /// sandboxd's window.
    ///
    /// # Errors
    ///
    /// `PermissionDenied`, `IsADirectory`, `InvalidInput` (a special file), `NotFound` (a
    /// parent that is a file), `SandboxGone`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future cancels the write: a new file is not created, an existing one
    /// may be partly written.
    pub(crate) async fn write_file(&self, abs: &str, data: &[u8], mode: Option<u32>) -> Result<()> {
        let mode = mode.unwrap_or(0o644) & 0o777;
        let path = abs.as_bytes().to_vec();
        if self.client.passes_fds() {
            let mut cmd = self.file_request(Message::FsOpenWrite { path, mode })?;
            return match cmd.next().await {
                Some(Event::Handle(Some(file), _)) => {
                    // On a failure here, dropping `cmd` makes sandboxd abandon the write.
                    self.write_handed(abs, file, data).await?;
                    cmd.finish().map_err(|why| self.gone_error(&why))?;
                    self.outcome(Op::Write, abs, cmd.next().await)
                }
                Some(Event::Handle(None, _)) => self.write_frames(cmd, abs, data).await,
                other => Err(self.unexpected(Op::Write, abs, other)),
            };
        }
        let cmd = self.file_request(Message::FsWrite { path, mode })?;
        self.write_frames(cmd, abs, data).await
    }

    /// Sends a write's bytes in data frames, within sandboxd's window, and ends it.
    async fn write_frames(&self, mut cmd: Cmd, abs: &str, data: &[u8]) -> Result<()> {
        // A refusal (or the session's end) stops the data early; either way the request's
        // last event says what happened. `FsEnd` goes even after a refusal: sandboxd then
        // forgets the request.
        let _ = cmd.send_data(data).await;
        let _ = cmd.finish();
        self.outcome(Op::Write, abs, cmd.next().await)
    }

    /// Lists the directory `abs`, entries not followed, at most [`LIST_LIMIT`] bytes of them
    /// (as sandboxd sends them).
    ///
    /// # Errors
    ///
    /// `NotFound`, `PermissionDenied`, `InvalidInput` (not a directory), `TooLarge` (a
    /// listing over the bound), `SandboxGone`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future cancels the listing in sandboxd.
    pub(crate) async fn list_dir(&self, abs: &str) -> Result<Vec<DirEntry>> {
        let mut cmd = self.file_request(Message::FsList { path: abs.as_bytes().to_vec() })?;
        let (mut entries, mut bytes) = (Vec::new(), 0u64);
        loop {
            match cmd.next().await {
                Some(Event::Entries(batch)) => {
                    bytes += batch.iter().map(Entry::wire_len).sum::<u64>();
                    if bytes > LIST_LIMIT {
                        return Err(file_errors::over_list_limit(abs));
                    }
                    entries.extend(batch.into_iter().map(dir_entry));
                }
                Some(Event::Done) => return Ok(entries),
                other => return Err(self.unexpected(Op::List, abs, other)),
            }
        }
    }

    /// Creates the directory `abs` and its parents; an existing directory is fine.
    ///
    /// # Errors
    ///
    /// `PermissionDenied`, `InvalidInput` (it exists and is not a directory), `NotFound` (a
    /// parent is a file), `SandboxGone`.
    ///
    /// # Cancel safety
    ///
    /// Creating a directory again is harmless.
    pub(crate) async fn make_dir(&self, abs: &str) -> Result<()> {
        let mut cmd = self.file_request(Message::FsMkdir { path: abs.as_bytes().to_vec(), parents: true })?;
        self.outcome(Op::Mkdir, abs, cmd.next().await)
    }

    /// Removes `abs` (a link itself, never its target; a directory's contents too when
    /// `recursive`).
    ///
    /// # Errors
    ///
    /// `NotFound`, `IsADirectory` (a non-empty directory without `recursive`),
    /// `PermissionDenied`, `SandboxGone`.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: part of a tree may have been removed.
    pub(crate) async fn remove_path(&self, abs: &str, recursive: bool) -> Result<()> {
        let mut cmd = self.file_request(Message::FsRemove { path: abs.as_bytes().to_vec(), recursive })?;
        self.outcome(Op::Remove, abs, cmd.next().await)
    }
}

impl Session {
    /// Reads at most `limit` bytes (and one more, to tell a file over it) from a file
    /// sandboxd handed over, `size` bytes long when it was opened; a step at a time, letting
    /// the executor run in between (a caller's deadline, its other tasks).
    async fn read_handed(&self, abs: &str, file: Passed, size: u64, limit: u64) -> Result<Vec<u8>> {
        use std::io::Read as _;
        let failed = |e: std::io::Error| file_errors::failed(self.scheme, abs, &e.to_string());
        let mut file = self.handed_file(abs, file)?;
        // sandboxd checked `size` against the limit; the host bounds it again all the same.
        // The size is the sandbox's to choose (a sparse file claims up to the limit without
        // a byte on disk), so room for it is asked for, never assumed: `with_capacity` of a
        // 100 GiB claim under a raised read limit aborted the whole process ("memory
        // allocation of 107374182400 bytes failed").
        let mut data = Vec::new();
        let claimed = size.min(limit);
        if usize::try_from(claimed).map_or(true, |bytes| data.try_reserve_exact(bytes).is_err()) {
            return Err(Error::TooLarge {
                path: abs.to_owned(),
                limit,
                what: format!(
                    "the memory this process could set aside for it: the file holds {size} bytes; \
                     read it with Fs::download"
                ),
            });
        }
        loop {
            let before = data.len();
            let want = limit.saturating_add(1).saturating_sub(before as u64).min(HANDED_STEP as u64);
            (&mut file).take(want).read_to_end(&mut data).map_err(failed)?;
            if data.len() as u64 > limit {
                return Err(crate::transfer::over_read_limit(abs, limit));
            }
            if ((data.len() - before) as u64) < want {
                return Ok(data);
            }
            futures_lite::future::yield_now().await;
        }
    }

    /// Writes `data` to a file sandboxd handed over, a step at a time (as
    /// [`Session::read_handed`]).
    async fn write_handed(&self, abs: &str, file: Passed, data: &[u8]) -> Result<()> {
        use std::io::Write as _;
        let failed = |e: std::io::Error| file_errors::failed(self.scheme, abs, &e.to_string());
        let mut file = self.handed_file(abs, file)?;
        for step in data.chunks(HANDED_STEP) {
            file.write_all(step).map_err(failed)?;
            futures_lite::future::yield_now().await;
        }
        Ok(())
    }
}

/// How many bytes a read or write through a handed-over file moves before it lets its
/// executor run (1 MiB: well under a millisecond of the caller's thread).
const HANDED_STEP: usize = 1024 * 1024;

impl Session {
    /// The file sandboxd handed over, once the host has seen for itself that it is what
    /// sandboxd promised: a regular file. The host reads and writes it on the caller's
    /// thread, where a deadline only fires between steps: a pipe, socket or device from a
    /// sandboxd that is not the one we started (one whose memory was taken over, say) would
    /// block that thread past every timeout, so anything else is refused and closed. (A
    /// descriptor open the wrong way fails its first read or write at once.)
    fn handed_file(&self, abs: &str, file: Passed) -> Result<std::fs::File> {
        use std::os::unix::fs::FileTypeExt as _;
        let failed = |e: std::io::Error| file_errors::failed(self.scheme, abs, &e.to_string());
        let file = file.into_file().map_err(failed)?;
        let kind = file.metadata().map_err(failed)?.file_type();
        if kind.is_file() {
            return Ok(file);
        }
        let what = match () {
            () if kind.is_fifo() => "a pipe",
            () if kind.is_socket() => "a socket",
            () if kind.is_char_device() || kind.is_block_device() => "a device",
            () if kind.is_dir() => "a directory",
            () => "something",
        };
        Err(Error::provider_message(
            self.scheme,
            format!("sandboxd handed over {what}, not a regular file, for {abs}; refused"),
        ))
    }
}

/// A listing entry as sandboxio reports it (a directory's size is 0).
fn dir_entry(e: Entry) -> DirEntry {
    let kind = match e.file_type {
        FileType::File => FileKind::File,
        FileType::Dir => FileKind::Dir,
        FileType::Symlink => FileKind::Symlink,
        FileType::Other => FileKind::Other,
    };
    let size = if kind == FileKind::Dir { 0 } else { e.size };
    // Names are bytes; one that is not UTF-8 is shown lossily (as the scripts' listing was).
    let name =
        String::from_utf8(e.name).unwrap_or_else(|bad| String::from_utf8_lossy(bad.as_bytes()).into_owned());
    DirEntry::new(name, kind, size, e.mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::fd::AsFd as _;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    use crate::sandboxd::client::Client;
    use crate::sandboxd::proto::{Frame, VERSION};
    use crate::sandboxd::session::Identity;

    /// Runs `op` on a session whose sandboxd is a stand-in peer: it greets the session, then
    /// answers the session's first request (id 1), once it has come, with `FsHandle` and the
    /// descriptor `fd` attached, as a sandboxd that is not ours could. `None` when `op` is
    /// still running after 10 s (the handed descriptor holds the caller's thread).
    fn with_handed<T: Send + 'static>(
        fd: &std::os::fd::OwnedFd,
        op: impl FnOnce(&Session) -> T + Send + 'static,
    ) -> Option<T> {
        use std::io::Read as _;
        let (host, mut peer) = UnixStream::pair().unwrap();
        let client = Client::start_socket(host, None).unwrap();
        let identity = Identity { user: (0, 0), command_gids: false, switch_user: false };
        let session =
            Session::new(client, "local", "stand-in".into(), "/workspace".into(), identity, vec![], vec![]);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(op(&session));
        });
        let mut decoder = crate::sandboxd::proto::Decoder::new();
        let mut buf = [0u8; 4096];
        'request: loop {
            let n = peer.read(&mut buf).unwrap();
            assert!(n > 0, "the session ended before its request");
            decoder.push(&buf[..n]);
            while let Some(frame) = decoder.next_frame().unwrap() {
                if frame.id == 1 {
                    break 'request;
                }
            }
        }
        let mut bytes = Frame::new(0, Message::HelloAck { version: VERSION, pid: 1 }).to_bytes().unwrap();
        bytes.extend(Frame::new(1, Message::FsHandle { size: 0, passed: true }).to_bytes().unwrap());
        // What follows a handover: a read's end at once, a write's once it is finished.
        bytes.extend(Frame::new(1, Message::FsDone).to_bytes().unwrap());
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
        let fds = [fd.as_fd()];
        assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
        let io = [std::io::IoSlice::new(&bytes)];
        rustix::net::sendmsg(&peer, &io, &mut control, rustix::net::SendFlags::empty()).unwrap();
        let got = rx.recv_timeout(Duration::from_secs(10)).ok();
        drop(peer);
        got
    }

    #[test]
    fn a_handed_over_descriptor_that_is_not_a_regular_file_is_refused_at_once() {
        use futures_lite::future::block_on;
        // The control: a regular file handed over is read and written through.
        let dir = std::env::temp_dir().join(format!("sandboxio-handed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("regular");
        std::fs::write(&file, b"handed").unwrap();
        let read = with_handed(&std::fs::File::open(&file).unwrap().into(), |a| {
            block_on(a.read_file("/workspace/f", 1 << 20)).map_err(|e| e.to_string())
        });
        assert_eq!(read, Some(Ok(b"handed".to_vec())), "control: a regular file is read through");
        let wrote = with_handed(&std::fs::OpenOptions::new().write(true).open(&file).unwrap().into(), |a| {
            block_on(a.write_file("/workspace/f", b"HANDED", None)).map_err(|e| e.to_string())
        });
        assert_eq!(wrote, Some(Ok(())), "control: a write through a regular file ends");
        assert_eq!(std::fs::read(&file).unwrap(), b"HANDED", "control: the write went through the file");
        let _ = std::fs::remove_dir_all(&dir);

        // A pipe whose other end the stand-in keeps, never writing or reading: on aefc7e8 the
        // read and the write waited on it for ever, on the caller's thread, so no timeout
        // could end them.
        let (reader, writer) = std::io::pipe().unwrap();
        let read = with_handed(&reader.into(), |a| block_on(a.read_file("/workspace/f", 1 << 20)));
        let read = read.expect("a read handed a pipe was still waiting after 10 s");
        let Err(Error::Provider { message, .. }) = &read else { panic!("{read:?}") };
        assert!(message.contains("a pipe, not a regular file"), "{message}");
        let (reader2, writer2) = std::io::pipe().unwrap();
        let big = vec![0u8; 4 << 20];
        let wrote = with_handed(&writer2.into(), move |a| block_on(a.write_file("/workspace/f", &big, None)));
        let wrote = wrote.expect("a write handed a pipe nobody reads was still waiting after 10 s");
        assert!(
            matches!(&wrote, Err(Error::Provider { message, .. }) if message.contains("a pipe")),
            "{wrote:?}"
        );
        // A socket and a device: refused the same way.
        let (socket, _other) = UnixStream::pair().unwrap();
        let read = with_handed(&socket.into(), |a| block_on(a.read_file("/workspace/f", 1 << 20)));
        assert!(
            matches!(&read, Some(Err(Error::Provider { message, .. })) if message.contains("a socket")),
            "{read:?}"
        );
        let null = std::fs::File::open("/dev/null").unwrap();
        let read = with_handed(&null.into(), |a| block_on(a.read_file("/workspace/f", 1 << 20)));
        assert!(
            matches!(&read, Some(Err(Error::Provider { message, .. })) if message.contains("a device")),
            "{read:?}"
        );
        drop((writer, reader2));
    }

    #[test]
    fn entries_keep_name_kind_and_mode_and_directories_have_no_size() {
        let e = |name: &[u8], file_type, size, mode| Entry { name: name.to_vec(), file_type, size, mode };
        assert_eq!(
            dir_entry(e(b"a b", FileType::File, 3, 0o644)),
            DirEntry::new("a b", FileKind::File, 3, 0o644)
        );
        assert_eq!(
            dir_entry(e(b"d\n", FileType::Dir, 4096, 0o755)),
            DirEntry::new("d\n", FileKind::Dir, 0, 0o755)
        );
        assert_eq!(dir_entry(e(b"l", FileType::Symlink, 11, 0o777)).kind, FileKind::Symlink);
        assert_eq!(dir_entry(e(b"\xff", FileType::Other, 0, 0o600)).name, "\u{fffd}");
    }
}
