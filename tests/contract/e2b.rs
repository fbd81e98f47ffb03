//! The `e2b://` contract run against the protocol stub (`tests/support/e2b_stub`): the
//! adapter speaks E2B's wire protocols over TLS to a loopback server that runs every
//! command and cell for real on `local://`.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use sandboxio::Command;
use sandboxio::testing::contract::{
    Canary, CancellationPoints, ContractSuite, Inapplicable, ProbeFuture, ProbeKind, Probes,
    python_egress_probe,
};

#[path = "../support/e2b_stub/mod.rs"]
mod e2b_stub;

struct StubProbes {
    stub: Arc<e2b_stub::Stub>,
    canary: Canary,
}

impl Probes for StubProbes {
    fn egress(&self, host: &str, port: u16) -> Command {
        python_egress_probe("/usr/bin/python3", host, port)
    }

    fn running_processes(&self, sandbox_id: &str) -> Option<ProbeFuture<Vec<String>>> {
        let (stub, id) = (Arc::clone(&self.stub), sandbox_id.to_owned());
        Some(Box::pin(async move {
            // A sandbox the stub no longer has was killed with all its processes.
            Ok(stub.local_id(&id).map(|local| stub.state.local.running_processes(&local)).unwrap_or_default())
        }))
    }

    fn live_sandboxes(&self, key: &str, value: &str) -> Option<ProbeFuture<Vec<String>>> {
        let (stub, key, value) = (Arc::clone(&self.stub), key.to_owned(), value.to_owned());
        Some(Box::pin(async move {
            let map = stub.state.sandboxes.lock().unwrap();
            Ok(map
                .iter()
                .filter(|(_, s)| s.metadata.get(&key) == Some(&value))
                .map(|(id, _)| id.clone())
                .collect())
        }))
    }

    fn expire_sandbox(&self, sandbox_id: &str) -> Option<ProbeFuture<()>> {
        let (stub, id) = (Arc::clone(&self.stub), sandbox_id.to_owned());
        Some(Box::pin(async move {
            if !stub.expire(&id) {
                return Err(format!("{id} was not alive"));
            }
            // The stub's expiry loop ends it within a tenth of a second.
            for _ in 0..50 {
                if stub.state.sandbox(&id).is_none() {
                    return Ok(());
                }
                futures_timer::Delay::new(std::time::Duration::from_millis(50)).await;
            }
            Err(format!("{id} did not expire"))
        }))
    }

    fn canary(&self) -> Option<Canary> {
        Some(self.canary.clone())
    }

    fn provider_labels(&self, sandbox_id: &str) -> Option<ProbeFuture<BTreeMap<String, String>>> {
        let (stub, id) = (Arc::clone(&self.stub), sandbox_id.to_owned());
        Some(Box::pin(async move {
            stub.state.sandbox(&id).map(|s| s.metadata.clone()).ok_or(format!("no sandbox {id}"))
        }))
    }

    fn provider_config_text(&self, sandbox_id: &str) -> Option<ProbeFuture<String>> {
        let (stub, id) = (Arc::clone(&self.stub), sandbox_id.to_owned());
        Some(Box::pin(async move {
            stub.state.sandbox(&id).map(|s| s.config.clone()).ok_or(format!("no sandbox {id}"))
        }))
    }

    fn missing_credentials(&self) -> Option<(Arc<dyn sandboxio::backend::Backend>, String)> {
        let backend = sandboxio::backends::e2b::E2bBackend::for_stub(
            e2b_stub::DOMAIN,
            self.stub.addr,
            &self.stub.ca_pem,
            "",
        )
        .expect("a backend without a key");
        Some((Arc::new(backend), "E2B_API_KEY".to_owned()))
    }

    fn not_applicable(&self, probe: ProbeKind) -> Option<Inapplicable> {
        // The stub (tests/support/e2b_stub) plays E2B's API faithfully and has no hook to make
        // a kill request hang; the orphan warning on grace expiry is the core's, held by the
        // fake's runs.
        (probe == ProbeKind::SimulateKillHang).then_some(Inapplicable::KillCannotHang)
    }

    fn cancellation_points(&self) -> CancellationPoints {
        CancellationPoints::Sample(vec![1, 2, 3, 5, 8])
    }
}

mod canary;

fn main() -> ExitCode {
    let stub = Arc::new(e2b_stub::Stub::start());
    let sink = sandboxio::audit::RecordingSink::new();
    let backend =
        stub.backend().with_audit(sandboxio::audit::AuditConfig::new().with_sink(Arc::clone(&sink)));
    let probes = StubProbes { stub, canary: canary::loopback() };
    ContractSuite::new(backend)
        .probes(probes)
        .audit_sink(sink)
        .known_failure(
            "run_code__dropping_a_context_stream_mid_cell_loses_the_context",
            "E2B's code interpreter interrupts the kernel when its client disconnects and keeps the context's state; the contract expects the context lost (ContextLost)",
        )
        .run()
}
