//! [`NetworkPolicy`]: the egress policy every sandbox is created with (exported at the crate
//! root).

use std::fmt;

use crate::error::Result;

#[cfg(doc)]
use super::ALLOWLIST_DEFAULT_PORT;
use super::{AllowlistEntry, Capabilities, ProviderAllowlist};

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
