//! Reading a frame body's fields, refusing any length that runs past the body, and splitting
//! a byte stream into frames.

use super::{
    Entry, Failure, FileType, Frame, HEADER_LEN, Kind, MAX_BODY, Message, Pairs, ProtoError, Spawn, Status,
    StdinMode, Stream,
};

/// Decodes a complete frame body of the kind `kind` names.
pub(super) fn message(kind: u8, body: &[u8]) -> Result<Message, ProtoError> {
    let kind = Kind::from_byte(kind).ok_or(ProtoError::UnknownKind(kind))?;
    let mut r = Reader { buf: body, kind };
    let message = decode_body(kind, &mut r)?;
    if !r.buf.is_empty() {
        return Err(ProtoError::Trailing { kind, extra: r.buf.len() });
    }
    Ok(message)
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
            let undumpable = r.bool("undumpable")?;
            Message::Spawn(Spawn { argv, env, secrets, cwd, stdin, user, control, undumpable })
        }
        Kind::Stdin => Message::Stdin { data: r.bytes()? },
        Kind::StdinEof => Message::StdinEof,
        Kind::Signal => Message::Signal { signal: r.i32()? },
        Kind::Credit => Message::Credit { bytes: r.u32()? },
        Kind::Ping => Message::Ping { nonce: r.u64()? },
        Kind::ControlIn => Message::ControlIn { data: r.bytes()? },
        Kind::Detach => Message::Detach,
        Kind::FsRead => Message::FsRead { path: r.bytes()?, limit: r.u64()? },
        Kind::FsWrite => Message::FsWrite { path: r.bytes()?, mode: r.u32()? },
        Kind::FsData => Message::FsData { data: r.bytes()? },
        Kind::FsEnd => Message::FsEnd,
        Kind::FsList => Message::FsList { path: r.bytes()? },
        Kind::FsMkdir => Message::FsMkdir { path: r.bytes()?, parents: r.bool("parents")? },
        Kind::FsRemove => Message::FsRemove { path: r.bytes()?, recursive: r.bool("recursive")? },
        Kind::FsStat => Message::FsStat { path: r.bytes()? },
        Kind::FsOpenRead => Message::FsOpenRead { path: r.bytes()?, limit: r.u64()? },
        Kind::FsOpenWrite => Message::FsOpenWrite { path: r.bytes()?, mode: r.u32()? },
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
                6 => Failure::Exposed,
                _ => return Err(ProtoError::BadValue { kind, field: "failure" }),
            };
            Message::Failed { failure, message: r.bytes()? }
        }
        Kind::Pong => Message::Pong { nonce: r.u64()? },
        Kind::Detached => Message::Detached,
        Kind::FsChunk => Message::FsChunk { data: r.bytes()? },
        Kind::FsDone => Message::FsDone,
        Kind::FsHandle => Message::FsHandle { size: r.u64()?, passed: r.bool("passed")? },
        Kind::FsEntries => {
            // name length (4) + type (1) + size (8) + mode (4)
            let n = r.count(17)?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                entries.push(Entry {
                    name: r.bytes()?,
                    file_type: r.file_type()?,
                    size: r.u64()?,
                    mode: r.u32()?,
                });
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
