//! E2B's error replies turned into sandboxio's [`Error`], the reply kept as the `source()`.
//!
//! Three shapes reach the adapter (E2B's `spec/openapi.yml` `components.schemas.Error`;
//! the Connect protocol's error JSON; the edge proxy's JSON):
//!
//! - the control plane: `{"code": <int>, "message": ".."}` with the HTTP status;
//! - envd's Connect handlers: `{"code": "not_found", "message": ".."}`, the code a string,
//!   in a unary reply's body or a stream's end frame (`{"error": {..}}`);
//! - the edge proxy and envd's middleware: `{"code": <int>, "message": ".."}` again, for
//!   example 502 `The sandbox was not found` after the sandbox expired or was killed.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::SCHEME;
use super::config::API_KEY_ENV;
use crate::error::Error;

/// What E2B answered, as the `source()` of the sandboxio error made from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    /// The HTTP status, `None` for a stream's end frame.
    pub(crate) status: Option<u16>,
    /// The Connect code (`not_found`), or empty when the body had an integer code or none.
    pub(crate) code: String,
    /// The message, or the start of a body that was not JSON.
    pub(crate) message: String,
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("E2B replied")?;
        if let Some(status) = self.status {
            write!(f, " HTTP {status}")?;
        }
        if !self.code.is_empty() {
            write!(f, " {}", self.code)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for Reply {}

#[derive(Deserialize)]
struct Body {
    #[serde(default)]
    code: serde_json::Value,
    #[serde(default)]
    message: String,
}

/// The most of a non-JSON body kept in a message.
const BODY_EXCERPT: usize = 512;

impl Reply {
    /// Reads an error reply with HTTP `status` and `body`.
    pub(crate) fn from_http(status: u16, body: &[u8]) -> Reply {
        if let Ok(b) = serde_json::from_slice::<Body>(body) {
            let code = b.code.as_str().unwrap_or_default().to_owned();
            return Reply { status: Some(status), code, message: b.message };
        }
        let text = String::from_utf8_lossy(body);
        let cut: String = text.chars().take(BODY_EXCERPT).collect();
        Reply { status: Some(status), code: String::new(), message: cut.trim().to_owned() }
    }

    /// Reads a Connect stream's end-frame payload: `Ok(None)` for a clean end (`{}`).
    ///
    /// # Errors
    ///
    /// The JSON error when the payload is not an end-of-stream message.
    pub(crate) fn from_end_frame(payload: &[u8]) -> Result<Option<Reply>, serde_json::Error> {
        #[derive(Deserialize)]
        struct End {
            #[serde(default)]
            error: Option<Body>,
        }
        let end: End = serde_json::from_slice(payload)?;
        Ok(end.error.map(|b| Reply {
            status: None,
            code: b.code.as_str().unwrap_or("unknown").to_owned(),
            message: b.message,
        }))
    }

    /// The Connect code, or the one the HTTP status stands for (the mapping E2B's SDKs use
    /// for replies that did not come from a Connect handler).
    pub(crate) fn connect_code(&self) -> &str {
        if !self.code.is_empty() {
            return &self.code;
        }
        match self.status {
            Some(400) => "invalid_argument",
            Some(401) => "unauthenticated",
            Some(403) => "permission_denied",
            Some(404) => "not_found",
            Some(409) => "already_exists",
            Some(429) => "resource_exhausted",
            Some(502 | 503) => "unavailable",
            Some(504) => "deadline_exceeded",
            Some(501) => "unimplemented",
            _ => "unknown",
        }
    }

    /// Whether the edge proxy says the sandbox no longer exists (killed or expired). The
    /// proxy's other 502, "The sandbox is running but port is not open", is not this.
    pub(crate) fn sandbox_not_found(&self) -> bool {
        self.status == Some(502) && self.message.to_ascii_lowercase().contains("sandbox was not found")
    }
}

/// The E2B reply an [`Error::Provider`] was made from, if it was made from one.
pub(crate) fn reply_of(e: &Error) -> Option<&Reply> {
    match e {
        Error::Provider { source: Some(source), .. } => source.downcast_ref::<Reply>(),
        _ => None,
    }
}

/// Which kind of call failed, for the parts of the mapping that depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call<'a> {
    /// A control-plane call about sandbox `id` (get, kill, timeout): 404 is gone.
    Sandbox(&'a str),
    /// `connect` to sandbox `id`: 404 is an unknown id.
    Connect(&'a str),
    /// Creating a sandbox.
    Create,
    /// A call about no sandbox in particular (a listing).
    Account,
    /// A call to envd or the code interpreter in sandbox `id` about `path` (a file
    /// operation) or nothing in particular.
    InSandbox { id: &'a str, path: Option<&'a str> },
}

/// Maps `reply` to sandboxio's error for `call`; `retry_after` is the reply's
/// `Retry-After`, when it had one.
pub(crate) fn to_error(call: Call<'_>, reply: Reply, retry_after: Option<Duration>) -> Error {
    if let Call::Sandbox(id) | Call::Connect(id) | Call::InSandbox { id, .. } = call
        && reply.sandbox_not_found()
    {
        return Error::sandbox_gone(id, format!("E2B says: {} (killed, or its TTL expired)", reply.message));
    }
    let code = reply.connect_code().to_owned();
    match (code.as_str(), call) {
        ("unauthenticated" | "permission_denied", Call::InSandbox { path: Some(path), .. })
            if reply.status != Some(401) =>
        {
            Error::permission_denied(path)
        }
        ("unauthenticated", _)
        | ("permission_denied", Call::Create | Call::Account | Call::Sandbox(_) | Call::Connect(_)) => {
            Error::auth(
                SCHEME,
                format!("E2B refused the credentials: {}", reply.message),
                Some(API_KEY_ENV.into()),
            )
            .with_source(reply)
        }
        ("resource_exhausted", _) => Error::rate_limited(SCHEME, retry_after).with_source(reply),
        ("not_found", Call::Sandbox(id)) => {
            Error::sandbox_gone(id, format!("E2B says: {} (killed, or its TTL expired)", reply.message))
        }
        ("not_found", Call::Connect(id)) => {
            Error::connect(SCHEME, format!("no sandbox with id {id:?}: {}", reply.message)).with_source(reply)
        }
        ("not_found", Call::InSandbox { path: Some(path), .. }) => Error::not_found(path),
        ("invalid_argument", Call::Create) => {
            Error::configuration(format!("E2B refused the sandbox's settings: {}", reply.message))
                .with_source(reply)
        }
        _ => Error::provider(SCHEME, "the call failed", reply),
    }
}

/// Parses a `Retry-After` header given in seconds (E2B does not send the date form).
pub(crate) fn retry_after(header: Option<&str>) -> Option<Duration> {
    header.and_then(|h| h.trim().parse::<u64>().ok()).map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::ErrorCode;

    fn map(call: Call<'_>, status: u16, body: &str) -> Error {
        to_error(call, Reply::from_http(status, body.as_bytes()), Some(Duration::from_secs(3)))
    }

    #[test]
    fn replies_parse_all_three_shapes() {
        assert_eq!(
            Reply::from_http(404, br#"{"code":404,"message":"Sandbox \"x\" doesn't exist"}"#).to_string(),
            "E2B replied HTTP 404: Sandbox \"x\" doesn't exist"
        );
        assert_eq!(
            Reply::from_http(404, br#"{"code":"not_found","message":"path not found"}"#).to_string(),
            "E2B replied HTTP 404 not_found: path not found"
        );
        assert_eq!(
            Reply::from_http(500, b"<html>oops</html>").to_string(),
            "E2B replied HTTP 500: <html>oops</html>"
        );
        assert_eq!(Reply::from_end_frame(b"{}").unwrap(), None);
        assert_eq!(
            Reply::from_end_frame(br#"{"error":{"code":"deadline_exceeded","message":"ctx"},"metadata":{}}"#)
                .unwrap()
                .map(|r| r.to_string()),
            Some("E2B replied deadline_exceeded: ctx".to_owned())
        );
        assert!(Reply::from_end_frame(b"[").is_err());
        let long = "x".repeat(2000);
        assert_eq!(Reply::from_http(500, long.as_bytes()).message.len(), 512);
    }

    #[test]
    #[expect(clippy::too_many_lines, reason = "one table of cases")]
    fn the_mapping() {
        let gone = r#"{"sandboxId":"s1","message":"The sandbox was not found","code":502}"#;
        let port = r#"{"sandboxId":"s1","message":"The sandbox is running but port is not open","code":502}"#;
        let inside = Call::InSandbox { id: "s1", path: Some("/a") };
        for (call, status, body, code, text) in [
            (
                Call::Create,
                401,
                r#"{"code":401,"message":"Invalid API key"}"#,
                ErrorCode::Auth,
                "[SBX-002] authentication with the e2b backend failed: E2B refused the credentials: Invalid API key",
            ),
            (
                Call::Create,
                403,
                r#"{"code":403,"message":"no"}"#,
                ErrorCode::Auth,
                "[SBX-002] authentication with the e2b backend failed: E2B refused the credentials: no",
            ),
            (
                Call::Create,
                429,
                r#"{"code":429,"message":"you have reached the maximum number of concurrent E2B sandboxes (20)"}"#,
                ErrorCode::RateLimited,
                "[SBX-014] rate limited by the e2b backend; retry after 3s",
            ),
            (
                Call::Create,
                400,
                r#"{"code":400,"message":"Timeout cannot be greater than 1 hours"}"#,
                ErrorCode::Configuration,
                "[SBX-003] configuration error: E2B refused the sandbox's settings: Timeout cannot be greater than 1 hours",
            ),
            (
                Call::Create,
                500,
                r#"{"code":500,"message":"Failed to place sandbox"}"#,
                ErrorCode::Provider,
                "[SBX-015] the e2b backend failed: the call failed",
            ),
            (
                Call::Sandbox("s1"),
                404,
                r#"{"code":404,"message":"gone"}"#,
                ErrorCode::SandboxGone,
                "[SBX-007] sandbox s1 is gone: E2B says: gone (killed, or its TTL expired)",
            ),
            (
                Call::Connect("s1"),
                404,
                r#"{"code":404,"message":"gone"}"#,
                ErrorCode::Connect,
                "[SBX-001] cannot connect to the e2b backend: no sandbox with id \"s1\": gone",
            ),
            (
                inside,
                502,
                gone,
                ErrorCode::SandboxGone,
                "[SBX-007] sandbox s1 is gone: E2B says: The sandbox was not found (killed, or its TTL expired)",
            ),
            (
                Call::Connect("s1"),
                502,
                gone,
                ErrorCode::SandboxGone,
                "[SBX-007] sandbox s1 is gone: E2B says: The sandbox was not found (killed, or its TTL expired)",
            ),
            (inside, 502, port, ErrorCode::Provider, "[SBX-015] the e2b backend failed: the call failed"),
            (
                inside,
                404,
                r#"{"code":"not_found","message":"no such file"}"#,
                ErrorCode::NotFound,
                "[SBX-010] not found: /a",
            ),
            (
                inside,
                404,
                r#"{"code":404,"message":"path '/a' does not exist"}"#,
                ErrorCode::NotFound,
                "[SBX-010] not found: /a",
            ),
            (
                inside,
                403,
                r#"{"code":"permission_denied","message":"denied"}"#,
                ErrorCode::PermissionDenied,
                "[SBX-011] permission denied: /a",
            ),
            (
                inside,
                401,
                r#"{"code":401,"message":"unauthorized access"}"#,
                ErrorCode::Auth,
                "[SBX-002] authentication with the e2b backend failed: E2B refused the credentials: unauthorized access",
            ),
        ] {
            let err = map(call, status, body);
            assert_eq!((err.code(), err.to_string().as_str()), (code, text), "{call:?} {status} {body}");
            let keeps_source = matches!(
                code,
                ErrorCode::Auth
                    | ErrorCode::RateLimited
                    | ErrorCode::Configuration
                    | ErrorCode::Provider
                    | ErrorCode::Connect
            );
            assert_eq!(err.source().is_some(), keeps_source, "{call:?} {status}");
        }
    }

    #[test]
    fn retry_after_in_seconds() {
        assert_eq!(retry_after(Some(" 7 ")), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(Some("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(retry_after(None), None);
    }
}
