//! # sandboxio
//!
//! One honest, compile-time-safe API over every sandbox that runs untrusted code for AI
//! agents: an in-memory fake for tests (always built), and backends behind Cargo features.
//!
//! ```
//! use sandboxio::{Command, NetworkPolicy, Sandbox};
//!
//! # futures_lite::future::block_on(async {
//! let sandbox = Sandbox::builder("fake://")?
//!     .network(NetworkPolicy::deny_all()) // required: there is no default policy
//!     .create()
//!     .await?;
//! let out = sandbox.run(Command::new("echo").arg("hello")).await?;
//! assert_eq!(out.stdout, b"hello\n");
//! sandbox.close().await?;
//! # Ok::<(), sandboxio::Error>(()) }).unwrap();
//! ```
//!
//! Forgetting the policy is a compile error that says what to do:
//!
//! ```compile_fail
//! # futures_lite::future::block_on(async {
//! let sandbox = sandboxio::Sandbox::builder("fake://")?.create().await?;
//! # Ok::<(), sandboxio::Error>(()) });
//! ```
//!
//! ## Shape
//!
//! - [`Sandbox::builder`] / [`Sandbox::builder_with`] → [`SandboxBuilder`] (typestate:
//!   `network(..)` before `create()`, `limits(..)` at most once) → [`Sandbox`].
//! - [`Sandbox::run`] → [`ExecResult`]; [`Sandbox::stream`] → [`ExecStream`] (a `Stream`,
//!   never a future); [`Sandbox::run_code`] → [`CodeResult`]; [`Sandbox::fs`] → [`Fs`].
//! - [`Sandbox::kill`] (idempotent), [`Sandbox::close`], [`Sandbox::detach`]; dropping an
//!   owned sandbox tears it down in the background, and [`shutdown`] waits for that.
//! - [`sync`]: the blocking twin of every type and method, generated from the async API.
//! - Errors: one [`Error`] with a stable [`ErrorCode`] and a page per code in
//!   `docs/errors/`.
//! - Backends implement [`backend::Backend`]; [`testing::FakeBackend`] is the in-memory one.
//!
//! ## Features
//!
//! All opt-in; the default build pulls no adapter code.
//!
//! | DSN | backend | feature | status |
//! |---|---|---|---|
//! | `fake://` | in-memory fake ([`testing::FakeBackend`]) | always on | available |
//! | – | the backend contract suite (`testing::contract`) | `contract` | available |
//! | `local://` | Linux namespaces via bubblewrap (`backends::local`) | `local` | available |
//! | `docker://` | Docker engine over bollard (`backends::docker`) | `docker` | available |
//! | `e2b://` | E2B micro-VMs over their REST, Connect and code-interpreter protocols (`backends::e2b`) | `e2b` | available |
//! | `modal://` | Modal Sandboxes over Modal's gRPC API (`backends::modal`) | `modal` | available |
#![cfg_attr(docsrs, feature(doc_cfg))]

mod api;
mod audit;
pub mod backend;
pub mod backends;
pub mod dsn;
mod duration;
#[cfg(feature = "egress")]
mod egress;
mod error;
mod exec;
mod fs;
mod inventory;
pub mod path;
mod policy;
mod runtime;
#[cfg(any(feature = "local", feature = "docker"))]
mod sandboxd;
mod secret;
pub mod sync;
pub mod testing;
pub mod text;
mod transfer;

pub use api::builder::{DEFAULT_CREATE_TIMEOUT, DEFAULT_TTL, IntoBackend, MAX_TTL, SandboxBuilder, state};
pub use api::code_stream::CodeStream;
pub use api::fs::Fs;
pub use api::lines::{DEFAULT_MAX_LINE, ExecLines, OutputLine};
pub use api::sandbox::Sandbox;
pub use api::stream::ExecStream;
pub use audit::{
    AuditConfig, AuditSink, EgressRecord, JsonLinesSink, OperationKind, OperationRecord, Outcome,
    RecordingSink, TracingSink,
};
pub use duration::MAX_TIMEOUT;
pub use error::{BoxError, Error, ErrorCode, Result};
pub use exec::{
    Code, CodeContext, CodeError, CodeResult, Command, DEFAULT_CELL_OUTPUT_LIMIT, DEFAULT_OUTPUT_LIMIT,
    ExecResult, ExitStatus, MAX_ARG_STRLEN, MAX_ARG_TOTAL, MimeBundle, OutputChunk, StreamKind,
};
pub use fs::{DEFAULT_DOWNLOAD_LIMIT, DEFAULT_FS_TIMEOUT, DEFAULT_READ_LIMIT, DirEntry, FileKind};
pub use inventory::{ReapOptions, ReapReport, SandboxInfo};
#[cfg(feature = "egress")]
#[cfg_attr(docsrs, doc(cfg(feature = "egress")))]
pub use policy::EgressResolver;
pub use policy::{
    ALLOWLIST_DEFAULT_PORT, AllowlistEntry, AllowlistPorts, AllowlistTarget, Capabilities, EgressMechanism,
    IsolationTier, NetworkEnforcement, NetworkPolicy, PROVIDER_ALLOWLIST_MAX, ProviderAllowlist,
    ResourceLimits,
};
pub use runtime::{TEARDOWN_GRACE, pending_teardowns, set_teardown_grace, shutdown, teardown_grace};
pub use secret::SecretString;
pub use transfer::TransferProgress;

/// Compiles and runs the code blocks of README.md as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The code blocks of the pages under `docs/` as doc tests, each page built with the
/// features its examples need (a plain `cargo test` builds those that need none).
#[cfg(doctest)]
mod docs_doctests {
    #[doc = include_str!("../docs/api.md")]
    struct Api;
    #[doc = include_str!("../docs/testing.md")]
    struct Testing;
    #[doc = include_str!("../docs/mcp.md")]
    struct Mcp;
    #[doc = include_str!("../docs/performance.md")]
    struct Performance;
    #[doc = include_str!("../docs/backends/local.md")]
    struct Local;
    #[cfg(feature = "docker")]
    #[doc = include_str!("../docs/backends/docker.md")]
    struct Docker;
    #[doc = include_str!("../docs/backends/e2b.md")]
    struct E2b;
    #[doc = include_str!("../docs/backends/modal.md")]
    struct Modal;
}
