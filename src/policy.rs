//! What a sandbox may do and how strongly it is isolated: [`NetworkPolicy`],
//! [`ResourceLimits`], [`IsolationTier`] and the closed set of [`Capabilities`].

use std::fmt;
use std::net::IpAddr;

use crate::error::{Error, Result};

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
    /// Egress only to the listed destinations (needs [`Capabilities::NETWORK_ALLOWLIST`]).
    Allowlist(Vec<AllowlistEntry>),
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

    /// Egress only to `entries`: exact host names (`pypi.org`), `*.suffix` wildcards
    /// (`*.pythonhosted.org`), `host:port` (`example.com:443`), IP addresses, or CIDR blocks
    /// (`10.0.0.0/8`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) naming the first entry that
    /// is none of these.
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

    /// Whether this policy lets a connection to `host` (a name or an IP) on `port` through.
    /// Backends that simulate policy (the fake) and canary tests use it.
    #[must_use]
    pub fn permits(&self, host: &str, port: u16) -> bool {
        match self {
            NetworkPolicy::DenyAll => false,
            NetworkPolicy::AllowAll => true,
            NetworkPolicy::Allowlist(entries) => entries.iter().any(|e| e.matches(host, port)),
        }
    }

    /// The capability a backend needs to enforce this policy, if any.
    #[must_use]
    pub fn required_capability(&self) -> Capabilities {
        match self {
            NetworkPolicy::DenyAll => Capabilities::NETWORK_DENY,
            NetworkPolicy::AllowAll => Capabilities::empty(),
            NetworkPolicy::Allowlist(_) => Capabilities::NETWORK_ALLOWLIST,
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
        }
    }
}

/// One destination of a [`NetworkPolicy::Allowlist`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AllowlistEntry {
    /// An exact host name, any port. Stored lower-case.
    Host(String),
    /// `*.suffix`: any host strictly under `suffix` (not `suffix` itself). Stored lower-case,
    /// without the `*.`.
    Wildcard(String),
    /// An exact host name (or IP) on one port.
    HostPort(String, u16),
    /// An address block: `addr/prefix`. A bare IP is a block of one address.
    Cidr(IpAddr, u8),
}

impl AllowlistEntry {
    /// Whether `host:port` falls under this entry.
    #[must_use]
    pub fn matches(&self, host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        match self {
            AllowlistEntry::Host(h) => *h == host,
            AllowlistEntry::Wildcard(suffix) => {
                host.len() > suffix.len() + 1
                    && host.ends_with(suffix.as_str())
                    && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
            }
            AllowlistEntry::HostPort(h, p) => *h == host && *p == port,
            AllowlistEntry::Cidr(net, prefix) => {
                host.parse::<IpAddr>().is_ok_and(|ip| cidr_contains(*net, *prefix, ip))
            }
        }
    }
}

fn cidr_contains(net: IpAddr, prefix: u8, ip: IpAddr) -> bool {
    fn masked(bits: u128, width: u32, prefix: u8) -> u128 {
        let prefix = u32::from(prefix);
        if prefix == 0 { 0 } else { bits >> (width - prefix) }
    }
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => {
            masked(u128::from(u32::from(n)), 32, prefix) == masked(u128::from(u32::from(i)), 32, prefix)
        }
        (IpAddr::V6(n), IpAddr::V6(i)) => {
            masked(u128::from(n), 128, prefix) == masked(u128::from(i), 128, prefix)
        }
        _ => false,
    }
}

fn valid_host_name(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

impl std::str::FromStr for AllowlistEntry {
    type Err = Error;

    fn from_str(raw: &str) -> Result<Self> {
        let bad = |why: &str| Error::invalid_input(format!("allowlist entry {raw:?}: {why}"));
        let s = raw.trim().to_ascii_lowercase();
        if s.is_empty() {
            return Err(bad("empty entry"));
        }
        if let Some((addr, prefix)) = s.split_once('/') {
            let ip: IpAddr = addr.parse().map_err(|_| bad("CIDR address is not an IP address"))?;
            let prefix: u8 = prefix.parse().map_err(|_| bad("CIDR prefix is not a number"))?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            if prefix > max {
                return Err(bad("CIDR prefix is too long for the address"));
            }
            return Ok(AllowlistEntry::Cidr(ip, prefix));
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            let width = if ip.is_ipv4() { 32 } else { 128 };
            return Ok(AllowlistEntry::Cidr(ip, width));
        }
        if let Some(suffix) = s.strip_prefix("*.") {
            return if valid_host_name(suffix) {
                Ok(AllowlistEntry::Wildcard(suffix.to_owned()))
            } else {
                Err(bad("wildcard suffix is not a host name"))
            };
        }
        if let Some((host, port)) = s.rsplit_once(':') {
            let port: u16 = port.parse().map_err(|_| bad("port is not a number in 0..=65535"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if valid_host_name(host) || host.parse::<IpAddr>().is_ok() {
                return Ok(AllowlistEntry::HostPort(host.to_owned(), port));
            }
            return Err(bad("not a host name"));
        }
        if valid_host_name(&s) {
            Ok(AllowlistEntry::Host(s))
        } else {
            Err(bad("not a host name, *.suffix, host:port, IP or CIDR block"))
        }
    }
}

impl fmt::Display for AllowlistEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllowlistEntry::Host(h) => f.write_str(h),
            AllowlistEntry::Wildcard(s) => write!(f, "*.{s}"),
            AllowlistEntry::HostPort(h, p) => write!(f, "{h}:{p}"),
            AllowlistEntry::Cidr(ip, prefix) => write!(f, "{ip}/{prefix}"),
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
    /// | `LIMIT_MEMORY` | enforce `ResourceLimits::memory_mib` |
    /// | `LIMIT_CPU` | enforce `ResourceLimits::cpu_millicores` |
    /// | `LIMIT_PIDS` | enforce `ResourceLimits::pids` |
    /// | `CONNECT` | attach to an existing sandbox by id (`Sandbox::connect`) |
    /// | `DETACH` | let a sandbox outlive its handle until its TTL (`detached(true)`, `Sandbox::detach`) |
    /// | `COMMAND_SECRETS` | keep a command's own secrets (`Command::secret_env`) from every other command of the sandbox |
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
    fn allowlist_entries_parse_and_match() {
        let p = NetworkPolicy::allowlist(["PyPI.org", "*.example.com", "api.x.io:443", "10.0.0.0/8", "::1"])
            .unwrap();
        assert!(p.permits("pypi.org", 80));
        assert!(!p.permits("evil-pypi.org", 80));
        assert!(p.permits("a.b.example.com", 1));
        assert!(!p.permits("example.com", 1));
        assert!(!p.permits("badexample.com", 1));
        assert!(p.permits("api.x.io", 443));
        assert!(!p.permits("api.x.io", 80));
        assert!(p.permits("10.200.3.4", 22));
        assert!(!p.permits("11.0.0.1", 22));
        assert!(p.permits("::1", 5));
        assert!(!NetworkPolicy::deny_all().permits("pypi.org", 443));
    }

    #[test]
    fn bad_allowlist_entries_name_the_entry() {
        for bad in ["", "a b", "10.0.0.0/33", "host:99999", "*.", "-x.com"] {
            let err = NetworkPolicy::allowlist([bad]).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidInput, "{bad:?}");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
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
