//! A streamed Docker exec: a pump task on the Docker runtime reads the exec's frames into a
//! bounded channel (so a slow consumer slows the command, and memory stays bounded), and a
//! writer task feeds its stdin. Dropping the stream aborts the pump, whose guard kills
//! every process of the command (its gid, see [`super::exec`]).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use futures_lite::StreamExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{mpsc, oneshot};

use crate::backend::{BackendExecStream, BoxFuture};
use crate::backends::common::pumped::{PumpedOutput, StdinOp};
use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult, OutputChunk, StreamKind};

use super::exec::{self, KillOnDrop, Launched};
use crate::backends::docker::client::sandbox_error;
use crate::backends::docker::rt;
use crate::backends::docker::sandbox::Shared;

pub(super) struct DockerExecStream {
    shared: Arc<Shared>,
    gid: u32,
    exec: Arc<std::sync::Mutex<Option<String>>>,
    out: PumpedOutput,
    exit: Option<oneshot::Receiver<Result<i64>>>,
    pump: Option<rt::Task<()>>,
    started: Instant,
}

impl std::fmt::Debug for DockerExecStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerExecStream")
            .field("gid", &self.gid)
            .field("ended", &self.out.ended)
            .finish_non_exhaustive()
    }
}

impl DockerExecStream {
    pub(super) fn start(shared: &Arc<Shared>, command: Command) -> Self {
        let guard = KillOnDrop::new(shared);
        let (gid, exec) = (guard.gid(), guard.exec_slot());
        let (out, ends) = PumpedOutput::new(super::SCHEME);
        let (exit_tx, exit) = oneshot::channel();
        let pump = rt::spawn(pump(Arc::clone(shared), command, guard, ends.chunks, ends.stdin, exit_tx));
        DockerExecStream {
            shared: Arc::clone(shared),
            gid,
            exec,
            out,
            exit: Some(exit),
            pump: Some(pump),
            started: Instant::now(),
        }
    }
}

async fn pump(
    shared: Arc<Shared>,
    command: Command,
    mut guard: KillOnDrop,
    chunks: mpsc::Sender<Result<OutputChunk>>,
    stdin_rx: mpsc::Receiver<StdinOp>,
    exit: oneshot::Sender<Result<i64>>,
) -> Result<()> {
    let Launched { exec_id, mut output, input, .. } =
        match exec::launch(&shared, &mut guard, &command, true, true).await {
            Ok(launched) => launched,
            Err(e) => {
                guard.disarm();
                let _ = chunks.send(Err(e)).await;
                return Ok(());
            }
        };
    let _writer = stdin_writer(input, stdin_rx);
    let deadline = command.timeout_duration();
    // The wrapper's report of a missing working directory (its only output, then exit 126)
    // is held back until the exit says whether it was that report (then the stream ends with
    // `NotFound`) or the command's own first words (then they go out as they are).
    let mut held: Option<OutputChunk> = None;
    let read = async {
        let mut first = true;
        while let Some(frame) = output.next().await {
            let chunk = match frame {
                Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                    Ok(OutputChunk { stream: StreamKind::Stdout, data: message.to_vec() })
                }
                Ok(LogOutput::StdErr { message }) => {
                    Ok(OutputChunk { stream: StreamKind::Stderr, data: message.to_vec() })
                }
                Ok(LogOutput::StdIn { .. }) => continue,
                Err(e) => Err(sandbox_error(&shared.id, "reading the command's output", e)),
            };
            if std::mem::take(&mut first)
                && let Ok(c) = &chunk
                && c.stream == StreamKind::Stderr
                && exec::is_no_cwd(&c.data)
            {
                held = chunk.ok();
                continue;
            }
            if let Some(earlier) = held.take()
                && chunks.send(Ok(earlier)).await.is_err()
            {
                return false;
            }
            let failed = chunk.is_err();
            if chunks.send(chunk).await.is_err() || failed {
                return false; // the consumer is gone, or the read failed: the guard kills
            }
        }
        true
    };
    let finished = match deadline {
        Some(limit) => tokio::time::timeout(limit, read).await.ok(),
        None => Some(read.await),
    };
    match finished {
        None => {
            let started = exec::exec_of(&guard.exec_slot());
            let killed = exec::kill_command(&shared, guard.gid(), started.as_deref()).await;
            guard.disarm();
            // A sandbox removed to end the command (or gone already) is what the stream
            // reports: not a timeout of a sandbox that lives on.
            let end = if let Err(gone @ Error::SandboxGone { .. }) = killed {
                gone
            } else {
                let partial = ExecResult::new(137, "", "");
                Error::ExecutionTimeout { timeout: deadline.unwrap_or_default(), partial: Box::new(partial) }
            };
            let _ = chunks.send(Err(end)).await;
        }
        Some(false) => {}
        Some(true) => {
            // At once, as in `exec::run`: one engine round trip less per command.
            let (code, ended) =
                tokio::join!(exec::exit_code(&shared, &exec_id), exec::end_command(&shared, guard.gid()));
            let mut code = code.and_then(|code| ended.map(|()| code));
            guard.disarm();
            if let Ok(c) = code
                && exec::died_under(&shared, c).await
            {
                code = Err(exec::gone_under(&shared));
            }
            // A sandbox gone under the stream ends it with an error item, not a normal end.
            if let Err(Error::SandboxGone { id, message }) = &code {
                let gone = Error::SandboxGone { id: id.clone(), message: message.clone() };
                let _ = chunks.send(Err(gone)).await;
            }
            if let Some(words) = held.take() {
                if matches!(code, Ok(126)) {
                    let path = command.working_dir().unwrap_or(".").to_owned();
                    let _ = chunks.send(Err(Error::NotFound { path })).await;
                    return Ok(());
                }
                let _ = chunks.send(Ok(words)).await;
            }
            let _ = exit.send(code);
        }
    }
    Ok(())
}

/// Writes stdin beside the output pump. After a close, later writes fail at once and a
/// second close is harmless; the task ends with the pump (dropped stream too).
fn stdin_writer(
    mut input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    mut stdin_rx: mpsc::Receiver<StdinOp>,
) -> exec::AbortOnDrop {
    exec::AbortOnDrop(tokio::spawn(async move {
        let mut open = true;
        while let Some(op) = stdin_rx.recv().await {
            match op {
                StdinOp::Data(data, ack) if open => {
                    let wrote = input.write_all(&data).await.and(input.flush().await);
                    let _ = ack.send(wrote.map_err(|e| Error::provider(super::SCHEME, "writing stdin", e)));
                }
                StdinOp::Data(_, ack) => {
                    let _ = ack.send(Err(Error::invalid_input("stdin was already closed")));
                }
                StdinOp::Close(ack) => {
                    if open {
                        let _ = input.shutdown().await;
                        open = false;
                    }
                    let _ = ack.send(Ok(()));
                }
            }
        }
        // Keep the write half until the pump ends.
        std::future::pending::<()>().await;
    }))
}

impl BackendExecStream for DockerExecStream {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        self.out.poll_chunk(cx)
    }

    fn write_stdin<'a>(&'a mut self, data: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        self.out.write_stdin(data)
    }

    fn close_stdin(&mut self) -> BoxFuture<'_, Result<()>> {
        self.out.close_stdin()
    }

    fn wait(&mut self) -> BoxFuture<'_, Result<ExecResult>> {
        Box::pin(async move {
            if let Some(done) = &self.out.done {
                return Ok(done.clone());
            }
            self.out.drain().await?;
            let Some(exit) = self.exit.take() else {
                return Err(Error::provider_message(super::SCHEME, "the process was terminated"));
            };
            let code = exit
                .await
                .map_err(|_| Error::provider_message(super::SCHEME, "the process was terminated"))??;
            self.shared.check_alive()?;
            let result = ExecResult::new(i32::try_from(code).unwrap_or(-1), "", "")
                .with_duration(self.started.elapsed());
            self.out.done = Some(result.clone());
            Ok(result)
        })
    }

    fn terminate(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.out.ended = true;
            self.exit = None;
            // Drop the pump (its guard would kill too), and kill now so that the call
            // returns once every process of the command is gone.
            drop(self.pump.take());
            let (shared, gid, started) = (Arc::clone(&self.shared), self.gid, exec::exec_of(&self.exec));
            // The bound runs on the Docker runtime: the caller's executor may not be tokio.
            rt::spawn(async move {
                match tokio::time::timeout(
                    Duration::from_secs(30),
                    exec::kill_command(&shared, gid, started.as_deref()),
                )
                .await
                {
                    // The command is ended either way; a sandbox removed to end it says so
                    // at its next operation.
                    Ok(Err(Error::SandboxGone { .. }) | Ok(())) | Err(_) => Ok(()),
                    Ok(Err(e)) => Err(e),
                }
            })
            .await
        })
    }
}
