//! A provider's own egress filter by domain name ([`ProviderAllowlist`]), kept apart from
//! sandboxio's [`NetworkPolicy::Allowlist`](super::NetworkPolicy::Allowlist) because it
//! checks something weaker.

use std::fmt;

use crate::error::{Error, Result};

/// The most domains one provider allowlist takes.
pub const PROVIDER_ALLOWLIST_MAX: usize = 256;

/// Domains a cloud provider's own egress filter lets a sandbox reach
/// ([`NetworkPolicy::provider_allowlist`](super::NetworkPolicy::provider_allowlist); needs
/// [`Capabilities::PROVIDER_ALLOWLIST`](super::Capabilities::PROVIDER_ALLOWLIST)).
///
/// Such a filter (E2B's `allowOut`, Modal's domain allowlist) decides on the **name a
/// connection claims**: the TLS server name (SNI) and, for plain HTTP, the `Host` header.
/// It does not check that the address dialed belongs to that name, so it is not
/// sandboxio's `NETWORK_ALLOWLIST` and cannot pass that contract's bypass tests. What it
/// cannot see, whatever the provider:
///
/// - a connection to any address that names an allowed host in its SNI or `Host` (an
///   attacker's server presenting an allowed name);
/// - domain fronting: TLS to an allowed front, the real site in the encrypted request;
/// - Encrypted Client Hello: the filter sees only the outer, public name;
/// - DNS: the resolvers the provider leaves reachable carry data in the names looked up.
///
/// Connections that claim no allowed name (an IP literal, TLS without SNI) are refused.
/// [`Sandbox::network_enforcement`](crate::Sandbox::network_enforcement) reports
/// [`EgressMechanism::ProviderNameFilter`](super::EgressMechanism::ProviderNameFilter).
///
/// Entries are host names (`pypi.org`) or `*.suffix` wildcards (`*.pythonhosted.org`,
/// names strictly below the suffix), lower-cased; no ports, addresses or denials.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProviderAllowlist {
    domains: Vec<String>,
}

impl ProviderAllowlist {
    /// The allowlist of `domains` (at least one, at most [`PROVIDER_ALLOWLIST_MAX`];
    /// duplicates kept once, in the order given).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] naming the first entry that is not a host name or a
    /// `*.suffix` wildcard (an IP address, a port, a `!` denial, a bare `*`), or for an
    /// empty or over-long list.
    pub fn new<I, S>(domains: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out: Vec<String> = Vec::new();
        for raw in domains {
            let domain = parse(raw.as_ref())?;
            if !out.contains(&domain) {
                out.push(domain);
            }
        }
        if out.is_empty() {
            return Err(Error::invalid_input("a provider allowlist needs at least one domain"));
        }
        if out.len() > PROVIDER_ALLOWLIST_MAX {
            return Err(Error::invalid_input(format!(
                "a provider allowlist takes at most {PROVIDER_ALLOWLIST_MAX} domains; {} given",
                out.len()
            )));
        }
        Ok(ProviderAllowlist { domains: out })
    }

    /// The domains, as given (lower-cased, each once).
    #[must_use]
    pub fn domains(&self) -> &[String] {
        &self.domains
    }

    /// Whether a connection claiming `host` passes the filter (case-insensitive; a
    /// wildcard matches names strictly below its suffix).
    #[must_use]
    pub fn matches(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.domains.iter().any(|d| match d.strip_prefix("*.") {
            Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
            None => host == *d,
        })
    }
}

impl fmt::Display for ProviderAllowlist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.domains.join(", "))
    }
}

/// One entry, checked and lower-cased.
fn parse(raw: &str) -> Result<String> {
    let domain = raw.trim().trim_end_matches('.').to_ascii_lowercase();
    let name = domain.strip_prefix("*.").unwrap_or(&domain);
    // At least two labels: a provider's filter judges public names, and `*.com` is no list.
    if !super::allowlist::valid_host_name(name) || !name.contains('.') {
        return Err(Error::invalid_input(format!(
            "provider allowlist entry {raw:?} is not a host name or a *.suffix wildcard \
             (no addresses, ports or denials: the provider's filter judges names only)"
        )));
    }
    Ok(domain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn names_and_wildcards_are_kept_lower_cased_once() {
        let list = ProviderAllowlist::new(["PyPI.org", "*.pythonhosted.org", "pypi.org."]).unwrap();
        assert_eq!(list.domains(), ["pypi.org", "*.pythonhosted.org"]);
        assert_eq!(list.to_string(), "pypi.org, *.pythonhosted.org");
    }

    #[test]
    fn a_wildcard_matches_strictly_below_its_suffix() {
        let list = ProviderAllowlist::new(["pypi.org", "*.pythonhosted.org"]).unwrap();
        assert!(list.matches("PYPI.org"));
        assert!(list.matches("files.pythonhosted.org"));
        assert!(list.matches("a.b.pythonhosted.org"));
        assert!(!list.matches("pythonhosted.org"));
        assert!(!list.matches("evilpythonhosted.org"));
        assert!(!list.matches("pypi.org.evil.com"));
        assert!(!list.matches("sub.pypi.org"));
    }

    #[test]
    fn addresses_ports_denials_and_empty_lists_are_refused() {
        for bad in
            ["10.0.0.1", "10.0.0.0/8", "[::1]", "pypi.org:443", "!pypi.org", "*", "*.com.", "localhost", ""]
        {
            let err = ProviderAllowlist::new([bad]).unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidInput, "{bad}");
        }
        let none: [&str; 0] = [];
        assert_eq!(ProviderAllowlist::new(none).unwrap_err().code(), ErrorCode::InvalidInput);
        let many: Vec<String> = (0..=PROVIDER_ALLOWLIST_MAX).map(|i| format!("h{i}.example.org")).collect();
        assert_eq!(ProviderAllowlist::new(many).unwrap_err().code(), ErrorCode::InvalidInput);
    }
}
