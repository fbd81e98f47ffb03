//! The FakeBackend's full contract run through the blocking facade (`sandboxio::sync`):
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
        .run()
}
