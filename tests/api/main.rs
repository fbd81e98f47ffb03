//! The API's tests: the core, the builders and the facades against the fake backend, the
//! error catalog, the public paths and the docs that quote the contract. One test binary
//! (each module was its own until issue #29: one link instead of twenty-one).
//!
//! Tests that count the process's threads or sockets, or change process-wide state
//! (`sandboxio::runtime::shutdown`, a global `tracing` subscriber), keep binaries of their own:
//! `tests/blocking_threads.rs`, `tests/no_io_on_construction.rs`, `tests/teardown_grace.rs`.

mod blocking;
mod cancellation;
mod capabilities;
mod contract_docs;
mod contract_strict;
mod contract_versions;
mod dsn;
mod errors;
mod fake;
mod fake_robustness;
mod fs;
mod hygiene;
mod lifecycle;
mod parity;
mod progress;
mod public_paths;
mod run;
mod run_blocking;
mod run_code;
mod runtimes;
mod sinks;
mod stream;
#[path = "../support/mod.rs"]
mod support;
