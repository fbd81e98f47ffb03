//! The FakeBackend's contract run with almost nothing declared, through the blocking
//! facade (`sandboxio::sync`): every negative test (an undeclared capability raises) makes
//! its calls through the facade.

use std::process::ExitCode;

use sandboxio::Capabilities;
use sandboxio::testing::FakeBackend;
use sandboxio::testing::contract::{ContractSuite, Facade, FakeProbes};

fn main() -> ExitCode {
    let backend = FakeBackend::new().with_capabilities(Capabilities::empty());
    ContractSuite::new(backend.clone())
        .probes(FakeProbes::new(backend.clone()))
        .audit_sink(backend.audit_sink())
        .facade(Facade::Blocking)
        .run()
}
