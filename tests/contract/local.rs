//! The `local://` backend's contract run: real processes in bubblewrap namespaces.

use std::collections::BTreeMap;
use std::process::ExitCode;

use sandboxio::Command;
use sandboxio::backends::local::LocalBackend;
use sandboxio::testing::contract::{Canary, CancellationPoints, ContractSuite, ProbeFuture, Probes};

/// Behaviour probes from the backend's own bookkeeping; the canary is a TCP server this
/// test runs on loopback (reachable only from a sandbox that shares the host's network).
struct LocalProbes {
    backend: LocalBackend,
    canary: Canary,
}

impl Probes for LocalProbes {
    fn egress(&self, host: &str, port: u16) -> Command {
        // The host image has no `nc`; Python's socket module is always there. Under an
        // allowlist the way out is the proxy the sandbox is given: a `CONNECT` through it
        // reaches the destination only when the gate answers 200 (it dials first).
        Command::new("/usr/bin/python3").arg("-c").arg(format!(
            r#"import os, socket, sys
proxy = os.environ.get("HTTPS_PROXY", "")
if not proxy:
    socket.create_connection(({host:?}, {port}), 3)
    sys.exit(0)
addr = proxy.split("://", 1)[-1].rstrip("/").rsplit(":", 1)
c = socket.create_connection((addr[0], int(addr[1])), 3)
c.sendall(b"CONNECT {host}:{port} HTTP/1.1\r\n\r\n")
sys.exit(0 if c.recv(64).startswith(b"HTTP/1.1 200") else 1)"#
        ))
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

    fn provider_labels(&self, sandbox_id: &str) -> Option<ProbeFuture<BTreeMap<String, String>>> {
        let (backend, id) = (self.backend.clone(), sandbox_id.to_owned());
        Some(Box::pin(async move { backend.labels(&id).ok_or_else(|| format!("no sandbox {id}")) }))
    }

    fn provider_config_text(&self, sandbox_id: &str) -> Option<ProbeFuture<String>> {
        let (backend, id) = (self.backend.clone(), sandbox_id.to_owned());
        Some(Box::pin(async move { backend.stored_config(&id).ok_or_else(|| format!("no sandbox {id}")) }))
    }

    fn cancellation_points(&self) -> CancellationPoints {
        // Real processes: a few points, each catching the command in flight.
        CancellationPoints::Sample(vec![1, 2, 3, 5, 8])
    }
}

mod canary;

fn main() -> ExitCode {
    let sink = sandboxio::RecordingSink::new();
    let backend =
        LocalBackend::new().with_audit(sandboxio::AuditConfig::new().with_sink(std::sync::Arc::clone(&sink)));
    let probes = LocalProbes { backend: backend.clone(), canary: canary::loopback() };
    ContractSuite::new(backend).probes(probes).audit_sink(sink).run()
}
