//! [`ExecLines`]: a running command's output, line by line, from [`ExecStream::lines`].
//!
//! Bytes are split on `\n` per stream before they are decoded: `\n` never occurs inside a
//! multi-byte UTF-8 character, so a chunk boundary that falls inside a character cannot
//! break it, and stdout and stderr never share a line.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;

use crate::error::{Error, Result};
use crate::exec::{OutputChunk, StreamKind};

use super::stream::ExecStream;

/// The longest line [`ExecStream::lines`] yields whole unless [`ExecLines::max_line`] says
/// otherwise: 64 KiB (65 536 bytes, not counting the `\n`).
pub const DEFAULT_MAX_LINE: usize = 64 * 1024;

/// The smallest bound [`ExecLines::max_line`] takes, in bytes: one UTF-8 character of any
/// length always fits in a piece.
const MIN_MAX_LINE: usize = 4;

/// One line of a streamed command's output.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutputLine {
    /// The stream it came from.
    pub stream: StreamKind,
    /// The line without its `\n` (a `\r` before it is kept). Bytes that are not UTF-8
    /// become U+FFFD.
    pub text: String,
    /// `true` when the line was longer than the bound and was cut here, at a character
    /// boundary: the next line of the same stream goes on with it.
    pub continues: bool,
}

/// A streamed command's output as lines: a [`Stream`] of `Result<OutputLine>`, from
/// [`ExecStream::lines`]. It borrows the [`ExecStream`]: once it is done (or dropped), call
/// [`ExecStream::wait`] for the exit status.
///
/// - Each line is tagged with its stream; lines of one stream keep their order, and lines
///   of the two streams come in the order their `\n` arrived.
/// - A line longer than the bound ([`DEFAULT_MAX_LINE`], 64 KiB, or
///   [`ExecLines::max_line`]) comes in pieces of at most that many bytes, cut at a
///   character boundary, each but the last with [`OutputLine::continues`] set: memory
///   stays bounded and nothing is dropped.
/// - When the output ends, or before an error item ends it (see
///   [How a stream ends](ExecStream#how-a-stream-ends)), each stream's unterminated last
///   line comes as a line of its own.
/// - Dropping it discards the part of a line it holds; the stream goes on from there.
#[derive(Debug)]
#[must_use = "lines are read only when the stream is iterated"]
pub struct ExecLines<'a> {
    stream: &'a mut ExecStream,
    splitter: Splitter,
    /// The error that ended the output, held until the lines before it are yielded.
    ended_by: Option<Error>,
    done: bool,
}

#[sandboxio_macros::blocking_facade]
impl<'a> ExecLines<'a> {
    pub(crate) fn new(stream: &'a mut ExecStream) -> Self {
        ExecLines { stream, splitter: Splitter::new(DEFAULT_MAX_LINE), ended_by: None, done: false }
    }

    /// The same lines with `bytes` as the longest piece of a line (default
    /// [`DEFAULT_MAX_LINE`], 64 KiB; at least 4, so that any character fits). Lines already
    /// split keep the bound they were split with.
    pub fn max_line(mut self, bytes: usize) -> Self {
        self.splitter.max = bytes.max(MIN_MAX_LINE);
        self
    }

    /// The next line, or `None` once the command has closed both streams.
    ///
    /// # Errors
    ///
    /// The errors of [`ExecStream::next_chunk`], after the lines written before them; the
    /// lines end after it (the next item is `None`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: no output is lost if the future is dropped before it completes.
    pub async fn next_line(&mut self) -> Option<Result<OutputLine>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Stream for ExecLines<'_> {
    type Item = Result<OutputLine>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(line) = this.splitter.ready.pop_front() {
                return Poll::Ready(Some(Ok(line)));
            }
            if let Some(e) = this.ended_by.take() {
                return Poll::Ready(Some(Err(e)));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut *this.stream).poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => this.splitter.push(&chunk),
                Poll::Ready(Some(Err(e))) => {
                    this.splitter.finish();
                    this.ended_by = Some(e);
                    this.done = true;
                }
                Poll::Ready(None) => {
                    this.splitter.finish();
                    this.done = true;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Splits chunks into lines, one partial line per stream, with no I/O.
#[derive(Debug)]
struct Splitter {
    max: usize,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    ready: VecDeque<OutputLine>,
}

impl Splitter {
    fn new(max: usize) -> Self {
        Splitter { max, stdout: Vec::new(), stderr: Vec::new(), ready: VecDeque::new() }
    }

    fn push(&mut self, chunk: &OutputChunk) {
        let buf = match chunk.stream {
            StreamKind::Stdout => &mut self.stdout,
            StreamKind::Stderr => &mut self.stderr,
        };
        buf.extend_from_slice(&chunk.data);
        let mut start = 0;
        loop {
            let rest = &buf[start..];
            let newline = rest.iter().take(self.max + 1).position(|&b| b == b'\n');
            let (len, skip, continues) = match newline {
                Some(at) => (at, 1, false),
                None if rest.len() > self.max => {
                    let cut = char_boundary(rest, self.max);
                    (cut, 0, true)
                }
                None => break,
            };
            self.ready.push_back(line(chunk.stream, &rest[..len], continues));
            start += len + skip;
        }
        buf.drain(..start);
    }

    /// The output ended: each stream's unterminated remainder becomes a line.
    fn finish(&mut self) {
        for (stream, buf) in [(StreamKind::Stdout, &mut self.stdout), (StreamKind::Stderr, &mut self.stderr)]
        {
            if !buf.is_empty() {
                self.ready.push_back(line(stream, buf, false));
                buf.clear();
            }
        }
    }
}

fn line(stream: StreamKind, bytes: &[u8], continues: bool) -> OutputLine {
    OutputLine { stream, text: String::from_utf8_lossy(bytes).into_owned(), continues }
}

/// The longest prefix of `bytes` of at most `max` bytes that does not end inside a UTF-8
/// character (`bytes` is longer than `max`). Invalid UTF-8 is cut at `max`.
fn char_boundary(bytes: &[u8], max: usize) -> usize {
    let is_continuation = |b: u8| b & 0b1100_0000 == 0b1000_0000;
    // A character is at most 4 bytes: the byte at `max` starts one at most 3 bytes back.
    (max.saturating_sub(3)..=max)
        .rev()
        .find(|&cut| !is_continuation(bytes[cut]))
        .filter(|&cut| cut > 0)
        .unwrap_or(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(stream: StreamKind, data: &[u8]) -> OutputChunk {
        OutputChunk { stream, data: data.to_vec() }
    }

    fn texts(s: &mut Splitter) -> Vec<(StreamKind, String, bool)> {
        s.ready.drain(..).map(|l| (l.stream, l.text, l.continues)).collect()
    }

    #[test]
    fn a_character_split_across_chunks_stays_whole() {
        let text = "größe € 😀\n".as_bytes();
        // Every split point, including inside the 2-, 3- and 4-byte characters.
        for at in 0..=text.len() {
            let mut s = Splitter::new(DEFAULT_MAX_LINE);
            s.push(&chunk(StreamKind::Stdout, &text[..at]));
            s.push(&chunk(StreamKind::Stdout, &text[at..]));
            s.finish();
            assert_eq!(
                texts(&mut s),
                [(StreamKind::Stdout, "größe € 😀".to_owned(), false)],
                "split at {at}"
            );
        }
    }

    #[test]
    fn streams_never_share_a_line() {
        let mut s = Splitter::new(DEFAULT_MAX_LINE);
        s.push(&chunk(StreamKind::Stdout, b"out "));
        s.push(&chunk(StreamKind::Stderr, b"err\xC3"));
        s.push(&chunk(StreamKind::Stdout, b"one\nout two"));
        s.push(&chunk(StreamKind::Stderr, b"\xA9\n"));
        s.finish();
        assert_eq!(
            texts(&mut s),
            [
                (StreamKind::Stdout, "out one".to_owned(), false),
                (StreamKind::Stderr, "erré".to_owned(), false),
                (StreamKind::Stdout, "out two".to_owned(), false),
            ]
        );
    }

    #[test]
    fn an_over_long_line_comes_in_pieces_cut_between_characters() {
        let mut s = Splitter::new(4);
        // Byte 4 falls inside the first `€` (bytes 2 to 4), and again inside the second.
        s.push(&chunk(StreamKind::Stdout, "ab€€x\n".as_bytes()));
        assert_eq!(
            texts(&mut s),
            [
                (StreamKind::Stdout, "ab".to_owned(), true),
                (StreamKind::Stdout, "€".to_owned(), true),
                (StreamKind::Stdout, "€x".to_owned(), false),
            ]
        );
        // A line of exactly the bound is whole; an empty line is a line.
        s.push(&chunk(StreamKind::Stderr, b"1234\n\n"));
        assert_eq!(
            texts(&mut s),
            [(StreamKind::Stderr, "1234".to_owned(), false), (StreamKind::Stderr, String::new(), false)]
        );
        // Memory stays bounded while a line has no end: 23 bytes are 5 full pieces, 3 held.
        s.push(&chunk(StreamKind::Stdout, &[b'y'; 23]));
        assert_eq!(texts(&mut s).len(), 5);
        assert_eq!(s.stdout.len(), 3);
        s.finish();
        assert_eq!(texts(&mut s), [(StreamKind::Stdout, "yyy".to_owned(), false)]);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_dropped() {
        let mut s = Splitter::new(4);
        s.push(&chunk(StreamKind::Stdout, b"\xFF\xFE\x80\x80\x80\x80\n"));
        let lines = texts(&mut s);
        assert_eq!(lines.iter().map(|l| l.1.chars().count()).sum::<usize>(), 6, "{lines:?}");
        assert!(lines.iter().all(|l| l.1.chars().all(|c| c == '\u{FFFD}')));
    }
}
