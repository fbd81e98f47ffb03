//! envd, the daemon in every E2B sandbox (port 49983): its Connect services
//! (`spec/envd/process/process.proto`, `spec/envd/filesystem/filesystem.proto` in E2B's
//! repository) over HTTP/1.1 with the JSON codec, and its `/files` and `/health` REST paths
//! (`spec/envd/envd.yaml`).
//!
//! Every request carries `X-Access-Token` and the routing headers `E2b-Sandbox-Id` and
//! `E2b-Sandbox-Port` (read by the edge proxy on shared hosts, harmless on per-port hosts).
//! Unary calls send the bare JSON message as `application/json`; server streams send one
//! envelope as `application/connect+json` and read envelopes until the end-of-stream
//! frame ([`super::envelope`]).

use std::time::Duration;

use super::SCHEME;
use super::config::ENVD_PORT;
use super::envelope::{self, EnvelopeDecoder, Frame};
use super::errors::{Call, Reply, reply_of, to_error};
use super::http::{self, REQUEST_TIMEOUT, transport_error};
use super::process::{self, ProcessEvent};
use super::wire::WireError;
use crate::error::{Error, Result};
use crate::secret::SecretString;

/// The largest envelope envd may send: a data event carries at most 32 KiB of output in
/// base64, so 4 MiB leaves room and still bounds a malicious frame.
pub(crate) const MAX_FRAME: usize = 4 << 20;
/// How often envd is asked to send a keepalive on a quiet command stream
/// (`Keepalive-Ping-Interval`, whole seconds; envd's own default is 90 s).
pub(crate) const KEEPALIVE: Duration = Duration::from_secs(30);
/// A code interpreter stream silent this long is dead (the interpreter sends its own
/// keepalive line every few seconds; the limit is that of a command stream at
/// [`KEEPALIVE`]).
pub(crate) const IDLE_LIMIT: Duration = Duration::from_secs(2 * KEEPALIVE.as_secs());

/// A client of one sandbox's envd.
#[derive(Clone)]
pub(crate) struct Envd {
    http: reqwest::Client,
    base: String,
    id: String,
    token: Option<SecretString>,
    /// The keepalive period asked of envd; a command stream silent for twice it is dead.
    keepalive: Duration,
}

impl std::fmt::Debug for Envd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Envd").field("base", &self.base).field("id", &self.id).finish_non_exhaustive()
    }
}

impl Envd {
    /// A client of envd at `base` (`https://49983-<id>.<domain>`) in sandbox `id`.
    pub(crate) fn new(http: reqwest::Client, base: String, id: String, token: Option<SecretString>) -> Self {
        Envd { http, base, id, token, keepalive: KEEPALIVE }
    }

    /// The same client asking for a keepalive every `every` (whole seconds, at least one).
    pub(crate) fn with_keepalive(mut self, every: Duration) -> Self {
        self.keepalive = Duration::from_secs(every.as_secs().max(1));
        self
    }

    /// The sandbox id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("E2b-Sandbox-Id", &self.id)
            .header("E2b-Sandbox-Port", ENVD_PORT.to_string())
            // The proxy answers browsers in HTML; this keeps its errors JSON.
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(token) = &self.token {
            request = request.header("X-Access-Token", token.expose_secret());
        }
        request
    }

    /// A unary Connect call: `POST /<service>/<method>` with `body`; the reply's JSON.
    /// `path` names the file a filesystem call is about, for the errors.
    ///
    /// # Errors
    ///
    /// The reply's error mapped through [`to_error`] (a gone sandbox is
    /// [`Error::SandboxGone`], `not_found` about a path [`Error::NotFound`]), or a transport
    /// error. Retried after a 5xx only when `idempotent`.
    pub(crate) async fn unary(
        &self,
        method: &str,
        body: &serde_json::Value,
        path: Option<&str>,
        idempotent: bool,
    ) -> Result<serde_json::Value> {
        let url = format!("/{method}");
        let make = || {
            self.request(reqwest::Method::POST, &url)
                .header("Connect-Protocol-Version", "1")
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .timeout(REQUEST_TIMEOUT)
                .body(body.to_string())
        };
        let response = http::send(make, idempotent, Call::InSandbox { id: &self.id, path }).await?;
        let bytes = http::read_body(response, http::MAX_BODY).await?;
        if bytes.is_empty() {
            return Ok(serde_json::Value::Object(serde_json::Map::new()));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::provider(SCHEME, "envd replied with malformed JSON", e))
    }

    /// Starts a server-streaming call: `POST /<service>/<method>` with `body` in one
    /// envelope. `deadline` becomes `Connect-Timeout-Ms`, which envd enforces by killing the
    /// process it starts when it passes.
    ///
    /// # Errors
    ///
    /// As [`Envd::unary`], for a reply that is not a stream (the edge proxy's 502, envd's
    /// 401).
    pub(crate) async fn server_stream(
        &self,
        method: &str,
        body: &serde_json::Value,
        deadline: Option<Duration>,
    ) -> Result<EventStream> {
        let url = format!("/{method}");
        let mut request = self
            .request(reqwest::Method::POST, &url)
            .header("Connect-Protocol-Version", "1")
            .header(reqwest::header::CONTENT_TYPE, "application/connect+json")
            .header("Keepalive-Ping-Interval", self.keepalive.as_secs().to_string())
            .body(envelope::encode(envelope::FLAG_MESSAGE, body.to_string().as_bytes()));
        if let Some(deadline) = deadline {
            let ms = u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX).max(1);
            request = request.header("Connect-Timeout-Ms", ms.to_string());
        }
        let response = request.send().await.map_err(transport_error)?;
        if !response.status().is_success() {
            return Err(http::error_of(response, Call::InSandbox { id: &self.id, path: None }).await);
        }
        Ok(EventStream { response, decoder: EnvelopeDecoder::new(MAX_FRAME), envd: self.clone() })
    }

    /// `process.Process/Start` for argv `cmd` + `args`.
    ///
    /// # Errors
    ///
    /// As [`Envd::server_stream`].
    pub(crate) async fn start(
        &self,
        request: &serde_json::Value,
        deadline: Option<Duration>,
    ) -> Result<EventStream> {
        self.server_stream("process.Process/Start", request, deadline).await
    }

    /// `process.Process/SendSignal` (`SIGKILL` when `kill`, else `SIGTERM`) to `pid`:
    /// `false` if envd no longer knows the pid.
    ///
    /// # Errors
    ///
    /// As [`Envd::unary`].
    pub(crate) async fn signal(&self, pid: u32, kill: bool) -> Result<bool> {
        let sent =
            self.unary("process.Process/SendSignal", &process::signal_request(pid, kill), None, true).await;
        match sent {
            Ok(_) => Ok(true),
            Err(e) if reply_of(&e).is_some_and(|r| r.connect_code() == "not_found") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `process.Process/SendInput`: `data` to `pid`'s stdin. Not retried (a retry could
    /// write twice).
    ///
    /// # Errors
    ///
    /// As [`Envd::unary`].
    pub(crate) async fn send_input(&self, pid: u32, data: &[u8]) -> Result<()> {
        self.unary("process.Process/SendInput", &process::input_request(pid, data), None, false)
            .await
            .map(drop)
    }

    /// `process.Process/CloseStdin`: end-of-file on `pid`'s stdin.
    ///
    /// # Errors
    ///
    /// As [`Envd::unary`].
    pub(crate) async fn close_stdin(&self, pid: u32) -> Result<()> {
        self.unary("process.Process/CloseStdin", &process::close_stdin_request(pid), None, true)
            .await
            .map(drop)
    }

    /// A `filesystem.Filesystem` call about `path` (`Stat`, `ListDir` one level deep,
    /// `MakeDir`, `Remove`): its reply's JSON.
    ///
    /// # Errors
    ///
    /// As [`Envd::unary`]; `not_found` is [`Error::NotFound`] naming `path`.
    pub(crate) async fn fs(&self, method: &str, path: &str) -> Result<serde_json::Value> {
        let body = serde_json::json!({ "path": path, "depth": 1 });
        self.unary(&format!("filesystem.Filesystem/{method}"), &body, Some(path), true).await
    }

    /// `GET /files?path=`: a whole file of at most `limit` bytes.
    ///
    /// # Errors
    ///
    /// [`Error::TooLarge`] past `limit` (nothing more is read), [`Error::NotFound`],
    /// [`Error::IsADirectory`] (envd's 400 for a directory), [`Error::PermissionDenied`],
    /// or as [`Envd::unary`].
    pub(crate) async fn read_file(&self, path: &str, limit: u64) -> Result<Vec<u8>> {
        let make =
            || self.request(reqwest::Method::GET, "/files").query(&[("path", path)]).timeout(REQUEST_TIMEOUT);
        let sent = http::send(make, true, Call::InSandbox { id: &self.id, path: Some(path) }).await;
        let mut response = sent.map_err(|e| directory_error(e, path))?;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
            if body.len() as u64 + chunk.len() as u64 > limit {
                return Err(Error::too_large(path, limit, "`Fs::read_limit`"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// `POST /files?path=` with the raw bytes (`application/octet-stream`): parents are
    /// created and an existing file is overwritten.
    ///
    /// # Errors
    ///
    /// [`Error::IsADirectory`], [`Error::PermissionDenied`], or as [`Envd::unary`].
    pub(crate) async fn write_file(&self, path: &str, data: Vec<u8>) -> Result<()> {
        let data = bytes::Bytes::from(data);
        let make = || {
            self.request(reqwest::Method::POST, "/files")
                .query(&[("path", path)])
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .timeout(REQUEST_TIMEOUT)
                .body(data.clone())
        };
        let sent = http::send(make, true, Call::InSandbox { id: &self.id, path: Some(path) }).await;
        sent.map(drop).map_err(|e| directory_error(e, path))
    }

    /// `GET /health`: whether envd answers (204). A 502 "sandbox was not found" is
    /// [`Error::SandboxGone`].
    ///
    /// # Errors
    ///
    /// As [`Envd::unary`].
    pub(crate) async fn health(&self) -> Result<()> {
        let make = || self.request(reqwest::Method::GET, "/health").timeout(http::CONNECT_TIMEOUT);
        http::send(make, false, Call::InSandbox { id: &self.id, path: None }).await.map(drop)
    }
}

/// `/files`' 400 for a directory where a file belongs as [`Error::IsADirectory`].
fn directory_error(e: Error, path: &str) -> Error {
    if reply_of(&e).is_some_and(|r| r.status == Some(400) && r.message.contains("directory")) {
        Error::is_a_directory(path)
    } else {
        e
    }
}

/// One server stream of process events.
#[derive(Debug)]
pub(crate) struct EventStream {
    response: reqwest::Response,
    decoder: EnvelopeDecoder,
    envd: Envd,
}

/// How a process stream ended, when it ended with an error frame.
#[derive(Debug)]
pub(crate) enum StreamEnd {
    /// `Connect-Timeout-Ms` passed (`deadline_exceeded`): envd killed the process.
    DeadlineExceeded,
}

impl EventStream {
    /// The next event: `Ok(None)` after a clean end-of-stream frame; keepalives are
    /// skipped.
    ///
    /// # Errors
    ///
    /// - [`Error::Provider`] for an end frame with `deadline_exceeded` (callers that set a
    ///   deadline use [`EventStream::next_or_end`] to tell it apart);
    /// - [`Error::SandboxGone`] when the body ended without its end frame and envd no
    ///   longer answers as the sandbox's (the proxy's 502).
    /// - [`Error::Provider`] with a [`WireError`] source for a malformed, oversized or
    ///   truncated frame, or a stream silent for twice the keepalive period asked of envd.
    pub(crate) async fn next(&mut self) -> Result<Option<ProcessEvent>> {
        match self.next_or_end().await? {
            Ok(event) => Ok(event),
            Err(StreamEnd::DeadlineExceeded) => {
                Err(Error::provider_message(SCHEME, "envd ended the stream: deadline_exceeded"))
            }
        }
    }

    /// As [`EventStream::next`], with a `deadline_exceeded` end frame given back as
    /// [`StreamEnd::DeadlineExceeded`] for the caller to turn into its timeout.
    ///
    /// # Errors
    ///
    /// As [`EventStream::next`].
    pub(crate) async fn next_or_end(
        &mut self,
    ) -> Result<std::result::Result<Option<ProcessEvent>, StreamEnd>> {
        loop {
            let frame = self.decoder.next_frame().map_err(wire)?;
            match frame {
                Some(Frame::Message(payload)) => {
                    if let Some(event) = process::parse_event(&payload).map_err(wire)? {
                        return Ok(Ok(Some(event)));
                    }
                }
                Some(Frame::End(payload)) => {
                    let end = Reply::from_end_frame(&payload)
                        .map_err(|e| Error::provider(SCHEME, "envd's end frame is malformed", e))?;
                    return match end {
                        None => Ok(Ok(None)),
                        Some(reply) if reply.code == "deadline_exceeded" => {
                            Ok(Err(StreamEnd::DeadlineExceeded))
                        }
                        Some(reply) => {
                            Err(to_error(Call::InSandbox { id: self.envd.id(), path: None }, reply, None))
                        }
                    };
                }
                None => match tokio::time::timeout(2 * self.envd.keepalive, self.response.chunk()).await {
                    Err(_) => {
                        return Err(Error::provider_message(
                            SCHEME,
                            format!(
                                "envd's stream was silent for {:?}, past twice its keepalive period",
                                2 * self.envd.keepalive
                            ),
                        ));
                    }
                    Ok(Ok(Some(bytes))) => self.decoder.push(&bytes).map_err(wire)?,
                    Ok(Ok(None)) => return Err(self.cut(self.decoder.finish().err()).await),
                    Ok(Err(e)) => {
                        return Err(self
                            .cut(Some(WireError::Field { field: "body", why: e.to_string() }))
                            .await);
                    }
                },
            }
        }
    }

    /// The error for a body that ended early: the sandbox is gone if envd says so (or no
    /// longer answers at all), else the cut itself is reported.
    async fn cut(&self, why: Option<WireError>) -> Error {
        let why = why.unwrap_or(WireError::MissingEnd);
        match self.envd.health().await {
            Err(e) if e.code() == crate::ErrorCode::SandboxGone => e,
            Err(e) if e.code() == crate::ErrorCode::Connect => Error::sandbox_gone(
                self.envd.id(),
                format!("its stream was cut ({why}) and envd no longer answers"),
            ),
            _ => Error::provider(SCHEME, "envd's stream was cut", why),
        }
    }
}

/// A malformed reply as sandboxio's error, the [`WireError`] kept as the source.
fn wire(e: WireError) -> Error {
    Error::provider(SCHEME, "a malformed stream from envd", e)
}
