//! [`ResourceLimits`]: the memory, CPU and process limits a sandbox may be created with
//! (exported at the crate root).

use super::Capabilities;

/// Resource limits applied to a sandbox at create time. Every field is optional; once given
/// to the builder they cannot be unset or set again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ResourceLimits {
    /// Memory limit in MiB (needs [`Capabilities::LIMIT_MEMORY`]).
    pub memory_mib: Option<u64>,
    /// CPU limit in millicores: 1000 is one full core (needs [`Capabilities::LIMIT_CPU`]).
    pub cpu_millicores: Option<u32>,
    /// Maximum number of processes (needs [`Capabilities::LIMIT_PIDS`]).
    pub pids: Option<u32>,
}

impl ResourceLimits {
    /// No limits yet; add them with the setters.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Limits memory to `mib` MiB.
    #[must_use]
    pub fn memory_mib(mut self, mib: u64) -> Self {
        self.memory_mib = Some(mib);
        self
    }

    /// Limits CPU to `millicores` thousandths of a core.
    #[must_use]
    pub fn cpu_millicores(mut self, millicores: u32) -> Self {
        self.cpu_millicores = Some(millicores);
        self
    }

    /// Limits the number of processes to `pids`.
    #[must_use]
    pub fn pids(mut self, pids: u32) -> Self {
        self.pids = Some(pids);
        self
    }

    /// The capabilities a backend needs to apply these limits.
    #[must_use]
    pub fn required_capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::empty();
        caps.set(Capabilities::LIMIT_MEMORY, self.memory_mib.is_some());
        caps.set(Capabilities::LIMIT_CPU, self.cpu_millicores.is_some());
        caps.set(Capabilities::LIMIT_PIDS, self.pids.is_some());
        caps
    }
}
