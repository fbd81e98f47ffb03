//! Streamed output: which stream a piece came from, and the piece itself.

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A piece of a streamed command's output. Chunks of one stream arrive in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// The stream it came from.
    pub stream: StreamKind,
    /// The bytes, exactly as written.
    pub data: Vec<u8>,
}
