//! A streamed command: a pump task on the portal reads stdout and stderr from the router
//! into one bounded channel (the next piece is read only once the last is queued, so a
//! slow consumer slows the reads and memory stays bounded), serves stdin writes at their
//! byte offsets, and waits for the exit. Dropping the stream aborts the pump, whose guard
//! kills the command's processes ([`super::exec::kill_on_drop`]).

use std::sync::Arc;

use tokio::sync::mpsc;

use super::exec::{self, SandboxEnv};
use super::router::{Fd, Router};
use super::{PORTAL, SCHEME};
use crate::backends::common::pumped::{ExitPumpEnds, Pumped, StdinOp};
use crate::backends::remote::stream::{RemoteExecStream, Terminate};
use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult, OutputChunk, StreamKind};

/// Starts `command` streamed: its pump runs on the portal at once.
pub(super) fn start(router: &Router, base: Arc<SandboxEnv>, command: Command) -> RemoteExecStream {
    let exec_id = super::client::idempotency_key();
    let (mut pumped, ends) = Pumped::new(SCHEME);
    pumped.run(PORTAL.spawn(pump(router.clone(), base, command, exec_id.clone(), ends)));
    let (router, killed_id) = (router.clone(), exec_id.clone());
    let terminate: Terminate = Box::new(move || {
        let (router, exec_id) = (router.clone(), killed_id.clone());
        Box::pin(async move { exec::kill_marked(&router, &exec_id).await })
    });
    RemoteExecStream::new("ModalExecStream", exec_id, &PORTAL, pumped, terminate)
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
    ends: ExitPumpEnds,
) -> Result<()> {
    let ExitPumpEnds { chunks, stdin, exit } = ends;
    let mut guard = exec::kill_on_drop(&router, &exec_id);
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
