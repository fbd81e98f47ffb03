//! The `FakeBackend`'s contract runs: the reference runs every adapter's own contract test
//! looks like. One binary holds six runs, one after another, each a full pass of the suite
//! with what makes it differ:
//!
//! - `multi_thread`: every capability the fake declares by default, under a multi-thread
//!   tokio runtime;
//! - `current_thread`: the same under a current-thread runtime;
//! - `smol`: every capability but `COMMAND_SECRETS`, under smol's executor: the run where
//!   the refusal of `Command::secret_env` (and the sandbox-wide secrets that stay allowed)
//!   is checked on the fake;
//! - `minimal`: nothing declared, under the futures-lite executor, so sandboxes are created
//!   under allow-all and every capability's negative test (an undeclared capability
//!   raises) runs;
//! - `blocking` and `minimal_blocking`: the full and the minimal runs through the blocking
//!   facade (`sandboxio::sync`), every sandbox operation a blocking call; the tests of
//!   async-only behaviour (cancellation by dropping a future) are reported n/a, with the
//!   reason, in the test list and after the summary.
//!
//! The command line's arguments (a name filter, `--exact`, `--list`) apply to each run;
//! `SANDBOXIO_CONTRACT_FAKE_RUN=smol` (a comma-separated list) picks runs by name.

use std::process::ExitCode;

use sandboxio::policy::Capabilities;
use sandboxio::testing::FakeBackend;
use sandboxio::testing::contract::{Arguments, ContractSuite, Facade, FakeProbes};

/// The suite against `backend`, driven by the fake's own probes and audit sink.
fn suite(backend: &FakeBackend) -> ContractSuite {
    ContractSuite::new(backend.clone())
        .probes(FakeProbes::new(backend.clone()))
        .audit_sink(backend.audit_sink())
}

/// The six runs, by name.
fn runs() -> Vec<(&'static str, ContractSuite)> {
    let minimal = || FakeBackend::new().with_capabilities(Capabilities::empty());
    vec![
        (
            "multi_thread",
            suite(&FakeBackend::new()).executor(|test| {
                let runtime =
                    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
                runtime.expect("a tokio runtime").block_on(test)
            }),
        ),
        (
            "current_thread",
            suite(&FakeBackend::new()).executor(|test| {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
                runtime.expect("a tokio runtime").block_on(test)
            }),
        ),
        (
            "smol",
            suite(
                &FakeBackend::new()
                    .with_capabilities(Capabilities::all().difference(Capabilities::COMMAND_SECRETS)),
            )
            .executor(smol::block_on),
        ),
        ("minimal", suite(&minimal())),
        ("blocking", suite(&FakeBackend::new()).facade(Facade::Blocking)),
        ("minimal_blocking", suite(&minimal()).facade(Facade::Blocking)),
    ]
}

/// Runs each selected run with the command line's arguments, one test at a time unless the
/// command line asks otherwise. The fake has one virtual clock for all its sandboxes: tests
/// run side by side would advance it for each other (a timeout elsewhere simulates minutes)
/// and expire each other's sandboxes at random. One at a time, each sees only its own time
/// (each run takes well under a second).
fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    args.test_threads.get_or_insert(1);
    let picked = std::env::var("SANDBOXIO_CONTRACT_FAKE_RUN").ok();
    let mut failed = Vec::new();
    for (name, suite) in runs() {
        if picked.as_deref().is_some_and(|list| !list.split(',').any(|p| p.trim() == name)) {
            continue;
        }
        println!("\n==== contract run: fake, {name}");
        if suite.run_with(&args) != ExitCode::SUCCESS {
            failed.push(name);
        }
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("contract runs that failed: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}
