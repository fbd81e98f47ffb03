//! The provider's HTTP API, one blocking method per endpoint.
//!
//! The methods block: the adapter calls them through `sandboxio::backend::run_blocking`,
//! never on the caller's executor. They return [`ApiError`], the provider's own failure;
//! `errors` turns it into a `sandboxio::Error` once the adapter knows what was asked.

use std::fmt;
use std::time::Duration;

use sandboxio::secret::SecretString;
use serde::de::DeserializeOwned;
use ureq::http::Response;

use crate::api::{CreateRequest, ErrorBody, ExecReply, ExecRequest, ProcessList, SandboxInfo, SandboxList};

/// Bound on a JSON reply other than an exec's (64 KiB): the provider sends small bodies.
const SMALL_REPLY: u64 = 64 * 1024;

/// A client of the Example Cloud API at one endpoint, with one API key. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    endpoint: String,
    api_key: SecretString,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key stays out of every debug print.
        f.debug_struct("Client").field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

/// What went wrong talking to the provider: the request never got a reply, or the reply
/// was an error. Kept as the `source()` of the `sandboxio::Error` it becomes.
#[derive(Debug)]
pub enum ApiError {
    /// No usable reply: connection refused or cut, TLS, a malformed or oversized body.
    Transport(ureq::Error),
    /// A reply with a status from 400 up.
    Status {
        /// The HTTP status.
        status: u16,
        /// The provider's error body (`internal` with the raw text when it was not JSON).
        body: ErrorBody,
        /// `Retry-After`, in seconds, on a 429.
        retry_after: Option<Duration>,
    },
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Transport(e) => write!(f, "no reply from the provider: {e}"),
            ApiError::Status { status, body, .. } => {
                write!(f, "HTTP {status} {}: {}", body.error, body.message)
            }
        }
    }
}

impl std::error::Error for ApiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ApiError::Transport(e) => Some(e),
            ApiError::Status { .. } => None,
        }
    }
}

impl From<ureq::Error> for ApiError {
    fn from(e: ureq::Error) -> Self {
        ApiError::Transport(e)
    }
}

impl Client {
    /// A client of `endpoint` (`https://api.example.com`, no trailing slash) with `api_key`.
    /// Does no I/O.
    #[must_use]
    pub fn new(endpoint: &str, api_key: SecretString) -> Self {
        let config = ureq::Agent::config_builder()
            // Error replies carry a JSON body the adapter maps; read it instead of failing.
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .build();
        Client { agent: config.into(), endpoint: endpoint.trim_end_matches('/').to_owned(), api_key }
    }

    /// `POST /v1/sandboxes`.
    ///
    /// # Errors
    ///
    /// [`ApiError`] for any failure.
    pub fn create(&self, request: &CreateRequest) -> Result<SandboxInfo, ApiError> {
        let reply = self.with_key(self.agent.post(self.url("/v1/sandboxes"))).send_json(request)?;
        read(reply, SMALL_REPLY)
    }

    /// `DELETE /v1/create-tokens/{token}`: destroys the sandbox a create with this token
    /// made, or makes that create fail if it is still running (or has not arrived yet).
    ///
    /// # Errors
    ///
    /// [`ApiError`] for any failure.
    pub fn cancel_create(&self, token: &str) -> Result<(), ApiError> {
        let reply =
            self.with_key(self.agent.delete(self.url(&format!("/v1/create-tokens/{token}")))).call()?;
        read_empty(reply)
    }

    /// `GET /v1/sandboxes/{id}`.
    ///
    /// # Errors
    ///
    /// [`ApiError`] for any failure; `sandbox_not_found` (404) for an unknown id.
    pub fn get(&self, id: &str) -> Result<SandboxInfo, ApiError> {
        let reply = self.with_key(self.agent.get(self.url(&format!("/v1/sandboxes/{id}")))).call()?;
        read(reply, SMALL_REPLY)
    }

    /// `GET /v1/sandboxes?label=key=value`: the live sandboxes carrying that label.
    ///
    /// # Errors
    ///
    /// [`ApiError`] for any failure.
    pub fn list(&self, key: &str, value: &str) -> Result<Vec<String>, ApiError> {
        let request = self.agent.get(self.url("/v1/sandboxes")).query("label", format!("{key}={value}"));
        let list: SandboxList = read(self.with_key(request).call()?, SMALL_REPLY)?;
        Ok(list.ids)
    }

    /// `DELETE /v1/sandboxes/{id}`. `Ok(false)` when it was already gone.
    ///
    /// # Errors
    ///
    /// [`ApiError`] for any failure other than a 404.
    pub fn delete(&self, id: &str) -> Result<bool, ApiError> {
        let reply = self.with_key(self.agent.delete(self.url(&format!("/v1/sandboxes/{id}")))).call()?;
        if reply.status() == 404 {
            return Ok(false);
        }
        read_empty(reply).map(|()| true)
    }

    /// `POST /v1/sandboxes/{id}/execs`: runs a command to completion. The reply holds up to
    /// `output_limit` bytes of each stream, base64-encoded.
    ///
    /// # Errors
    ///
    /// [`ApiError`] for any failure; `sandbox_not_found` (404) or `sandbox_gone` (410) when
    /// the sandbox is not there or died under the command.
    pub fn exec(&self, id: &str, request: &ExecRequest) -> Result<ExecReply, ApiError> {
        let url = self.url(&format!("/v1/sandboxes/{id}/execs"));
        let reply = self.with_key(self.agent.post(url)).send_json(request)?;
        // Both streams, base64 (4/3), plus the JSON around them.
        let bound = (request.output_limit as u64).saturating_mul(2).saturating_mul(4) / 3 + SMALL_REPLY;
        read(reply, bound)
    }

    /// `DELETE /v1/sandboxes/{id}/execs/{exec_id}`: kills a running command's process tree.
    ///
    /// # Errors
    ///
    /// [`ApiError`] for any failure; `exec_not_found` (404) once it has ended.
    pub fn kill_exec(&self, id: &str, exec_id: &str) -> Result<(), ApiError> {
        let url = self.url(&format!("/v1/sandboxes/{id}/execs/{exec_id}"));
        read_empty(self.with_key(self.agent.delete(url)).call()?)
    }

    /// `GET /v1/sandboxes/{id}/processes`: what runs in the sandbox now.
    ///
    /// # Errors
    ///
    /// [`ApiError`] for any failure.
    pub fn processes(&self, id: &str) -> Result<Vec<String>, ApiError> {
        let reply =
            self.with_key(self.agent.get(self.url(&format!("/v1/sandboxes/{id}/processes")))).call()?;
        let list: ProcessList = read(reply, SMALL_REPLY)?;
        Ok(list.processes)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.endpoint)
    }

    fn with_key<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        request.header("Authorization", format!("Bearer {}", self.api_key.expose_secret()))
    }
}

/// The JSON body of a success, or the error the reply carries.
fn read<T: DeserializeOwned>(mut reply: Response<ureq::Body>, limit: u64) -> Result<T, ApiError> {
    check(&mut reply)?;
    Ok(reply.body_mut().with_config().limit(limit).read_json()?)
}

fn read_empty(mut reply: Response<ureq::Body>) -> Result<(), ApiError> {
    check(&mut reply)
}

fn check(reply: &mut Response<ureq::Body>) -> Result<(), ApiError> {
    let status = reply.status().as_u16();
    if status < 400 {
        return Ok(());
    }
    let retry_after = reply
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs);
    let text = reply.body_mut().with_config().limit(SMALL_REPLY).read_to_string().unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| ErrorBody {
        error: "internal".to_owned(),
        message: text,
        path: None,
    });
    Err(ApiError::Status { status, body, retry_after })
}
