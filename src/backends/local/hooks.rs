//! [`LocalBackend`]'s test hooks, behind the `contract` feature: what the contract suite's
//! probes ask of the provider side (a sandbox's processes, labels and stored configuration,
//! an early expiry), for this crate's tests and adapters that stand on `local://` (the
//! adapter template's provider). Code that uses `local://` as a product needs none of them.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use crate::backends::owner::Owner;

use super::LocalBackend;
use super::{launch, record};

#[cfg_attr(docsrs, doc(cfg(feature = "contract")))]
impl LocalBackend {
    /// Descriptions (`pid N (comm)`) of the processes of a sandbox still running on this
    /// host, found by the sandbox's PID namespace, wherever they were re-parented, and after
    /// the sandbox was killed (the contract suite's orphan probe): empty means none.
    /// sandboxd's own processes (named `sandboxd`) are not listed. Reads `/proc`: processes
    /// of another user are not seen.
    #[must_use]
    pub fn running_processes(&self, sandbox_id: &str) -> Vec<String> {
        let known = self.sandboxes().get(sandbox_id).and_then(|s| s.pid_namespace);
        let namespace = known.or_else(|| {
            let sandboxd = record::sandboxd(&record::read(&self.inner.root.join(sandbox_id))?)?;
            let namespace = launch::pid_namespace(sandboxd.pid)?;
            // Read after the namespace: the pid was still the sandbox's sandboxd then.
            (Owner::of(sandboxd.pid)? == sandboxd).then_some(namespace)
        });
        namespace.map(launch::processes_in).unwrap_or_default()
    }

    /// Ids of this backend's live sandboxes whose metadata has `key` = `value` (the contract
    /// suite's `live_sandboxes_labelled` probe).
    #[must_use]
    pub fn live_sandboxes_labelled(&self, key: &str, value: &str) -> Vec<String> {
        self.sandboxes()
            .values()
            .filter(|s| s.is_alive() && s.metadata.get(key).is_some_and(|v| v == value))
            .map(|s| s.id.clone())
            .collect()
    }

    /// Everything the backend stores about a sandbox, as text (secret values appear only as
    /// `[redacted]`; the contract suite's `stored_config` probe).
    #[must_use]
    pub fn stored_config(&self, sandbox_id: &str) -> Option<String> {
        self.sandboxes().get(sandbox_id).map(|s| s.config.clone())
    }

    /// Ends a sandbox's TTL now, as if it had expired (its commands are killed and its
    /// next operation raises `SandboxGone`). Returns whether it was alive (the contract
    /// suite's `expire_sandbox` probe).
    #[expect(clippy::must_use_candidate, reason = "expiring is the point; the answer is optional")]
    pub fn expire(&self, sandbox_id: &str) -> bool {
        let Some(state) = self.sandboxes().get(sandbox_id).cloned() else { return false };
        let was = state.is_alive();
        state.expired_early.store(true, Ordering::Release);
        let _ = state.check_alive();
        was
    }

    /// The labels recorded with a sandbox (the contract suite's `labels` probe).
    #[must_use]
    pub fn labels(&self, sandbox_id: &str) -> Option<BTreeMap<String, String>> {
        self.sandboxes().get(sandbox_id).map(|s| s.metadata.clone())
    }
}
