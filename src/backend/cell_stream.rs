//! [`CellStream`]: a code cell written as one future that hands its output to a
//! [`ChunkSink`] as the cell prints it, served as a [`BackendCodeStream`]; and
//! [`collect_cell`], the way back to one whole [`CodeResult`]. With the two, a backend writes
//! its cell once and both `run_code` and `run_code_stream` use it.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use crate::error::{Error, Result};
use crate::exec::{CodeResult, OutputChunk, StreamKind};

use super::{BackendCodeStream, BoxFuture, CellEvent};

/// The one chunk handed over and not yet taken by the stream's reader.
type Slot = Arc<Mutex<Option<OutputChunk>>>;

/// Where a [`CellStream`]'s cell sends its output.
#[derive(Clone)]
pub struct ChunkSink {
    slot: Slot,
}

impl fmt::Debug for ChunkSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkSink").finish_non_exhaustive()
    }
}

impl ChunkSink {
    /// Hands `chunk` to the stream's reader and resolves once the reader has taken it, so
    /// the cell never runs more than one chunk ahead of its reader: a slow reader holds the
    /// cell back through the backend's own flow control instead of growing a buffer here.
    /// An empty chunk is not sent.
    ///
    /// Only the [`CellStream`] that made this sink polls the future that awaits `send`; a
    /// sink used anywhere else never sees its chunk taken.
    pub async fn send(&self, chunk: OutputChunk) {
        if chunk.data.is_empty() {
            return;
        }
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(chunk);
        // The stream takes the chunk after this poll returns `Pending`, and polls the cell
        // again for its next event: no waker is needed.
        std::future::poll_fn(|_| {
            if self.slot.lock().unwrap_or_else(PoisonError::into_inner).is_some() {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await;
    }
}

/// A [`BackendCodeStream`] made of one future that runs the cell, sends what it prints to a
/// [`ChunkSink`] and returns the cell's result (its `stdout` and `stderr` are ignored: the
/// output went through the sink). The future is polled only while the stream is, so
/// dropping the stream drops the future: write its cancellation as `run_code`'s.
pub struct CellStream {
    cell: Option<BoxFuture<'static, Result<CodeResult>>>,
    slot: Slot,
    /// The cell's result, when it ended with a chunk still to deliver.
    ended: Option<Result<CodeResult>>,
}

impl fmt::Debug for CellStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CellStream").field("running", &self.cell.is_some()).finish_non_exhaustive()
    }
}

impl CellStream {
    /// The stream of the cell `start` returns, given the sink it sends its output to.
    /// Nothing runs until the stream is first polled.
    pub fn new<F>(start: impl FnOnce(ChunkSink) -> F) -> Self
    where
        F: Future<Output = Result<CodeResult>> + Send + 'static,
    {
        let slot = Slot::default();
        let cell = start(ChunkSink { slot: Arc::clone(&slot) });
        CellStream { cell: Some(Box::pin(cell)), slot, ended: None }
    }

    fn take_chunk(&self) -> Option<OutputChunk> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl BackendCodeStream for CellStream {
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<CellEvent> {
        if let Some(chunk) = self.take_chunk() {
            return Poll::Ready(CellEvent::Output(chunk));
        }
        if let Some(ended) = self.ended.take() {
            return Poll::Ready(CellEvent::Ended(ended));
        }
        let Some(cell) = self.cell.as_mut() else {
            return Poll::Ready(CellEvent::Ended(Err(Error::provider_message(
                "sandboxio",
                "a code stream was polled after its cell ended",
            ))));
        };
        let polled = cell.as_mut().poll(cx);
        let chunk = self.take_chunk();
        match (polled, chunk) {
            (Poll::Pending, None) => Poll::Pending,
            (Poll::Pending, Some(chunk)) => Poll::Ready(CellEvent::Output(chunk)),
            (Poll::Ready(result), chunk) => {
                self.cell = None;
                let result = streamed(result);
                match chunk {
                    // A chunk sent without awaiting the send still goes out first.
                    Some(chunk) => {
                        self.ended = Some(result);
                        Poll::Ready(CellEvent::Output(chunk))
                    }
                    None => Poll::Ready(CellEvent::Ended(result)),
                }
            }
        }
    }
}

/// The result as a stream ends with it: output removed (it went through the chunks).
fn streamed(result: Result<CodeResult>) -> Result<CodeResult> {
    match result {
        Ok(result) => Ok(result.into_streamed()),
        Err(Error::ExecutionTimeout { timeout, partial }) => {
            Err(Error::ExecutionTimeout { timeout, partial: Box::new(partial.into_streamed()) })
        }
        Err(e) => Err(e),
    }
}

/// Runs a streamed cell to its end and returns its whole result: `stdout` and `stderr`
/// gathered from the chunks (at most [`DEFAULT_OUTPUT_LIMIT`](crate::DEFAULT_OUTPUT_LIMIT)
/// bytes of each; the rest is read and dropped), `streamed` unset. An
/// [`Error::ExecutionTimeout`] gets the output printed before it in its partial result.
///
/// Cancellation: dropping the future drops the stream, which interrupts the cell.
///
/// # Errors
///
/// The error that ended the cell.
pub async fn collect_cell(mut stream: Box<dyn BackendCodeStream>) -> Result<CodeResult> {
    let mut out = Collected::new(crate::DEFAULT_OUTPUT_LIMIT);
    loop {
        match std::future::poll_fn(|cx| stream.poll_event(cx)).await {
            CellEvent::Output(chunk) => out.push(chunk.stream, &chunk.data),
            CellEvent::Ended(Ok(mut result)) => {
                (result.stdout, result.stderr, result.streamed) = (out.stdout, out.stderr, false);
                return Ok(result);
            }
            CellEvent::Ended(Err(Error::ExecutionTimeout { timeout, mut partial })) => {
                (partial.stdout, partial.stderr, partial.streamed) = (out.stdout, out.stderr, false);
                partial.truncated |= out.truncated;
                return Err(Error::ExecutionTimeout { timeout, partial });
            }
            CellEvent::Ended(Err(e)) => return Err(e),
        }
    }
}

/// Output kept up to a per-stream cap; the rest is drained and dropped.
pub(crate) struct Collected {
    limit: usize,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) truncated: bool,
}

impl Collected {
    /// Keeps at most `limit` bytes of each stream.
    pub(crate) fn new(limit: usize) -> Self {
        Collected { limit, stdout: Vec::new(), stderr: Vec::new(), truncated: false }
    }

    /// Keeps what fits of `data`, and notes when some did not.
    pub(crate) fn push(&mut self, kind: StreamKind, data: &[u8]) {
        let buf = if kind == StreamKind::Stdout { &mut self.stdout } else { &mut self.stderr };
        let room = self.limit.saturating_sub(buf.len());
        self.truncated |= data.len() > room;
        buf.extend_from_slice(&data[..data.len().min(room)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::ExecResult;

    fn chunk(data: &str) -> OutputChunk {
        OutputChunk { stream: StreamKind::Stdout, data: data.as_bytes().to_vec() }
    }

    #[test]
    fn each_chunk_is_delivered_before_the_cell_goes_on() {
        let progress = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&progress);
        let mut stream = CellStream::new(move |sink| async move {
            for word in ["a", "b"] {
                sink.send(chunk(word)).await;
                seen.lock().unwrap().push(word);
            }
            Ok(CodeResult::new(0, "ignored", ""))
        });
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let Poll::Ready(CellEvent::Output(first)) = stream.poll_event(&mut cx) else { panic!("no chunk") };
        assert_eq!(first.data, b"a");
        // The cell is held at its first send until the reader comes back for more.
        assert!(progress.lock().unwrap().is_empty());
        let Poll::Ready(CellEvent::Output(second)) = stream.poll_event(&mut cx) else { panic!("no chunk") };
        assert_eq!(second.data, b"b");
        assert_eq!(*progress.lock().unwrap(), ["a"]);
        let Poll::Ready(CellEvent::Ended(Ok(result))) = stream.poll_event(&mut cx) else { panic!("no end") };
        assert!(result.streamed && result.stdout.is_empty());
    }

    #[test]
    fn collecting_puts_the_chunks_back_into_the_result_and_a_timeouts_partial() {
        let ok = CellStream::new(|sink| async move {
            sink.send(chunk("x")).await;
            sink.send(OutputChunk { stream: StreamKind::Stderr, data: b"e".to_vec() }).await;
            Ok(CodeResult::new(0, "", ""))
        });
        let result = futures_lite::future::block_on(collect_cell(Box::new(ok))).unwrap();
        assert_eq!((result.stdout.as_slice(), result.stderr.as_slice()), (&b"x"[..], &b"e"[..]));
        assert!(!result.streamed);
        let late = CellStream::new(|sink| async move {
            sink.send(chunk("partial")).await;
            Err(Error::execution_timeout(std::time::Duration::from_secs(1), ExecResult::new(0, "", "")))
        });
        let Err(Error::ExecutionTimeout { partial, .. }) =
            futures_lite::future::block_on(collect_cell(Box::new(late)))
        else {
            panic!("expected a timeout")
        };
        assert_eq!(partial.stdout, b"partial");
    }
}
