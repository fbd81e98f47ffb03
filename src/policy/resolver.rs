//! [`EgressResolver`]: which DNS the egress gate asks when a sandbox names a host.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// How the egress gate of a sandbox under [`NetworkPolicy::allowlist`](super::NetworkPolicy::allowlist)
/// resolves the names the sandbox asks for. Names are always resolved here, on the host
/// (never by the sandbox, which reaches no resolver), to every `A` and `AAAA` address, and
/// each address is vetted: it must be public, or itself listed by an address block.
///
/// Give it to a backend that runs a gate (`LocalBackend::with_egress_resolver`); the default
/// is [`EgressResolver::system`].
///
/// # Examples
///
/// ```
/// use sandboxio::policy::EgressResolver;
///
/// let resolver = EgressResolver::dns_server("192.0.2.53:53".parse().unwrap());
/// assert_eq!(resolver.server(), Some("192.0.2.53:53".parse().unwrap()));
/// assert_eq!(EgressResolver::system().server(), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct EgressResolver {
    server: Option<SocketAddr>,
    /// Address blocks vetted as public although they are not (test networks only).
    public: Vec<(IpAddr, u8)>,
}

impl EgressResolver {
    /// The host's own resolver (the C library's `getaddrinfo`: `/etc/hosts`, then the
    /// servers in `/etc/resolv.conf`), as every other program on the host resolves.
    #[must_use]
    pub fn system() -> Self {
        EgressResolver::default()
    }

    /// Only the DNS server at `server` (an address and port: `192.0.2.53:53`), asked over UDP
    /// and again over TCP when the UDP answer is truncated or lost; no `/etc/hosts`, no
    /// search domains (every name is asked as written, fully qualified). A name it does not
    /// answer is refused by the gate as unresolved.
    #[must_use]
    pub fn dns_server(server: SocketAddr) -> Self {
        EgressResolver { server: Some(server), public: Vec::new() }
    }

    /// The DNS server this resolver asks, or `None` for the host's resolver.
    #[must_use]
    pub fn server(&self) -> Option<SocketAddr> {
        self.server
    }

    /// **For test networks only** (feature `contract`): addresses inside `block` are vetted
    /// as public, so that a test network's hosts, which must live on addresses nobody else
    /// routes, can stand in for the public hosts an allowlist names. Only the IETF
    /// documentation ranges are accepted (`192.0.2.0/24`, `198.51.100.0/24`,
    /// `203.0.113.0/24`, `2001:db8::/32`, RFC 5737 and RFC 3849), or blocks inside them:
    /// loopback, private, link-local and metadata addresses stay refused unless a policy
    /// lists them.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) for text that is no address or
    /// CIDR block, or a block outside the documentation ranges.
    ///
    /// # Examples
    ///
    /// ```
    /// use sandboxio::policy::EgressResolver;
    ///
    /// let resolver = EgressResolver::dns_server("198.51.100.53:53".parse().unwrap())
    ///     .treat_as_public("198.51.100.0/24")?;
    /// assert!(EgressResolver::system().treat_as_public("10.0.0.0/8").is_err());
    /// # Ok::<(), sandboxio::Error>(())
    /// ```
    #[cfg(feature = "contract")]
    #[cfg_attr(docsrs, doc(cfg(feature = "contract")))]
    pub fn treat_as_public(mut self, block: &str) -> crate::Result<Self> {
        let bad = |why: &str| crate::Error::invalid_input(format!("treat_as_public({block:?}): {why}"));
        let entry: super::AllowlistEntry = block.parse().map_err(|_| bad("not an address or CIDR block"))?;
        let super::AllowlistTarget::Cidr(net, prefix) = *entry.target() else {
            return Err(bad("not an address or CIDR block"));
        };
        if entry.is_deny() || entry.ports() != super::AllowlistPorts::Default {
            return Err(bad("an address block takes no `!` and no port here"));
        }
        if !inside_documentation(net, prefix) {
            return Err(bad("only blocks inside the documentation ranges 192.0.2.0/24, 198.51.100.0/24, \
                 203.0.113.0/24 and 2001:db8::/32 can be treated as public"));
        }
        self.public.push((net, prefix));
        Ok(self)
    }

    /// Whether `ip` is inside a block given to `treat_as_public`.
    pub(crate) fn treated_as_public(&self, ip: IpAddr) -> bool {
        self.public.iter().any(|(net, prefix)| super::allowlist::cidr_contains(*net, *prefix, ip))
    }
}

/// The documentation ranges (RFC 5737, RFC 3849).
#[cfg(feature = "contract")]
const DOCUMENTATION: [(IpAddr, u8); 4] = [
    (IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 0)), 24),
    (IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 0)), 24),
    (IpAddr::V4(std::net::Ipv4Addr::new(203, 0, 113, 0)), 24),
    (IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0)), 32),
];

/// Whether the block `net/prefix` lies wholly inside one documentation range.
#[cfg(feature = "contract")]
fn inside_documentation(net: IpAddr, prefix: u8) -> bool {
    DOCUMENTATION
        .iter()
        .any(|(doc, width)| prefix >= *width && super::allowlist::cidr_contains(*doc, *width, net))
}

impl fmt::Display for EgressResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.server {
            Some(server) => write!(f, "the DNS server {server}")?,
            None => f.write_str("the host's resolver")?,
        }
        for (net, prefix) in &self.public {
            write!(f, ", {net}/{prefix} treated as public")?;
        }
        Ok(())
    }
}

#[cfg(all(test, feature = "contract"))]
mod tests {
    use super::*;

    #[test]
    fn only_documentation_blocks_can_be_treated_as_public() {
        let r = EgressResolver::system();
        for ok in [
            "198.51.100.0/24",
            "198.51.100.7",
            "203.0.113.128/25",
            "192.0.2.0/24",
            "2001:db8::/32",
            "2001:db8:1::/48",
        ] {
            let treated = r.clone().treat_as_public(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert!(treated.to_string().contains("treated as public"), "{treated}");
        }
        for refused in [
            "10.0.0.0/8",
            "127.0.0.1",
            "169.254.169.254",
            "198.51.0.0/16",
            "198.51.100.0/23",
            "2001:db8::/16",
            "::1",
            "0.0.0.0/0",
            "pypi.org",
            "198.51.100.0/24:80",
            "!198.51.100.0/24",
        ] {
            let err = r.clone().treat_as_public(refused).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidInput, "{refused}");
        }
        let r = r.treat_as_public("198.51.100.0/24").unwrap();
        assert!(r.treated_as_public("198.51.100.9".parse().unwrap()));
        assert!(!r.treated_as_public("198.51.101.9".parse().unwrap()));
        assert!(!EgressResolver::system().treated_as_public("198.51.100.9".parse().unwrap()));
    }
}
