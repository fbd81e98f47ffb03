//! The `FakeBackend`'s contract run with almost nothing declared, so that every negative
//! test (an undeclared capability raises) runs, under the futures-lite executor.

use std::process::ExitCode;

use sandboxio::Capabilities;
use sandboxio::testing::FakeBackend;

mod support;

fn main() -> ExitCode {
    // Nothing declared: sandboxes are created under allow-all, and every capability's
    // negative test runs.
    let backend = FakeBackend::new().with_capabilities(Capabilities::empty());
    support::run_one_at_a_time(support::suite(&backend))
}
