//! The `FakeBackend`'s contract run under smol, with every capability declared but
//! `COMMAND_SECRETS`: the run where the refusal of `Command::secret_env` (and the
//! sandbox-wide secrets that stay allowed) is checked on the fake.

use std::process::ExitCode;

use sandboxio::Capabilities;
use sandboxio::testing::FakeBackend;

mod support;

fn main() -> ExitCode {
    let backend =
        FakeBackend::new().with_capabilities(Capabilities::all().difference(Capabilities::COMMAND_SECRETS));
    support::run_one_at_a_time(support::suite(&backend).executor(smol::block_on))
}
