//! The sandboxd wire protocol, version 6: length-framed binary messages over one byte stream.
//!
//! This module is compiled twice: into the `sandboxd` binary that runs inside a sandbox, and into
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
//!
//! The end of sandboxd's first session (its stdin and stdout) ends sandboxd, unless the host
//! sent [`Message::Detach`] and got [`Message::Detached`] first; sessions on `--listen-fd`
//! connections never end it. Version 2 added `Detach` and `Detached`; version 3 the `mode` of
//! each [`Entry`] of a listing; version 4 the [`MIN_FRAME_CREDIT`] an output frame takes;
//! version 5 [`Spawn::undumpable`] and [`Failure::Exposed`]; version 6 file data frames
//! ([`Message::FsData`], [`Message::FsChunk`]) of up to [`MAX_FILE_CHUNK`] bytes, and
//! [`Message::FsOpenRead`], [`Message::FsOpenWrite`] and [`Message::FsHandle`]: on a Unix
//! socket, the file's descriptor handed to the host, which moves the bytes itself (sandboxd
//! still resolves, checks and opens the file, as the sandbox's user, in the sandbox's view).

use std::fmt;

mod decode;
mod encode;
mod message;

pub use decode::Decoder;
pub use message::{Entry, Failure, FileType, Kind, Message, Pairs, Spawn, Status, StdinMode, Stream};

/// The protocol version this file speaks.
pub const VERSION: u16 = 6;

/// The largest body a frame may carry, in bytes (4 MiB): a spawn with the largest argv and
/// environment a command may have (1 MiB, `MAX_ARG_TOTAL`) fits with room to spare.
pub const MAX_BODY: u32 = 4 * 1024 * 1024;

/// The size of a frame header, in bytes.
pub const HEADER_LEN: usize = 9;

/// The largest data chunk either side puts in one [`Message::Stdin`], [`Message::Output`] or
/// [`Message::ControlIn`] frame, in bytes (64 KiB).
pub const MAX_CHUNK: usize = 64 * 1024;

/// The largest data chunk of one [`Message::FsData`] or [`Message::FsChunk`] frame, in bytes
/// (1 MiB, version 6). A file is written or read whole and as fast as the transport goes: a
/// sixteenth of the frames 64 KiB chunks took means a sixteenth of the poll turns, wake-ups
/// and credit returns on both sides; a frame still fits [`MAX_BODY`] four times over.
pub const MAX_FILE_CHUNK: usize = 1024 * 1024;

/// The length of [`data_prefix`]: a frame header and one byte string's length.
pub const DATA_PREFIX_LEN: usize = HEADER_LEN + 4;

/// The first bytes of a frame of `kind` for `id` whose body is one byte string of `len`
/// bytes (`Stdin`, `ControlIn`, `FsData`, `FsChunk`): the header and the string's length.
/// Written before the data itself, it lets a sender write the data from where it lies
/// instead of copying it into a frame. `None` when such a body would be over [`MAX_BODY`].
#[must_use]
pub fn data_prefix(kind: Kind, id: u32, len: usize) -> Option<[u8; DATA_PREFIX_LEN]> {
    let body = u32::try_from(len.checked_add(4)?).ok().filter(|&b| b <= MAX_BODY)?;
    let mut out = [0; DATA_PREFIX_LEN];
    out[..4].copy_from_slice(&body.to_be_bytes());
    out[4] = kind.byte();
    out[5..9].copy_from_slice(&id.to_be_bytes());
    out[9..].copy_from_slice(&u32::try_from(len).ok()?.to_be_bytes());
    Some(out)
}

/// The least output credit one [`Message::Output`] frame takes, in bytes, whatever it
/// carries (version 4). The host keeps each frame it has not handed to its caller yet, at a
/// cost of its own beyond the bytes (an event, an allocation); without this floor a command
/// writing a byte at a time to stdout and stderr in turn could make a host whose caller is
/// slow hold millions of one-byte frames within one window of credit.
pub const MIN_FRAME_CREDIT: u32 = 256;

/// The credit an output frame carrying `len` bytes takes: `len`, at least
/// [`MIN_FRAME_CREDIT`].
#[must_use]
pub fn frame_credit(len: usize) -> u64 {
    (len as u64).max(u64::from(MIN_FRAME_CREDIT))
}

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

/// A frame: the id it belongs to and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The command or request; 0 for the session.
    pub id: u32,
    /// The message.
    pub message: Message,
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
        encode::body(&self.message, out);
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
        Ok(Frame { id, message: decode::message(kind, body)? })
    }
}
