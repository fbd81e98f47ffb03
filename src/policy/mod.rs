//! What a sandbox may do and how strongly it is isolated: [`NetworkPolicy`],
//! [`ResourceLimits`], [`IsolationTier`] and the closed set of [`Capabilities`].

use std::fmt;

pub(crate) mod address;
pub(crate) mod allowlist;
mod enforcement;
pub(crate) mod limits;
pub(crate) mod network;
mod provider_allowlist;
#[cfg(feature = "egress")]
mod resolver;

pub use allowlist::{ALLOWLIST_DEFAULT_PORT, AllowlistEntry, AllowlistPorts, AllowlistTarget};
pub use enforcement::{EgressMechanism, NetworkEnforcement};
pub use provider_allowlist::{PROVIDER_ALLOWLIST_MAX, ProviderAllowlist};
// The two a first program sets are exported at the crate root (`sandboxio::NetworkPolicy`,
// `sandboxio::ResourceLimits`), their one public path; the crate names them here too.
pub(crate) use limits::ResourceLimits;
pub(crate) use network::NetworkPolicy;
#[cfg(feature = "egress")]
#[cfg_attr(docsrs, doc(cfg(feature = "egress")))]
pub use resolver::EgressResolver;

bitflags::bitflags! {
    /// The closed set of capabilities a backend declares before `create()` (and a sandbox may
    /// narrow after it, for example an image without `python3` has no `RUN_CODE`).
    ///
    /// | flag | the backend can … |
    /// |---|---|
    /// | `RUN` | run a command to completion (`Sandbox::run`) |
    /// | `RUN_CODE` | run a code cell (`Sandbox::run_code`) |
    /// | `STREAM` | stream a command's output as it is produced (`Sandbox::stream`) |
    /// | `STDIN` | write to a streamed command's stdin and close it |
    /// | `FILESYSTEM` | read, write, list, upload and download files (`Sandbox::fs`) |
    /// | `STATEFUL_CODE` | keep state across code cells in a context (`Sandbox::create_context`) |
    /// | `RICH_OUTPUTS` | return MIME bundles (HTML, PNG, …) from code cells |
    /// | `NETWORK_DENY` | enforce `NetworkPolicy::deny_all()` |
    /// | `NETWORK_ALLOWLIST` | enforce `NetworkPolicy::allowlist(..)` |
    /// | `PROVIDER_ALLOWLIST` | hand `NetworkPolicy::provider_allowlist(..)` to the provider's own name filter |
    /// | `LIMIT_MEMORY` | enforce `ResourceLimits::memory_mib` |
    /// | `LIMIT_CPU` | enforce `ResourceLimits::cpu_millicores` |
    /// | `LIMIT_PIDS` | enforce `ResourceLimits::pids` |
    /// | `CONNECT` | attach to an existing sandbox by id (`Sandbox::connect`) |
    /// | `DETACH` | let a sandbox outlive its handle until its TTL (`detached(true)`, `Sandbox::detach`) |
    /// | `COMMAND_SECRETS` | keep a command's own secrets (`Command::secret_env`) from every other command of the sandbox |
    /// | `EXTEND_TTL` | change a live sandbox's TTL (`Sandbox::extend_ttl`) |
    ///
    /// Without `COMMAND_SECRETS`, `run` and `stream` refuse a command that carries
    /// `Command::secret_env` before anything starts; sandbox-wide secrets
    /// (`SandboxBuilder::secret_env`), which every command sees by design, work everywhere.
    /// Every declared flag has a passing contract test; every undeclared one raises
    /// [`Error::CapabilityNotSupported`](crate::Error::CapabilityNotSupported) when used.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Capabilities: u32 {
        /// Run a command to completion.
        const RUN = 1 << 0;
        /// Run a code cell.
        const RUN_CODE = 1 << 1;
        /// Stream a command's output.
        const STREAM = 1 << 2;
        /// Write to and close a streamed command's stdin.
        const STDIN = 1 << 3;
        /// File operations.
        const FILESYSTEM = 1 << 4;
        /// Code contexts that keep state across cells.
        const STATEFUL_CODE = 1 << 5;
        /// MIME-bundle results from code cells.
        const RICH_OUTPUTS = 1 << 6;
        /// Enforce deny-all egress.
        const NETWORK_DENY = 1 << 7;
        /// Enforce an egress allowlist.
        const NETWORK_ALLOWLIST = 1 << 8;
        /// Enforce a memory limit.
        const LIMIT_MEMORY = 1 << 9;
        /// Enforce a CPU limit.
        const LIMIT_CPU = 1 << 10;
        /// Enforce a process-count limit.
        const LIMIT_PIDS = 1 << 11;
        /// Attach to an existing sandbox by id.
        const CONNECT = 1 << 12;
        /// Sandboxes that outlive their handle until their TTL.
        const DETACH = 1 << 13;
        /// Command-scoped secrets: a value given with `Command::secret_env` reaches that
        /// command's processes only. No other command of the same sandbox, running at the
        /// same time or later, can read it (from `/proc/<pid>/environ`, a file, a shared
        /// mount, or anywhere else). A backend declares it only when its mechanism
        /// guarantees this (for example a PID namespace per command); elsewhere such a
        /// command is refused with `CapabilityNotSupported` before anything starts.
        const COMMAND_SECRETS = 1 << 14;
        /// Hand a domain allowlist to the provider's own egress filter, which decides on
        /// the name a connection claims (SNI, `Host`), not on the address it reaches
        /// (`NetworkPolicy::provider_allowlist`). Not `NETWORK_ALLOWLIST`: it cannot pass
        /// that contract's bypass tests.
        const PROVIDER_ALLOWLIST = 1 << 15;

        /// Change a live sandbox's TTL: the provider moves the sandbox's end to a new
        /// instant (`Sandbox::extend_ttl`). A backend whose TTL is fixed when the sandbox
        /// starts (a timer in the sandbox's own init, an immutable provider label) does not
        /// declare it.
        const EXTEND_TTL = 1 << 16;
    }
}

impl Capabilities {
    /// The flag names joined with `|`, for example `"STREAM|STDIN"`.
    #[must_use]
    pub fn names(self) -> String {
        let names: Vec<&str> = self.iter_names().map(|(n, _)| n).collect();
        if names.is_empty() { "(none)".to_owned() } else { names.join("|") }
    }
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.names())
    }
}

/// How strongly a backend isolates untrusted code from the host, weakest first:
/// `None < Process < Container < UserspaceKernel < MicroVm`. [`IsolationTier::Unknown`] is
/// outside the order and satisfies no requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IsolationTier {
    /// No isolation (the in-memory fake, or code run on the host).
    None,
    /// Namespaced processes sharing the host kernel (`local://`).
    Process,
    /// Containers sharing the host kernel (`docker://`).
    Container,
    /// A user-space kernel such as gVisor.
    UserspaceKernel,
    /// A hardware-virtualised micro-VM such as Firecracker (E2B).
    MicroVm,
    /// The backend did not declare a tier.
    Unknown,
}

impl IsolationTier {
    fn rank(self) -> Option<u8> {
        match self {
            IsolationTier::None => Some(0),
            IsolationTier::Process => Some(1),
            IsolationTier::Container => Some(2),
            IsolationTier::UserspaceKernel => Some(3),
            IsolationTier::MicroVm => Some(4),
            IsolationTier::Unknown => None,
        }
    }

    /// Whether a backend of this tier meets a `require_isolation(required)`.
    /// `Unknown` satisfies nothing, and nothing satisfies a requirement of `Unknown`.
    #[must_use]
    pub fn satisfies(self, required: IsolationTier) -> bool {
        matches!((self.rank(), required.rank()), (Some(have), Some(need)) if have >= need)
    }
}

impl fmt::Display for IsolationTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IsolationTier::None => "none",
            IsolationTier::Process => "process",
            IsolationTier::Container => "container",
            IsolationTier::UserspaceKernel => "userspace-kernel",
            IsolationTier::MicroVm => "micro-vm",
            IsolationTier::Unknown => "unknown",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowlist_policies_permit_listed_ports_and_deny_wins() {
        let p = NetworkPolicy::allowlist([
            "PyPI.org",
            "*.example.com:*",
            "api.x.io:80",
            "10.0.0.0/8:22",
            "::1",
            "!secret.example.com:*",
        ])
        .unwrap();
        assert!(p.permits("pypi.org", 443));
        assert!(!p.permits("pypi.org", 80));
        assert!(!p.permits("evil-pypi.org", 443));
        assert!(p.permits("a.b.example.com", 1));
        assert!(!p.permits("example.com", 443));
        assert!(!p.permits("secret.example.com", 443));
        assert!(p.permits("api.x.io", 80));
        assert!(!p.permits("api.x.io", 443));
        assert!(p.permits("10.200.3.4", 22));
        assert!(!p.permits("11.0.0.1", 22));
        assert!(p.permits("::1", 443));
        assert!(!NetworkPolicy::deny_all().permits("pypi.org", 443));
        assert!(
            !NetworkPolicy::allowlist(["!pypi.org"]).unwrap().permits("pypi.org", 443),
            "deny alone allows nothing"
        );
    }

    #[test]
    fn unknown_tier_satisfies_nothing() {
        assert!(IsolationTier::MicroVm.satisfies(IsolationTier::Container));
        assert!(!IsolationTier::Process.satisfies(IsolationTier::Container));
        assert!(IsolationTier::None.satisfies(IsolationTier::None));
        assert!(!IsolationTier::Unknown.satisfies(IsolationTier::None));
        assert!(!IsolationTier::MicroVm.satisfies(IsolationTier::Unknown));
    }
}
