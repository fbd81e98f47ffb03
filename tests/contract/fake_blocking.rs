//! The `FakeBackend`'s full contract run through the blocking facade (`sandboxio::sync`):
//! every sandbox operation of every test is a blocking call. The tests of async-only
//! behaviour (cancellation by dropping a future) are reported n/a, with the reason, in the
//! test list and after the summary.

use std::process::ExitCode;

use sandboxio::testing::FakeBackend;
use sandboxio::testing::contract::Facade;

mod support;

fn main() -> ExitCode {
    support::run_one_at_a_time(support::suite(&FakeBackend::new()).facade(Facade::Blocking))
}
