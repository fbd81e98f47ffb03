//! How a sandbox's [`NetworkPolicy`](super::NetworkPolicy) is enforced, as its backend reports
//! it: what decides, and what the decision cannot see.

use std::fmt;

/// One mechanism that takes part in enforcing a sandbox's egress policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EgressMechanism {
    /// Nothing is enforced: the sandbox shares a network that reaches everything
    /// (`allow_all()`).
    Unrestricted,
    /// The sandbox's network has no route out at all (a namespace with only loopback, a
    /// container with no network).
    NoRoute,
    /// Connections leave only through an HTTP `CONNECT` (and plain-HTTP) proxy that decides on
    /// the destination the client names, resolves names itself and dials the addresses it
    /// vetted.
    ProxyConnect,
    /// A tunnel to a name must carry TLS whose `ClientHello` names that same host (Server
    /// Name Indication), checked before any byte reaches the destination.
    SniCheck,
    /// Destinations given as IP addresses are judged by address blocks (CIDR).
    Cidr,
    /// TLS is terminated and each request judged inside it (the only mechanism that can see
    /// domain fronting).
    TlsTerminate,
    /// The policy is simulated, not enforced: the in-memory fake.
    Simulated,
    /// A cloud provider's own filter decides on the name a connection claims (TLS SNI, the
    /// HTTP `Host` header), not on the address it reaches: a connection to any address
    /// that names an allowed host passes (see
    /// [`ProviderAllowlist`](super::ProviderAllowlist)).
    ProviderNameFilter,
}

impl fmt::Display for EgressMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EgressMechanism::Unrestricted => "unrestricted",
            EgressMechanism::NoRoute => "no route",
            EgressMechanism::ProxyConnect => "proxy CONNECT",
            EgressMechanism::SniCheck => "SNI check",
            EgressMechanism::Cidr => "CIDR",
            EgressMechanism::TlsTerminate => "TLS termination",
            EgressMechanism::Simulated => "simulated",
            EgressMechanism::ProviderNameFilter => "provider name filter (SNI/Host)",
        })
    }
}

/// How a sandbox's egress policy is enforced ([`Sandbox::network_enforcement`]): the
/// mechanisms that decide, and the three things users of an allowlist most need to know
/// about what they cannot see.
///
/// [`Sandbox::network_enforcement`]: crate::Sandbox::network_enforcement
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct NetworkEnforcement {
    /// The mechanisms, in the order a connection meets them.
    pub mechanisms: Vec<EgressMechanism>,
    /// Whether code in the sandbox can reach any DNS resolver (and so leak data in the names
    /// it looks up, even where every connection is refused).
    pub dns_from_inside: bool,
    /// Whether UDP (QUIC included) can leave the sandbox.
    pub udp_out: bool,
    /// Whether a TLS session to an allowed name could be served by another site behind the
    /// same front (domain fronting): true wherever TLS is not terminated.
    pub domain_fronting_possible: bool,
}

impl NetworkEnforcement {
    /// Allow-all: nothing enforced, everything reachable.
    #[must_use]
    pub fn unrestricted() -> Self {
        NetworkEnforcement {
            mechanisms: vec![EgressMechanism::Unrestricted],
            dns_from_inside: true,
            udp_out: true,
            domain_fronting_possible: true,
        }
    }

    /// Deny-all by having no route out.
    #[must_use]
    pub fn no_route() -> Self {
        NetworkEnforcement {
            mechanisms: vec![EgressMechanism::NoRoute],
            dns_from_inside: false,
            udp_out: false,
            domain_fronting_possible: false,
        }
    }

    /// An allowlist enforced by sandboxio's egress gate: no route but the proxy, which
    /// checks names, addresses and TLS server names; no DNS and no UDP inside; fronting
    /// possible (TLS is not terminated).
    #[must_use]
    pub fn egress_gate() -> Self {
        NetworkEnforcement {
            mechanisms: vec![
                EgressMechanism::NoRoute,
                EgressMechanism::ProxyConnect,
                EgressMechanism::Cidr,
                EgressMechanism::SniCheck,
            ],
            dns_from_inside: false,
            udp_out: false,
            domain_fronting_possible: true,
        }
    }

    /// A [`ProviderAllowlist`](super::ProviderAllowlist) handed to the provider: its name
    /// filter, then address blocks for connections that claim no allowed name; the
    /// provider's resolvers stay reachable (DNS and UDP to them), and fronting is possible.
    #[must_use]
    pub fn provider_name_filter() -> Self {
        NetworkEnforcement {
            mechanisms: vec![EgressMechanism::ProviderNameFilter, EgressMechanism::Cidr],
            dns_from_inside: true,
            udp_out: true,
            domain_fronting_possible: true,
        }
    }

    /// A policy the in-memory fake simulates.
    #[must_use]
    pub fn simulated() -> Self {
        NetworkEnforcement {
            mechanisms: vec![EgressMechanism::Simulated],
            dns_from_inside: false,
            udp_out: false,
            domain_fronting_possible: false,
        }
    }
}

impl fmt::Display for NetworkEnforcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, m) in self.mechanisms.iter().enumerate() {
            if i > 0 {
                f.write_str(" + ")?;
            }
            write!(f, "{m}")?;
        }
        let yes = |b: bool| if b { "yes" } else { "no" };
        write!(
            f,
            " (DNS from inside: {}, UDP out: {}, domain fronting possible: {})",
            yes(self.dns_from_inside),
            yes(self.udp_out),
            yes(self.domain_fronting_possible)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_reads_as_one_line() {
        assert_eq!(
            NetworkEnforcement::egress_gate().to_string(),
            "no route + proxy CONNECT + CIDR + SNI check (DNS from inside: no, UDP out: no, domain fronting possible: yes)"
        );
        assert_eq!(
            NetworkEnforcement::provider_name_filter().to_string(),
            "provider name filter (SNI/Host) + CIDR (DNS from inside: yes, UDP out: yes, domain fronting possible: yes)"
        );
        assert_eq!(
            NetworkEnforcement::no_route().to_string(),
            "no route (DNS from inside: no, UDP out: no, domain fronting possible: no)"
        );
    }
}
