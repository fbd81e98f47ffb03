//! The FakeBackend's contract run under a current-thread tokio runtime.

use std::process::ExitCode;

use sandboxio::testing::FakeBackend;
use sandboxio::testing::contract::{ContractSuite, FakeProbes};

fn main() -> ExitCode {
    let backend = FakeBackend::new();
    ContractSuite::new(backend.clone())
        .probes(FakeProbes::new(backend.clone()))
        .audit_sink(backend.audit_sink())
        .executor(|test| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime")
                .block_on(test)
        })
        .run()
}
