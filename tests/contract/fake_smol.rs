//! The FakeBackend's contract run under smol.

use std::process::ExitCode;

use sandboxio::testing::FakeBackend;
use sandboxio::testing::contract::{ContractSuite, FakeProbes};

fn main() -> ExitCode {
    let backend = FakeBackend::new();
    ContractSuite::new(backend.clone())
        .probes(FakeProbes::new(backend.clone()))
        .audit_sink(backend.audit_sink())
        .executor(smol::block_on)
        .run()
}
