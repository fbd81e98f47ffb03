//! The `FakeBackend`'s contract run under a multi-thread tokio runtime: the reference run
//! every adapter's own contract test looks like.

use std::process::ExitCode;

use sandboxio::testing::FakeBackend;

mod support;

fn main() -> ExitCode {
    let suite = support::suite(&FakeBackend::new()).executor(|test| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
            .block_on(test)
    });
    support::run_one_at_a_time(suite)
}
