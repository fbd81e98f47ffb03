//! The consumer's half of a streamed command whose output a pump task reads on a backend's
//! runtime (`docker://`, `e2b://`): a bounded channel of chunks (a slow consumer slows the
//! pump, so memory stays bounded), stdin requests the pump acknowledges, whether the output
//! has ended, and the result once `wait` has it. Each backend keeps its pump, its kill and
//! its exit status; this is the plumbing between them and `BackendExecStream`.

use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot};

use crate::backend::BoxFuture;
use crate::error::{Error, Result};
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
