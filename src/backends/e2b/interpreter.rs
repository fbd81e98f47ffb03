//! The code interpreter's HTTP API (port 49999 in a code-interpreter sandbox; E2B's
//! `code-interpreter` repository, `template/server/main.py`): `POST /execute` answering the
//! line-delimited JSON of [`super::code`], and `POST /contexts` to create
//! code contexts. Plain-text errors (400, 404) and the proxy's JSON map as envd's do.

use std::time::Duration;

use serde::Deserialize;

use super::SCHEME;
use super::code::{self, CellLine, LineDecoder};
use super::config::CODE_PORT;
use super::envd::IDLE_LIMIT;
use super::errors::Call;
use super::http::{self, REQUEST_TIMEOUT, transport_error};
use super::wire::WireError;
use crate::error::{Error, Result};
use crate::secret::SecretString;

/// The longest line of an execution: a result's PNG in base64 can be large, so 64 MiB.
pub(crate) const MAX_LINE: usize = 64 << 20;

/// A context as the interpreter describes it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub(crate) struct ContextInfo {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) language: String,
}

/// A client of one sandbox's code interpreter.
#[derive(Clone)]
pub(crate) struct Interpreter {
    http: reqwest::Client,
    base: String,
    id: String,
    token: Option<SecretString>,
}

impl std::fmt::Debug for Interpreter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interpreter").field("base", &self.base).finish_non_exhaustive()
    }
}

impl Interpreter {
    /// A client at `base` (`https://49999-<id>.<domain>`) of sandbox `id`.
    pub(crate) fn new(http: reqwest::Client, base: String, id: String, token: Option<SecretString>) -> Self {
        Interpreter { http, base, id, token }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("E2b-Sandbox-Id", &self.id)
            .header("E2b-Sandbox-Port", CODE_PORT.to_string())
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(token) = &self.token {
            request = request.header("X-Access-Token", token.expose_secret());
        }
        request
    }

    /// `POST /execute`: runs `code` (in `context_id`, else the default context of
    /// `language`) and returns its line stream. The interpreter interrupts the cell when
    /// this request's connection closes, so dropping the stream interrupts the cell.
    ///
    /// # Errors
    ///
    /// An unknown context ([`Error::ContextLost`]), or the reply's error as
    /// [`super::errors::to_error`] maps it.
    pub(crate) async fn execute(
        &self,
        code_text: &str,
        context_id: Option<&str>,
        language: &str,
    ) -> Result<CellLines> {
        let body = code::execute_request(code_text, context_id, language);
        let response = self
            .request(reqwest::Method::POST, "/execute")
            .json(&body)
            .send()
            .await
            .map_err(transport_error)?;
        if response.status() == reqwest::StatusCode::NOT_FOUND
            && let Some(context) = context_id
        {
            return Err(Error::context_lost(context, "the code interpreter does not know this context"));
        }
        if !response.status().is_success() {
            return Err(http::error_of(response, Call::InSandbox { id: &self.id, path: None }).await);
        }
        Ok(CellLines {
            response,
            decoder: LineDecoder::new(MAX_LINE),
            pending: std::collections::VecDeque::new(),
        })
    }

    /// `POST /contexts`: a new context for `language`.
    ///
    /// # Errors
    ///
    /// As [`http::send`].
    pub(crate) async fn create_context(&self, language: &str) -> Result<ContextInfo> {
        let body = serde_json::json!({ "language": language });
        let make = || self.request(reqwest::Method::POST, "/contexts").json(&body).timeout(REQUEST_TIMEOUT);
        let response = http::send(make, false, Call::InSandbox { id: &self.id, path: None }).await?;
        http::read_json(response).await
    }
}

/// The lines of one execution.
#[derive(Debug)]
pub(crate) struct CellLines {
    response: reqwest::Response,
    decoder: LineDecoder,
    pending: std::collections::VecDeque<Vec<u8>>,
}

impl CellLines {
    /// The next line that matters (keepalives and counters skipped); [`CellLine::End`]
    /// last.
    ///
    /// # Errors
    ///
    /// [`Error::Provider`] with a [`WireError`] source for a malformed or oversized line, a
    /// body that ended before `end_of_execution`, or a stream silent past [`IDLE_LIMIT`]
    /// (the interpreter sends a keepalive every 5 s).
    pub(crate) async fn next(&mut self) -> Result<CellLine> {
        loop {
            if let Some(line) = self.pending.pop_front() {
                if let Some(parsed) = code::parse_line(&line).map_err(malformed)? {
                    return Ok(parsed);
                }
                continue;
            }
            match tokio::time::timeout(IDLE_LIMIT, self.response.chunk()).await {
                Err(_) => return Err(Error::provider_message(SCHEME, idle_message(IDLE_LIMIT))),
                Ok(Ok(Some(bytes))) => self.pending.extend(self.decoder.push(&bytes).map_err(malformed)?),
                Ok(Ok(None)) => {
                    self.decoder.finish().map_err(malformed)?;
                    return Err(malformed(WireError::MissingEnd));
                }
                Ok(Err(e)) => return Err(transport_error(e)),
            }
        }
    }
}

fn idle_message(limit: Duration) -> String {
    format!("the code interpreter's stream was silent for {limit:?}")
}

fn malformed(e: WireError) -> Error {
    Error::provider(SCHEME, "a malformed stream from the code interpreter", e)
}
