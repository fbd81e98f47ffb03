//! The `e2b://` contract run against the real service: opt-in, never part of `cargo test`'s
//! default set (the target has `test = false`) and never run in CI. Run it with
//!
//! ```sh
//! E2B_API_KEY=e2b_... cargo test --features contract,e2b --test contract_e2b_live
//! ```
//!
//! Without the key it says `[skip]` and why, and exits 0. A sandbox a failed test leaves
//! behind ends by itself: an owned sandbox's TTL is never more than
//! `sandboxio::backends::e2b::OWNER_TTL` ahead, and only the owner renews it.

use std::process::ExitCode;

use sandboxio::backends::e2b::E2bBackend;
use sandboxio::testing::contract::{CancellationPoints, ContractSuite, Probes};

/// No behaviour probe reaches inside E2B's infrastructure: the suite skips what needs one,
/// visibly.
struct LiveProbes;

impl Probes for LiveProbes {
    fn cancellation_points(&self) -> CancellationPoints {
        CancellationPoints::Sample(vec![1, 3, 8])
    }
}

fn main() -> ExitCode {
    if std::env::var_os("E2B_API_KEY").is_none_or(|k| k.is_empty()) {
        println!("[skip] contract_e2b_live: E2B_API_KEY is not set, so the real service is not contacted");
        return ExitCode::SUCCESS;
    }
    let backend = match E2bBackend::from_env() {
        Ok(backend) => backend,
        Err(e) => {
            eprintln!("contract_e2b_live: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sink = sandboxio::audit::RecordingSink::new();
    let audited =
        backend.with_audit(sandboxio::audit::AuditConfig::new().with_sink(std::sync::Arc::clone(&sink)));
    ContractSuite::new(audited)
        .probes(LiveProbes)
        .audit_sink(sink)
        .known_failure(
            "run_code__dropping_a_context_stream_mid_cell_loses_the_context",
            "E2B's code interpreter interrupts the kernel when its client disconnects and keeps the context's state",
        )
        .run()
}
