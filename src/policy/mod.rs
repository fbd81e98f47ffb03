//! What a sandbox may do and how strongly it is isolated: [`NetworkPolicy`],
//! [`ResourceLimits`], [`IsolationTier`] and the closed set of [`Capabilities`].

use std::fmt;

use crate::error::Result;

pub(crate) mod address;
pub(crate) mod allowlist;
mod enforcement;
mod provider_allowlist;
#[cfg(feature = "egress")]
mod resolver;

pub use allowlist::{ALLOWLIST_DEFAULT_PORT, AllowlistEntry, AllowlistPorts, AllowlistTarget};
pub use enforcement::{EgressMechanism, NetworkEnforcement};
pub use provider_allowlist::{PROVIDER_ALLOWLIST_MAX, ProviderAllowlist};
#[cfg(feature = "egress")]
#[cfg_attr(docsrs, doc(cfg(feature = "egress")))]
pub use resolver::EgressResolver;

/// The egress policy of a sandbox. There is no default: the builder's `create()` compiles
/// only once one is chosen, and [`NetworkPolicy::deny_all`] is the one to reach for.
///
/// Policies compare by value, so a test can assert
/// `calls[0].network == NetworkPolicy::deny_all()`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NetworkPolicy {
    /// No egress at all (needs [`Capabilities::NETWORK_DENY`]).
    DenyAll,
    /// Unrestricted egress.
    AllowAll,
    /// Egress only to the listed destinations, minus the denied ones (needs
    /// [`Capabilities::NETWORK_ALLOWLIST`]); see [`NetworkPolicy::allowlist`].
    Allowlist(Vec<AllowlistEntry>),
    /// Egress only to the listed domains as the **provider's own filter** judges them, on
    /// the name a connection claims (TLS SNI, HTTP `Host`), not on where it goes (needs
    /// [`Capabilities::PROVIDER_ALLOWLIST`]); see [`NetworkPolicy::provider_allowlist`].
    /// Weaker than [`NetworkPolicy::Allowlist`], and never taken for it.
    ProviderAllowlist(ProviderAllowlist),
}

impl NetworkPolicy {
    /// No egress at all.
    #[must_use]
    pub fn deny_all() -> Self {
        NetworkPolicy::DenyAll
    }

    /// Unrestricted egress.
    #[must_use]
    pub fn allow_all() -> Self {
        NetworkPolicy::AllowAll
    }

    /// Egress only to `entries`, each `[!]target[:port|:*]`:
    ///
    /// - targets: exact host names (`pypi.org`), `*.suffix` wildcards (`*.pythonhosted.org`,
    ///   strictly below the suffix), IP addresses and CIDR blocks (`10.0.0.0/8`; IPv6 in
    ///   brackets when a port follows);
    /// - ports: an entry without one covers **443 only** ([`ALLOWLIST_DEFAULT_PORT`]); `:80` or any
    ///   other number covers that port, `:*` every port;
    /// - `!` denies: a destination matched by any denying entry is refused whatever allows it;
    ///   a denying entry without a port denies every port.
    ///
    /// How a backend enforces it (and what it cannot see) is its own to say; a backend that
    /// cannot enforce it refuses the policy at `create()`. Allowing a multi-tenant domain (a
    /// code host, an object store, a paste site) opens an exfiltration channel by design:
    /// anything the sandbox can upload there, anyone can read.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) naming the first entry that
    /// is none of these.
    ///
    /// # Examples
    ///
    /// ```
    /// use sandboxio::NetworkPolicy;
    ///
    /// let policy = NetworkPolicy::allowlist(["pypi.org", "*.pythonhosted.org", "!evil.pythonhosted.org"])?;
    /// assert!(policy.permits("files.pythonhosted.org", 443));
    /// assert!(!policy.permits("files.pythonhosted.org", 80), "443 unless a port is listed");
    /// assert!(!policy.permits("evil.pythonhosted.org", 443), "deny wins");
    /// # Ok::<(), sandboxio::Error>(())
    /// ```
    pub fn allowlist<I, S>(entries: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        entries
            .into_iter()
            .map(|e| e.as_ref().parse())
            .collect::<Result<Vec<_>>>()
            .map(NetworkPolicy::Allowlist)
    }

    /// Egress only to `domains` as a cloud provider's own filter judges them (E2B's
    /// `allowOut`): a separate, explicit choice, because such a filter decides on the name
    /// a connection claims (TLS SNI, the HTTP `Host` header) and not on the address it
    /// reaches, so it is weaker than [`NetworkPolicy::allowlist`]. [`ProviderAllowlist`]
    /// says what it cannot see; only backends that declare
    /// [`Capabilities::PROVIDER_ALLOWLIST`] take it, the others refuse it at `create()`.
    ///
    /// # Errors
    ///
    /// As [`ProviderAllowlist::new`]: [`Error::InvalidInput`](crate::Error::InvalidInput)
    /// for an entry that is not a host name or a `*.suffix` wildcard, or an empty list.
    ///
    /// # Examples
    ///
    /// ```
    /// use sandboxio::NetworkPolicy;
    ///
    /// let policy = NetworkPolicy::provider_allowlist(["pypi.org", "*.pythonhosted.org"])?;
    /// assert!(policy.permits("files.pythonhosted.org", 443));
    /// assert!(!policy.permits("example.org", 443));
    /// assert_ne!(policy, NetworkPolicy::allowlist(["pypi.org", "*.pythonhosted.org"])?);
    /// # Ok::<(), sandboxio::Error>(())
    /// ```
    pub fn provider_allowlist<I, S>(domains: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        ProviderAllowlist::new(domains).map(NetworkPolicy::ProviderAllowlist)
    }

    /// Whether this policy lets a connection to `host` (a name or an IP literal) on `port`
    /// through, judged on the name alone: no denying entry matches and an allowing one does.
    /// Backends that simulate policy (the fake) and canary tests use it; a real gate also
    /// judges the addresses a name resolves to.
    #[must_use]
    pub fn permits(&self, host: &str, port: u16) -> bool {
        match self {
            NetworkPolicy::DenyAll => false,
            NetworkPolicy::AllowAll => true,
            NetworkPolicy::Allowlist(entries) => {
                !entries.iter().any(|e| e.is_deny() && e.matches(host, port))
                    && entries.iter().any(|e| !e.is_deny() && e.matches(host, port))
            }
            // A name filter: any port, as long as the name is claimed.
            NetworkPolicy::ProviderAllowlist(list) => list.matches(host),
        }
    }

    /// The capability a backend needs to enforce this policy, if any.
    #[must_use]
    pub fn required_capability(&self) -> Capabilities {
        match self {
            NetworkPolicy::DenyAll => Capabilities::NETWORK_DENY,
            NetworkPolicy::AllowAll => Capabilities::empty(),
            NetworkPolicy::Allowlist(_) => Capabilities::NETWORK_ALLOWLIST,
            NetworkPolicy::ProviderAllowlist(_) => Capabilities::PROVIDER_ALLOWLIST,
        }
    }
}

impl fmt::Display for NetworkPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetworkPolicy::DenyAll => f.write_str("deny-all"),
            NetworkPolicy::AllowAll => f.write_str("allow-all"),
            NetworkPolicy::Allowlist(entries) => {
                f.write_str("allowlist[")?;
                for (i, e) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str("]")
            }
            NetworkPolicy::ProviderAllowlist(list) => write!(f, "provider-allowlist[{list}]"),
        }
    }
}

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
