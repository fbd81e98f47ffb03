//! The `FakeBackend`'s contract run with almost nothing declared, through the blocking
//! facade (`sandboxio::sync`): every negative test (an undeclared capability raises) makes
//! its calls through the facade.

use std::process::ExitCode;

use sandboxio::Capabilities;
use sandboxio::testing::FakeBackend;
use sandboxio::testing::contract::Facade;

mod support;

fn main() -> ExitCode {
    let backend = FakeBackend::new().with_capabilities(Capabilities::empty());
    support::run_one_at_a_time(support::suite(&backend).facade(Facade::Blocking))
}
