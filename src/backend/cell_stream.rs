//! [`CellStream`]: a code cell written as one future that hands its output to a
//! [`ChunkSink`] as the cell prints it, served as a [`BackendCodeStream`]; and
//! [`collect_cell`], the way back to one whole [`CodeResult`]. With the two, a backend writes
//! its cell once and both `run_code` and `run_code_stream` use it.
//!
//! A cell's [`OutputBudget`] bounds what the host keeps of it: the cell's rich results
//! (counted by the backend as their records arrive) and, when the cell is collected, its
//! stdout and stderr, together. What does not fit is drained and dropped, and the result is
//! marked [`CodeResult::truncated`].

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use crate::error::{Error, Result};
use crate::exec::{CodeResult, DEFAULT_CELL_OUTPUT_LIMIT, OutputChunk, StreamKind};

use super::{BackendCodeStream, BoxFuture, CellEvent};

/// The one chunk handed over and not yet taken by the stream's reader.
type Slot = Arc<Mutex<Option<OutputChunk>>>;

/// What one rich result costs an [`OutputBudget`] beyond its items: the bundle's map node
/// and its place in the results (a `BTreeMap` leaf of 11 entries is about 540 bytes).
pub(crate) const BUNDLE_COST: usize = 576;

/// What one item of a rich result costs beyond its MIME type and data: their allocations.
pub(crate) const ITEM_COST: usize = 64;

/// What a whole rich result costs an [`OutputBudget`].
#[cfg_attr(not(feature = "e2b"), allow(dead_code))]
pub(crate) fn bundle_cost(bundle: &crate::exec::MimeBundle) -> usize {
    bundle
        .iter()
        .fold(BUNDLE_COST, |sum, (mime, data)| sum.saturating_add(ITEM_COST + mime.len() + data.len()))
}

/// How many bytes the host may still keep of one cell ([`Code::output_limit`]), shared by
/// the backend that keeps its results and the collector that keeps its output. Cheap to
/// clone: clones count against the same budget.
///
/// What did not fit is dropped and the budget marked truncated. Its users keep prefixes:
/// once a rich result is dropped no later one is kept, and once a stream's chunk is cut no
/// later byte of that stream is, so what is kept of each is what came first.
///
/// [`Code::output_limit`]: crate::Code::output_limit
#[derive(Clone)]
pub struct OutputBudget {
    inner: Arc<BudgetState>,
}

struct BudgetState {
    limit: usize,
    kept: AtomicUsize,
    truncated: AtomicBool,
}

impl fmt::Debug for OutputBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputBudget")
            .field("limit", &self.inner.limit)
            .field("kept", &self.inner.kept.load(Ordering::Relaxed))
            .field("truncated", &self.is_truncated())
            .finish()
    }
}

impl OutputBudget {
    /// A budget of `limit` bytes.
    #[must_use]
    pub fn new(limit: usize) -> Self {
        OutputBudget {
            inner: Arc::new(BudgetState {
                limit,
                kept: AtomicUsize::new(0),
                truncated: AtomicBool::new(false),
            }),
        }
    }

    /// The budget, in bytes.
    #[must_use]
    pub fn limit(&self) -> usize {
        self.inner.limit
    }

    /// The bytes that may still be kept.
    #[must_use]
    pub fn room(&self) -> usize {
        self.inner.limit.saturating_sub(self.inner.kept.load(Ordering::Acquire))
    }

    /// Counts `bytes` about to be kept; `false` (and the budget marked truncated) when they
    /// do not fit, in which case the caller drops them, whole.
    #[must_use]
    pub fn keep(&self, bytes: usize) -> bool {
        if bytes > self.room() {
            self.truncate();
            return false;
        }
        self.inner.kept.fetch_add(bytes, Ordering::AcqRel);
        true
    }

    /// Counts what fits of `bytes` about to be kept and returns how many may be kept (the
    /// rest is dropped, and the budget marked truncated).
    #[must_use]
    pub fn keep_prefix(&self, bytes: usize) -> usize {
        let fits = bytes.min(self.room());
        self.inner.kept.fetch_add(fits, Ordering::AcqRel);
        if fits < bytes {
            self.truncate();
        }
        fits
    }

    /// Marks the budget truncated: something was dropped.
    pub fn truncate(&self) {
        self.inner.truncated.store(true, Ordering::Release);
    }

    /// Whether something was dropped.
    #[must_use]
    pub fn is_truncated(&self) -> bool {
        self.inner.truncated.load(Ordering::Acquire)
    }
}

impl Default for OutputBudget {
    /// [`DEFAULT_CELL_OUTPUT_LIMIT`].
    fn default() -> Self {
        OutputBudget::new(DEFAULT_CELL_OUTPUT_LIMIT)
    }
}

/// Where a [`CellStream`]'s cell sends its output.
#[derive(Clone)]
pub struct ChunkSink {
    slot: Slot,
    budget: OutputBudget,
}

impl fmt::Debug for ChunkSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkSink").finish_non_exhaustive()
    }
}

impl ChunkSink {
    /// The cell's output budget: a backend counts every rich result (and any other record it
    /// keeps for the result) against it as the bytes arrive, before it buffers them, and
    /// drops what does not fit.
    #[must_use]
    pub fn budget(&self) -> &OutputBudget {
        &self.budget
    }

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
    budget: OutputBudget,
    /// The cell's result, when it ended with a chunk still to deliver.
    ended: Option<Result<CodeResult>>,
}

impl fmt::Debug for CellStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CellStream").field("running", &self.cell.is_some()).finish_non_exhaustive()
    }
}

impl CellStream {
    /// The stream of the cell `start` returns, given the sink it sends its output to, with
    /// the default output budget ([`DEFAULT_CELL_OUTPUT_LIMIT`]). Nothing runs until the
    /// stream is first polled.
    pub fn new<F>(start: impl FnOnce(ChunkSink) -> F) -> Self
    where
        F: Future<Output = Result<CodeResult>> + Send + 'static,
    {
        Self::with_output_limit(DEFAULT_CELL_OUTPUT_LIMIT, start)
    }

    /// As [`CellStream::new`], with an output budget of `limit` bytes (a cell's
    /// [`Code::output_limit_bytes`](crate::Code::output_limit_bytes)).
    pub fn with_output_limit<F>(limit: usize, start: impl FnOnce(ChunkSink) -> F) -> Self
    where
        F: Future<Output = Result<CodeResult>> + Send + 'static,
    {
        let slot = Slot::default();
        let budget = OutputBudget::new(limit);
        let cell = start(ChunkSink { slot: Arc::clone(&slot), budget: budget.clone() });
        CellStream { cell: Some(Box::pin(cell)), slot, budget, ended: None }
    }

    fn take_chunk(&self) -> Option<OutputChunk> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl BackendCodeStream for CellStream {
    fn output_budget(&self) -> Option<OutputBudget> {
        Some(self.budget.clone())
    }

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
                let result = streamed(result, self.budget.is_truncated());
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

/// The result as a stream ends with it: output removed (it went through the chunks), and
/// marked truncated when its budget dropped something.
fn streamed(result: Result<CodeResult>, truncated: bool) -> Result<CodeResult> {
    match result {
        Ok(mut result) => {
            result.truncated |= truncated;
            Ok(result.into_streamed())
        }
        Err(Error::ExecutionTimeout { timeout, partial }) => {
            Err(Error::ExecutionTimeout { timeout, partial: Box::new(partial.into_streamed()) })
        }
        Err(e) => Err(e),
    }
}

/// Runs a streamed cell to its end and returns its whole result: `stdout` and `stderr`
/// gathered from the chunks within the stream's [`OutputBudget`]
/// ([`BackendCodeStream::output_budget`], which its rich results share; a stream without
/// one gets [`DEFAULT_CELL_OUTPUT_LIMIT`] for its output), the rest read and dropped and the
/// result marked [`CodeResult::truncated`]; `streamed` unset. An
/// [`Error::ExecutionTimeout`] gets the output printed before it in its partial result.
///
/// Cancellation: dropping the future drops the stream, which interrupts the cell.
///
/// # Errors
///
/// The error that ended the cell.
pub async fn collect_cell(mut stream: Box<dyn BackendCodeStream>) -> Result<CodeResult> {
    let budget = stream.output_budget().unwrap_or_default();
    let mut out = Kept::new(budget.clone());
    loop {
        match std::future::poll_fn(|cx| stream.poll_event(cx)).await {
            CellEvent::Output(chunk) => out.push(chunk.stream, &chunk.data),
            CellEvent::Ended(Ok(mut result)) => {
                (result.stdout, result.stderr, result.streamed) = (out.stdout, out.stderr, false);
                result.truncated |= budget.is_truncated();
                return Ok(result);
            }
            CellEvent::Ended(Err(Error::ExecutionTimeout { timeout, mut partial })) => {
                (partial.stdout, partial.stderr, partial.streamed) = (out.stdout, out.stderr, false);
                partial.truncated |= budget.is_truncated();
                return Err(Error::ExecutionTimeout { timeout, partial });
            }
            CellEvent::Ended(Err(e)) => return Err(e),
        }
    }
}

/// A collected cell's output, kept within its budget: a prefix of each stream.
struct Kept {
    budget: OutputBudget,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// Whether a chunk of stdout, of stderr, was cut (nothing more of it is kept).
    cut: [bool; 2],
}

impl Kept {
    fn new(budget: OutputBudget) -> Self {
        Kept { budget, stdout: Vec::new(), stderr: Vec::new(), cut: [false; 2] }
    }

    fn push(&mut self, kind: StreamKind, data: &[u8]) {
        let (buf, cut) = if kind == StreamKind::Stdout {
            (&mut self.stdout, &mut self.cut[0])
        } else {
            (&mut self.stderr, &mut self.cut[1])
        };
        if *cut {
            self.budget.truncate();
            return;
        }
        let fits = self.budget.keep_prefix(data.len());
        *cut = fits < data.len();
        buf.extend_from_slice(&data[..fits]);
    }
}

/// Output kept up to a per-stream cap; the rest is drained and dropped.
#[cfg_attr(
    not(any(feature = "local", feature = "docker")),
    allow(dead_code, reason = "used by the sandboxd backends: local, docker")
)]
pub(crate) struct Collected {
    limit: usize,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) truncated: bool,
}

#[cfg_attr(
    not(any(feature = "local", feature = "docker")),
    allow(dead_code, reason = "used by the sandboxd backends: local, docker")
)]
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
