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
        (401, ..) => Error::auth(
            SCHEME,
            format!("the provider refused the key in {API_KEY_ENV}"),
            Some(API_KEY_ENV.to_owned()),
        )
        .with_source(e),
        (429, ..) => Error::rate_limited(SCHEME, *retry_after).with_source(e),
        (404, "sandbox_not_found", Asked::Connect(id)) => {
            Error::connect(SCHEME, format!("no sandbox {id}")).with_source(e)
        }
        // `SandboxGone`, `NotFound`, `PermissionDenied` and `InvalidInput` carry no cause:
        // what the provider said is kept in their message or path.
        (404 | 410, "sandbox_not_found" | "sandbox_gone", Asked::Sandbox(id)) => {
            Error::sandbox_gone(id, body.message.clone())
        }
        // A command's missing working directory; the core rewrites the path to the one
        // the caller wrote.
        (404, "path_not_found", _) => Error::not_found(body.path.clone().unwrap_or_default()),
        (403, "permission_denied", _) => Error::permission_denied(body.path.clone().unwrap_or_default()),
        (400, "invalid_request", _) => Error::invalid_input(body.message.clone()),
        _ => Error::provider(SCHEME, format!("HTTP {status}"), e),
    }
}

/// The error for a missing API key, raised at the first call that needs one.
pub(crate) fn missing_key() -> Error {
    Error::auth(SCHEME, format!("no API key: set {API_KEY_ENV}"), Some(API_KEY_ENV.to_owned()))
}

#[cfg(test)]
mod tests {
    use sandboxio::ErrorCode;

    use super::*;
    use crate::api::ErrorBody;

    fn reply(status: u16, kind: &str, path: Option<&str>) -> ApiError {
        let body =
            ErrorBody { error: kind.to_owned(), message: "said".to_owned(), path: path.map(str::to_owned) };
        ApiError::Status { status, body, retry_after: None }
    }

    #[test]
    fn each_reply_maps_to_its_code_and_keeps_the_reply_as_source() {
        let cases = [
            (reply(401, "unauthorized", None), Asked::Create, ErrorCode::Auth),
            (reply(429, "rate_limited", None), Asked::Create, ErrorCode::RateLimited),
            (reply(404, "sandbox_not_found", None), Asked::Connect("ex-1"), ErrorCode::Connect),
            (reply(404, "sandbox_not_found", None), Asked::Sandbox("ex-1"), ErrorCode::SandboxGone),
            (reply(410, "sandbox_gone", None), Asked::Sandbox("ex-1"), ErrorCode::SandboxGone),
            (reply(404, "path_not_found", Some("/w/x")), Asked::Sandbox("ex-1"), ErrorCode::NotFound),
            (
                reply(403, "permission_denied", Some("/etc")),
                Asked::Sandbox("ex-1"),
                ErrorCode::PermissionDenied,
            ),
            (reply(400, "invalid_request", None), Asked::Sandbox("ex-1"), ErrorCode::InvalidInput),
            (reply(500, "internal", None), Asked::Sandbox("ex-1"), ErrorCode::Provider),
        ];
        for (e, asked, code) in cases {
            let mapped = map(e, asked);
            assert_eq!(mapped.code(), code, "{mapped}");
            if matches!(
                code,
                ErrorCode::Auth | ErrorCode::RateLimited | ErrorCode::Connect | ErrorCode::Provider
            ) {
                let source = std::error::Error::source(&mapped).expect("the reply as source");
                assert!(source.to_string().starts_with("HTTP "), "{source}");
            }
        }
        let auth = map(reply(401, "unauthorized", None), Asked::Create);
        assert!(auth.to_string().contains(API_KEY_ENV), "{auth}");
    }
}
