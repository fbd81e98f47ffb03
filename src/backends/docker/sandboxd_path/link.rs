//! The host end of a sandboxd session in a container: an attach connection (the owner's,
//! made before the start) or an exec of sandboxd (a `connect`ed handle's own session),
//! joined to a [`Client`], and greeted.

use std::io;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use futures_lite::StreamExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use crate::error::{Error, Result};
use crate::sandboxd::client::Client;

use super::place::SANDBOXD_PATH;
use crate::backends::docker::SCHEME;

/// How long sandboxd may take to answer `Hello` after the container started.
const HELLO_TIMEOUT: Duration = Duration::from_secs(20);

/// The most bytes of sandboxd's own stderr kept for an error message.
const DIAGNOSTICS_LIMIT: usize = 4096;

/// The host end of a sandboxd session carried by an attach or exec connection: the
/// session's input is a socket pair whose other end a task on the Docker runtime pumps into
/// the connection; its output comes through a [`Chunks`] channel. Dropping it (or
/// [`Link::close`]) ends the session's input, which sandboxd reads as its owner leaving.
#[derive(Debug)]
pub(crate) struct Link {
    host: UnixStream,
    /// What sandboxd wrote to its stderr (bounded), for error messages.
    diagnostics: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Link {
    /// Ends the session's input (idempotent).
    pub(crate) fn close(&self) {
        let _ = self.host.shutdown(std::net::Shutdown::Write);
    }

    /// What sandboxd said on its stderr, for an error message.
    pub(crate) fn diagnostics(&self) -> String {
        let said = self.diagnostics.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&said).trim().to_owned()
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.close();
    }
}

type Output =
    Pin<Box<dyn futures_core::Stream<Item = std::result::Result<LogOutput, bollard::errors::Error>> + Send>>;

/// How many chunks of sandboxd's output wait between the connection and the session's
/// reader thread (each one read of the engine's stream, at most 32 KiB as the engine frames
/// them): the pump waits while they are all taken, so the engine's stream stops too.
const CHUNKS_QUEUED: usize = 32;

/// sandboxd's output as the session's reader thread reads it: the chunks bollard decoded,
/// handed over as they are (no socket hop, no copy but the one into the reader's buffer).
/// End-of-file once the pump has stopped and every chunk is read.
struct Chunks {
    queue: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    current: bytes::Bytes,
}

impl io::Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            // Called on the reader thread only, never on the runtime (blocking_recv panics there).
            match self.queue.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// Joins an attach or exec connection to a session: sandboxd's stdout goes to the client's
/// reader thread through [`Chunks`], the client's writes to the host end of a socket pair
/// go to sandboxd's stdin, sandboxd's stderr is kept (bounded). Runs on the Docker runtime.
/// Returns the link and a client on it (`Hello` sent, not yet answered).
pub(crate) fn join(
    mut input: Pin<Box<dyn AsyncWrite + Send>>,
    mut output: Output,
    user: (u32, u32),
) -> Result<(Link, Client)> {
    let io_error = |e: io::Error| Error::provider(SCHEME, "joining sandboxd's stream", e);
    let (host, ours) = UnixStream::pair().map_err(io_error)?;
    ours.set_nonblocking(true).map_err(io_error)?;
    let mut from_host = tokio::net::UnixStream::from_std(ours).map_err(io_error)?;
    let (to_reader, queue) = tokio::sync::mpsc::channel(CHUNKS_QUEUED);
    let diagnostics = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = std::sync::Arc::clone(&diagnostics);
    tokio::spawn(async move {
        while let Some(Ok(frame)) = output.next().await {
            match frame {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    // The reader is gone only when the session is over.
                    if to_reader.send(message).await.is_err() {
                        break;
                    }
                }
                LogOutput::StdErr { message } => {
                    let mut said = kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let room = DIAGNOSTICS_LIMIT.saturating_sub(said.len());
                    said.extend_from_slice(&message[..message.len().min(room)]);
                }
                LogOutput::StdIn { .. } => {}
            }
        }
        // sandboxd's output ended (it exited, or the container is gone): dropping the sender,
        // the client reads end-of-file and ends every command with `Gone`.
    });
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from_host.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if input.write_all(&buf[..n]).await.is_err() || input.flush().await.is_err() {
                        break;
                    }
                }
            }
        }
        // The host closed its end: close sandboxd's stdin (the engine passes the
        // half-close on; the container is `StdinOnce`).
        let _ = input.shutdown().await;
    });
    let read = Chunks { queue, current: bytes::Bytes::new() };
    let write = host.try_clone().map_err(io_error)?;
    let client = Client::start(read, write, Some(user)).map_err(io_error)?;
    Ok((Link { host, diagnostics }, client))
}

/// Waits for sandboxd's answer to `Hello` (at most [`HELLO_TIMEOUT`]).
///
/// # Errors
///
/// [`Error::Provider`] naming what sandboxd said when it did not answer.
pub(crate) async fn greet(client: &Client, link: &Link) -> Result<()> {
    let answered = tokio::time::timeout(HELLO_TIMEOUT, client.hello()).await;
    let why = match answered {
        Ok(Ok(_pid)) => return Ok(()),
        Ok(Err(why)) => why,
        Err(_) => format!("no answer within {} s", HELLO_TIMEOUT.as_secs()),
    };
    // Let the stderr pump catch up with what sandboxd said before it ended.
    tokio::time::sleep(Duration::from_millis(50)).await;
    Err(Error::provider_message(
        SCHEME,
        format!("sandboxd did not start in the container: {why}; it said: {:?}", link.diagnostics()),
    ))
}

/// Starts a new sandboxd session in running container `id` through an exec (a
/// `connect`ed handle's own session): its commands end when this session does.
pub(crate) async fn exec_session(docker: &Docker, id: &str, user: (u32, u32)) -> Result<(Link, Client)> {
    let config = bollard::models::ExecConfig {
        cmd: Some(vec![SANDBOXD_PATH.to_owned()]),
        user: Some("0:0".into()),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        ..Default::default()
    };
    let created = docker
        .create_exec(id, config)
        .await
        .map_err(|e| crate::backends::docker::client::sandbox_error(id, "starting a sandboxd session", e))?;
    let options = bollard::exec::StartExecOptions { detach: false, tty: false, output_capacity: None };
    let started = docker
        .start_exec(&created.id, Some(options))
        .await
        .map_err(|e| crate::backends::docker::client::sandbox_error(id, "starting a sandboxd session", e))?;
    let bollard::exec::StartExecResults::Attached { output, input } = started else {
        return Err(Error::provider_message(SCHEME, "the engine started sandboxd's exec detached"));
    };
    let (link, client) = join(input, output, user)?;
    greet(&client, &link).await?;
    Ok((link, client))
}
