//! [`CodeStream`]: a running code cell's output, chunk by chunk, then its result.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;

use crate::audit::{OperationKind, Outcome};
use crate::backend::{BackendCodeStream, CellEvent};
use crate::error::Result;
use crate::exec::{CodeResult, OutputChunk};

use super::op::{LateRecord, OpContext};

/// A running code cell, from [`Sandbox::run_code_stream`](crate::Sandbox::run_code_stream).
///
/// It is a [`futures_core::Stream`] of [`OutputChunk`]s, the same chunks as an
/// [`ExecStream`](crate::exec::ExecStream)'s: the bytes the cell writes to stdout and stderr,
/// each stream in order, delivered as the cell prints them (a chunk can arrive while the
/// cell is still running). It is not a future: `.await` on it does not compile. Iterate it
/// with [`CodeStream::next_chunk`] (no extra crate needed) or a `StreamExt::next`, then call
/// [`CodeStream::wait`] for the cell's [`CodeResult`] (status, error, rich results,
/// duration, out-of-memory mark).
///
/// The chunks carry the output; the result does not repeat it: its `stdout` and `stderr`
/// are empty and [`CodeResult::streamed`] is set, as an [`ExecStream`](crate::exec::ExecStream)'s
/// `wait` does for a command. [`Sandbox::run_code`](crate::Sandbox::run_code) is this
/// stream collected, with the output put back in the result.
///
/// Dropping it before the cell ended interrupts the cell exactly as dropping
/// `run_code`'s future does: a cell in a code context kills that context's interpreter, and
/// the context is lost (its next cell fails with
/// [`Error::ContextLost`](crate::Error::ContextLost), saying why); a cell of its own has its
/// interpreter killed. Exactly one audit record
/// ([`OperationKind::RunCodeStream`]) is written for the stream: when it ends or is dropped.
///
/// # How it ends
///
/// - The cell ends (a cell that raises ends too: that is data): the remaining output, then
///   `None`; [`CodeStream::wait`] gives the result, with [`CodeResult::error`] for a
///   raising cell.
/// - Something ends it that is not data (its timeout, the sandbox dying, its context lost):
///   output printed before may still arrive, then exactly one `Err` item, then `None`.
///   [`CodeStream::wait`], before or after, returns the same error every time it is called.
#[must_use = "a code stream runs its cell until it is dropped: iterate it or wait() for it"]
pub struct CodeStream {
    inner: Box<dyn BackendCodeStream>,
    /// Whether the sandbox declares `RICH_OUTPUTS` (rich results are dropped otherwise, as
    /// `run_code` drops them).
    rich: bool,
    audit: LateRecord,
    /// How the cell ended, once it has: kept so that `wait` says the same every time.
    ended: Option<Result<CodeResult>>,
}

impl fmt::Debug for CodeStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodeStream")
            .field("sandbox_id", &self.audit.ctx.sandbox_id)
            .field("ended", &self.ended.is_some())
            .finish_non_exhaustive()
    }
}

#[sandboxio_macros::blocking_facade]
impl CodeStream {
    pub(crate) fn new(inner: Box<dyn BackendCodeStream>, rich: bool, ctx: OpContext) -> Self {
        CodeStream { inner, rich, audit: LateRecord::new(ctx, OperationKind::RunCodeStream), ended: None }
    }

    /// The next chunk of the cell's output, or `None` once the cell has ended.
    ///
    /// # Errors
    ///
    /// An item is `Err` for what ends a cell without a result:
    /// [`Error::ExecutionTimeout`](crate::Error::ExecutionTimeout) (its partial result has
    /// empty output: the output came as chunks),
    /// [`Error::ContextLost`](crate::Error::ContextLost) (the cell ended its context's
    /// interpreter, or an earlier cell did), [`Error::NotFound`](crate::Error::NotFound)
    /// for an unknown context, [`Error::SandboxGone`](crate::Error::SandboxGone),
    /// [`Error::Provider`](crate::Error::Provider). The stream ends after it (the next item
    /// is `None`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: no output is lost if the future is dropped before it completes.
    pub async fn next_chunk(&mut self) -> Option<Result<OutputChunk>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// Waits for the cell to end, discarding any output not yet read, and returns its
    /// result with [`CodeResult::streamed`] set and empty `stdout` and `stderr` (the output
    /// went through the stream). Idempotent: later calls return the same result, or the
    /// same error.
    ///
    /// # Errors
    ///
    /// As [`CodeStream::next_chunk`]'s `Err` item, including after the stream already
    /// yielded it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: call it again to keep waiting (the cell runs only while the stream is
    /// polled, so it is held, not lost, in between).
    pub async fn wait(&mut self) -> Result<CodeResult> {
        loop {
            match &self.ended {
                Some(Ok(result)) => return Ok(result.clone()),
                Some(Err(e)) => return Err(e.again()),
                None => {
                    // Output not read yet is discarded.
                    let _ = self.next_chunk().await;
                }
            }
        }
    }
}

impl Stream for CodeStream {
    type Item = Result<OutputChunk>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended.is_some() {
            return Poll::Ready(None);
        }
        match self.inner.poll_event(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(CellEvent::Output(chunk)) => Poll::Ready(Some(Ok(chunk))),
            Poll::Ready(CellEvent::Ended(Ok(mut result))) => {
                if !self.rich {
                    result.results.clear();
                }
                self.ended = Some(Ok(result));
                self.audit.record(Outcome::Ok);
                Poll::Ready(None)
            }
            Poll::Ready(CellEvent::Ended(Err(e))) => {
                self.ended = Some(Err(e.again()));
                self.audit.record(Outcome::Error(e.code()));
                Poll::Ready(Some(Err(e)))
            }
        }
    }
}

impl Drop for CodeStream {
    fn drop(&mut self) {
        // The backend stream interrupts its cell in its own Drop.
        let outcome = if self.ended.is_some() { Outcome::Ok } else { Outcome::Cancelled };
        self.audit.record(outcome);
    }
}
