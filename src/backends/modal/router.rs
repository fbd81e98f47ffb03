//! The per-task command router client: exec with client-generated ids, output read by byte
//! offset (a cut stream is reopened where it stopped), stdin written by byte offset with an
//! end-of-file, and the exit as a code or a signal. Auth is `authorization: Bearer <token>`
//! from `TaskGetCommandRouterAccess`; the Modal token is never sent here.

use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

use super::SCHEME;
use super::client::{MAX_MESSAGE, channel, idempotency_key};
use super::errors::{self, Call};
use super::proto::router::task_command_router_client::TaskCommandRouterClient;
use super::proto::router::{
    TaskExecStartRequest, TaskExecStderrConfig, TaskExecStdinWriteRequest, TaskExecStdioFileDescriptor,
    TaskExecStdioReadRequest, TaskExecStdoutConfig, TaskExecWaitRequest, task_exec_wait_response,
};
use crate::error::{Error, Result};
use crate::exec::ExitStatus;
use crate::secret::SecretString;

/// How many times a cut output stream is reopened for one read before giving up.
pub(crate) const REOPENS: u32 = 10;

/// Adds the router token to every request.
#[derive(Clone, Debug)]
pub(crate) struct Bearer(AsciiMetadataValue);

impl Bearer {
    /// `Bearer <token>`, marked sensitive (its `Debug` shows `Sensitive`).
    ///
    /// # Errors
    ///
    /// [`Error::Provider`] for a token that is not visible ASCII.
    pub(crate) fn new(token: &SecretString) -> Result<Self> {
        let mut bearer: AsciiMetadataValue =
            MetadataValue::try_from(format!("Bearer {}", token.expose_secret())).map_err(|_| {
                Error::provider_message(SCHEME, "the command router's token is not visible ASCII")
            })?;
        bearer.set_sensitive(true);
        Ok(Bearer(bearer))
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> std::result::Result<Request<()>, Status> {
        request.metadata_mut().insert("authorization", self.0.clone());
        Ok(request)
    }
}

type Inner = TaskCommandRouterClient<InterceptedService<Channel, Bearer>>;

/// A client of one task's router; building it does no I/O.
#[derive(Clone)]
pub(crate) struct Router {
    inner: Inner,
    sandbox_id: String,
    task_id: String,
}

/// Which output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fd {
    Stdout,
    Stderr,
}

/// What one command is: its argv and environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Command {
    pub(crate) argv: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) workdir: Option<String>,
}

impl Router {
    /// A client of the router at `url` for task `task_id` of sandbox `sandbox_id`.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for a URL that is not `https://`; [`Error::Provider`] for a
    /// token that is not visible ASCII.
    pub(crate) fn new(
        url: &str,
        token: &SecretString,
        sandbox_id: &str,
        task_id: &str,
        trust: Option<(&[u8], &str)>,
    ) -> Result<Self> {
        let channel = channel(url, trust)?;
        let inner = TaskCommandRouterClient::with_interceptor(channel, Bearer::new(token)?)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        Ok(Router { inner, sandbox_id: sandbox_id.to_owned(), task_id: task_id.to_owned() })
    }

    fn gone(&self, status: Status) -> Error {
        errors::from_status(status, Call::Sandbox(&self.sandbox_id))
    }

    /// Starts `command` with stdout and stderr piped and returns its exec id, chosen here: a
    /// start retried after a transient status carries the same id, so it is the same command.
    ///
    /// # Errors
    ///
    /// The mapped status (`NOT_FOUND` is [`Error::SandboxGone`]).
    pub(crate) async fn start(&self, command: &Command) -> Result<String> {
        let exec_id = idempotency_key();
        self.start_as(&exec_id, command).await?;
        Ok(exec_id)
    }

    /// Starts `command` as exec `exec_id` (chosen by the caller, who may have put it in the
    /// command's environment first); retried after a transient status with the same id.
    ///
    /// # Errors
    ///
    /// The mapped status (`NOT_FOUND` is [`Error::SandboxGone`]).
    pub(crate) async fn start_as(&self, exec_id: &str, command: &Command) -> Result<()> {
        let message = TaskExecStartRequest {
            task_id: self.task_id.clone(),
            exec_id: exec_id.to_owned(),
            command_args: command.argv.clone(),
            stdout_config: TaskExecStdoutConfig::Pipe as i32,
            stderr_config: TaskExecStderrConfig::Pipe as i32,
            timeout_secs: None,
            workdir: command.workdir.clone(),
            secret_ids: Vec::new(),
            env: command.env.iter().cloned().collect(),
        };
        let mut attempt = 0;
        loop {
            match self.inner.clone().task_exec_start(message.clone()).await {
                Ok(_) => return Ok(()),
                Err(s) if attempt < errors::RETRIES && errors::transient(s.code()) => {
                    attempt += 1;
                    futures_timer::Delay::new(errors::backoff(attempt)).await;
                }
                Err(s) => return Err(self.gone(s)),
            }
        }
    }

    /// Reads `fd` of `exec_id` from byte `offset` to its end, calling `sink` with each piece.
    /// A stream cut by a transient status is reopened at the offset reached, at most
    /// [`REOPENS`] times. Returns the offset at the end.
    ///
    /// # Errors
    ///
    /// The mapped status; a cut that happened more than [`REOPENS`] times.
    pub(crate) async fn read(
        &self,
        exec_id: &str,
        fd: Fd,
        offset: u64,
        mut sink: impl FnMut(&[u8]),
    ) -> Result<u64> {
        self.read_with(exec_id, fd, offset, |piece| {
            sink(&piece);
            std::future::ready(())
        })
        .await
    }

    /// [`Router::read`] with a sink that may wait (a bounded channel to a consumer): the
    /// next piece is read only once the sink's future is done, so a slow consumer slows the
    /// reads.
    ///
    /// # Errors
    ///
    /// As [`Router::read`].
    pub(crate) async fn read_with<F: std::future::Future<Output = ()>>(
        &self,
        exec_id: &str,
        fd: Fd,
        mut offset: u64,
        mut sink: impl FnMut(Vec<u8>) -> F,
    ) -> Result<u64> {
        let descriptor = match fd {
            Fd::Stdout => TaskExecStdioFileDescriptor::Stdout,
            Fd::Stderr => TaskExecStdioFileDescriptor::Stderr,
        };
        let mut reopens = 0;
        loop {
            let message = TaskExecStdioReadRequest {
                task_id: self.task_id.clone(),
                exec_id: exec_id.to_owned(),
                offset,
                file_descriptor: descriptor as i32,
            };
            let cut = match self.inner.clone().task_exec_stdio_read(message).await {
                Ok(reply) => {
                    let mut stream = reply.into_inner();
                    loop {
                        match stream.message().await {
                            Ok(Some(piece)) => {
                                offset += piece.data.len() as u64;
                                sink(piece.data).await;
                            }
                            Ok(None) => return Ok(offset),
                            Err(s) => break s,
                        }
                    }
                }
                Err(s) => s,
            };
            if !errors::transient(cut.code()) || reopens >= REOPENS {
                return Err(self.gone(cut));
            }
            reopens += 1;
            futures_timer::Delay::new(errors::router_backoff(reopens)).await;
        }
    }

    /// Writes `data` to the stdin of `exec_id` at byte `offset` (the count written before),
    /// closing it after when `eof`.
    ///
    /// # Errors
    ///
    /// The mapped status.
    pub(crate) async fn write_stdin(&self, exec_id: &str, offset: u64, data: &[u8], eof: bool) -> Result<()> {
        let message = TaskExecStdinWriteRequest {
            task_id: self.task_id.clone(),
            exec_id: exec_id.to_owned(),
            offset,
            data: data.to_vec(),
            eof,
        };
        self.inner.clone().task_exec_stdin_write(message).await.map(|_| ()).map_err(|s| self.gone(s))
    }

    /// Waits for `exec_id` to end: its exit code, or the signal that ended it. A wait cut by
    /// a transient status is asked again (the wait itself is idempotent), at most
    /// [`REOPENS`] times.
    ///
    /// # Errors
    ///
    /// The mapped status; a reply with neither a code nor a signal is [`Error::Provider`].
    pub(crate) async fn wait(&self, exec_id: &str) -> Result<ExitStatus> {
        let mut again = 0;
        loop {
            let message = TaskExecWaitRequest { task_id: self.task_id.clone(), exec_id: exec_id.to_owned() };
            match self.inner.clone().task_exec_wait(message).await {
                Ok(reply) => {
                    return match reply.into_inner().exit_status {
                        Some(task_exec_wait_response::ExitStatus::Code(c)) => Ok(ExitStatus::Code(c)),
                        Some(task_exec_wait_response::ExitStatus::Signal(s)) => Ok(ExitStatus::Signal(s)),
                        None => Err(Error::provider_message(
                            SCHEME,
                            "TaskExecWait answered without an exit status",
                        )),
                    };
                }
                Err(s) if again < REOPENS && errors::transient(s.code()) => {
                    again += 1;
                    futures_timer::Delay::new(errors::router_backoff(again)).await;
                }
                Err(s) => return Err(self.gone(s)),
            }
        }
    }
}

#[cfg(test)]
mod tests;
