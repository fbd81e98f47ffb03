//! The sandboxd wire protocol, version 1: length-framed binary messages over one byte stream.
//!
//! This file is compiled twice: into the `sandboxd` binary that runs inside a sandbox, and into
//! `sandboxio` (the host side). It uses `std` only, so the binary can be built by a bare
//! `rustc` invocation (`docs/adr/0006-sandboxd.md` says why).
//!
//! # Frames
//!
//! Every frame is a 9-byte header and a body:
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..4 | `len` | body length in bytes, big-endian `u32`, at most [`MAX_BODY`] |
//! | 4 | `kind` | the message type, [`Kind`] |
//! | 5..9 | `id` | the command or request the frame belongs to, big-endian `u32`; 0 for the session |
//! | 9.. | body | the message's fields, in order |
//!
//! Fields are big-endian integers, and byte strings as a `u32` length then the bytes. A list is
//! a `u32` count then its items. A decoder never allocates more than the bytes it has already
//! received: lengths and counts are checked against what remains before anything is reserved,
//! so a hostile peer cannot make the other side allocate by lying about a size.
//!
//! # Sessions
//!
//! The host speaks first with [`Message::Hello`]; sandboxd answers [`Message::HelloAck`] or
//! ends the session. Versions must match exactly: the host ships the binary it speaks to, so
//! there is no negotiation. Output flows only within credit: sandboxd sends at most the bytes
//! of stdout plus stderr that the host has granted a command with [`Message::Credit`], so a slow
//! reader stops the producer (its pipe fills) instead of growing a buffer anywhere.

use std::fmt;

/// The protocol version this file speaks.
pub const VERSION: u16 = 1;

/// The largest body a frame may carry, in bytes (4 MiB): a spawn with the largest argv and
/// environment a command may have (1 MiB, `MAX_ARG_TOTAL`) fits with room to spare.
pub const MAX_BODY: u32 = 4 * 1024 * 1024;

/// The size of a frame header, in bytes.
pub const HEADER_LEN: usize = 9;

/// The largest data chunk either side puts in one [`Message::Stdin`], [`Message::Output`] or
/// file frame, in bytes (64 KiB).
pub const MAX_CHUNK: usize = 64 * 1024;

/// Why a frame could not be decoded. Any of these ends the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtoError {
    /// The header announced a body larger than [`MAX_BODY`].
    TooLarge {
        /// The announced body length, in bytes.
        len: u32,
    },
    /// The `kind` byte names no message of this version.
    UnknownKind(u8),
    /// The body ended before a field did, or a field's length ran past the body.
    Truncated {
        /// The message being decoded.
        kind: Kind,
    },
    /// The body had bytes left over after its last field.
    Trailing {
        /// The message being decoded.
        kind: Kind,
        /// How many bytes were left, in bytes.
        extra: usize,
    },
    /// A field held a value its type does not allow (an unknown enum tag, a bool other than 0/1).
    BadValue {
        /// The message being decoded.
        kind: Kind,
        /// Which field.
        field: &'static str,
    },
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge { len } => {
                write!(f, "frame body of {len} bytes is over the {MAX_BODY}-byte limit")
            }
            Self::UnknownKind(k) => write!(f, "unknown frame kind 0x{k:02x}"),
            Self::Truncated { kind } => write!(f, "{kind:?} frame is truncated"),
            Self::Trailing { kind, extra } => write!(f, "{kind:?} frame has {extra} trailing bytes"),
            Self::BadValue { kind, field } => write!(f, "{kind:?} frame has an invalid {field}"),
        }
    }
}

impl std::error::Error for ProtoError {}

macro_rules! kinds {
    ($( $(#[$doc:meta])* $name:ident = $byte:literal, )*) => {
        /// The type byte of a frame.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Kind {
            $( $(#[$doc])* $name, )*
        }

        impl Kind {
            /// The kind a type byte names, if any.
            #[must_use]
            pub fn from_byte(byte: u8) -> Option<Kind> {
                match byte {
                    $( $byte => Some(Kind::$name), )*
                    _ => None,
                }
            }

            /// The type byte of this kind.
            #[must_use]
            pub fn byte(self) -> u8 {
                match self {
                    $( Kind::$name => $byte, )*
                }
            }
        }
    };
}

kinds! {
    /// Host to sandboxd: the first frame of a session.
    Hello = 0x01,
    /// Host to sandboxd: start a command.
    Spawn = 0x02,
    /// Host to sandboxd: bytes for a command's stdin.
    Stdin = 0x03,
    /// Host to sandboxd: end of a command's stdin.
    StdinEof = 0x04,
    /// Host to sandboxd: signal every process of a command.
    Signal = 0x05,
    /// Host to sandboxd: allow more output bytes for a command.
    Credit = 0x06,
    /// Host to sandboxd: liveness probe.
    Ping = 0x07,
    /// Host to sandboxd: bytes for a command's control channel.
    ControlIn = 0x08,
    /// Host to sandboxd: read a file.
    FsRead = 0x10,
    /// Host to sandboxd: create or replace a file with the data frames that follow.
    FsWrite = 0x11,
    /// Host to sandboxd: a chunk of a file being written.
    FsData = 0x12,
    /// Host to sandboxd: the file being written is complete.
    FsEnd = 0x13,
    /// Host to sandboxd: list a directory.
    FsList = 0x14,
    /// Host to sandboxd: create a directory.
    FsMkdir = 0x15,
    /// Host to sandboxd: remove a path.
    FsRemove = 0x16,
    /// Host to sandboxd: describe a path.
    FsStat = 0x17,
    /// Sandboxd to host: the answer to `Hello`.
    HelloAck = 0x81,
    /// Sandboxd to host: a command started.
    Spawned = 0x82,
    /// Sandboxd to host: bytes a command wrote.
    Output = 0x83,
    /// Sandboxd to host: a command ended, and every process it started is gone.
    Exit = 0x84,
    /// Sandboxd to host: a request failed.
    Failed = 0x85,
    /// Sandboxd to host: the answer to `Ping`.
    Pong = 0x87,
    /// Sandboxd to host: a chunk of a file being read.
    FsChunk = 0x90,
    /// Sandboxd to host: a file request completed.
    FsDone = 0x91,
    /// Sandboxd to host: a directory's entries.
    FsEntries = 0x92,
    /// Sandboxd to host: a path's description.
    FsStatReply = 0x93,
}

/// Where a command's stdin comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StdinMode {
    /// `/dev/null`: the command sees end-of-file at once.
    #[default]
    Null,
    /// A pipe fed by [`Message::Stdin`] frames and closed by [`Message::StdinEof`].
    Pipe,
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// The control channel (descriptor 3 of a command spawned with `control`). sandboxd
    /// forwards its bytes only once the command's stdout and stderr pipes are empty, so what
    /// the command wrote to them before writing here arrives first.
    Control,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It exited with this code (0 to 255).
    Code(i32),
    /// A signal ended it; the signal's number.
    Signal(i32),
}

/// The kind of a path, in [`Message::FsEntries`] and [`Message::FsStatReply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed by the file operations).
    Symlink,
    /// Anything else: a device, a fifo, a socket.
    Other,
}

/// Why a request failed, in [`Message::Failed`]; the host maps these to its error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The path or the program does not exist.
    NotFound,
    /// The sandbox's user may not do this.
    PermissionDenied,
    /// The path is a directory where a file was asked for.
    IsADirectory,
    /// The request was malformed or named something invalid.
    InvalidInput,
    /// A file was over the limit the request gave.
    TooLarge,
    /// Anything else the operating system reported.
    Io,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's name (not a path).
    pub name: Vec<u8>,
    /// What it is.
    pub file_type: FileType,
    /// Its size in bytes.
    pub size: u64,
}

/// Environment variables as `NAME` and value pairs.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// The fields of [`Message::Spawn`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Spawn {
    /// The program and its arguments; the program is looked up on the command's `PATH`.
    pub argv: Vec<Vec<u8>>,
    /// Environment variables, `NAME` and value.
    pub env: Pairs,
    /// Environment variables whose values are secrets: set like `env`, never logged.
    pub secrets: Pairs,
    /// The working directory; sandboxd's own when absent.
    pub cwd: Option<Vec<u8>>,
    /// Where stdin comes from.
    pub stdin: StdinMode,
    /// The uid and gid to run as (the only group); sandboxd's own when absent.
    pub user: Option<(u32, u32)>,
    /// Give the command a control channel: a socket at its descriptor 3, fed by
    /// [`Message::ControlIn`] and read as [`Stream::Control`] output.
    pub control: bool,
}

/// A decoded frame body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// The first frame of a session, with the host's protocol version.
    Hello {
        /// [`VERSION`] of the host.
        version: u16,
        /// The sandbox's user, as uid and gid: file operations run as this user, and so do
        /// commands whose `Spawn` names none. sandboxd's own identity when absent.
        user: Option<(u32, u32)>,
    },
    /// Start a command under the frame's id, which must be new in this session.
    Spawn(Spawn),
    /// Bytes for the command's stdin.
    Stdin {
        /// At most [`MAX_CHUNK`] bytes.
        data: Vec<u8>,
    },
    /// End of the command's stdin.
    StdinEof,
    /// Send a signal to every process of the command; for a file request, cancel it.
    Signal {
        /// The signal number.
        signal: i32,
    },
    /// Allow the command this many more bytes of output.
    Credit {
        /// Bytes, added to what is left of earlier grants.
        bytes: u32,
    },
    /// Bytes for the command's control channel (shares the stdin window).
    ControlIn {
        /// At most [`MAX_CHUNK`] bytes.
        data: Vec<u8>,
    },
    /// Liveness probe; answered with `Pong` carrying the same nonce.
    Ping {
        /// Any value.
        nonce: u64,
    },
    /// Read a file, failing with `TooLarge` past `limit`.
    FsRead {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
        /// The most bytes to send.
        limit: u64,
    },
    /// Create or replace a file; data follows in `FsData` frames and `FsEnd`.
    FsWrite {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
        /// Permission bits for a new file.
        mode: u32,
    },
    /// A chunk of the file being written.
    FsData {
        /// At most [`MAX_CHUNK`] bytes.
        data: Vec<u8>,
    },
    /// The file being written is complete: rename it into place.
    FsEnd,
    /// List a directory.
    FsList {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
    },
    /// Create a directory.
    FsMkdir {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
        /// Create missing parents too.
        parents: bool,
    },
    /// Remove a path.
    FsRemove {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
        /// Remove a directory and everything in it.
        recursive: bool,
    },
    /// Describe a path without following a final symbolic link.
    FsStat {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
    },
    /// The answer to `Hello`.
    HelloAck {
        /// [`VERSION`] of sandboxd.
        version: u16,
        /// sandboxd's pid in its own PID namespace.
        pid: u32,
    },
    /// The command started.
    Spawned {
        /// Its pid in the sandbox's PID namespace.
        pid: u32,
    },
    /// Bytes the command wrote.
    Output {
        /// Which stream.
        stream: Stream,
        /// At most [`MAX_CHUNK`] bytes, never more than the credit left.
        data: Vec<u8>,
    },
    /// The command ended and every process it started is gone.
    Exit {
        /// How its first process ended.
        status: Status,
        /// The kernel's out-of-memory killer ended a process of the command.
        oom_killed: bool,
    },
    /// The request with this frame's id failed.
    Failed {
        /// What kind of failure.
        failure: Failure,
        /// The operating system's or sandboxd's own words.
        message: Vec<u8>,
    },
    /// The answer to `Ping`.
    Pong {
        /// The nonce of the `Ping`.
        nonce: u64,
    },
    /// A chunk of the file being read.
    FsChunk {
        /// At most [`MAX_CHUNK`] bytes.
        data: Vec<u8>,
    },
    /// The file request completed.
    FsDone,
    /// A directory's entries.
    FsEntries {
        /// In no particular order.
        entries: Vec<Entry>,
    },
    /// A path's description.
    FsStatReply {
        /// What it is.
        file_type: FileType,
        /// Its size in bytes.
        size: u64,
        /// Its permission bits.
        mode: u32,
    },
}

/// A frame: the id it belongs to and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The command or request; 0 for the session.
    pub id: u32,
    /// The message.
    pub message: Message,
}

impl Message {
    /// The frame kind this message is sent as.
    #[must_use]
    pub fn kind(&self) -> Kind {
        match self {
            Message::Hello { .. } => Kind::Hello,
            Message::Spawn(_) => Kind::Spawn,
            Message::Stdin { .. } => Kind::Stdin,
            Message::StdinEof => Kind::StdinEof,
            Message::Signal { .. } => Kind::Signal,
            Message::Credit { .. } => Kind::Credit,
            Message::Ping { .. } => Kind::Ping,
            Message::ControlIn { .. } => Kind::ControlIn,
            Message::FsRead { .. } => Kind::FsRead,
            Message::FsWrite { .. } => Kind::FsWrite,
            Message::FsData { .. } => Kind::FsData,
            Message::FsEnd => Kind::FsEnd,
            Message::FsList { .. } => Kind::FsList,
            Message::FsMkdir { .. } => Kind::FsMkdir,
            Message::FsRemove { .. } => Kind::FsRemove,
            Message::FsStat { .. } => Kind::FsStat,
            Message::HelloAck { .. } => Kind::HelloAck,
            Message::Spawned { .. } => Kind::Spawned,
            Message::Output { .. } => Kind::Output,
            Message::Exit { .. } => Kind::Exit,
            Message::Failed { .. } => Kind::Failed,
            Message::Pong { .. } => Kind::Pong,
            Message::FsChunk { .. } => Kind::FsChunk,
            Message::FsDone => Kind::FsDone,
            Message::FsEntries { .. } => Kind::FsEntries,
            Message::FsStatReply { .. } => Kind::FsStatReply,
        }
    }
}

impl Frame {
    /// A frame for `id` carrying `message`.
    #[must_use]
    pub fn new(id: u32, message: Message) -> Frame {
        Frame { id, message }
    }

    /// Appends this frame's bytes to `out`.
    ///
    /// # Errors
    ///
    /// [`ProtoError::TooLarge`] if the body would be over [`MAX_BODY`]; nothing is appended then.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), ProtoError> {
        let start = out.len();
        out.extend_from_slice(&[0; HEADER_LEN]);
        body(&self.message, out);
        let len = out.len() - start - HEADER_LEN;
        match u32::try_from(len) {
            Ok(len) if len <= MAX_BODY => {
                out[start..start + 4].copy_from_slice(&len.to_be_bytes());
                out[start + 4] = self.message.kind().byte();
                out[start + 5..start + 9].copy_from_slice(&self.id.to_be_bytes());
                Ok(())
            }
            _ => {
                out.truncate(start);
                Err(ProtoError::TooLarge { len: u32::try_from(len).unwrap_or(u32::MAX) })
            }
        }
    }

    /// This frame's bytes.
    ///
    /// # Errors
    ///
    /// [`ProtoError::TooLarge`] if the body would be over [`MAX_BODY`].
    pub fn to_bytes(&self) -> Result<Vec<u8>, ProtoError> {
        let mut out = Vec::new();
        self.encode(&mut out)?;
        Ok(out)
    }

    /// Decodes one frame from a header's `kind` and `id` and its complete body.
    ///
    /// # Errors
    ///
    /// Any [`ProtoError`] but `TooLarge`, which [`Decoder`] checks before the body arrives.
    pub fn decode(kind: u8, id: u32, body: &[u8]) -> Result<Frame, ProtoError> {
        let kind = Kind::from_byte(kind).ok_or(ProtoError::UnknownKind(kind))?;
        let mut r = Reader { buf: body, kind };
        let message = decode_body(kind, &mut r)?;
        if !r.buf.is_empty() {
            return Err(ProtoError::Trailing { kind, extra: r.buf.len() });
        }
        Ok(Frame { id, message })
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // A field longer than u32::MAX cannot fit a frame: the frame's total check refuses it.
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn put_count(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes());
}

fn put_pairs(out: &mut Vec<u8>, pairs: &[(Vec<u8>, Vec<u8>)]) {
    put_count(out, pairs.len());
    for (k, v) in pairs {
        put_bytes(out, k);
        put_bytes(out, v);
    }
}

fn put_user(out: &mut Vec<u8>, user: Option<(u32, u32)>) {
    match user {
        None => out.push(0),
        Some((uid, gid)) => {
            out.push(1);
            out.extend_from_slice(&uid.to_be_bytes());
            out.extend_from_slice(&gid.to_be_bytes());
        }
    }
}

fn file_type_byte(t: FileType) -> u8 {
    match t {
        FileType::File => 0,
        FileType::Dir => 1,
        FileType::Symlink => 2,
        FileType::Other => 3,
    }
}

fn failure_byte(f: Failure) -> u8 {
    match f {
        Failure::NotFound => 0,
        Failure::PermissionDenied => 1,
        Failure::IsADirectory => 2,
        Failure::InvalidInput => 3,
        Failure::TooLarge => 4,
        Failure::Io => 5,
    }
}

fn body(message: &Message, out: &mut Vec<u8>) {
    match message {
        Message::Hello { version, user } => {
            out.extend_from_slice(&version.to_be_bytes());
            put_user(out, *user);
        }
        Message::Spawn(s) => {
            put_count(out, s.argv.len());
            for arg in &s.argv {
                put_bytes(out, arg);
            }
            put_pairs(out, &s.env);
            put_pairs(out, &s.secrets);
            match &s.cwd {
                None => out.push(0),
                Some(cwd) => {
                    out.push(1);
                    put_bytes(out, cwd);
                }
            }
            out.push(match s.stdin {
                StdinMode::Null => 0,
                StdinMode::Pipe => 1,
            });
            put_user(out, s.user);
            out.push(u8::from(s.control));
        }
        Message::Stdin { data }
        | Message::ControlIn { data }
        | Message::FsData { data }
        | Message::FsChunk { data } => {
            put_bytes(out, data);
        }
        Message::StdinEof | Message::FsEnd | Message::FsDone => {}
        Message::Signal { signal } => out.extend_from_slice(&signal.to_be_bytes()),
        Message::Credit { bytes } => out.extend_from_slice(&bytes.to_be_bytes()),
        Message::Ping { nonce } | Message::Pong { nonce } => out.extend_from_slice(&nonce.to_be_bytes()),
        Message::FsRead { path, limit } => {
            put_bytes(out, path);
            out.extend_from_slice(&limit.to_be_bytes());
        }
        Message::FsWrite { path, mode } => {
            put_bytes(out, path);
            out.extend_from_slice(&mode.to_be_bytes());
        }
        Message::FsList { path } | Message::FsStat { path } => put_bytes(out, path),
        Message::FsMkdir { path, parents: flag } | Message::FsRemove { path, recursive: flag } => {
            put_bytes(out, path);
            out.push(u8::from(*flag));
        }
        Message::HelloAck { version, pid } => {
            out.extend_from_slice(&version.to_be_bytes());
            out.extend_from_slice(&pid.to_be_bytes());
        }
        Message::Spawned { pid } => out.extend_from_slice(&pid.to_be_bytes()),
        Message::Output { stream, data } => {
            out.push(match stream {
                Stream::Stdout => 1,
                Stream::Stderr => 2,
                Stream::Control => 3,
            });
            put_bytes(out, data);
        }
        Message::Exit { status, oom_killed } => {
            let (tag, value) = match status {
                Status::Code(c) => (0, c),
                Status::Signal(s) => (1, s),
            };
            out.push(tag);
            out.extend_from_slice(&value.to_be_bytes());
            out.push(u8::from(*oom_killed));
        }
        Message::Failed { failure, message } => {
            out.push(failure_byte(*failure));
            put_bytes(out, message);
        }
        Message::FsEntries { entries } => {
            put_count(out, entries.len());
            for e in entries {
                put_bytes(out, &e.name);
                out.push(file_type_byte(e.file_type));
                out.extend_from_slice(&e.size.to_be_bytes());
            }
        }
        Message::FsStatReply { file_type, size, mode } => {
            out.push(file_type_byte(*file_type));
            out.extend_from_slice(&size.to_be_bytes());
            out.extend_from_slice(&mode.to_be_bytes());
        }
    }
}

/// Reads fields from a body, refusing any length that runs past what is left.
struct Reader<'a> {
    buf: &'a [u8],
    kind: Kind,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if n > self.buf.len() {
            return Err(ProtoError::Truncated { kind: self.kind });
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, ProtoError> {
        self.array().map(u16::from_be_bytes)
    }

    fn u32(&mut self) -> Result<u32, ProtoError> {
        self.array().map(u32::from_be_bytes)
    }

    fn i32(&mut self) -> Result<i32, ProtoError> {
        self.array().map(i32::from_be_bytes)
    }

    fn u64(&mut self) -> Result<u64, ProtoError> {
        self.array().map(u64::from_be_bytes)
    }

    fn bool(&mut self, field: &'static str) -> Result<bool, ProtoError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(ProtoError::BadValue { kind: self.kind, field }),
        }
    }

    fn user(&mut self) -> Result<Option<(u32, u32)>, ProtoError> {
        Ok(if self.bool("user flag")? { Some((self.u32()?, self.u32()?)) } else { None })
    }

    fn bytes(&mut self) -> Result<Vec<u8>, ProtoError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }

    /// A list count, refused when `min_item` bytes per item cannot fit in what is left, so a
    /// lying count never reserves memory.
    fn count(&mut self, min_item: usize) -> Result<usize, ProtoError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item) > self.buf.len() {
            return Err(ProtoError::Truncated { kind: self.kind });
        }
        Ok(n)
    }

    fn pairs(&mut self) -> Result<Pairs, ProtoError> {
        let n = self.count(8)?;
        let mut pairs = Vec::with_capacity(n);
        for _ in 0..n {
            pairs.push((self.bytes()?, self.bytes()?));
        }
        Ok(pairs)
    }

    fn file_type(&mut self) -> Result<FileType, ProtoError> {
        match self.u8()? {
            0 => Ok(FileType::File),
            1 => Ok(FileType::Dir),
            2 => Ok(FileType::Symlink),
            3 => Ok(FileType::Other),
            _ => Err(ProtoError::BadValue { kind: self.kind, field: "file type" }),
        }
    }
}

fn decode_body(kind: Kind, r: &mut Reader<'_>) -> Result<Message, ProtoError> {
    Ok(match kind {
        Kind::Hello => Message::Hello { version: r.u16()?, user: r.user()? },
        Kind::Spawn => {
            let n = r.count(4)?;
            let mut argv = Vec::with_capacity(n);
            for _ in 0..n {
                argv.push(r.bytes()?);
            }
            let env = r.pairs()?;
            let secrets = r.pairs()?;
            let cwd = if r.bool("cwd flag")? { Some(r.bytes()?) } else { None };
            let stdin = match r.u8()? {
                0 => StdinMode::Null,
                1 => StdinMode::Pipe,
                _ => return Err(ProtoError::BadValue { kind, field: "stdin mode" }),
            };
            let user = r.user()?;
            let control = r.bool("control")?;
            Message::Spawn(Spawn { argv, env, secrets, cwd, stdin, user, control })
        }
        Kind::Stdin => Message::Stdin { data: r.bytes()? },
        Kind::StdinEof => Message::StdinEof,
        Kind::Signal => Message::Signal { signal: r.i32()? },
        Kind::Credit => Message::Credit { bytes: r.u32()? },
        Kind::Ping => Message::Ping { nonce: r.u64()? },
        Kind::ControlIn => Message::ControlIn { data: r.bytes()? },
        Kind::FsRead => Message::FsRead { path: r.bytes()?, limit: r.u64()? },
        Kind::FsWrite => Message::FsWrite { path: r.bytes()?, mode: r.u32()? },
        Kind::FsData => Message::FsData { data: r.bytes()? },
        Kind::FsEnd => Message::FsEnd,
        Kind::FsList => Message::FsList { path: r.bytes()? },
        Kind::FsMkdir => Message::FsMkdir { path: r.bytes()?, parents: r.bool("parents")? },
        Kind::FsRemove => Message::FsRemove { path: r.bytes()?, recursive: r.bool("recursive")? },
        Kind::FsStat => Message::FsStat { path: r.bytes()? },
        Kind::HelloAck => Message::HelloAck { version: r.u16()?, pid: r.u32()? },
        Kind::Spawned => Message::Spawned { pid: r.u32()? },
        Kind::Output => {
            let stream = match r.u8()? {
                1 => Stream::Stdout,
                2 => Stream::Stderr,
                3 => Stream::Control,
                _ => return Err(ProtoError::BadValue { kind, field: "stream" }),
            };
            Message::Output { stream, data: r.bytes()? }
        }
        Kind::Exit => {
            let status = match (r.u8()?, r.i32()?) {
                (0, code) => Status::Code(code),
                (1, signal) => Status::Signal(signal),
                _ => return Err(ProtoError::BadValue { kind, field: "status" }),
            };
            Message::Exit { status, oom_killed: r.bool("oom_killed")? }
        }
        Kind::Failed => {
            let failure = match r.u8()? {
                0 => Failure::NotFound,
                1 => Failure::PermissionDenied,
                2 => Failure::IsADirectory,
                3 => Failure::InvalidInput,
                4 => Failure::TooLarge,
                5 => Failure::Io,
                _ => return Err(ProtoError::BadValue { kind, field: "failure" }),
            };
            Message::Failed { failure, message: r.bytes()? }
        }
        Kind::Pong => Message::Pong { nonce: r.u64()? },
        Kind::FsChunk => Message::FsChunk { data: r.bytes()? },
        Kind::FsDone => Message::FsDone,
        Kind::FsEntries => {
            // name length (4) + type (1) + size (8)
            let n = r.count(13)?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                entries.push(Entry { name: r.bytes()?, file_type: r.file_type()?, size: r.u64()? });
            }
            Message::FsEntries { entries }
        }
        Kind::FsStatReply => {
            Message::FsStatReply { file_type: r.file_type()?, size: r.u64()?, mode: r.u32()? }
        }
    })
}

/// Splits a byte stream into frames, holding at most one frame's bytes.
///
/// Feed it what the transport read with [`Decoder::push`], then take frames with
/// [`Decoder::next_frame`] until it returns `Ok(None)`. After an error the session is over:
/// the decoder keeps returning that error.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    failed: Option<ProtoError>,
}

impl Decoder {
    /// An empty decoder.
    #[must_use]
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// How many bytes the decoder wants before it can make progress: what is missing of the
    /// current header, or of the current body once the header is in.
    #[must_use]
    pub fn wants(&self) -> usize {
        if self.buf.len() < HEADER_LEN {
            return HEADER_LEN - self.buf.len();
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        (HEADER_LEN + len).saturating_sub(self.buf.len()).max(1)
    }

    /// Adds bytes read from the transport.
    ///
    /// Push at most [`Decoder::wants`] bytes at a time to keep the decoder's memory bounded by
    /// one frame; pushing more is correct but buffers the excess.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed.
    ///
    /// # Errors
    ///
    /// A [`ProtoError`]: the stream is not speaking this protocol and the session must end.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ProtoError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        if len > MAX_BODY {
            return Err(self.fail(ProtoError::TooLarge { len }));
        }
        let total = HEADER_LEN + len as usize;
        if self.buf.len() < total {
            return Ok(None);
        }
        let id = u32::from_be_bytes([self.buf[5], self.buf[6], self.buf[7], self.buf[8]]);
        let result = Frame::decode(self.buf[4], id, &self.buf[HEADER_LEN..total]);
        self.buf.drain(..total);
        match result {
            Ok(frame) => Ok(Some(frame)),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Bytes pushed that no frame has consumed yet.
    #[must_use]
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    fn fail(&mut self, e: ProtoError) -> ProtoError {
        self.failed = Some(e.clone());
        self.buf = Vec::new();
        e
    }
}
