//! A streamed command: a pump task on the portal reads envd's events into a bounded
//! channel (a slow consumer slows the reads, memory stays bounded) and serves stdin writes
//! as `SendInput` calls. Dropping the stream aborts the pump, whose guard kills the
//! command's process tree ([`super::exec::kill_on_drop`]).

use std::sync::Arc;

use super::envd::Envd;
use super::exec;
use super::process::ProcessEvent;
use super::{PORTAL, SCHEME};
use crate::backends::common::pumped::{ExitPumpEnds, Pumped, StdinOp};
use crate::backends::remote::stream::{RemoteExecStream, Terminate};
use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult};
use crate::secret::SecretString;

/// Starts `command` streamed: its pump runs on the portal at once.
pub(super) fn start(
    envd: &Envd,
    secrets: Arc<Vec<(String, SecretString)>>,
    command: Command,
) -> RemoteExecStream {
    let tag = exec::next_tag();
    let (mut pumped, ends) = Pumped::new(SCHEME);
    let pid = Arc::new(std::sync::Mutex::new(None));
    pumped.run(PORTAL.spawn(pump(envd.clone(), secrets, command, tag.clone(), Arc::clone(&pid), ends)));
    let (envd, killed_tag) = (envd.clone(), tag.clone());
    // The pid the pump learnt, if it did: without it, the kill goes by the mark.
    let terminate: Terminate = Box::new(move || {
        let pid = *pid.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (envd, tag) = (envd.clone(), killed_tag.clone());
        Box::pin(async move { exec::kill_tree(&envd, pid, &tag).await })
    });
    RemoteExecStream::new("E2bExecStream", tag, &PORTAL, pumped, terminate)
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
    let mut guard = exec::kill_on_drop(&envd, &tag);
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
    exec::set_pid(&mut guard, pid);
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
