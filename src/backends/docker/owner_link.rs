//! The owner link: an attach connection to PID 1's stdin, made before the container
//! starts (the container is `StdinOnce`), so the engine closes PID 1's stdin when the owner
//! closes it or dies, and PID 1 ends the container. On the exec-API path (and in template
//! setups) this module holds it on the Docker runtime and asks PID 1 to `detach`; on the
//! sandboxd path the same attach carries the session (`sandboxd_path/link.rs`).

use std::sync::PoisonError;

use crate::error::{Error, Result};

use super::SCHEME;
use super::client::sandbox_error;
use super::sandbox::Shared;

/// The owner link's attach: stdin (the link itself) and both outputs, live only.
pub(super) fn owner_attach() -> bollard::query_parameters::AttachContainerOptions {
    bollard::query_parameters::AttachContainerOptions {
        stdin: true,
        stdout: true,
        stderr: true,
        stream: true,
        logs: false,
        detach_keys: None,
    }
}

/// Operations on the owner link.
pub(super) enum LinkOp {
    /// Tell PID 1 to wait for the TTL instead of the owner.
    Detach(tokio::sync::oneshot::Sender<Result<()>>),
}

pub(super) type AttachOutput = std::pin::Pin<
    Box<
        dyn futures_core::Stream<
                Item = std::result::Result<bollard::container::LogOutput, bollard::errors::Error>,
            > + Send,
    >,
>;

/// Reads PID 1's output up to the end of a line (at most 4 KiB): what it said, the newline
/// included, or less when it ended first.
async fn read_line(output: &mut AttachOutput) -> std::result::Result<Vec<u8>, bollard::errors::Error> {
    use futures_lite::StreamExt as _;
    let mut said = Vec::new();
    while !said.ends_with(b"\n") && said.len() < 4096 {
        match output.next().await {
            Some(Ok(
                bollard::container::LogOutput::StdOut { message }
                | bollard::container::LogOutput::StdErr { message }
                | bollard::container::LogOutput::Console { message },
            )) => said.extend_from_slice(&message),
            Some(Ok(bollard::container::LogOutput::StdIn { .. })) => {}
            Some(Err(e)) => return Err(e),
            None => break,
        }
    }
    Ok(said)
}

/// Writes `detach` to PID 1 and waits (10 s at most) for it to say `detached`.
async fn detach_over(
    input: &mut std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    output: &mut AttachOutput,
) -> Result<()> {
    use tokio::io::AsyncWriteExt as _;
    let failed = |why: String| Error::provider_message(SCHEME, format!("detaching the sandbox: {why}"));
    input.write_all(b"detach\n").await.map_err(|e| Error::provider(SCHEME, "detaching the sandbox", e))?;
    input.flush().await.map_err(|e| Error::provider(SCHEME, "detaching the sandbox", e))?;
    match tokio::time::timeout(std::time::Duration::from_secs(10), read_line(output)).await {
        Ok(Ok(said)) if said.starts_with(b"detached") => Ok(()),
        Ok(Ok(said)) => Err(failed(format!("PID 1 said {:?}", String::from_utf8_lossy(&said)))),
        Ok(Err(e)) => Err(Error::provider(SCHEME, "detaching the sandbox", e)),
        Err(_) => Err(failed("PID 1 did not answer within 10 s".into())),
    }
}

/// Holds the owner link on the Docker runtime until it is released (every sender dropped:
/// `kill`, `close`, the last handle gone) or PID 1 ends; serves detach requests meanwhile.
pub(super) fn spawn_link(
    mut input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    mut output: AttachOutput,
) -> tokio::sync::mpsc::Sender<LinkOp> {
    use futures_lite::StreamExt as _;
    let (ops, mut requests) = tokio::sync::mpsc::channel::<LinkOp>(1);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                op = requests.recv() => match op {
                    None => break,
                    Some(LinkOp::Detach(ack)) => {
                        let _ = ack.send(detach_over(&mut input, &mut output).await);
                    }
                },
                frame = output.next() => if frame.is_none() { break },
            }
        }
        // Dropping `input` closes PID 1's stdin (the container is `StdinOnce`).
    });
    ops
}

/// Detaches PID 1 from its owner, over this handle's link or (a `connect`ed handle) a new
/// attach connection.
pub(super) async fn send_detach(shared: &Shared) -> Result<()> {
    let link = shared.owner_link.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if let Some(link) = link {
        let (ack, acked) = tokio::sync::oneshot::channel();
        if link.send(LinkOp::Detach(ack)).await.is_ok()
            && let Ok(result) = acked.await
        {
            return result;
        }
        return Err(Error::SandboxGone { id: shared.id.clone(), message: "its PID 1 has ended".into() });
    }
    let attach = bollard::query_parameters::AttachContainerOptions {
        stdin: true,
        stdout: true,
        stderr: false,
        stream: true,
        logs: false,
        detach_keys: None,
    };
    let bollard::container::AttachContainerResults { mut output, mut input } = shared
        .docker
        .attach_container(&shared.id, Some(attach))
        .await
        .map_err(|e| sandbox_error(&shared.id, "attaching to the container", e))?;
    detach_over(&mut input, &mut output).await
}
