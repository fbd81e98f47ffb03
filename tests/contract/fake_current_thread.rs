//! The `FakeBackend`'s contract run under a current-thread tokio runtime.

use std::process::ExitCode;

use sandboxio::testing::FakeBackend;

mod support;

fn main() -> ExitCode {
    let suite = support::suite(&FakeBackend::new()).executor(|test| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
            .block_on(test)
    });
    support::run_one_at_a_time(suite)
}
