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
//! - [`Sandbox::run`] → [`ExecResult`]; [`Sandbox::stream`] → [`exec::ExecStream`] (a
//!   `Stream`, never a future); [`Sandbox::run_code`] → [`CodeResult`]; [`Sandbox::fs`] →
//!   [`fs::Fs`].
//! - [`Sandbox::kill`] (idempotent), [`Sandbox::close`], [`Sandbox::detach`]; dropping an
//!   owned sandbox tears it down in the background, and [`runtime::shutdown`] waits for that.
//! - [`sync`] holds the blocking twin of every type and method, generated from the async API.
//! - Errors: one [`Error`] with a stable [`ErrorCode`] and a page per code in
//!   `docs/errors/`.
//! - Backends implement [`backend::Backend`]; [`testing::FakeBackend`] is the in-memory one.
//!
//! ## Where things live
//!
//! The crate root holds what a first program names: [`Sandbox`], [`SandboxBuilder`],
//! [`Command`], [`ExecResult`], [`ExitStatus`], [`Code`], [`CodeResult`], [`NetworkPolicy`],
//! [`ResourceLimits`], [`Error`], [`ErrorCode`], [`Result`]. Every other item has one path,
//! in its module:
//!
//! - [`exec`] holds streams, their chunks and lines, code contexts and what cells return, the
//!   output and argument limits;
//! - [`fs`] holds [`fs::Fs`], directory entries, transfer progress, the file limits;
//! - [`policy`] holds allowlist entries, [`policy::Capabilities`], [`policy::IsolationTier`], how
//!   a policy is enforced, the egress resolver;
//! - [`builder`] holds the builder's typestates, [`builder::IntoBackend`], the TTL and
//!   create-timeout defaults and bounds;
//! - [`audit`] holds [`audit::AuditConfig`], the records and the sinks;
//! - [`inventory`] holds what `Sandbox::list` and `Sandbox::reap` take and report;
//! - [`runtime`] holds [`runtime::shutdown`] and the background-teardown grace;
//! - [`secret`] holds [`secret::SecretString`], a value that never prints;
//! - [`sync`] is the blocking facade;
//! - [`backend`], [`backends`], [`dsn`], [`path`], [`text`] hold the adapter interface, the
//!   first-party backends, DSNs and schemes, helpers for adapters;
//! - [`testing`] holds the fake backend and the contract suite.
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
pub mod audit;
pub mod backend;
pub mod backends;
pub mod builder;
pub mod dsn;
mod duration;
#[cfg(feature = "egress")]
mod egress;
mod error;
pub mod exec;
pub mod fs;
pub mod inventory;
pub mod path;
pub mod policy;
pub mod runtime;
#[cfg(any(feature = "local", feature = "docker"))]
mod sandboxd;
pub mod secret;
pub mod sync;
pub mod testing;
pub mod text;
mod transfer;

// What a first program names; everything else at its one path in the modules above.
pub use api::builder::SandboxBuilder;
pub use api::sandbox::Sandbox;
pub use error::{Error, ErrorCode, Result};
pub use exec::code::Code;
pub use exec::command::Command;
pub use exec::result::{CodeResult, ExecResult, ExitStatus};
pub use policy::limits::ResourceLimits;
pub use policy::network::NetworkPolicy;

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
