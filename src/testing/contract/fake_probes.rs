//! [`FakeProbes`]: the behaviour probes of the [`FakeBackend`], the suite's reference.

use std::collections::BTreeMap;

use crate::policy::ResourceLimits;
use crate::testing::FakeBackend;

use super::inapplicable::Inapplicable;
use super::probes::{Canary, ProbeFuture, ProbeKind, Probes};

/// Every behaviour probe of the [`FakeBackend`]. Its canary is simulated (the fake's egress
/// commands consult the sandbox's policy rather than a network), and `missing_credentials`
/// is a fake that wants an API key in a variable nobody sets.
#[derive(Debug, Clone)]
pub struct FakeProbes {
    fake: FakeBackend,
}

impl FakeProbes {
    /// Probes for `fake` (pass a clone of the backend the suite runs).
    #[must_use]
    pub fn new(fake: FakeBackend) -> Self {
        FakeProbes { fake }
    }
}

impl Probes for FakeProbes {
    fn code_gated(&self, _gate: &str) -> Option<crate::Code> {
        None
    }

    fn test_network(&self) -> Option<super::probes::ProbeResult<crate::testing::TestNetwork>> {
        None
    }

    fn not_applicable(&self, probe: ProbeKind) -> Option<Inapplicable> {
        match probe {
            // The fake simulates a cell to its end before it replays the output: a cell
            // cannot wait for a file the test writes after its first chunk.
            ProbeKind::CodeGated => Some(Inapplicable::CellsSimulatedWhole),
            // It simulates a policy by the name a command asks for and reaches no network:
            // resolved addresses, TLS, DNS and UDP cannot be tested on it.
            ProbeKind::TestNetwork => Some(Inapplicable::NoTestNetwork),
            _ => None,
        }
    }

    fn running_processes(&self, sandbox_id: &str) -> Option<ProbeFuture<Vec<String>>> {
        let fake = self.fake.clone();
        let id = sandbox_id.to_owned();
        Some(Box::pin(async move {
            let n = fake.processes_in(&id);
            Ok((0..n).map(|i| format!("fake process {i} in {id}")).collect())
        }))
    }

    fn live_sandboxes(&self, key: &str, value: &str) -> Option<ProbeFuture<Vec<String>>> {
        let (fake, key, value) = (self.fake.clone(), key.to_owned(), value.to_owned());
        Some(Box::pin(async move { Ok(fake.live_sandboxes_labelled(&key, &value)) }))
    }

    fn simulate_kill_hang(&self, sandbox_id: &str) -> Option<ProbeFuture<()>> {
        let (fake, id) = (self.fake.clone(), sandbox_id.to_owned());
        Some(Box::pin(async move {
            fake.simulate_kill_hang(&id, true);
            Ok(())
        }))
    }

    fn expire_sandbox(&self, sandbox_id: &str) -> Option<ProbeFuture<()>> {
        let (fake, id) = (self.fake.clone(), sandbox_id.to_owned());
        Some(Box::pin(async move {
            if fake.expire(&id) { Ok(()) } else { Err(format!("sandbox {id} was not alive")) }
        }))
    }

    fn missing_credentials(&self) -> Option<(std::sync::Arc<dyn crate::backend::Backend>, String)> {
        let var = "SANDBOXIO_FAKE_CONTRACT_API_KEY_NEVER_SET".to_owned();
        Some((std::sync::Arc::new(FakeBackend::new().with_api_key_env(&var)), var))
    }

    fn canary(&self) -> Option<Canary> {
        Some(Canary { host: "192.0.2.80".to_owned(), port: 8080 })
    }

    fn limits_in_effect(&self, sandbox_id: &str) -> Option<ProbeFuture<ResourceLimits>> {
        let (fake, id) = (self.fake.clone(), sandbox_id.to_owned());
        Some(Box::pin(async move { fake.limits(&id).ok_or_else(|| format!("no sandbox {id}")) }))
    }

    fn provider_labels(&self, sandbox_id: &str) -> Option<ProbeFuture<BTreeMap<String, String>>> {
        let (fake, id) = (self.fake.clone(), sandbox_id.to_owned());
        Some(Box::pin(async move { fake.labels(&id).ok_or_else(|| format!("no sandbox {id}")) }))
    }

    fn provider_config_text(&self, sandbox_id: &str) -> Option<ProbeFuture<String>> {
        let (fake, id) = (self.fake.clone(), sandbox_id.to_owned());
        Some(Box::pin(async move { fake.stored_config(&id).ok_or_else(|| format!("no sandbox {id}")) }))
    }
}
