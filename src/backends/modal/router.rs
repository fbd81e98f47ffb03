//! The per-task command router client: exec with client-generated ids, output read by byte
//! offset (a cut stream is reopened where it stopped), stdin written by byte offset with an
//! end-of-file, and the exit as a code or a signal. Auth is `authorization: Bearer <token>`
//! from `TaskGetCommandRouterAccess`; the Modal token is never sent here.
//!
//! The router token is a JWT that expires. As Modal's own clients do (Python
//! `modal/_utils/task_command_router_client.py`, `_refresh_jwt` and `_call_with_auth_retry`;
//! Go `modal-go/task_command_router_client.go`, `refreshJwt` and `callWithAuthRetry`), a call
//! answered `UNAUTHENTICATED` fetches a new token from the control plane and is sent once more;
//! calls that fail together refresh once (a lock, then the token's `exp` read again: one
//! more than [`REFRESH_BUFFER`] away means another call has refreshed it), and the router's
//! URL must stay the same. An output stream gets one such retry per opening, renewed by any
//! piece read after it.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

use super::SCHEME;
use super::client::{Control, MAX_MESSAGE, channel, idempotency_key};
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

/// A token whose `exp` is more than this far ahead is not refreshed on `UNAUTHENTICATED`
/// (Modal's clients: `jwtRefreshBufferSeconds`, 30 s): a concurrent call refreshed it.
pub(crate) const REFRESH_BUFFER: Duration = Duration::from_secs(30);

/// The router token in use, shared by every clone of one [`Router`] and read by the
/// interceptor on each request.
#[derive(Debug)]
pub(crate) struct Token {
    /// `Bearer <token>` (marked sensitive) and the token's `exp` (Unix seconds) when it
    /// could be read.
    current: RwLock<(AsciiMetadataValue, Option<u64>)>,
    /// Held while a new token is fetched, so calls refused together fetch one.
    refreshing: tokio::sync::Mutex<()>,
}

impl Token {
    /// `Bearer <token>` for `token`, its `exp` read when the token is a JWT carrying one.
    ///
    /// # Errors
    ///
    /// [`Error::Provider`] for a token that is not visible ASCII.
    pub(crate) fn new(token: &SecretString) -> Result<Self> {
        Ok(Token { current: RwLock::new(Self::parts(token)?), refreshing: tokio::sync::Mutex::new(()) })
    }

    fn parts(token: &SecretString) -> Result<(AsciiMetadataValue, Option<u64>)> {
        let mut bearer: AsciiMetadataValue =
            MetadataValue::try_from(format!("Bearer {}", token.expose_secret())).map_err(|_| {
                Error::provider_message(SCHEME, "the command router's token is not visible ASCII")
            })?;
        bearer.set_sensitive(true);
        Ok((bearer, jwt_expiry(token.expose_secret())))
    }

    fn bearer(&self) -> AsciiMetadataValue {
        self.current.read().unwrap_or_else(PoisonError::into_inner).0.clone()
    }

    /// Whether the token's `exp` is known and more than [`REFRESH_BUFFER`] ahead of `now`
    /// (Unix seconds).
    fn fresh_at(&self, now: u64) -> bool {
        let exp = self.current.read().unwrap_or_else(PoisonError::into_inner).1;
        exp.is_some_and(|exp| exp.saturating_sub(now) > REFRESH_BUFFER.as_secs())
    }

    fn replace(&self, token: &SecretString) -> Result<()> {
        let parts = Self::parts(token)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = parts;
        Ok(())
    }
}

/// The `exp` claim of a JWT (Unix seconds), read without checking the signature (the
/// router checks it); `None` for anything else: the token is then refreshed on every
/// `UNAUTHENTICATED`, as Modal's clients do when they cannot read it.
pub(crate) fn jwt_expiry(token: &str) -> Option<u64> {
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&json).ok()?;
    match &claims["exp"] {
        serde_json::Value::Number(n) => n.as_u64().or_else(|| {
            #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a time in seconds")]
            n.as_f64().filter(|f| f.is_finite() && *f >= 0.0).map(|f| f as u64)
        }),
        _ => None,
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Adds the router token in use to every request.
#[derive(Clone, Debug)]
pub(crate) struct Bearer(Arc<Token>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> std::result::Result<Request<()>, Status> {
        request.metadata_mut().insert("authorization", self.0.bearer());
        Ok(request)
    }
}

type Inner = TaskCommandRouterClient<InterceptedService<Channel, Bearer>>;

/// A client of one task's router; building it does no I/O.
#[derive(Clone)]
pub(crate) struct Router {
    inner: Inner,
    token: Arc<Token>,
    /// Where new tokens come from: the control plane's `TaskGetCommandRouterAccess`.
    control: Control,
    url: String,
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
    /// A client of the router at `url` for task `task_id` of sandbox `sandbox_id`, with
    /// `token` from `control`, which gives new ones when it expires.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for a URL that is not `https://`; [`Error::Provider`] for a
    /// token that is not visible ASCII.
    pub(crate) fn new(
        control: Control,
        (url, token): (&str, &SecretString),
        sandbox_id: &str,
        task_id: &str,
        trust: Option<(&[u8], &str)>,
    ) -> Result<Self> {
        let channel = channel(url, trust)?;
        let token = Arc::new(Token::new(token)?);
        let inner = TaskCommandRouterClient::with_interceptor(channel, Bearer(Arc::clone(&token)))
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        Ok(Router {
            inner,
            token,
            control,
            url: url.to_owned(),
            sandbox_id: sandbox_id.to_owned(),
            task_id: task_id.to_owned(),
        })
    }

    fn gone(&self, status: Status) -> Error {
        if matches!(status.code(), Code::Unauthenticated | Code::PermissionDenied) {
            let said: String = status.message().chars().take(512).collect();
            return Error::auth(
                SCHEME,
                format!(
                    "the command router of sandbox {} refused its token, also one just fetched from TaskGetCommandRouterAccess (the Modal token itself was accepted): {said}",
                    self.sandbox_id
                ),
                None,
            )
            .with_source(status);
        }
        errors::from_status(status, Call::Sandbox(&self.sandbox_id))
    }

    /// Fetches a new router token unless another call has just done so.
    ///
    /// # Errors
    ///
    /// The control plane's mapped status; a router URL that changed is [`Error::Provider`].
    async fn refresh(&self) -> Result<()> {
        let _one_at_a_time = self.token.refreshing.lock().await;
        if self.token.fresh_at(unix_now()) {
            return Ok(());
        }
        tracing::debug!(target: "sandboxio::modal", sandbox = %self.sandbox_id, "refreshing the command router's token");
        let (url, token) = self.control.router_access(&self.sandbox_id, &self.task_id).await?;
        if url != self.url {
            return Err(Error::provider_message(
                SCHEME,
                format!("the command router of sandbox {} moved during the session", self.sandbox_id),
            ));
        }
        self.token.replace(&token)
    }

    /// `call` on the router; answered `UNAUTHENTICATED`, once more after a refresh.
    ///
    /// # Errors
    ///
    /// The outer error: the refresh failed. The inner one: the call's status.
    async fn authed<T, F>(&self, call: impl Fn(Inner) -> F) -> Result<std::result::Result<T, Status>>
    where
        F: std::future::Future<Output = std::result::Result<T, Status>>,
    {
        // Boxed: a tonic call's future is kilobytes, and this holds two of them and a refresh.
        match Box::pin(call(self.inner.clone())).await {
            Err(s) if s.code() == Code::Unauthenticated => {
                Box::pin(self.refresh()).await?;
                Ok(Box::pin(call(self.inner.clone())).await)
            }
            other => Ok(other),
        }
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
            match self
                .authed(|mut c| {
                    let message = message.clone();
                    async move { c.task_exec_start(message).await }
                })
                .await?
            {
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
    /// [`REOPENS`] times in a row without a piece read in between. Returns the offset at the
    /// end.
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
        // One refresh per opening, renewed by a piece read after it (as Modal's clients do).
        let mut refreshed = false;
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
                                // Progress: the next cut starts a fresh budget of reopens and
                                // backoff (Modal's clients reset their delay on each piece).
                                refreshed = false;
                                reopens = 0;
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
            if cut.code() == Code::Unauthenticated && !refreshed {
                Box::pin(self.refresh()).await?;
                refreshed = true;
                continue;
            }
            if !errors::transient(cut.code()) || reopens >= REOPENS {
                return Err(self.gone(cut));
            }
            reopens += 1;
            futures_timer::Delay::new(errors::router_backoff(reopens)).await;
        }
    }

    /// Writes `data` to the stdin of `exec_id` at byte `offset` (the count written before),
    /// closing it after when `eof`; a write refused by a transient status is sent again, at
    /// most [`REOPENS`] times.
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
        // A write names its byte offset, so sending it again after a transient status is
        // safe: the router skips what it already took (as Modal's clients retry it).
        let mut attempt = 0;
        loop {
            match self
                .authed(|mut c| {
                    let message = message.clone();
                    async move { c.task_exec_stdin_write(message).await }
                })
                .await?
            {
                Ok(_) => return Ok(()),
                Err(s) if attempt < REOPENS && errors::transient(s.code()) => {
                    attempt += 1;
                    futures_timer::Delay::new(errors::router_backoff(attempt)).await;
                }
                Err(s) => return Err(self.gone(s)),
            }
        }
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
            match self
                .authed(|mut c| {
                    let message = message.clone();
                    async move { c.task_exec_wait(message).await }
                })
                .await?
            {
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
