//! The [`FakeBackend`]'s test-only hooks, behind the `contract` feature: what the contract
//! suite's probes ask of a backend's provider side, and what this crate's own tests plant
//! or count. Code that uses the fake as a product needs none of them.

use std::collections::BTreeMap;

use crate::error::Result;

use super::FakeBackend;
use super::vfs::WORKDIR;
use super::world::{Life, gone};

#[cfg_attr(docsrs, doc(cfg(feature = "contract")))]
impl FakeBackend {
    /// Makes `kill` of one sandbox hang forever (the `simulate_kill_hang` probe), so that
    /// teardown's grace bound can be observed. `false` restores it.
    pub fn simulate_kill_hang(&self, sandbox_id: &str, hang: bool) {
        let mut world = self.world();
        if hang {
            world.kill_hangs.insert(sandbox_id.to_owned());
        } else {
            world.kill_hangs.remove(sandbox_id);
        }
    }

    /// Processes still running in one sandbox.
    #[must_use]
    pub fn processes_in(&self, sandbox_id: &str) -> usize {
        self.world().processes.values().filter(|owner| *owner == sandbox_id).count()
    }

    /// Live sandboxes whose metadata has `key` = `value`.
    #[must_use]
    pub fn live_sandboxes_labelled(&self, key: &str, value: &str) -> Vec<String> {
        self.world().live_where(|s| s.spec.metadata.get(key).is_some_and(|v| v == value))
    }

    /// The resource limits a sandbox was created with, as the fake enforces them.
    #[must_use]
    pub fn limits(&self, sandbox_id: &str) -> Option<crate::ResourceLimits> {
        self.world().sandboxes.get(sandbox_id).map(|s| s.spec.limits)
    }

    /// Background children killed because their parent command exited (with its process
    /// group), summed over every command so far.
    #[must_use]
    pub fn reaped_children(&self) -> usize {
        self.world().reaped_children
    }

    /// Everything the fake stores about a sandbox, as text (the fake's `docker inspect`):
    /// secret values appear only as `[redacted]`.
    #[must_use]
    pub fn stored_config(&self, sandbox_id: &str) -> Option<String> {
        self.world().sandboxes.get(sandbox_id).map(|s| format!("{:?}", s.spec))
    }

    /// The metadata labels a sandbox was created with (as a provider would show them).
    #[must_use]
    pub fn labels(&self, sandbox_id: &str) -> Option<BTreeMap<String, String>> {
        self.world().sandboxes.get(sandbox_id).map(|s| s.spec.metadata.clone())
    }

    /// Writes a symlink into a sandbox (the fake's file API has no way to make one), so
    /// tests can check that links are never followed on the host side.
    ///
    /// # Errors
    ///
    /// [`Error::SandboxGone`](crate::Error::SandboxGone) for an unknown or dead sandbox.
    pub fn plant_symlink(&self, sandbox_id: &str, path: &str, target: &str) -> Result<()> {
        let mut world = self.world();
        let sandbox = world
            .sandboxes
            .get_mut(sandbox_id)
            .filter(|s| s.life == Life::Alive)
            .ok_or_else(|| gone(sandbox_id, "no such live sandbox"))?;
        sandbox.vfs.symlink(&crate::path::resolve(WORKDIR, path), target)
    }
}
