//! What every contract run against the `FakeBackend` (the `fake*.rs` runners) shares.
//! Each runner in this folder is its own test binary (one per runtime or facade), includes
//! this module, and adds only what makes its run differ: the fake's declared
//! capabilities, the executor, the facade.

use std::process::ExitCode;

use sandboxio::testing::FakeBackend;
use sandboxio::testing::contract::{Arguments, ContractSuite, FakeProbes};

/// The suite against `backend`, driven by the fake's own probes and audit sink.
pub fn suite(backend: &FakeBackend) -> ContractSuite {
    ContractSuite::new(backend.clone())
        .probes(FakeProbes::new(backend.clone()))
        .audit_sink(backend.audit_sink())
}

/// Runs `suite` with the command line's arguments, one test at a time unless the command
/// line asks otherwise. The fake has one virtual clock for all its sandboxes: tests run
/// side by side would advance it for each other (a timeout elsewhere simulates minutes)
/// and expire each other's sandboxes at random. One at a time, each sees only its own
/// time (the whole run takes well under a second).
pub fn run_one_at_a_time(suite: ContractSuite) -> ExitCode {
    let mut args = Arguments::from_args();
    args.test_threads.get_or_insert(1);
    suite.run_with(&args)
}
