//! The Connect protocol's streaming envelopes (`docs/protocol.md` of connectrpc.com, the
//! "Streaming" section): one flag byte, a 4-byte big-endian length, the payload. Flag
//! `0x02` marks the end-of-stream frame, the last one; `0x01` (compressed) is refused
//! because sandboxio never offers compression.
//!
//! The decoder is incremental (frames split across reads or merged into one are both
//! normal) and bounded: a declared length over [`EnvelopeDecoder::new`]'s `max` is an
//! error before any of the payload is buffered.

use super::wire::WireError;

/// The flag of an ordinary message frame.
pub(crate) const FLAG_MESSAGE: u8 = 0x00;
/// The flag of the compressed bit.
const FLAG_COMPRESSED: u8 = 0x01;
/// The flag of the end-of-stream frame.
pub(crate) const FLAG_END: u8 = 0x02;
/// The envelope header's size: flags and length.
const HEADER: usize = 5;

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A message, its JSON payload.
    Message(Vec<u8>),
    /// The end-of-stream frame's JSON payload.
    End(Vec<u8>),
}

/// Wraps `payload` in one envelope with `flags`.
pub(crate) fn encode(flags: u8, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("an envelope payload fits in u32 (requests are small)");
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.push(flags);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An incremental envelope decoder holding at most one frame (`max` bytes of payload)
/// plus the bytes of the read that completed it.
#[derive(Debug)]
pub(crate) struct EnvelopeDecoder {
    buf: Vec<u8>,
    max: usize,
    ended: bool,
}

impl EnvelopeDecoder {
    /// A decoder refusing payloads over `max` bytes.
    pub(crate) fn new(max: usize) -> Self {
        EnvelopeDecoder { buf: Vec::new(), max, ended: false }
    }

    /// Appends bytes read from the body.
    ///
    /// # Errors
    ///
    /// [`WireError::AfterEnd`] for bytes after the end-of-stream frame.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<(), WireError> {
        if self.ended && !bytes.is_empty() {
            return Err(WireError::AfterEnd);
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    /// The next complete frame, `None` until one is buffered.
    ///
    /// # Errors
    ///
    /// A declared length over the bound, the compressed flag, unknown flag bits, or bytes
    /// after the end-of-stream frame.
    pub(crate) fn next_frame(&mut self) -> Result<Option<Frame>, WireError> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        if self.ended {
            return Err(WireError::AfterEnd);
        }
        let flags = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
        if flags & FLAG_COMPRESSED != 0 {
            return Err(WireError::Compressed);
        }
        if flags & !(FLAG_END) != 0 {
            return Err(WireError::UnknownFlags(flags));
        }
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > self.max {
            return Err(WireError::FrameTooLarge { len: len as u64, max: self.max });
        }
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        let payload = self.buf[HEADER..HEADER + len].to_vec();
        self.buf.drain(..HEADER + len);
        if flags == FLAG_END {
            self.ended = true;
            if !self.buf.is_empty() {
                return Err(WireError::AfterEnd);
            }
            return Ok(Some(Frame::End(payload)));
        }
        Ok(Some(Frame::Message(payload)))
    }

    /// Checks the body's end: it must come right after the end-of-stream frame.
    ///
    /// # Errors
    ///
    /// [`WireError::Truncated`] when the body ended inside a frame, [`WireError::MissingEnd`]
    /// when it ended between frames but before the end-of-stream frame.
    pub(crate) fn finish(&self) -> Result<(), WireError> {
        if !self.buf.is_empty() {
            let need = if self.buf.len() < HEADER {
                HEADER
            } else {
                HEADER
                    + usize::try_from(u32::from_be_bytes([
                        self.buf[1],
                        self.buf[2],
                        self.buf[3],
                        self.buf[4],
                    ]))
                    .unwrap_or(usize::MAX)
            };
            return Err(WireError::Truncated { have: self.buf.len(), need });
        }
        if self.ended { Ok(()) } else { Err(WireError::MissingEnd) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(bytes: &[u8], split: usize) -> Result<Vec<Frame>, WireError> {
        let mut d = EnvelopeDecoder::new(64);
        let mut out = Vec::new();
        for piece in bytes.chunks(split.max(1)) {
            d.push(piece)?;
            while let Some(f) = d.next_frame()? {
                out.push(f);
            }
        }
        d.finish()?;
        Ok(out)
    }

    #[test]
    fn encodes_the_documented_header() {
        assert_eq!(encode(FLAG_MESSAGE, b"{}"), [0, 0, 0, 0, 2, b'{', b'}']);
        assert_eq!(encode(FLAG_END, b""), [2, 0, 0, 0, 0]);
    }

    #[test]
    fn decodes_whatever_the_read_boundaries() {
        let mut body = encode(FLAG_MESSAGE, br#"{"event":{"start":{"pid":412}}}"#);
        body.extend(encode(FLAG_MESSAGE, b""));
        body.extend(encode(FLAG_END, b"{}"));
        for split in 1..=body.len() {
            assert_eq!(
                decode_all(&body, split).unwrap(),
                [
                    Frame::Message(br#"{"event":{"start":{"pid":412}}}"#.to_vec()),
                    Frame::Message(Vec::new()),
                    Frame::End(b"{}".to_vec())
                ],
                "split {split}"
            );
        }
    }

    #[test]
    fn malformed_bodies_are_typed_errors() {
        let msg = encode(FLAG_MESSAGE, b"{}");
        let end = encode(FLAG_END, b"{}");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (msg.clone(), "the stream ended without its end frame"),
            ([&msg[..], &end[..3]].concat(), "the body ended inside a frame (3 of 5 bytes)"),
            ([&msg[..], &end[..6]].concat(), "the body ended inside a frame (6 of 7 bytes)"),
            (encode(0x01, b"{}"), "a compressed envelope, though no compression was negotiated"),
            (encode(0x80, b"{}"), "an envelope with unknown flags 0x80"),
            (vec![0, 0xff, 0xff, 0xff, 0xff], "an envelope declares 4294967295 bytes, over the bound of 64"),
            (encode(FLAG_MESSAGE, &[b' '; 65]), "an envelope declares 65 bytes, over the bound of 64"),
            ([&end[..], &msg[..]].concat(), "bytes after the end-of-stream frame"),
            (Vec::new(), "the stream ended without its end frame"),
        ];
        for (body, message) in cases {
            let err = decode_all(&body, body.len()).unwrap_err();
            assert_eq!(err.to_string(), message, "{body:?}");
        }
    }

    #[test]
    fn an_oversized_frame_is_refused_before_its_payload_arrives() {
        let mut d = EnvelopeDecoder::new(1024);
        d.push(&[0, 0, 0x10, 0, 0]).unwrap();
        assert!(matches!(d.next_frame(), Err(WireError::FrameTooLarge { len: 1_048_576, max: 1024 })));
    }

    proptest::proptest! {
        /// Any mutation of a valid body, split anywhere, ends in frames or a typed error:
        /// never a panic, and never more buffered than one bounded frame plus one read.
        #[test]
        fn mutated_bodies_never_panic_nor_grow(
            flips in proptest::collection::vec((0usize..64, proptest::prelude::any::<u8>()), 0..6),
            cut in 0usize..64,
            split in 1usize..17,
        ) {
            let mut body = encode(FLAG_MESSAGE, br#"{"event":{"data":{"stdout":"aGkK"}}}"#);
            body.extend(encode(FLAG_END, b"{}"));
            for (at, byte) in flips {
                let i = at % body.len();
                body[i] = byte;
            }
            body.truncate(body.len() - cut.min(body.len()));
            let mut d = EnvelopeDecoder::new(64);
            'read: for piece in body.chunks(split) {
                if d.push(piece).is_err() {
                    break;
                }
                proptest::prop_assert!(d.buf.len() <= 64 + HEADER + split);
                loop {
                    match d.next_frame() {
                        Ok(Some(Frame::Message(p))) => {
                            let _ = super::super::process::parse_event(&p);
                        }
                        Ok(Some(Frame::End(p))) => {
                            let _ = super::super::errors::Reply::from_end_frame(&p);
                        }
                        Ok(None) => break,
                        Err(_) => break 'read,
                    }
                }
            }
            let _ = d.finish();
        }
    }
}
