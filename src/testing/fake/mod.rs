//! [`FakeBackend`]: the in-memory backend, a supported product surface for tests.
//!
//! - [`backend`]: the public handle, its configuration, scripting and observation.
//! - [`world`]: the state clones share under one lock (clock, sandboxes, scripts, calls).
//! - [`sandbox`]: one sandbox's operations; [`stream`]: a streamed process.
//! - [`process`]: what a simulated process starts with and how it runs to a trace.
//! - [`shell`], [`python`]: the command and code interpreters; [`machine`]: the process
//!   model they share; [`vfs`]: the in-memory file system.
//! - `hooks` (with the `contract` feature): test-only hooks.

mod backend;
#[cfg(feature = "contract")]
mod hooks;
mod machine;
mod process;
mod python;
mod sandbox;
mod shell;
mod stream;
mod vfs;
mod world;

use std::time::Duration;

use crate::audit::OperationKind;
#[cfg(doc)]
use crate::error::Error;
use crate::policy::NetworkPolicy;

pub use backend::FakeBackend;
pub use vfs::WORKDIR;

const SCHEME: &str = "fake";

/// How long a fake `create()` takes on the virtual clock unless
/// [`FakeBackend::with_create_latency`] says otherwise: 50 ms, so that a create timeout
/// shorter than that fires, as it would on any real provider.
pub const DEFAULT_CREATE_LATENCY: Duration = Duration::from_millis(50);

/// A failure the fake produces on demand.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// The command or cell times out: [`Error::ExecutionTimeout`] with empty partial output,
    /// after the virtual clock advances by the command's timeout.
    Timeout,
    /// [`Error::NetworkPolicyViolation`], as a backend that reports blocked egress raises it.
    NetworkPolicyViolation,
    /// The command exits with this code and no output.
    ExitCode(i32),
    /// The sandbox's TTL expires now: this call and every later one get
    /// [`Error::SandboxGone`].
    Expire,
    /// [`Error::RateLimited`] with this retry-after.
    RateLimited(Option<Duration>),
    /// [`Error::Provider`] with this message.
    Provider(String),
    /// [`Error::Auth`]: the provider refused the credentials.
    Auth,
}

/// One call the fake received, for assertions. Calls are named as the audit log names
/// operations ([`OperationKind`]): an upload is one [`OperationKind::FsUpload`] call, not
/// the writes it is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FakeCall {
    /// Which operation.
    pub kind: OperationKind,
    /// The sandbox it was made on (`None` for a failed create).
    pub sandbox_id: Option<String>,
    /// The network policy in effect for that sandbox.
    pub network: NetworkPolicy,
    /// The argv, for `run` and `stream`.
    pub argv: Vec<String>,
    /// The source, for `run_code`.
    pub code: Option<String>,
    /// The sandbox path, for file operations (uploads and downloads included).
    pub path: Option<String>,
    /// The virtual time of the call.
    pub at: Duration,
}
