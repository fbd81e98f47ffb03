//! What can be wrong with bytes from E2B, as one typed error: the `source()` of every
//! sandboxio error the transports build from a malformed frame or line, so a caller can
//! tell a protocol fault from a sandbox fault.

use std::fmt;

/// A malformed or unexpected frame, line or body from E2B.
#[derive(Debug)]
#[non_exhaustive]
pub(crate) enum WireError {
    /// A Connect envelope declared a payload larger than the decoder's bound.
    FrameTooLarge { len: u64, max: usize },
    /// A line of the code interpreter's stream grew past the bound without a newline.
    LineTooLong { max: usize },
    /// A Connect envelope with the compressed flag: compression is never negotiated.
    Compressed,
    /// A Connect envelope with flag bits the protocol does not define.
    UnknownFlags(u8),
    /// The body ended inside a frame or line (`have` of `need` bytes).
    Truncated { have: usize, need: usize },
    /// The body ended with no end-of-stream frame (Connect) or `end_of_execution` line.
    MissingEnd,
    /// Bytes after the end-of-stream frame.
    AfterEnd,
    /// A frame or line that is not the JSON the protocol defines.
    Json(serde_json::Error),
    /// A field that is present but not what its type says (bad base64, say).
    Field { field: &'static str, why: String },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::FrameTooLarge { len, max } => {
                write!(f, "an envelope declares {len} bytes, over the bound of {max}")
            }
            WireError::LineTooLong { max } => write!(f, "a line is longer than the bound of {max} bytes"),
            WireError::Compressed => {
                f.write_str("a compressed envelope, though no compression was negotiated")
            }
            WireError::UnknownFlags(flags) => write!(f, "an envelope with unknown flags {flags:#04x}"),
            WireError::Truncated { have, need } => {
                write!(f, "the body ended inside a frame ({have} of {need} bytes)")
            }
            WireError::MissingEnd => f.write_str("the stream ended without its end frame"),
            WireError::AfterEnd => f.write_str("bytes after the end-of-stream frame"),
            WireError::Json(e) => write!(f, "malformed JSON: {e}"),
            WireError::Field { field, why } => write!(f, "field `{field}`: {why}"),
        }
    }
}

impl std::error::Error for WireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WireError::Json(e) => Some(e),
            _ => None,
        }
    }
}

impl From<serde_json::Error> for WireError {
    fn from(e: serde_json::Error) -> Self {
        WireError::Json(e)
    }
}
