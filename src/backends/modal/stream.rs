//! A streamed command: a pump task on the portal reads stdout and stderr from the router
//! into one bounded channel (the next piece is read only once the last is queued, so a
//! slow consumer slows the reads and memory stays bounded), serves stdin writes at their
//! byte offsets, and waits for the exit. Dropping the stream aborts the pump, whose guard
//! kills the command's processes ([`super::exec::KillOnDrop`]).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use super::exec::{self, KillOnDrop, SandboxEnv};
use super::router::{Fd, Router};
use super::{PORTAL, SCHEME};
use crate::backend::{BackendExecStream, BoxFuture};
use crate::backends::portal::Task;
use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult, ExitStatus, OutputChunk, StreamKind};

/// Chunks buffered between the router and a consumer that has not polled yet.
const CHANNEL_CHUNKS: usize = 32;

enum StdinOp {
    Data(Vec<u8>, oneshot::Sender<Result<()>>),
    Close(oneshot::Sender<Result<()>>),
}

pub(super) struct ModalExecStream {
    router: Router,
    exec_id: String,
    chunks: mpsc::Receiver<Result<OutputChunk>>,
    stdin: mpsc::Sender<StdinOp>,
    exit: Option<oneshot::Receiver<ExitStatus>>,
    pump: Option<Task<()>>,
    ended: bool,
    started: Instant,
    done: Option<ExecResult>,
}

impl std::fmt::Debug for ModalExecStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModalExecStream")
            .field("exec_id", &self.exec_id)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

/// The ends of the pump's channels.
struct Ends {
    chunks: mpsc::Sender<Result<OutputChunk>>,
    stdin: mpsc::Receiver<StdinOp>,
    exit: oneshot::Sender<ExitStatus>,
}

impl ModalExecStream {
    pub(super) fn start(router: &Router, base: Arc<SandboxEnv>, command: Command) -> Self {
        let exec_id = super::client::idempotency_key();
        let (chunk_tx, chunks) = mpsc::channel(CHANNEL_CHUNKS);
        let (stdin, stdin_rx) = mpsc::channel(4);
        let (exit_tx, exit) = oneshot::channel();
        let ends = Ends { chunks: chunk_tx, stdin: stdin_rx, exit: exit_tx };
        let pump = PORTAL.spawn(pump(router.clone(), base, command, exec_id.clone(), ends));
        ModalExecStream {
            router: router.clone(),
            exec_id,
            chunks,
            stdin,
            exit: Some(exit),
            pump: Some(pump),
            ended: false,
            started: Instant::now(),
            done: None,
        }
    }

    async fn stdin_op(&mut self, op: impl FnOnce(oneshot::Sender<Result<()>>) -> StdinOp) -> Result<()> {
        let (ack, acked) = oneshot::channel();
        let ended = || Error::provider_message(SCHEME, "the process has ended");
        self.stdin.send(op(ack)).await.map_err(|_| ended())?;
        acked.await.map_err(|_| ended())?
    }
}

/// Serves stdin operations until the stream goes; never returns on its own.
async fn serve_stdin(router: &Router, exec_id: &str, mut ops: mpsc::Receiver<StdinOp>) {
    let (mut offset, mut open) = (0u64, true);
    while let Some(op) = ops.recv().await {
        match op {
            StdinOp::Data(data, ack) if open => {
                let written = router.write_stdin(exec_id, offset, &data, false).await;
                if written.is_ok() {
                    offset += data.len() as u64;
                }
                let _ = ack.send(written);
            }
            StdinOp::Data(_, ack) => {
                let _ = ack.send(Err(Error::invalid_input("stdin was already closed")));
            }
            StdinOp::Close(ack) => {
                let closed = if open { router.write_stdin(exec_id, offset, &[], true).await } else { Ok(()) };
                open = false;
                let _ = ack.send(closed);
            }
        }
    }
    std::future::pending::<()>().await;
}

async fn pump(
    router: Router,
    base: Arc<SandboxEnv>,
    command: Command,
    exec_id: String,
    ends: Ends,
) -> Result<()> {
    let Ends { chunks, stdin, exit } = ends;
    let mut guard = KillOnDrop::new(&router, &exec_id);
    let started = async {
        exec::check_workdir(&router, &command).await?;
        router.start_as(&exec_id, &exec::router_command(&command, &base, &exec_id)).await
    };
    if let Err(e) = started.await {
        if matches!(e, Error::NotFound { .. }) {
            guard.disarm();
        }
        let _ = chunks.send(Err(e)).await;
        return Ok(());
    }
    let forward = |stream: StreamKind| {
        let chunks = chunks.clone();
        move |data: Vec<u8>| {
            let chunks = chunks.clone();
            async move {
                // A consumer that is gone drops the stream, which aborts this pump.
                let _ = chunks.send(Ok(OutputChunk { stream, data })).await;
            }
        }
    };
    let reading = async {
        let (_, _, status) = tokio::try_join!(
            router.read_with(&exec_id, Fd::Stdout, 0, forward(StreamKind::Stdout)),
            router.read_with(&exec_id, Fd::Stderr, 0, forward(StreamKind::Stderr)),
            router.wait(&exec_id),
        )?;
        Ok::<_, Error>(status)
    };
    let running = async {
        tokio::select! {
            ended = reading => ended,
            () = serve_stdin(&router, &exec_id, stdin) => unreachable!("serving stdin never ends"),
        }
    };
    let finished = match command.timeout_duration() {
        Some(limit) => tokio::time::timeout(limit, running).await.map_err(|_| limit),
        None => Ok(running.await),
    };
    guard.disarm();
    match finished {
        Err(limit) => {
            let ending = match exec::kill_marked(&router, &exec_id).await {
                Err(gone @ Error::SandboxGone { .. }) => gone,
                _ => Error::execution_timeout(limit, ExecResult::new(137, "", "")),
            };
            let _ = chunks.send(Err(ending)).await;
        }
        Ok(Ok(status)) => {
            let _ = exit.send(status);
        }
        Ok(Err(e)) => {
            let _ = chunks.send(Err(e)).await;
        }
    }
    Ok(())
}

impl BackendExecStream for ModalExecStream {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let polled = self.chunks.poll_recv(cx);
        if matches!(polled, Poll::Ready(Some(Err(_)) | None)) {
            self.ended = true;
        }
        polled
    }

    fn write_stdin<'a>(&'a mut self, data: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        let data = data.to_vec();
        Box::pin(self.stdin_op(move |ack| StdinOp::Data(data, ack)))
    }

    fn close_stdin(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.stdin_op(StdinOp::Close))
    }

    fn wait(&mut self) -> BoxFuture<'_, Result<ExecResult>> {
        Box::pin(async move {
            if let Some(done) = &self.done {
                return Ok(done.clone());
            }
            while !self.ended {
                if let Some(Err(e)) = std::future::poll_fn(|cx| self.poll_chunk(cx)).await {
                    return Err(e);
                }
            }
            let terminated = || Error::provider_message(SCHEME, "the process was terminated");
            let status = self.exit.take().ok_or_else(terminated)?.await.map_err(|_| terminated())?;
            let result = ExecResult::new(0, "", "").with_status(status).with_duration(self.started.elapsed());
            self.done = Some(result.clone());
            Ok(result)
        })
    }

    fn terminate(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.ended = true;
            self.exit = None;
            drop(self.pump.take());
            let (router, exec_id) = (self.router.clone(), self.exec_id.clone());
            PORTAL
                .spawn(async move {
                    match exec::kill_marked(&router, &exec_id).await {
                        Ok(()) | Err(Error::SandboxGone { .. }) => Ok(()),
                        Err(e) => Err(e),
                    }
                })
                .await
        })
    }
}
