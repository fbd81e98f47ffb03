//! The `modal://` contract run against the real service: opt-in, never part of `cargo test`'s
//! default set (the target has `test = false`) and never run in CI. Run it with
//!
//! ```sh
//! MODAL_TOKEN_ID=ak-... MODAL_TOKEN_SECRET=as-... cargo test --features contract,modal --test contract_modal_live
//! ```
//!
//! Without both variables it says `[skip]` and why, and exits 0 (a token in the profile file
//! is not enough here: the run must be asked for). A sandbox a failed test leaves behind ends
//! by itself: an owned sandbox's idle timeout is at most
//! `sandboxio::backends::modal::OWNER_IDLE`, and only its owner keeps it busy.

use std::process::ExitCode;

use sandboxio::backends::modal::ModalBackend;
use sandboxio::backends::modal::config::{TOKEN_ID_ENV, TOKEN_SECRET_ENV};
use sandboxio::testing::contract::{CancellationPoints, ContractSuite, Probes};

/// No behaviour probe reaches inside Modal's infrastructure: the suite skips what needs one,
/// visibly.
struct LiveProbes;

impl Probes for LiveProbes {
    fn cancellation_points(&self) -> CancellationPoints {
        CancellationPoints::Sample(vec![1, 3, 8])
    }
}

fn main() -> ExitCode {
    let missing: Vec<&str> = [TOKEN_ID_ENV, TOKEN_SECRET_ENV]
        .into_iter()
        .filter(|v| std::env::var_os(v).is_none_or(|k| k.is_empty()))
        .collect();
    if !missing.is_empty() {
        println!(
            "[skip] contract_modal_live: {} not set, so the real service is not contacted",
            missing.join(" and ")
        );
        return ExitCode::SUCCESS;
    }
    let backend = match ModalBackend::from_env() {
        Ok(backend) => backend,
        Err(e) => {
            eprintln!("contract_modal_live: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sink = sandboxio::audit::RecordingSink::new();
    let audited =
        backend.with_audit(sandboxio::audit::AuditConfig::new().with_sink(std::sync::Arc::clone(&sink)));
    ContractSuite::new(audited).probes(LiveProbes).audit_sink(sink).run()
}
