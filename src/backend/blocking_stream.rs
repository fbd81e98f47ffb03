//! [`blocking_chunks`]: a provider's blocking iterator of output chunks served as the
//! non-blocking `poll_chunk` a [`BackendExecStream`](super::BackendExecStream) needs.
//!
//! A blocking SDK hands streamed output as an iterator whose `next()` waits for the
//! process. That iterator runs on a thread of its own through [`run_blocking`], so it keeps
//! [`run_blocking`]'s contract (lazy start, a [`CancelToken`] whose hooks run when the
//! stream is dropped); chunks cross over one at a time, so a slow reader holds the
//! provider back instead of growing a buffer here.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::error::{Error, Result};
use crate::exec::OutputChunk;

use super::blocking::{Blocking, CancelToken, run_blocking};

/// Starts `open` on a thread of its own at the first poll and serves the chunks of the
/// iterator it returns, in order, through [`BlockingChunks::poll_chunk`].
///
/// `open` makes the provider call that starts the output (an SDK's `exec_stream`) and
/// returns its blocking iterator; it registers with [`CancelToken::on_cancel`] what stops
/// the process, exactly as work given to [`run_blocking`] does. `backend` is the adapter's
/// scheme, for the errors [`run_blocking`] makes.
///
/// Items are yielded as the iterator gives them: an `Err` item is passed on and the stream
/// goes on after it only if the iterator does (end your iterator after its final error;
/// the contract wants `None` after an `Err`). An `Err` from `open`, or a panic in `open` or
/// the iterator, is yielded once as the last item. Empty chunks are skipped.
///
/// # Cancellation
///
/// Dropping the [`BlockingChunks`] before the iterator ends cancels the work as dropping a
/// [`run_blocking`] future does: the token turns cancelled, the hooks run on a thread of
/// their own (they must unblock a `next()` that waits for output, by killing the
/// process), and the iterator is not advanced again once its current `next()` returns.
///
/// # Example
///
/// A blocking SDK's output iterator behind an exec stream's `poll_chunk`:
///
/// ```
/// use sandboxio::backend::blocking_chunks;
/// use sandboxio::exec::{OutputChunk, StreamKind};
/// # futures_lite::future::block_on(async {
/// let mut chunks = blocking_chunks("fly", |cancel| {
///     cancel.on_cancel(|| { /* the SDK's kill call */ });
///     let lines = ["a\n", "b\n"].map(|s| Ok(OutputChunk { stream: StreamKind::Stdout, data: s.into() }));
///     Ok(lines.into_iter())
/// });
/// let mut seen = Vec::new();
/// while let Some(chunk) = std::future::poll_fn(|cx| chunks.poll_chunk(cx)).await {
///     seen.extend(chunk?.data);
/// }
/// assert_eq!(seen, b"a\nb\n");
/// # Ok::<(), sandboxio::Error>(())
/// # }).unwrap();
/// ```
pub fn blocking_chunks<I, F>(backend: &str, open: F) -> BlockingChunks
where
    I: Iterator<Item = Result<OutputChunk>>,
    F: FnOnce(&CancelToken) -> Result<I> + Send + 'static,
{
    // One chunk in flight: the worker waits in `send` until the reader took the last one.
    let (sender, receiver) = mpsc::sync_channel(1);
    let waker: SharedWaker = Arc::default();
    let handoff = Handoff { sender, waker: Arc::clone(&waker) };
    let pump = run_blocking(backend, move |cancel| {
        for item in open(cancel)? {
            if cancel.is_cancelled() || !handoff.send(item) {
                break;
            }
        }
        Ok(())
    });
    BlockingChunks { receiver, waker, pump: Pump::Running(pump) }
}

/// The waker of the task reading a [`BlockingChunks`], for the worker to wake on a chunk.
type SharedWaker = Arc<Mutex<Option<Waker>>>;

/// The worker's end: sends an item and wakes the reader.
struct Handoff {
    sender: SyncSender<Result<OutputChunk>>,
    waker: SharedWaker,
}

impl Handoff {
    /// Blocks until the reader has room; `false` once the reader is gone.
    fn send(&self, item: Result<OutputChunk>) -> bool {
        if item.as_ref().is_ok_and(|c| c.data.is_empty()) {
            return true;
        }
        let sent = self.sender.send(item).is_ok();
        if let Some(waker) = self.waker.lock().unwrap_or_else(PoisonError::into_inner).take() {
            waker.wake();
        }
        sent
    }
}

/// The chunks of a blocking iterator, made by [`blocking_chunks`]. Dropping it cancels the
/// work.
pub struct BlockingChunks {
    receiver: Receiver<Result<OutputChunk>>,
    waker: SharedWaker,
    pump: Pump,
}

/// Where the worker is.
enum Pump {
    Running(Blocking<()>),
    /// It ended with this error, to yield once the chunks before it are taken.
    Failed(Error),
    Ended,
}

impl std::fmt::Debug for BlockingChunks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ended = matches!(self.pump, Pump::Ended);
        f.debug_struct("BlockingChunks").field("ended", &ended).finish_non_exhaustive()
    }
}

impl BlockingChunks {
    /// The next chunk, `None` once the iterator has ended (and after the last error).
    /// Never blocks: the iterator runs on its own thread, which wakes the task polling
    /// here when it hands over a chunk or ends.
    pub fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        // The waker first: a chunk sent after the `try_recv` below then wakes this task.
        *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
        loop {
            // Chunks sent before the worker ended are yielded before its end.
            if let Ok(item) = self.receiver.try_recv() {
                return Poll::Ready(Some(item));
            }
            match std::mem::replace(&mut self.pump, Pump::Ended) {
                // Polling the worker starts it and registers for its end.
                Pump::Running(mut pump) => match Pin::new(&mut pump).poll(cx) {
                    Poll::Pending => {
                        self.pump = Pump::Running(pump);
                        return Poll::Pending;
                    }
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => self.pump = Pump::Failed(e),
                },
                Pump::Failed(e) => return Poll::Ready(Some(Err(e))),
                Pump::Ended => return Poll::Ready(None),
            }
        }
    }
}
