//! The contract suite against Example Cloud: the adapter talks HTTP to a provider server
//! on loopback (`provider/`) whose sandboxes are real `local://` sandboxes.
//!
//! `cargo test --test contract` runs it; `SANDBOXIO_STRICT=1` makes every test that cannot
//! run (a positive control that fails, a behaviour probe not implemented) a failure instead
//! of a skip (run your CI strict). A probe that cannot apply to your provider is declared
//! with `Probes::not_applicable` and one of the reasons the contract accepts for it
//! (`Inapplicable`; `docs/contract.md`, "Probes that may be declared not applicable"), and
//! reported `n/a`. Add `.contract_version(..)` to hold the adapter to an older contract.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use sandboxio::backend::Backend;
use sandboxio::backends::local::LocalBackend;
use sandboxio::testing::contract::{
    Canary, CancellationPoints, ContractSuite, ProbeFuture, Probes, python_egress_probe,
};
use sandboxio::{
    Command,
    audit::{AuditConfig, RecordingSink},
};
use sandboxio_example::client::{ApiError, Client};
use sandboxio_example::{API_KEY_ENV, ExampleBackend};

mod provider;

/// How the suite observes Example Cloud: through the provider's own API where it has an
/// endpoint (processes, labels, listing by label), through the test's server otherwise.
struct ExampleProbes {
    client: Client,
    provider: Arc<provider::Provider>,
    canary: Canary,
}

impl Probes for ExampleProbes {
    fn egress(&self, host: &str, port: u16) -> Command {
        // The sandboxes have no `nc`; Python's socket module is there.
        python_egress_probe("/usr/bin/python3", host, port)
    }

    fn running_processes(&self, sandbox_id: &str) -> Option<ProbeFuture<Vec<String>>> {
        let (client, id) = (self.client.clone(), sandbox_id.to_owned());
        Some(Box::pin(blocking(move || match client.processes(&id) {
            // A deleted sandbox has no processes left.
            Err(ApiError::Status { status: 404, .. }) => Ok(Vec::new()),
            other => other,
        })))
    }

    fn live_sandboxes(&self, key: &str, value: &str) -> Option<ProbeFuture<Vec<String>>> {
        let (client, key, value) = (self.client.clone(), key.to_owned(), value.to_owned());
        Some(Box::pin(blocking(move || client.list(&key, &value))))
    }

    fn provider_labels(&self, sandbox_id: &str) -> Option<ProbeFuture<BTreeMap<String, String>>> {
        let (client, id) = (self.client.clone(), sandbox_id.to_owned());
        Some(Box::pin(blocking(move || client.get(&id).map(|info| info.labels))))
    }

    fn provider_config_text(&self, sandbox_id: &str) -> Option<ProbeFuture<String>> {
        // Everything the API shows about a sandbox: a secret must not be in it.
        let (client, id) = (self.client.clone(), sandbox_id.to_owned());
        Some(Box::pin(blocking(move || client.get(&id).map(|info| format!("{info:?}")))))
    }

    fn expire_sandbox(&self, sandbox_id: &str) -> Option<ProbeFuture<()>> {
        // The API cannot expire a sandbox early: the test's server does it.
        let (provider, id) = (Arc::clone(&self.provider), sandbox_id.to_owned());
        Some(Box::pin(async move {
            if provider.expire(&id) { Ok(()) } else { Err(format!("{id} was not alive")) }
        }))
    }

    fn simulate_kill_hang(&self, sandbox_id: &str) -> Option<ProbeFuture<()>> {
        let (provider, id) = (Arc::clone(&self.provider), sandbox_id.to_owned());
        Some(Box::pin(async move {
            provider.hang_next_delete(&id);
            Ok(())
        }))
    }

    fn missing_credentials(&self) -> Option<(Arc<dyn Backend>, String)> {
        let backend = ExampleBackend::new(&self.provider.endpoint).with_api_key("");
        Some((Arc::new(backend), API_KEY_ENV.to_owned()))
    }

    fn canary(&self) -> Option<Canary> {
        Some(self.canary.clone())
    }

    fn cancellation_points(&self) -> CancellationPoints {
        // Real processes behind HTTP: a few points, each catching the operation in flight.
        CancellationPoints::Sample(vec![1, 2, 3])
    }
}

/// A blocking API call as a probe's future, off the suite's executor.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, String> {
    sandboxio::backend::run_blocking("probe", move |_| Ok(call().map_err(|e| e.to_string())))
        .await
        .map_err(|e| e.to_string())?
}

/// A TCP server on loopback that accepts and drops every connection: reachable from a
/// sandbox under allow-all, and from none under deny-all.
fn canary() -> Canary {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || listener.incoming().for_each(drop));
    Canary { host: "127.0.0.1".into(), port }
}

fn main() -> ExitCode {
    const KEY: &str = "test-key";
    let provider = Arc::new(provider::Provider::start(LocalBackend::new(), KEY));
    let sink = RecordingSink::new();
    let backend = ExampleBackend::new(&provider.endpoint)
        .with_api_key(KEY)
        .with_audit(AuditConfig::new().with_sink(Arc::clone(&sink)));
    let client = backend.client().expect("the backend has a key");
    let probes = ExampleProbes { client, provider, canary: canary() };
    ContractSuite::new(backend).probes(probes).audit_sink(sink).run()
}
