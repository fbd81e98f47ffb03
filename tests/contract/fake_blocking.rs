//! The `FakeBackend`'s full contract run through the blocking facade (`sandboxio::sync`):
//! every sandbox operation of every test is a blocking call. The tests of async-only
//! behaviour (cancellation by dropping a future) are reported n/a, with the reason, in the
//! test list and after the summary.

use std::process::ExitCode;

use sandboxio::testing::FakeBackend;
use sandboxio::testing::contract::{ContractSuite, Facade, FakeProbes};

fn main() -> ExitCode {
    let backend = FakeBackend::new();
    ContractSuite::new(backend.clone())
        .probes(FakeProbes::new(backend.clone()))
        .audit_sink(backend.audit_sink())
        .facade(Facade::Blocking)
        .run_with(&one_thread())
}

/// The fake has one virtual clock for all its sandboxes: tests run side by side would
/// advance it for each other (a timeout elsewhere simulates minutes) and expire each
/// other's sandboxes at random. One at a time, each sees only its own time (the whole run
/// takes well under a second).
fn one_thread() -> sandboxio::testing::contract::Arguments {
    let mut args = sandboxio::testing::contract::Arguments::from_args();
    args.test_threads.get_or_insert(1);
    args
}
