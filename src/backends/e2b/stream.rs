//! A streamed command: a pump task on the portal reads envd's events into a bounded
//! channel (a slow consumer slows the reads, memory stays bounded) and serves stdin writes
//! as `SendInput` calls. Dropping the stream aborts the pump, whose guard kills the
//! command's process tree ([`super::exec::KillOnDrop`]).

use std::sync::Arc;
use std::task::{Context, Poll};

use super::envd::Envd;
use super::exec::{self, KillOnDrop};
use super::process::ProcessEvent;
use super::{PORTAL, SCHEME};
use crate::backend::{BackendExecStream, BoxFuture};
use crate::backends::pumped::{ExitPumpEnds, Pumped, StdinOp};
use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult, OutputChunk};
use crate::secret::SecretString;

pub(super) struct E2bExecStream {
    envd: Envd,
    tag: String,
    pid: Arc<std::sync::Mutex<Option<u32>>>,
    pumped: Pumped,
}

impl std::fmt::Debug for E2bExecStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bExecStream")
            .field("tag", &self.tag)
            .field("ended", &self.pumped.ended())
            .finish_non_exhaustive()
    }
}

impl E2bExecStream {
    pub(super) fn start(envd: &Envd, secrets: Arc<Vec<(String, SecretString)>>, command: Command) -> Self {
        let tag = exec::next_tag();
        let (mut pumped, ends) = Pumped::new(SCHEME);
        let pid = Arc::new(std::sync::Mutex::new(None));
        pumped.run(PORTAL.spawn(pump(envd.clone(), secrets, command, tag.clone(), Arc::clone(&pid), ends)));
        E2bExecStream { envd: envd.clone(), tag, pid, pumped }
    }
}

async fn pump(
    envd: Envd,
    secrets: Arc<Vec<(String, SecretString)>>,
    command: Command,
    tag: String,
    pid_slot: Arc<std::sync::Mutex<Option<u32>>>,
    ends: ExitPumpEnds,
) -> Result<()> {
    let ExitPumpEnds { chunks, stdin: mut stdin_rx, exit } = ends;
    let mut guard = KillOnDrop::new(&envd, &tag);
    let started = async {
        let mut stream = envd.start(&exec::start_request(&command, &secrets, true, &tag), None).await?;
        let pid = exec::first_pid(&mut stream).await?;
        Ok::<_, Error>((stream, pid))
    };
    let started = async { started.await.map_err(|e| exec::start_error(e, &command)) };
    let (mut stream, pid) = match started.await {
        Ok(started) => started,
        Err(e) => {
            let _ = chunks.send(Err(e)).await;
            return Ok(());
        }
    };
    guard.pid = Some(pid);
    *pid_slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(pid);
    let mut stdin_open = true;
    let read = async {
        loop {
            tokio::select! {
                event = stream.next() => match event {
                    Ok(Some(ProcessEvent::End(status))) => return Ok(Some(status)),
                    Ok(Some(event)) => {
                        if let Some(chunk) = exec::chunk_of(&event)
                            && chunks.send(Ok(chunk)).await.is_err()
                        {
                            return Ok(None); // the consumer is gone: the guard kills
                        }
                    }
                    Ok(None) => return Err(Error::provider_message(SCHEME, "envd ended the process stream without an end event")),
                    Err(e) => return Err(e),
                },
                Some(op) = stdin_rx.recv() => match op {
                    StdinOp::Data(data, ack) if stdin_open => {
                        let _ = ack.send(envd.send_input(pid, &data).await);
                    }
                    StdinOp::Data(_, ack) => {
                        let _ = ack.send(Err(Error::invalid_input("stdin was already closed")));
                    }
                    StdinOp::Close(ack) => {
                        let closed = if stdin_open { envd.close_stdin(pid).await } else { Ok(()) };
                        stdin_open = false;
                        let _ = ack.send(closed);
                    }
                },
            }
        }
    };
    let finished = match command.timeout_duration() {
        Some(limit) => tokio::time::timeout(limit, read).await.map_err(|_| limit),
        None => Ok(read.await),
    };
    match finished {
        Err(limit) => {
            guard.disarm();
            let killed = exec::kill_tree(&envd, Some(pid), &tag).await;
            let ending = match killed {
                Err(gone @ Error::SandboxGone { .. }) => gone,
                _ => Error::execution_timeout(limit, ExecResult::new(137, "", "")),
            };
            let _ = chunks.send(Err(ending)).await;
        }
        Ok(Ok(None)) => {}
        Ok(Ok(Some(status))) => {
            guard.disarm();
            let _ = exit.send(status);
        }
        Ok(Err(e)) => {
            let _ = chunks.send(Err(e)).await;
        }
    }
    Ok(())
}

impl BackendExecStream for E2bExecStream {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        self.pumped.poll_chunk(cx)
    }

    fn write_stdin<'a>(&'a mut self, data: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        self.pumped.write_stdin(data)
    }

    fn close_stdin(&mut self) -> BoxFuture<'_, Result<()>> {
        self.pumped.close_stdin()
    }

    fn wait(&mut self) -> BoxFuture<'_, Result<ExecResult>> {
        Box::pin(self.pumped.wait())
    }

    fn terminate(&mut self) -> BoxFuture<'_, Result<()>> {
        self.pumped.stop();
        let pid = *self.pid.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (envd, tag) = (self.envd.clone(), self.tag.clone());
        Box::pin(PORTAL.spawn(async move {
            match exec::kill_tree(&envd, pid, &tag).await {
                Ok(()) | Err(Error::SandboxGone { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        }))
    }
}
