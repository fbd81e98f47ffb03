//! The provider's wire format: the JSON bodies of the Example Cloud API, one type per body.
//!
//! Everything the adapter sends or reads goes through these types, so a change in the
//! provider's API is a change here. Byte strings (a command's stdin and output) travel as
//! base64.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /v1/sandboxes`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateRequest {
    /// A token the client chose, so that `DELETE /v1/create-tokens/{token}` can cancel a
    /// creation whose reply never arrived (the caller gave up, the create timed out).
    pub client_token: String,
    /// Provider-native labels: sandboxio's metadata goes here.
    pub labels: BTreeMap<String, String>,
    /// Environment of every process. Shown back by the API.
    pub env: Vec<(String, String)>,
    /// Secret environment of every process: delivered, never shown back.
    pub secret_env: Vec<(String, String)>,
    /// Egress.
    pub network: Network,
    /// Seconds until the provider destroys the sandbox.
    pub ttl_secs: u64,
}

/// The provider's egress settings: all or nothing (no allowlists).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// No egress.
    Deny,
    /// Unrestricted egress.
    Allow,
}

/// A sandbox as `POST /v1/sandboxes` and `GET /v1/sandboxes/{id}` return it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxInfo {
    /// The provider's id.
    pub id: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// The environment it was created with (never the secret one).
    pub env: Vec<(String, String)>,
}

/// `GET /v1/sandboxes?label=k=v`: the ids of the live sandboxes with that label.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxList {
    /// The ids.
    pub ids: Vec<String>,
}

/// `GET /v1/sandboxes/{id}/processes`: the command lines running in a sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessList {
    /// One command line per process.
    pub processes: Vec<String>,
}

/// `POST /v1/sandboxes/{id}/execs`: run one command to completion.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecRequest {
    /// Chosen by the client, so that `DELETE /v1/sandboxes/{id}/execs/{exec_id}` can kill
    /// the command while this request waits for it.
    pub exec_id: String,
    /// Program first; never joined into a shell line.
    pub argv: Vec<String>,
    /// Added to the sandbox's environment, in order (a later name wins).
    pub env: Vec<(String, String)>,
    /// Working directory; the provider's default when absent.
    pub cwd: Option<String>,
    /// Bytes on stdin, then end of file; no stdin when absent.
    #[serde(with = "base64_opt")]
    pub stdin: Option<Vec<u8>>,
    /// Milliseconds before the provider kills the command's process tree.
    pub timeout_ms: Option<u64>,
    /// Bytes kept per stream; the rest is dropped and `truncated` set.
    pub output_limit: usize,
}

/// The reply to an exec, also when it timed out (`timed_out`, with the output so far).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecReply {
    /// The exit code, when the command exited.
    pub exit_code: Option<i32>,
    /// The signal number, when a signal ended it.
    pub signal: Option<i32>,
    /// Stdout.
    #[serde(with = "base64_bytes")]
    pub stdout: Vec<u8>,
    /// Stderr.
    #[serde(with = "base64_bytes")]
    pub stderr: Vec<u8>,
    /// Output past `output_limit` was dropped.
    pub truncated: bool,
    /// The timeout elapsed and the provider killed the command.
    pub timed_out: bool,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
}

/// The body of every error reply (any status from 400 up).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A stable kind: `unauthorized`, `sandbox_not_found`, `sandbox_gone`, `path_not_found`,
    /// `permission_denied`, `invalid_request`, `cancelled`, `rate_limited`, `internal`.
    pub error: String,
    /// For people.
    pub message: String,
    /// The path a `path_not_found` or `permission_denied` is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

mod base64_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    #[allow(clippy::ref_option, reason = "serde's `with` passes the field by reference")]
    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => super::base64_bytes::serialize(b, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        #[derive(Deserialize)]
        struct Wrapped(#[serde(with = "super::base64_bytes")] Vec<u8>);
        Ok(Option::<Wrapped>::deserialize(d)?.map(|Wrapped(b)| b))
    }
}
