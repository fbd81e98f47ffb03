//! The backend contract suite: one call makes any backend prove it keeps sandboxio's
//! contract (stated clause by clause, with the test of each clause, in `docs/contract.md`).
//!
//! Feature `contract`. In a `harness = false` test target of your adapter crate:
//!
//! ```no_run
//! use sandboxio::testing::FakeBackend;
//! use sandboxio::testing::contract::{ContractSuite, FakeProbes};
//!
//! fn main() -> std::process::ExitCode {
//!     let backend = FakeBackend::new();
//!     ContractSuite::new(backend.clone())
//!         .probes(FakeProbes::new(backend.clone()))
//!         .audit_sink(backend.audit_sink())
//!         .run()
//! }
//! ```
//!
//! The suite reads the backend's declared capabilities and isolation tier, runs the tests
//! of what is declared and a negative test for each capability that is not, and reports
//! through `libtest-mimic`, so `cargo test` filters, `--list` and `--include-ignored` work
//! as usual. Tests whose behaviour probe is not implemented are reported as ignored with
//! `skip` and the probe's name, and counted in the summary; they never pass, and a strict
//! run fails them, unless [`Probes::not_applicable`] gives the reason the probe cannot
//! apply (the test is then `n/a`, with the reason listed after the summary). Test names
//! read as contract clauses: `run__timeout_raises_execution_timeout_and_does_not_hang`.
//! A summary after the run lists passed, failed, skipped, not-applicable and known-failure
//! counts per contract area.
//!
//! No negative check passes vacuously: each one (egress denied, no process or sandbox
//! left, a secret unseen) first proves in the same test that its probe observes the thing
//! when it is there. A control that cannot run skips its test with the reason (reported
//! ignored, listed in the summary), and fails it in a strict run
//! ([`ContractSuite::strict`], on by default under `SANDBOXIO_STRICT=1` or
//! any `SANDBOXIO_REQUIRE_*=1`, such as `SANDBOXIO_REQUIRE_DOCKER=1`).
//!
//! The tests drive the async API by default. [`ContractSuite::facade`] with
//! [`Facade::Blocking`] runs the same tests through the blocking facade
//! ([`sandboxio::sync`](crate::sync)) instead: every sandbox operation of every test is then
//! a blocking call, and the few tests of async-only behaviour (cancellation by dropping a
//! future at its k-th poll) are reported `n/a`, with the reason, in the test list and in
//! the summary.
//!
//! Each test is a clause of a [`ContractVersion`]: the version it arrived in. A run holds
//! the backend to the latest version unless [`ContractSuite::contract_version`] (or
//! `SANDBOXIO_CONTRACT_VERSION=1`, [`CONTRACT_VERSION_ENV`]) selects an older one; the
//! clauses added after it are then listed as not yet promised, with the version each
//! arrived in, neither passed nor skipped (`--include-ignored` runs them).
//!
//! # Reading this documentation from a copied adapter crate
//!
//! This module is behind the `contract` feature, so docs.rs and a plain `cargo doc` of an
//! adapter leave it out. From the adapter crate's directory, run
//! `cargo doc -p <your crate> -p sandboxio --features sandboxio/contract --no-deps` and open
//! `target/doc/sandboxio/testing/contract/index.html` (cargo refuses `--features` when the
//! only package selected is outside your workspace, so name your own crate too).

mod cases;
mod ctx;
mod facade;
mod inapplicable;
mod net_scripts;
mod probes;
mod rules;
mod runner;
mod version;

use std::fmt;

pub use ctx::LABEL_KEY;
pub use facade::Facade;
pub use inapplicable::Inapplicable;
pub use probes::{
    Canary, CancellationPoints, DefaultProbes, PROBE_CHECK_ID, ProbeFuture, ProbeKind, ProbeResult, Probes,
    python_egress_probe,
};
pub use runner::{ContractSuite, DEFAULT_TEST_TIMEOUT, Executor, STRICT_ENV};
pub use version::{CONTRACT_VERSION_ENV, ContractVersion};

/// The command-line arguments [`ContractSuite::run_with`] takes (`libtest-mimic`'s), for
/// running the suite from code with a filter of your own.
pub use libtest_mimic::Arguments;

mod fake_probes;
pub use fake_probes::FakeProbes;

/// An area of the contract: a group of clauses, and of the tests that check them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Row {
    /// Create, run, kill; teardown; idempotent kill; connect.
    Lifecycle,
    /// Dropped futures leave no orphan; teardown is bounded.
    Cancellation,
    /// Cancellation is never an error; kill works from synchronous code; orphan warnings.
    CancellationIdentity,
    /// `run`.
    Run,
    /// `run_code` and contexts.
    RunCode,
    /// `stream`.
    Streaming,
    /// The four ways a stream ends, each leaving no process.
    StreamingCleanup,
    /// `fs()`.
    Filesystem,
    /// Network policy and resource limits.
    Policy,
    /// Error mapping, typed options, auth errors.
    Errors,
    /// Create and execution timeouts, expiry.
    Timeouts,
    /// Declared capabilities work; undeclared ones raise.
    CapabilityHonesty,
    /// The reported isolation tier is honoured.
    IsolationHonesty,
    /// Audit records, secrets, labels.
    Observability,
    /// The blocking facade matches the async API.
    SyncParity,
}

impl Row {
    /// Every area, in the order of `docs/contract.md`.
    pub const ALL: &'static [Row] = &[
        Row::Lifecycle,
        Row::Cancellation,
        Row::CancellationIdentity,
        Row::Run,
        Row::RunCode,
        Row::Streaming,
        Row::StreamingCleanup,
        Row::Filesystem,
        Row::Policy,
        Row::Errors,
        Row::Timeouts,
        Row::CapabilityHonesty,
        Row::IsolationHonesty,
        Row::Observability,
        Row::SyncParity,
    ];

    /// The area's title, as `docs/contract.md` and the suite's summary print it.
    #[must_use]
    pub fn title(self) -> &'static str {
        match self {
            Row::Lifecycle => "Lifecycle",
            Row::Cancellation => "Cancellation",
            Row::CancellationIdentity => "Cancellation identity",
            Row::Run => "run",
            Row::RunCode => "run_code",
            Row::Streaming => "Streaming",
            Row::StreamingCleanup => "Streaming cleanup",
            Row::Filesystem => "Filesystem",
            Row::Policy => "Policy",
            Row::Errors => "Errors",
            Row::Timeouts => "Timeouts",
            Row::CapabilityHonesty => "Capability honesty",
            Row::IsolationHonesty => "Isolation honesty",
            Row::Observability => "Observability",
            Row::SyncParity => "Sync parity",
        }
    }
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.title())
    }
}

/// A contract test's name and row, as `docs/contract.md` lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CaseInfo {
    /// The test's name, a contract clause (`run__exit_codes_are_data`).
    pub name: &'static str,
    /// Its contract area.
    pub row: Row,
    /// `Some(reason)` for a test of async-only behaviour, reported n/a with that reason
    /// under [`Facade::Blocking`].
    pub async_only: Option<&'static str>,
    /// The clause of `docs/contract.md` the test checks (its clause table's text; several
    /// joined with ` / `), as a failure reports it; `None` if the page does not list it.
    pub clause: Option<String>,
    /// The contract version the clause arrived in.
    pub since: ContractVersion,
}

/// Every test of the suite, in order.
#[must_use]
pub fn cases() -> Vec<CaseInfo> {
    cases::all()
        .iter()
        .map(|c| CaseInfo {
            name: c.name,
            row: c.row,
            async_only: c.async_only,
            clause: rules::clause_of(c.name),
            since: c.since,
        })
        .collect()
}
