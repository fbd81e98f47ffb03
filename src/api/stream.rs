//! [`ExecStream`]: a running command's output, chunk by chunk.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;

use crate::audit::{OperationKind, Outcome};
use crate::backend::BackendExecStream;
use crate::error::{Error, Result};
use crate::exec::{ExecResult, OutputChunk};
use crate::policy::Capabilities;

use super::lines::ExecLines;
use super::op::{LateRecord, OpContext};

/// A running command, from [`Sandbox::stream`](crate::Sandbox::stream).
///
/// It is a [`futures_core::Stream`] of [`OutputChunk`]s (stdout and stderr, each in order),
/// not a future: `.await` on it does not compile. Iterate it with
/// [`ExecStream::next_chunk`] (no extra crate needed), or with the `StreamExt::next` of
/// `futures` or `futures-lite`, then call [`ExecStream::wait`] for the exit status.
///
/// Dropping it, or [`ExecStream::close`], terminates the remote process (and its process
/// tree). Exactly one audit record is written for the stream: when it ends, is closed, or
/// is dropped.
///
/// # How a stream ends
///
/// - The command exits: the remaining output, then `None`; [`ExecStream::wait`] gives its
///   [`ExitStatus`](crate::ExitStatus) (a signal death is `ExitStatus::Signal(n)`).
/// - The sandbox dies while the command runs (killed through this or any other handle,
///   expired): output the command wrote before may still arrive, then exactly one
///   `Err` item with [`Error::SandboxGone`](crate::Error::SandboxGone), then `None`. It never
///   ends with `None` alone, as if the command had exited. [`ExecStream::wait`], before
///   or after, returns `Err` with `SandboxGone` too, every time it is called.
/// - Its timeout elapses: the same, with
///   [`Error::ExecutionTimeout`](crate::Error::ExecutionTimeout) in place of `SandboxGone`.
///
/// After an `Err` item the stream always ends: the next item is `None`.
#[must_use = "a stream runs its command until it is dropped: iterate it, wait() or close() it"]
pub struct ExecStream {
    inner: Box<dyn BackendExecStream>,
    capabilities: Capabilities,
    audit: LateRecord,
    finished: Option<ExecResult>,
    /// The error that ended the command (its sandbox died, its timeout elapsed), kept so
    /// that `wait()` reports the same fact however often it is called.
    ended_by: Option<Terminal>,
    output_done: bool,
}

/// An error that ends a streamed command for good. [`Error`] is not `Clone`; this keeps
/// what rebuilds the same one.
#[derive(Debug, Clone)]
enum Terminal {
    Gone { id: String, message: String },
    Timeout { timeout: std::time::Duration, partial: Box<ExecResult> },
}

impl Terminal {
    fn of(e: &Error) -> Option<Self> {
        match e {
            Error::SandboxGone { id, message } => {
                Some(Terminal::Gone { id: id.clone(), message: message.clone() })
            }
            Error::ExecutionTimeout { timeout, partial } => {
                Some(Terminal::Timeout { timeout: *timeout, partial: partial.clone() })
            }
            _ => None,
        }
    }

    fn error(&self) -> Error {
        match self {
            Terminal::Gone { id, message } => Error::SandboxGone { id: id.clone(), message: message.clone() },
            Terminal::Timeout { timeout, partial } => {
                Error::ExecutionTimeout { timeout: *timeout, partial: partial.clone() }
            }
        }
    }
}

impl fmt::Debug for ExecStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecStream")
            .field("sandbox_id", &self.audit.ctx.sandbox_id)
            .field("output_done", &self.output_done)
            .field("finished", &self.finished.is_some())
            .finish_non_exhaustive()
    }
}

#[sandboxio_macros::blocking_facade]
impl ExecStream {
    pub(crate) fn new(inner: Box<dyn BackendExecStream>, capabilities: Capabilities, ctx: OpContext) -> Self {
        ExecStream {
            inner,
            capabilities,
            audit: LateRecord::new(ctx, OperationKind::Stream),
            finished: None,
            ended_by: None,
            output_done: false,
        }
    }

    /// The next chunk of output, or `None` once the command has closed both streams.
    ///
    /// # Errors
    ///
    /// An item is `Err` for [`Error::ExecutionTimeout`] (the process
    /// tree was killed), [`Error::SandboxGone`] (the sandbox died
    /// while the command ran) or [`Error::Provider`]; the stream ends
    /// after it (the next item is `None`). See [How a stream ends](ExecStream#how-a-stream-ends).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: no output is lost if the future is dropped before it completes.
    pub async fn next_chunk(&mut self) -> Option<Result<OutputChunk>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// The rest of the output as lines, each tagged with its stream (see [`ExecLines`]:
    /// lines split on `\n`, UTF-8 kept whole across chunks, over-long lines cut into
    /// pieces of at most [`DEFAULT_MAX_LINE`](crate::exec::DEFAULT_MAX_LINE) bytes). After the
    /// lines, [`ExecStream::wait`] gives the exit status.
    ///
    /// ```
    /// use sandboxio::{Command, NetworkPolicy, Sandbox, exec::StreamKind};
    /// # futures_lite::future::block_on(async {
    /// let sandbox = Sandbox::builder("fake://")?.network(NetworkPolicy::deny_all()).create().await?;
    /// let mut stream = sandbox.stream(Command::shell("echo one; echo two >&2"))?;
    /// let mut lines = stream.lines();
    /// while let Some(line) = lines.next_line().await {
    ///     let line = line?;
    ///     println!("{:?}: {}", line.stream, line.text);
    /// }
    /// assert!(stream.wait().await?.success());
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    pub fn lines(&mut self) -> ExecLines<'_> {
        ExecLines::new(self)
    }

    /// Writes `data` to the command's stdin.
    ///
    /// # Errors
    ///
    /// [`Error::CapabilityNotSupported`] without `STDIN`;
    /// [`Error::Provider`] if the process is gone or closed its stdin.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: if the future is dropped, part of `data` may have been written.
    pub async fn write_stdin(&mut self, data: impl AsRef<[u8]>) -> Result<()> {
        self.require_stdin()?;
        self.inner.write_stdin(data.as_ref()).await
    }

    /// Closes the command's stdin, so it reads end-of-file.
    ///
    /// # Errors
    ///
    /// [`Error::CapabilityNotSupported`] without `STDIN`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: closing twice is harmless.
    pub async fn close_stdin(&mut self) -> Result<()> {
        self.require_stdin()?;
        self.inner.close_stdin().await
    }

    fn require_stdin(&self) -> Result<()> {
        if self.capabilities.contains(Capabilities::STDIN) {
            Ok(())
        } else {
            Err(Error::missing_capability(self.audit.ctx.backend.to_string(), Capabilities::STDIN))
        }
    }

    /// Waits for the command to exit, discarding any output not yet read, and returns its
    /// status with `streamed = true` and empty `stdout`/`stderr` (the output went through
    /// the stream). Idempotent: later calls return the same result, or the same
    /// `SandboxGone` or `ExecutionTimeout` error.
    ///
    /// # Errors
    ///
    /// [`Error::ExecutionTimeout`] (the process tree was killed),
    /// [`Error::SandboxGone`] (the sandbox died before or while the
    /// command ran, including after the stream already yielded that error),
    /// [`Error::Provider`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: call it again to keep waiting.
    pub async fn wait(&mut self) -> Result<ExecResult> {
        if let Some(done) = &self.finished {
            return Ok(done.clone());
        }
        if let Some(ended) = &self.ended_by {
            return Err(ended.error());
        }
        match self.inner.wait().await {
            Ok(result) => {
                let result = result.into_streamed();
                self.finished = Some(result.clone());
                self.output_done = true;
                self.audit.record(Outcome::Ok);
                Ok(result)
            }
            Err(e) => {
                self.ended_by = Terminal::of(&e);
                self.audit.record(Outcome::Error(e.code()));
                Err(e)
            }
        }
    }

    /// Terminates the command if it is still running and releases the stream.
    ///
    /// # Errors
    ///
    /// [`Error::Provider`] if the backend could not confirm the kill
    /// (the process is still killed when the stream's backend handle is dropped).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the stream, which terminates the process.
    pub async fn close(mut self) -> Result<()> {
        if self.finished.is_some() {
            self.audit.record(Outcome::Ok);
            return Ok(());
        }
        let result = self.inner.terminate().await;
        self.audit.record(match &result {
            Ok(()) if self.output_done => Outcome::Ok,
            Ok(()) => Outcome::Cancelled,
            Err(e) => Outcome::Error(e.code()),
        });
        result
    }
}

impl Stream for ExecStream {
    type Item = Result<OutputChunk>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.output_done {
            return Poll::Ready(None);
        }
        match self.inner.poll_chunk(cx) {
            Poll::Ready(None) => {
                self.output_done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                self.output_done = true;
                self.ended_by = Terminal::of(&e);
                self.audit.record(Outcome::Error(e.code()));
                Poll::Ready(Some(Err(e)))
            }
            other => other,
        }
    }
}

impl Drop for ExecStream {
    fn drop(&mut self) {
        // The backend stream terminates its process in its own Drop.
        let outcome =
            if self.output_done || self.finished.is_some() { Outcome::Ok } else { Outcome::Cancelled };
        self.audit.record(outcome);
    }
}
