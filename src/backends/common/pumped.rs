//! The consumer's half of a streamed command whose output a pump task reads on a backend's
//! runtime (`docker://`, `e2b://`, `modal://`): a bounded channel of chunks (a slow consumer
//! slows the pump, so memory stays bounded), stdin requests the pump acknowledges, whether
//! the output has ended, and the result once `wait` has it. Each backend keeps its pump and
//! its kill; this is the plumbing between them and `BackendExecStream`.
//!
//! [`PumpedOutput`] is the output and stdin alone (`docker://` keeps its own exit, an engine
//! exit code); [`Pumped`] adds the exit status the pump sends last and owns the pump task
//! (the remote backends).

use std::task::{Context, Poll};
#[cfg(any(feature = "e2b", feature = "modal"))]
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use crate::backend::BoxFuture;
#[cfg(any(feature = "e2b", feature = "modal"))]
use crate::backends::common::portal::Task;
use crate::error::{Error, Result};
#[cfg(any(feature = "e2b", feature = "modal"))]
use crate::exec::ExitStatus;
use crate::exec::{ExecResult, OutputChunk};

/// Chunks buffered between the pump and a consumer that has not polled yet.
const CHANNEL_CHUNKS: usize = 32;
/// Stdin requests queued for the pump.
const STDIN_OPS: usize = 4;

/// A stdin request, answered on its sender once the pump has carried it out.
pub(crate) enum StdinOp {
    Data(Vec<u8>, oneshot::Sender<Result<()>>),
    Close(oneshot::Sender<Result<()>>),
}

/// The pump's ends: where it sends output (an `Err` ends the stream with that error) and
/// where it takes stdin requests from.
pub(crate) struct PumpEnds {
    pub(crate) chunks: mpsc::Sender<Result<OutputChunk>>,
    pub(crate) stdin: mpsc::Receiver<StdinOp>,
}

/// The consumer's end, held by a backend's exec stream.
pub(crate) struct PumpedOutput {
    scheme: &'static str,
    chunks: mpsc::Receiver<Result<OutputChunk>>,
    stdin: mpsc::Sender<StdinOp>,
    /// No more chunks: the channel closed, an error was handed out, or the stream was
    /// terminated.
    pub(crate) ended: bool,
    /// The result `wait` returned, returned again by later calls.
    pub(crate) done: Option<ExecResult>,
}

impl PumpedOutput {
    /// Both ends; `scheme` names the backend in errors.
    pub(crate) fn new(scheme: &'static str) -> (Self, PumpEnds) {
        let (chunk_tx, chunks) = mpsc::channel(CHANNEL_CHUNKS);
        let (stdin, stdin_rx) = mpsc::channel(STDIN_OPS);
        let out = PumpedOutput { scheme, chunks, stdin, ended: false, done: None };
        (out, PumpEnds { chunks: chunk_tx, stdin: stdin_rx })
    }

    /// The next chunk; after an error or the channel's end, `None` for ever.
    pub(crate) fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.chunks.poll_recv(cx) {
            Poll::Ready(Some(Err(e))) => {
                self.ended = true;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                self.ended = true;
                Poll::Ready(None)
            }
            other => other,
        }
    }

    /// Reads the output to its end, dropping the chunks (`wait` after streaming).
    ///
    /// # Errors
    ///
    /// The error that ended the output, if one did.
    pub(crate) async fn drain(&mut self) -> Result<()> {
        while !self.ended {
            if let Some(Err(e)) = std::future::poll_fn(|cx| self.poll_chunk(cx)).await {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Hands `data` to the pump for the process's stdin.
    pub(crate) fn write_stdin<'a>(&'a mut self, data: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        let data = data.to_vec();
        Box::pin(self.stdin_op(move |ack| StdinOp::Data(data, ack)))
    }

    /// Asks the pump to close the process's stdin.
    pub(crate) fn close_stdin(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.stdin_op(StdinOp::Close))
    }

    async fn stdin_op(&mut self, op: impl FnOnce(oneshot::Sender<Result<()>>) -> StdinOp) -> Result<()> {
        let (ack, acked) = oneshot::channel();
        let scheme = self.scheme;
        let ended = || Error::provider_message(scheme, "the process has ended");
        self.stdin.send(op(ack)).await.map_err(|_| ended())?;
        acked.await.map_err(|_| ended())?
    }
}

/// A pump's ends when it also reports the exit status ([`Pumped`]).
#[cfg(any(feature = "e2b", feature = "modal"))]
pub(crate) struct ExitPumpEnds {
    pub(crate) chunks: mpsc::Sender<Result<OutputChunk>>,
    pub(crate) stdin: mpsc::Receiver<StdinOp>,
    pub(crate) exit: oneshot::Sender<ExitStatus>,
}

/// The output and stdin ([`PumpedOutput`]), the exit status the pump sends last, and the
/// pump task once spawned (dropping this aborts it). The remote backends' (docker's streams
/// get their exit status from the engine).
#[cfg(any(feature = "e2b", feature = "modal"))]
pub(crate) struct Pumped {
    out: PumpedOutput,
    exit: Option<oneshot::Receiver<ExitStatus>>,
    pump: Option<Task<()>>,
    started: Instant,
}

#[cfg(any(feature = "e2b", feature = "modal"))]
impl Pumped {
    /// New channels, and the pump's ends for the task to be spawned with ([`Pumped::run`]).
    pub(crate) fn new(scheme: &'static str) -> (Self, ExitPumpEnds) {
        let (out, PumpEnds { chunks, stdin }) = PumpedOutput::new(scheme);
        let (exit_tx, exit) = oneshot::channel();
        let pumped = Pumped { out, exit: Some(exit), pump: None, started: Instant::now() };
        (pumped, ExitPumpEnds { chunks, stdin, exit: exit_tx })
    }

    /// Keeps the pump task: dropping this stream aborts it.
    pub(crate) fn run(&mut self, pump: Task<()>) {
        self.pump = Some(pump);
    }

    pub(crate) fn ended(&self) -> bool {
        self.out.ended
    }

    /// The next chunk; an error ends the stream.
    pub(crate) fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        self.out.poll_chunk(cx)
    }

    pub(crate) fn write_stdin<'a>(&'a mut self, data: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        self.out.write_stdin(data)
    }

    pub(crate) fn close_stdin(&mut self) -> BoxFuture<'_, Result<()>> {
        self.out.close_stdin()
    }

    /// Drains the output (dropping it) and gives the exit, the same one each time.
    pub(crate) async fn wait(&mut self) -> Result<ExecResult> {
        if let Some(done) = &self.out.done {
            return Ok(done.clone());
        }
        self.out.drain().await?;
        let scheme = self.out.scheme;
        let terminated = || Error::provider_message(scheme, "the process was terminated");
        let status = self.exit.take().ok_or_else(terminated)?.await.map_err(|_| terminated())?;
        let result = ExecResult::new(0, "", "").with_status(status).with_duration(self.started.elapsed());
        self.out.done = Some(result.clone());
        Ok(result)
    }

    /// Ends the stream on this side: no more chunks, no exit, the pump aborted.
    pub(crate) fn stop(&mut self) {
        self.out.ended = true;
        self.exit = None;
        drop(self.pump.take());
    }
}
