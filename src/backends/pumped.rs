//! The consumer's side of a streamed command on a remote backend (`e2b://`, `modal://`): a
//! pump task on the backend's portal sends output into a bounded channel (a slow consumer
//! slows the reads, memory stays bounded), serves stdin operations sent to it, and sends
//! the exit status last. Each backend writes its own pump; this is what the stream does
//! with the channels' other ends.

use std::task::{Context, Poll};
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use crate::backends::portal::Task;
use crate::error::{Error, Result};
use crate::exec::{ExecResult, ExitStatus, OutputChunk};

/// Chunks buffered between the provider and a consumer that has not polled yet.
const CHANNEL_CHUNKS: usize = 32;

/// A stdin operation for the pump, with where to send its outcome.
pub(crate) enum StdinOp {
    Data(Vec<u8>, oneshot::Sender<Result<()>>),
    Close(oneshot::Sender<Result<()>>),
}

/// The pump's ends of the channels.
pub(crate) struct PumpEnds {
    pub(crate) chunks: mpsc::Sender<Result<OutputChunk>>,
    pub(crate) stdin: mpsc::Receiver<StdinOp>,
    pub(crate) exit: oneshot::Sender<ExitStatus>,
}

/// The stream's ends, and the pump task once spawned (dropping it aborts the pump).
pub(crate) struct Pumped {
    scheme: &'static str,
    chunks: mpsc::Receiver<Result<OutputChunk>>,
    stdin: mpsc::Sender<StdinOp>,
    exit: Option<oneshot::Receiver<ExitStatus>>,
    pump: Option<Task<()>>,
    ended: bool,
    started: Instant,
    done: Option<ExecResult>,
}

impl Pumped {
    /// New channels, and the pump's ends for the task to be spawned with ([`Pumped::run`]).
    pub(crate) fn new(scheme: &'static str) -> (Self, PumpEnds) {
        let (chunk_tx, chunks) = mpsc::channel(CHANNEL_CHUNKS);
        let (stdin, stdin_rx) = mpsc::channel(4);
        let (exit_tx, exit) = oneshot::channel();
        let ends = PumpEnds { chunks: chunk_tx, stdin: stdin_rx, exit: exit_tx };
        let pumped = Pumped {
            scheme,
            chunks,
            stdin,
            exit: Some(exit),
            pump: None,
            ended: false,
            started: Instant::now(),
            done: None,
        };
        (pumped, ends)
    }

    /// Keeps the pump task: dropping this stream aborts it.
    pub(crate) fn run(&mut self, pump: Task<()>) {
        self.pump = Some(pump);
    }

    pub(crate) fn ended(&self) -> bool {
        self.ended
    }

    /// The next chunk; an error ends the stream.
    pub(crate) fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let polled = self.chunks.poll_recv(cx);
        if matches!(polled, Poll::Ready(Some(Err(_)) | None)) {
            self.ended = true;
        }
        polled
    }

    async fn stdin_op(&self, op: StdinOp, acked: oneshot::Receiver<Result<()>>) -> Result<()> {
        let ended = || Error::provider_message(self.scheme, "the process has ended");
        self.stdin.send(op).await.map_err(|_| ended())?;
        acked.await.map_err(|_| ended())?
    }

    pub(crate) async fn write_stdin(&self, data: &[u8]) -> Result<()> {
        let (ack, acked) = oneshot::channel();
        self.stdin_op(StdinOp::Data(data.to_vec(), ack), acked).await
    }

    pub(crate) async fn close_stdin(&self) -> Result<()> {
        let (ack, acked) = oneshot::channel();
        self.stdin_op(StdinOp::Close(ack), acked).await
    }

    /// Drains the output (dropping it) and gives the exit, the same one each time.
    pub(crate) async fn wait(&mut self) -> Result<ExecResult> {
        if let Some(done) = &self.done {
            return Ok(done.clone());
        }
        while !self.ended {
            if let Some(Err(e)) = std::future::poll_fn(|cx| self.poll_chunk(cx)).await {
                return Err(e);
            }
        }
        let terminated = || Error::provider_message(self.scheme, "the process was terminated");
        let status = self.exit.take().ok_or_else(terminated)?.await.map_err(|_| terminated())?;
        let result = ExecResult::new(0, "", "").with_status(status).with_duration(self.started.elapsed());
        self.done = Some(result.clone());
        Ok(result)
    }

    /// Ends the stream on this side: no more chunks, no exit, the pump aborted.
    pub(crate) fn stop(&mut self) {
        self.ended = true;
        self.exit = None;
        drop(self.pump.take());
    }
}
