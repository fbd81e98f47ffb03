//! The `FakeBackend`'s contract run under smol, with every capability declared but
//! `COMMAND_SECRETS`: the run where the refusal of `Command::secret_env` (and the
//! sandbox-wide secrets that stay allowed) is checked on the fake.

use std::process::ExitCode;

use sandboxio::Capabilities;
use sandboxio::testing::FakeBackend;
use sandboxio::testing::contract::{ContractSuite, FakeProbes};

fn main() -> ExitCode {
    let backend =
        FakeBackend::new().with_capabilities(Capabilities::all().difference(Capabilities::COMMAND_SECRETS));
    ContractSuite::new(backend.clone())
        .probes(FakeProbes::new(backend.clone()))
        .audit_sink(backend.audit_sink())
        .executor(smol::block_on)
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
