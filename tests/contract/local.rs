//! The `local://` backend's contract run: real processes in bubblewrap namespaces.

use std::collections::BTreeMap;
use std::process::ExitCode;

use sandboxio::Command;
use sandboxio::backends::local::LocalBackend;
use sandboxio::testing::TestNetwork;
use sandboxio::testing::contract::{
    Canary, CancellationPoints, ContractSuite, Inapplicable, ProbeFuture, ProbeKind, ProbeResult, Probes,
    python_egress_probe,
};

/// Behaviour probes from the backend's own bookkeeping; the canary is a TCP server this
/// test runs on loopback (reachable only from a sandbox that shares the host's network);
/// the test network is the project's own (`scripts/testnet up`), when it is up.
struct LocalProbes {
    backend: LocalBackend,
    canary: Canary,
    network: ProbeResult<TestNetwork>,
}

impl Probes for LocalProbes {
    fn egress(&self, host: &str, port: u16) -> Command {
        // The host image has no `nc`; Python's socket module is always there. Under an
        // allowlist the way out is the proxy the sandbox is given.
        python_egress_probe("/usr/bin/python3", host, port)
    }

    fn running_processes(&self, sandbox_id: &str) -> Option<ProbeFuture<Vec<String>>> {
        let (backend, id) = (self.backend.clone(), sandbox_id.to_owned());
        Some(Box::pin(async move { Ok(backend.running_processes(&id)) }))
    }

    fn live_sandboxes(&self, key: &str, value: &str) -> Option<ProbeFuture<Vec<String>>> {
        let (backend, key, value) = (self.backend.clone(), key.to_owned(), value.to_owned());
        Some(Box::pin(async move { Ok(backend.live_sandboxes_labelled(&key, &value)) }))
    }

    fn expire_sandbox(&self, sandbox_id: &str) -> Option<ProbeFuture<()>> {
        let (backend, id) = (self.backend.clone(), sandbox_id.to_owned());
        Some(Box::pin(async move {
            if backend.expire(&id) { Ok(()) } else { Err(format!("{id} was not alive")) }
        }))
    }

    fn canary(&self) -> Option<Canary> {
        Some(self.canary.clone())
    }

    fn test_network(&self) -> Option<ProbeResult<TestNetwork>> {
        Some(self.network.clone())
    }

    fn provider_labels(&self, sandbox_id: &str) -> Option<ProbeFuture<BTreeMap<String, String>>> {
        let (backend, id) = (self.backend.clone(), sandbox_id.to_owned());
        Some(Box::pin(async move { backend.labels(&id).ok_or_else(|| format!("no sandbox {id}")) }))
    }

    fn provider_config_text(&self, sandbox_id: &str) -> Option<ProbeFuture<String>> {
        let (backend, id) = (self.backend.clone(), sandbox_id.to_owned());
        Some(Box::pin(async move { backend.stored_config(&id).ok_or_else(|| format!("no sandbox {id}")) }))
    }

    fn no_credentials(&self) -> Option<String> {
        Some("local:// runs on this host through bubblewrap: there is no account or key".to_owned())
    }

    fn not_applicable(&self, probe: ProbeKind) -> Option<Inapplicable> {
        // local:// has no hook to make its kill of the bwrap process hang; the orphan warning
        // on grace expiry is the core's, held by the fake's runs.
        (probe == ProbeKind::SimulateKillHang).then_some(Inapplicable::KillCannotHang)
    }

    fn cancellation_points(&self) -> CancellationPoints {
        // Real processes: a few points, each catching the command in flight.
        CancellationPoints::Sample(vec![1, 2, 3, 5, 8])
    }
}

mod canary;

fn main() -> ExitCode {
    let sink = sandboxio::audit::RecordingSink::new();
    let mut backend = LocalBackend::new()
        .with_audit(sandboxio::audit::AuditConfig::new().with_sink(std::sync::Arc::clone(&sink)));
    // The gates resolve through the test network's DNS server, the only one that knows its
    // names (and treat its documentation-range block as public), when it is up.
    let network = TestNetwork::load();
    if let Ok(net) = &network {
        backend = backend
            .with_egress_resolver(net.resolver().expect("the test network's block is a documentation range"));
    }
    let probes = LocalProbes { backend: backend.clone(), canary: canary::loopback(), network };
    ContractSuite::new(backend).probes(probes).audit_sink(sink).run()
}
