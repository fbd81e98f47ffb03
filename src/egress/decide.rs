//! The gate's decision, as pure functions: whether a requested destination may be dialled,
//! and which of the addresses the host resolved for it.
//!
//! 1. The host the client asked for is read as a name or an address ([`parse_host`]); neither
//!    is a malformed request.
//! 2. A denying entry that matches refuses it; then an allowing entry must match: for a name,
//!    by name; for an address (an IP literal in any spelling), by an address block.
//! 3. A name is resolved by the host (never by the sandbox); every address it gives must be
//!    public, or itself listed by an allowing block and not denied. The gate dials only the
//!    addresses that pass, never the name again (no second lookup to rebind).

use std::net::IpAddr;

use crate::policy::AllowlistEntry;
use crate::policy::address::{Host, non_public, parse_host};

/// Why the gate refused a connection: a stable machine word (sent in the refusal's header and
/// audit record) and the words for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) reason: Reason,
    pub(crate) detail: String,
    /// The policy entry that decided it, when one did (a denying entry).
    pub(crate) rule: Option<String>,
}

/// The kinds of refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// The request could not be read as a proxy request for a host and port.
    Malformed,
    /// No allowing entry covers the destination.
    NotListed,
    /// A denying entry covers it.
    Denied,
    /// The name resolved to a non-public address that no entry lists.
    NonPublicAddress,
    /// The name did not resolve.
    Unresolved,
    /// The TLS `ClientHello` named another host than the CONNECT request, or none.
    SniMismatch,
    /// The destination did not accept the connection.
    Unreachable,
}

impl Reason {
    /// The word sent in the `X-Sandboxio-Egress` header and the audit record.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::Malformed => "malformed-request",
            Reason::NotListed => "not-listed",
            Reason::Denied => "denied",
            Reason::NonPublicAddress => "non-public-address",
            Reason::Unresolved => "unresolved",
            Reason::SniMismatch => "sni-mismatch",
            Reason::Unreachable => "unreachable",
        }
    }

    /// The HTTP status a refusal before the tunnel opens is answered with.
    pub(crate) fn status(self) -> u16 {
        match self {
            Reason::Malformed => 400,
            Reason::NotListed | Reason::Denied | Reason::NonPublicAddress | Reason::SniMismatch => 403,
            Reason::Unresolved | Reason::Unreachable => 502,
        }
    }
}

impl Refusal {
    pub(crate) fn new(reason: Reason, detail: impl Into<String>) -> Refusal {
        Refusal { reason, detail: detail.into(), rule: None }
    }

    /// The same refusal, decided by the policy entry `rule`.
    fn by(mut self, rule: &AllowlistEntry) -> Refusal {
        self.rule = Some(rule.to_string());
        self
    }
}

/// Step 1 and 2: the host the client asked for, if the policy lets it be tried on `port`.
///
/// # Errors
///
/// `Malformed` for a host that is no name or address, `Denied`, `NotListed`.
pub(crate) fn admit(entries: &[AllowlistEntry], host: &str, port: u16) -> Result<Host, Refusal> {
    let parsed = parse_host(host)
        .ok_or_else(|| Refusal::new(Reason::Malformed, format!("{host:?} is no host name or IP address")))?;
    let text = parsed.to_string();
    let matching = |deny: bool| {
        entries.iter().find(|e| {
            e.is_deny() == deny
                && match &parsed {
                    Host::Name(name) => e.matches(name, port),
                    Host::Ip(ip) => e.matches_address(*ip, port),
                }
        })
    };
    if let Some(entry) = matching(true) {
        return Err(
            Refusal::new(Reason::Denied, format!("{text}:{port} is denied by the entry {entry}")).by(entry)
        );
    }
    if matching(false).is_none() {
        let hint = match &parsed {
            Host::Ip(_) if host != text => {
                format!(" ({host:?} is the address {text}, which no address block lists)")
            }
            Host::Ip(_) => " (an IP address is reachable only through a listed address block)".to_owned(),
            Host::Name(_) => String::new(),
        };
        return Err(Refusal::new(
            Reason::NotListed,
            format!("no allowlist entry covers {text}:{port}{hint}"),
        ));
    }
    Ok(parsed)
}

/// Step 3: the addresses of `name` the gate may dial on `port`, in the resolver's order.
///
/// # Errors
///
/// `Unresolved` when `addrs` is empty; `NonPublicAddress` when no address passes (naming the
/// first refused one); `Denied` when a denying block covers one.
pub(crate) fn vet(
    entries: &[AllowlistEntry],
    name: &str,
    port: u16,
    addrs: &[IpAddr],
) -> Result<Vec<IpAddr>, Refusal> {
    if addrs.is_empty() {
        return Err(Refusal::new(Reason::Unresolved, format!("{name} has no address")));
    }
    let mut passed = Vec::new();
    let mut refused = None;
    for &ip in addrs {
        let ip = ip.to_canonical();
        if let Some(entry) = entries.iter().find(|e| e.is_deny() && e.matches_address(ip, port)) {
            return Err(Refusal::new(
                Reason::Denied,
                format!("{name} resolves to {ip}, denied by the entry {entry}"),
            )
            .by(entry));
        }
        let listed = entries.iter().any(|e| !e.is_deny() && e.matches_address(ip, port));
        match non_public(ip) {
            Some(kind) if !listed => {
                refused.get_or_insert((ip, kind));
            }
            _ => passed.push(ip),
        }
    }
    if passed.is_empty() {
        let (ip, kind) = refused.unwrap_or((addrs[0], "refused"));
        return Err(Refusal::new(
            Reason::NonPublicAddress,
            format!("{name} resolves to {ip}, a {kind} address no address block lists"),
        ));
    }
    Ok(passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(list: &[&str]) -> Vec<AllowlistEntry> {
        list.iter().map(|e| e.parse().unwrap()).collect()
    }

    fn reason<T: std::fmt::Debug>(r: Result<T, Refusal>) -> Reason {
        r.unwrap_err().reason
    }

    #[test]
    fn names_are_admitted_by_name_and_port() {
        let e = entries(&["pypi.org", "*.pythonhosted.org", "!evil.pythonhosted.org", "mirror.test:80"]);
        assert_eq!(admit(&e, "PyPI.org.", 443), Ok(Host::Name("pypi.org".into())));
        assert_eq!(reason(admit(&e, "pypi.org", 80)), Reason::NotListed);
        assert_eq!(reason(admit(&e, "evil.pythonhosted.org", 443)), Reason::Denied);
        assert_eq!(
            admit(&e, "evil.pythonhosted.org", 443).unwrap_err().rule.as_deref(),
            Some("!evil.pythonhosted.org:*")
        );
        assert_eq!(admit(&e, "other.test", 443).unwrap_err().rule, None);
        assert!(admit(&e, "files.pythonhosted.org", 443).is_ok());
        assert!(admit(&e, "mirror.test", 80).is_ok());
        assert_eq!(reason(admit(&e, "other.test", 443)), Reason::NotListed);
        assert_eq!(reason(admit(&e, "a b", 443)), Reason::Malformed);
    }

    #[test]
    fn ip_literals_in_any_spelling_need_an_address_block() {
        let e = entries(&["pypi.org:*"]);
        for spelling in ["127.0.0.1", "127.1", "2130706433", "0x7f000001", "[::1]", "[::ffff:127.0.0.1]", "0"]
        {
            assert_eq!(reason(admit(&e, spelling, 443)), Reason::NotListed, "{spelling}");
        }
        let detail = admit(&e, "2130706433", 443).unwrap_err().detail;
        assert!(detail.contains("the address 127.0.0.1"), "{detail}");
        // The control: a listed block admits its addresses, whatever the spelling.
        let e = entries(&["127.0.0.0/8:*", "!127.0.0.2:*"]);
        assert_eq!(admit(&e, "127.1", 8080), Ok(Host::Ip("127.0.0.1".parse().unwrap())));
        assert_eq!(reason(admit(&e, "127.0.0.2", 8080)), Reason::Denied);
    }

    #[test]
    fn names_resolving_to_non_public_addresses_need_them_listed() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let e = entries(&["allowed.test"]);
        let refused = vet(&e, "allowed.test", 443, &[ip("10.0.0.7")]).unwrap_err();
        assert_eq!(refused.reason, Reason::NonPublicAddress);
        assert!(refused.detail.contains("10.0.0.7, a private address"), "{}", refused.detail);
        assert_eq!(reason(vet(&e, "allowed.test", 443, &[ip("169.254.169.254")])), Reason::NonPublicAddress);
        assert_eq!(reason(vet(&e, "allowed.test", 443, &[])), Reason::Unresolved);
        // Public addresses pass, non-public ones of the same name are dropped.
        assert_eq!(vet(&e, "allowed.test", 443, &[ip("127.0.0.1"), ip("1.1.1.1")]), Ok(vec![ip("1.1.1.1")]));
        // The control: the same name with its address listed is reachable.
        let e = entries(&["allowed.test", "10.0.0.0/24"]);
        assert_eq!(vet(&e, "allowed.test", 443, &[ip("10.0.0.7")]), Ok(vec![ip("10.0.0.7")]));
        // ...on the block's ports only.
        assert_eq!(reason(vet(&e, "allowed.test", 80, &[ip("10.0.0.7")])), Reason::NonPublicAddress);
        let e = entries(&["allowed.test", "!1.1.1.0/24"]);
        assert_eq!(reason(vet(&e, "allowed.test", 443, &[ip("1.1.1.1")])), Reason::Denied);
    }
}
