//! The FakeBackend's contract run under smol, with every capability declared but
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
        .run()
}
