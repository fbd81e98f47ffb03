//! From the provider's failures to `sandboxio::Error`, keeping each as the `source()`.
//!
//! The same reply means different things for different calls (a 404 is `Connect` for
//! `connect` and `SandboxGone` for a command), so each call site says what it asked.

use sandboxio::Error;

use crate::client::ApiError;
use crate::{API_KEY_ENV, SCHEME};

/// What the failed call was about.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Asked<'a> {
    /// Creating a sandbox.
    Create,
    /// Attaching to sandbox `id` by id.
    Connect(&'a str),
    /// An operation on sandbox `id`, which the caller holds.
    Sandbox(&'a str),
}

/// The `sandboxio::Error` for `e`, with `e` as its source.
pub(crate) fn map(e: ApiError, asked: Asked<'_>) -> Error {
    let ApiError::Status { status, body, retry_after } = &e else {
        return match asked {
            Asked::Connect(id) => Error::connect(SCHEME, format!("cannot reach sandbox {id}")).with_source(e),
            Asked::Create | Asked::Sandbox(_) => Error::provider(SCHEME, "the provider did not reply", e),
        };
    };
    match (*status, body.error.as_str(), asked) {
        (401 | 403, ..) => Error::auth(
            SCHEME,
            format!("the provider refused the key in {API_KEY_ENV}"),
            Some(API_KEY_ENV.to_owned()),
        )
        .with_source(e),
        (429, ..) => Error::rate_limited(SCHEME, *retry_after).with_source(e),
        (404, "sandbox_not_found", Asked::Connect(id)) => {
            Error::connect(SCHEME, format!("no sandbox {id}")).with_source(e)
        }
        (404 | 410, "sandbox_not_found" | "sandbox_gone", Asked::Sandbox(id)) => {
            // `SandboxGone` and `InvalidInput` carry no cause: the message is what is kept.
            Error::sandbox_gone(id, body.message.clone())
        }
        (400, "invalid_request", _) => Error::invalid_input(body.message.clone()),
        _ => Error::provider(SCHEME, format!("HTTP {status}"), e),
    }
}

/// The error for a missing API key, raised at the first call that needs one.
pub(crate) fn missing_key() -> Error {
    Error::auth(SCHEME, format!("no API key: set {API_KEY_ENV}"), Some(API_KEY_ENV.to_owned()))
}
