//! gRPC statuses from Modal turned into sandboxio's [`Error`], the status kept as the
//! `source()` where the variant has one; the retry rule for idempotent calls.
//!
//! The mapping follows the meaning of each gRPC code (and the shape of Modal's throttling
//! details, `RPCStatus` holding an `RPCRetryPolicy`, declared in `proto/modal/api.proto`):
//!
//! | status | call | error |
//! |---|---|---|
//! | `UNAUTHENTICATED`, `PERMISSION_DENIED` | any | [`Error::Auth`] |
//! | a refusal that names the client's version, or `UNIMPLEMENTED` | any | [`Error::Configuration`] ("update sandboxio") |
//! | `RESOURCE_EXHAUSTED` | any | [`Error::RateLimited`], with the server's retry-after |
//! | `NOT_FOUND` | on a sandbox | [`Error::SandboxGone`] |
//! | `NOT_FOUND` | connect | [`Error::Connect`] |
//! | `INVALID_ARGUMENT`, `OUT_OF_RANGE` | create | [`Error::Configuration`] |
//! | `UNAVAILABLE`, `DEADLINE_EXCEEDED` | any | [`Error::Connect`] (retryable) |
//! | anything else | any | [`Error::Provider`] |

use std::time::Duration;

use prost::Message;
use tonic::{Code, Status};

use super::SCHEME;
use super::proto::client::{RpcRetryPolicy, RpcStatus};
use super::request::{CLIENT_TYPE, CLIENT_VERSION, LIBRARY_VERSION};
use crate::error::Error;

/// What the failed call was about, which decides what `NOT_FOUND` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call<'a> {
    /// A control-plane call about no particular sandbox (app, image, list).
    Control,
    /// `SandboxCreate`.
    Create,
    /// A call on sandbox `id` the caller holds.
    Sandbox(&'a str),
    /// Attaching to sandbox `id` by its id.
    Connect(&'a str),
}

/// The longest server-requested wait honoured (a longer one is capped to this).
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_mins(5);
/// How many times an idempotent call is retried after a transient status.
pub(crate) const RETRIES: u32 = 3;

/// The wait before retry `attempt` (1-based): 100 ms, doubling, at most 1 s.
pub(crate) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << attempt.saturating_sub(1).min(10)))
        .min(Duration::from_secs(1))
}

/// The wait before reopening a router stream or repeating a router call for the `attempt`th
/// time (1-based): 10 ms, doubling, at most 320 ms (the router is one hop from the task, so
/// a cut there is retried sooner than a control-plane call).
pub(crate) fn router_backoff(attempt: u32) -> Duration {
    Duration::from_millis(10u64.saturating_mul(1 << attempt.saturating_sub(1).min(10)))
        .min(Duration::from_millis(320))
}

/// Whether an idempotent call may be retried after `code`.
pub(crate) fn transient(code: Code) -> bool {
    matches!(
        code,
        Code::DeadlineExceeded | Code::Unavailable | Code::Cancelled | Code::Internal | Code::Unknown
    )
}

/// The wait the server asked for in the status details (`grpc-status-details-bin`, an
/// `RPCStatus` whose details hold an `RPCRetryPolicy`), capped at [`MAX_RETRY_AFTER`].
/// The type URL is matched on its message name, whatever its prefix.
pub(crate) fn retry_after(status: &Status) -> Option<Duration> {
    let details = RpcStatus::decode(status.details()).ok()?;
    details.details.iter().find_map(|any| {
        let name = any.type_url.rsplit('/').next().unwrap_or_default();
        if name != "modal.client.RPCRetryPolicy" {
            return None;
        }
        let secs = RpcRetryPolicy::decode(any.value.as_slice()).ok()?.retry_after_secs;
        (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f32(secs).min(MAX_RETRY_AFTER))
    })
}

/// Whether a refusal is about the client being too old or unknown.
fn names_client_version(status: &Status) -> bool {
    let m = status.message().to_ascii_lowercase();
    matches!(status.code(), Code::FailedPrecondition | Code::Unauthenticated | Code::InvalidArgument)
        && (m.contains("old client")
            || m.contains("client version")
            || m.contains("client type")
            || m.contains("too old")
            || m.contains("upgrade"))
}

/// The most of a status message kept in an error message.
const MESSAGE_EXCERPT: usize = 512;

/// Turns a status from `call` into an [`Error`].
pub(crate) fn from_status(status: Status, call: Call<'_>) -> Error {
    let said: String = status.message().chars().take(MESSAGE_EXCERPT).collect();
    let code = status.code();
    if names_client_version(&status) || code == Code::Unimplemented {
        let identity = format!(
            "x-modal-client-type {}, x-modal-client-version {CLIENT_VERSION}, {LIBRARY_VERSION}",
            CLIENT_TYPE as i32
        );
        return Error::configuration(format!(
            "Modal refused this client ({identity}): {said}; the protocol sandboxio speaks is out of date, update sandboxio"
        ))
        .with_source(status);
    }
    match code {
        Code::Unauthenticated | Code::PermissionDenied => {
            Error::auth(SCHEME, format!("Modal refused the token: {said}"), None).with_source(status)
        }
        Code::ResourceExhausted => {
            let after = retry_after(&status);
            Error::rate_limited(SCHEME, after).with_source(status)
        }
        Code::NotFound => match call {
            Call::Sandbox(id) => Error::sandbox_gone(id, format!("Modal no longer knows it: {said}")),
            Call::Connect(id) => {
                Error::connect(SCHEME, format!("no Modal sandbox {id}: {said}")).with_source(status)
            }
            Call::Control | Call::Create => {
                Error::provider(SCHEME, format!("Modal: not found: {said}"), status)
            }
        },
        Code::InvalidArgument | Code::OutOfRange if call == Call::Create => {
            Error::configuration(format!("Modal refused the sandbox definition: {said}")).with_source(status)
        }
        Code::Unavailable | Code::DeadlineExceeded => {
            Error::connect(SCHEME, format!("Modal is unreachable or did not answer in time: {said}"))
                .with_source(status)
        }
        _ => Error::provider(SCHEME, format!("Modal answered {code:?}: {said}"), status),
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use prost_types::Any;

    use super::*;
    use crate::ErrorCode;

    fn with_retry_policy(type_url: &str, secs: f32) -> Status {
        let policy = RpcRetryPolicy { retry_after_secs: secs }.encode_to_vec();
        let details = RpcStatus {
            code: Code::ResourceExhausted as i32,
            message: "slow down".into(),
            details: vec![
                Any { type_url: "type.googleapis.com/google.rpc.DebugInfo".into(), value: vec![1, 2, 3] },
                Any { type_url: type_url.into(), value: policy },
            ],
        };
        Status::with_details(
            Code::ResourceExhausted,
            "Sandbox creation rate limit exceeded",
            details.encode_to_vec().into(),
        )
    }

    #[test]
    fn throttling_is_rate_limited_with_the_servers_wait() {
        for (url, secs, want) in [
            ("type.modal.com/modal.client.RPCRetryPolicy", 2.5, Some(Duration::from_millis(2500))),
            ("type.googleapis.com/modal.client.RPCRetryPolicy", 0.0, Some(Duration::ZERO)),
            ("modal.client.RPCRetryPolicy", 1e9, Some(MAX_RETRY_AFTER)),
            ("type.modal.com/modal.client.RPCRetryPolicy", f32::NAN, None),
            ("type.modal.com/modal.client.RPCRetryPolicy", -1.0, None),
            ("type.modal.com/modal.client.Other", 2.0, None),
        ] {
            let err = from_status(with_retry_policy(url, secs), Call::Create);
            assert_eq!(err.code(), ErrorCode::RateLimited, "{url}");
            assert!(
                matches!(&err, Error::RateLimited { retry_after, .. } if *retry_after == want),
                "{url} {secs}: {err:?}"
            );
            assert!(err.source().unwrap().to_string().contains("rate limit"), "the status is the source");
        }
        // Details that are not an RPCStatus: no wait, still rate limited.
        let garbage = Status::with_details(Code::ResourceExhausted, "x", vec![0xff, 0xff, 0xff].into());
        assert!(matches!(from_status(garbage, Call::Control), Error::RateLimited { retry_after: None, .. }));
    }

    #[test]
    fn codes_map_by_meaning_and_call() {
        let cases: &[(Status, Call<'_>, &str)] = &[
            (
                Status::unauthenticated("invalid token"),
                Call::Control,
                "[SBX-002] authentication with the modal backend failed: Modal refused the token: invalid token",
            ),
            (
                Status::permission_denied("no access to workspace"),
                Call::Create,
                "[SBX-002] authentication with the modal backend failed: Modal refused the token: no access to workspace",
            ),
            (
                Status::not_found("Sandbox sb-1 not found"),
                Call::Sandbox("sb-1"),
                "[SBX-007] sandbox sb-1 is gone: Modal no longer knows it: Sandbox sb-1 not found",
            ),
            (
                Status::not_found("Sandbox sb-2 not found"),
                Call::Connect("sb-2"),
                "[SBX-001] cannot connect to the modal backend: no Modal sandbox sb-2: Sandbox sb-2 not found",
            ),
            (
                Status::not_found("App not found"),
                Call::Control,
                "[SBX-015] the modal backend failed: Modal: not found: App not found",
            ),
            (
                Status::invalid_argument("memory_mb exceeds the maximum"),
                Call::Create,
                "[SBX-003] configuration error: Modal refused the sandbox definition: memory_mb exceeds the maximum",
            ),
            (
                Status::invalid_argument("bad offset"),
                Call::Sandbox("sb-1"),
                "[SBX-015] the modal backend failed: Modal answered InvalidArgument: bad offset",
            ),
            (
                Status::unavailable("connection reset"),
                Call::Sandbox("sb-1"),
                "[SBX-001] cannot connect to the modal backend: Modal is unreachable or did not answer in time: connection reset",
            ),
            (
                Status::deadline_exceeded("timeout"),
                Call::Control,
                "[SBX-001] cannot connect to the modal backend: Modal is unreachable or did not answer in time: timeout",
            ),
            (
                Status::failed_precondition("Sandbox is already running"),
                Call::Control,
                "[SBX-015] the modal backend failed: Modal answered FailedPrecondition: Sandbox is already running",
            ),
            (
                Status::internal("boom"),
                Call::Create,
                "[SBX-015] the modal backend failed: Modal answered Internal: boom",
            ),
        ];
        for (status, call, want) in cases {
            let err = from_status(status.clone(), *call);
            assert_eq!(err.to_string(), *want);
            if !matches!(err, Error::SandboxGone { .. }) {
                assert_eq!(err.source().unwrap().to_string(), status.to_string(), "{want}");
            }
        }
    }

    #[test]
    fn a_client_too_old_refusal_is_a_configuration_error_naming_the_identity() {
        let identity = format!(
            "x-modal-client-type 9, x-modal-client-version 1.0.0, sandboxio-rust/{}",
            env!("CARGO_PKG_VERSION")
        );
        for status in [
            Status::failed_precondition("Old client"),
            Status::unauthenticated("x-modal-client-version is required for this client type"),
            Status::failed_precondition("Please upgrade your client"),
            Status::unimplemented("unknown method SandboxCreate"),
        ] {
            let err = from_status(status.clone(), Call::Create);
            assert_eq!(err.code(), ErrorCode::Configuration);
            assert_eq!(
                err.to_string(),
                format!(
                    "[SBX-003] configuration error: Modal refused this client ({identity}): {}; the protocol sandboxio speaks is out of date, update sandboxio",
                    status.message()
                )
            );
            assert!(err.source().is_some());
        }
    }

    #[test]
    fn long_messages_are_cut() {
        let err = from_status(Status::internal("x".repeat(10_000)), Call::Control);
        assert!(err.to_string().len() < 600, "{}", err.to_string().len());
    }

    #[test]
    fn the_retry_rule() {
        let waits: Vec<_> = (1..=5).map(backoff).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000].map(Duration::from_millis));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(1));
        let waits: Vec<_> = (1..=7).map(router_backoff).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 320].map(Duration::from_millis));
        for code in
            [Code::DeadlineExceeded, Code::Unavailable, Code::Cancelled, Code::Internal, Code::Unknown]
        {
            assert!(transient(code), "{code:?}");
        }
        for code in [
            Code::Ok,
            Code::NotFound,
            Code::ResourceExhausted,
            Code::Unauthenticated,
            Code::InvalidArgument,
            Code::FailedPrecondition,
        ] {
            assert!(!transient(code), "{code:?}");
        }
        assert_eq!(RETRIES, 3);
    }
}
