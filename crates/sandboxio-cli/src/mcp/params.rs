//! The tools' arguments: their JSON schemas are what `tools/list` shows an agent, and
//! unknown fields are refused.

use schemars::JsonSchema;
use serde::Deserialize;

/// `create_sandbox`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    /// Network policy: `deny`, `allow`, or `allow=HOST,..`; within the operator's (the
    /// operator's own when absent).
    pub network: Option<String>,
    /// How long the sandbox may live, in seconds, within the operator's bound (10 minutes,
    /// or the bound if shorter, when absent).
    pub ttl_seconds: Option<u64>,
}

/// The arguments of the tools that take only a sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdParams {
    /// The id `create_sandbox` returned.
    pub sandbox_id: String,
}

/// `extend_sandbox`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendParams {
    /// The id `create_sandbox` returned.
    pub sandbox_id: String,
    /// The sandbox then lives this many seconds from now (within the operator's bound).
    pub ttl_seconds: u64,
}

/// `run_command`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommandParams {
    /// The id `create_sandbox` returned.
    pub sandbox_id: String,
    /// The command, run by `sh -c` in the sandbox.
    pub command: String,
    /// Kill it after this many seconds (0: at once). At most the operator's timeout, which
    /// is also the default (60 s unless the operator set another).
    pub timeout_seconds: Option<u64>,
}

/// `run_code`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCodeParams {
    /// The id `create_sandbox` returned.
    pub sandbox_id: String,
    /// A Python cell; its last expression's value comes back as a rich result.
    pub code: String,
    /// Interrupt it after this many seconds (0: at once). At most the operator's timeout,
    /// which is also the default (60 s unless the operator set another).
    pub timeout_seconds: Option<u64>,
}

/// `read_file`'s and `list_files`' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathParams {
    /// The id `create_sandbox` returned.
    pub sandbox_id: String,
    /// A path in the sandbox (relative ones are under its working directory).
    pub path: String,
}

/// `write_file`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileParams {
    /// The id `create_sandbox` returned.
    pub sandbox_id: String,
    /// A path in the sandbox (relative ones are under its working directory).
    pub path: String,
    /// The file's new content: text, or base64 with `encoding: "base64"` (for bytes that
    /// are not UTF-8).
    pub content: String,
    /// `text` (the default) or `base64`.
    pub encoding: Option<String>,
}
