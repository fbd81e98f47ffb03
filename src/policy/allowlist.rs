//! The entries of [`NetworkPolicy::allowlist`](super::NetworkPolicy::allowlist): what a
//! destination is (a name, a `*.suffix`, an address block), which ports it covers, and whether
//! it allows or denies.
//!
//! **The port rule.** An entry that names no port covers port 443 (HTTPS) only
//! ([`ALLOWLIST_DEFAULT_PORT`]): plain HTTP, SSH or a database port must be listed (`host:80`,
//! `host:22`) or opened on purpose (`host:*`). Before 0.2 an entry without a port covered
//! every port; see CHANGELOG.md.
//!
//! **Deny wins.** An entry written with a leading `!` denies what it matches, whatever an
//! allowing entry says: `["*.github.com", "!gist.github.com"]`. A denying entry without a
//! port denies every port.

use std::fmt;
use std::net::IpAddr;

use super::address::Host;
use crate::error::{Error, Result};

/// The port an entry that names none covers: HTTPS.
pub const ALLOWLIST_DEFAULT_PORT: u16 = 443;

/// What an [`AllowlistEntry`] names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AllowlistTarget {
    /// An exact host name, lower-case, without a trailing dot.
    Name(String),
    /// `*.suffix`: any name strictly under `suffix` (not `suffix` itself); lower-case, without
    /// the `*.`.
    Suffix(String),
    /// An address block `addr/prefix`; a bare IP address is a block of one address. It
    /// matches IP-literal destinations and, for names, the addresses they resolve to (so a
    /// name that resolves to a private address is reachable only when that address is listed).
    Cidr(IpAddr, u8),
}

/// The ports an [`AllowlistEntry`] covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AllowlistPorts {
    /// None was written: [`ALLOWLIST_DEFAULT_PORT`] (443) only.
    Default,
    /// `:N`: that port only.
    One(u16),
    /// `:*`: every port.
    Any,
}

impl AllowlistPorts {
    /// Whether `port` is covered.
    #[must_use]
    pub fn covers(self, port: u16) -> bool {
        match self {
            AllowlistPorts::Default => port == ALLOWLIST_DEFAULT_PORT,
            AllowlistPorts::One(p) => p == port,
            AllowlistPorts::Any => true,
        }
    }
}

/// One entry of a [`NetworkPolicy::Allowlist`](super::NetworkPolicy::Allowlist), parsed from
/// text: `[!]target[:port|:*]`, where the target is a host name (`pypi.org`), a `*.suffix`
/// wildcard, an IPv4 address or block (`10.0.0.0/8`), or an IPv6 address or block (bare, or in
/// brackets when a port follows: `[2001:db8::]/32:*`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowlistEntry {
    target: AllowlistTarget,
    ports: AllowlistPorts,
    deny: bool,
}

impl AllowlistEntry {
    /// What the entry names.
    #[must_use]
    pub fn target(&self) -> &AllowlistTarget {
        &self.target
    }

    /// The ports it covers.
    #[must_use]
    pub fn ports(&self) -> AllowlistPorts {
        self.ports
    }

    /// Whether it denies (written with a leading `!`) rather than allows.
    #[must_use]
    pub fn is_deny(&self) -> bool {
        self.deny
    }

    /// Whether a connection to `host` on `port` falls under this entry, `host` being a name
    /// or an IP literal (compared case-insensitively, a trailing dot ignored). A name is
    /// matched by its name only: the addresses it resolves to are matched with
    /// [`AllowlistEntry::matches_address`].
    #[must_use]
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if !self.ports.covers(port) {
            return false;
        }
        // The host as the gate reads it: a canonical name, or the address any IP spelling
        // (`127.1`, `2130706433`, `[::ffff:127.0.0.1]`) stands for.
        match (&self.target, super::address::parse_host(host)) {
            (AllowlistTarget::Name(name), Some(Host::Name(host))) => *name == host,
            (AllowlistTarget::Suffix(suffix), Some(Host::Name(host))) => {
                host.len() > suffix.len() + 1
                    && host.ends_with(suffix.as_str())
                    && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
            }
            (AllowlistTarget::Cidr(net, prefix), Some(Host::Ip(ip))) => cidr_contains(*net, *prefix, ip),
            _ => false,
        }
    }

    /// Whether the address `ip` on `port` falls under this entry's address block (never for
    /// a name or suffix entry).
    #[must_use]
    pub fn matches_address(&self, ip: IpAddr, port: u16) -> bool {
        match &self.target {
            AllowlistTarget::Cidr(net, prefix) => self.ports.covers(port) && cidr_contains(*net, *prefix, ip),
            AllowlistTarget::Name(_) | AllowlistTarget::Suffix(_) => false,
        }
    }
}

/// Whether `ip` is inside `net/prefix`; an IPv4-mapped IPv6 address is compared as IPv4.
pub(crate) fn cidr_contains(net: IpAddr, prefix: u8, ip: IpAddr) -> bool {
    fn masked(bits: u128, width: u32, prefix: u8) -> u128 {
        let prefix = u32::from(prefix);
        if prefix == 0 { 0 } else { bits >> (width - prefix) }
    }
    let ip = ip.to_canonical();
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

/// Whether `h` is a host name of letters, digits, `-` and `_` labels (no IDN: punycode it).
pub(crate) fn valid_host_name(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
        // A name whose last label is all digits is an IP address spelled oddly (`127.1`) or
        // nothing: never a name (the WHATWG URL host rule).
        && !h.rsplit('.').next().is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
}

fn parse_cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (text, None),
    };
    let addr = addr.strip_prefix('[').and_then(|a| a.strip_suffix(']')).unwrap_or(addr);
    let ip: IpAddr = addr.parse().ok()?;
    let width = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        Some(p) => p.parse().ok().filter(|p| *p <= width)?,
        None => width,
    };
    Some((ip, prefix))
}

impl std::str::FromStr for AllowlistEntry {
    type Err = Error;

    fn from_str(raw: &str) -> Result<Self> {
        let bad = |why: &str| Error::invalid_input(format!("allowlist entry {raw:?}: {why}"));
        let s = raw.trim().to_ascii_lowercase();
        let (deny, s) = match s.strip_prefix('!') {
            Some(rest) => (true, rest.trim()),
            None => (false, s.as_str()),
        };
        if s.is_empty() {
            return Err(bad("empty entry"));
        }
        // A bare address or block (an IPv6 one has colons of its own and takes no port):
        // allowing, it covers 443; denying, every port, as a denying name does.
        if let Some((ip, prefix)) = parse_cidr(s) {
            return Ok(AllowlistEntry {
                target: AllowlistTarget::Cidr(ip, prefix),
                ports: if deny { AllowlistPorts::Any } else { AllowlistPorts::Default },
                deny,
            });
        }
        if s.contains('/') && !s.starts_with('[') && s.matches(':').count() > 1 {
            return Err(bad("CIDR block is not an address and a prefix length that fits it"));
        }
        let (target, ports) = match s.rsplit_once(':') {
            Some((target, "*")) => (target, AllowlistPorts::Any),
            Some((target, port)) => {
                let port: u16 = port.parse().map_err(|_| bad("port is not a number in 0..=65535 or *"))?;
                (target, AllowlistPorts::One(port))
            }
            // A denying entry without a port denies every port: `!evil.test` means all of it.
            None if deny => (s, AllowlistPorts::Any),
            None => (s, AllowlistPorts::Default),
        };
        let target = target.strip_suffix('.').unwrap_or(target);
        let target = if target.contains('/') || target.starts_with('[') || target.parse::<IpAddr>().is_ok() {
            let (ip, prefix) = parse_cidr(target)
                .ok_or_else(|| bad("CIDR block is not an address and a prefix length that fits it"))?;
            AllowlistTarget::Cidr(ip, prefix)
        } else if let Some(suffix) = target.strip_prefix("*.") {
            if !valid_host_name(suffix) {
                return Err(bad("wildcard suffix is not a host name"));
            }
            AllowlistTarget::Suffix(suffix.to_owned())
        } else if valid_host_name(target) {
            AllowlistTarget::Name(target.to_owned())
        } else {
            return Err(bad("not a host name, *.suffix, IP address or CIDR block"));
        };
        Ok(AllowlistEntry { target, ports, deny })
    }
}

impl fmt::Display for AllowlistEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.deny {
            f.write_str("!")?;
        }
        let bracket = matches!(self.target, AllowlistTarget::Cidr(IpAddr::V6(_), _))
            && self.ports != AllowlistPorts::Default;
        match &self.target {
            AllowlistTarget::Name(h) => f.write_str(h)?,
            AllowlistTarget::Suffix(s) => write!(f, "*.{s}")?,
            AllowlistTarget::Cidr(ip, prefix) if bracket => write!(f, "[{ip}]/{prefix}")?,
            AllowlistTarget::Cidr(ip, prefix) => write!(f, "{ip}/{prefix}")?,
        }
        match self.ports {
            AllowlistPorts::Default => Ok(()),
            AllowlistPorts::One(p) => write!(f, ":{p}"),
            AllowlistPorts::Any => f.write_str(":*"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(s: &str) -> AllowlistEntry {
        s.parse().unwrap()
    }

    #[test]
    fn entries_parse_into_target_ports_and_kind() {
        let cases: [(&str, AllowlistTarget, AllowlistPorts, bool); 10] = [
            ("PyPI.org", AllowlistTarget::Name("pypi.org".into()), AllowlistPorts::Default, false),
            ("pypi.org.", AllowlistTarget::Name("pypi.org".into()), AllowlistPorts::Default, false),
            ("pypi.org:80", AllowlistTarget::Name("pypi.org".into()), AllowlistPorts::One(80), false),
            ("pypi.org:*", AllowlistTarget::Name("pypi.org".into()), AllowlistPorts::Any, false),
            (
                "*.example.com:8443",
                AllowlistTarget::Suffix("example.com".into()),
                AllowlistPorts::One(8443),
                false,
            ),
            ("!gist.github.com", AllowlistTarget::Name("gist.github.com".into()), AllowlistPorts::Any, true),
            (
                "10.0.0.0/8",
                AllowlistTarget::Cidr("10.0.0.0".parse().unwrap(), 8),
                AllowlistPorts::Default,
                false,
            ),
            (
                "10.1.2.3:*",
                AllowlistTarget::Cidr("10.1.2.3".parse().unwrap(), 32),
                AllowlistPorts::Any,
                false,
            ),
            (
                "2001:db8::/32",
                AllowlistTarget::Cidr("2001:db8::".parse().unwrap(), 32),
                AllowlistPorts::Default,
                false,
            ),
            (
                "[::1]/128:22",
                AllowlistTarget::Cidr("::1".parse().unwrap(), 128),
                AllowlistPorts::One(22),
                false,
            ),
        ];
        for (text, target, ports, deny) in cases {
            let e = entry(text);
            assert_eq!((e.target(), e.ports(), e.is_deny()), (&target, ports, deny), "{text}");
            // Display gives text that parses back to the same entry.
            assert_eq!(entry(&e.to_string()), e, "{text} -> {e}");
        }
    }

    #[test]
    fn an_entry_without_a_port_covers_443_only() {
        let e = entry("pypi.org");
        assert!(e.matches("pypi.org", 443));
        assert!(e.matches("PYPI.ORG.", 443));
        assert!(!e.matches("pypi.org", 80));
        assert!(entry("pypi.org:*").matches("pypi.org", 22));
        assert!(entry("10.0.0.0/8").matches("10.2.3.4", 443));
        assert!(!entry("10.0.0.0/8").matches("10.2.3.4", 22));
    }

    #[test]
    fn a_denying_address_or_block_without_a_port_denies_every_port() {
        for text in ["!10.0.0.0/8", "!198.51.100.10", "!2001:db8::/32", "!::1"] {
            let e = entry(text);
            assert_eq!(e.ports(), AllowlistPorts::Any, "{text}");
            assert_eq!(entry(&e.to_string()), e, "{text} -> {e}");
        }
        assert!(entry("!10.0.0.0/8").matches("10.1.2.3", 22));
        assert!(entry("!198.51.100.10").matches_address("198.51.100.10".parse().unwrap(), 80));
        // The control: an allowing one still covers 443 only.
        assert!(!entry("10.0.0.0/8").matches("10.1.2.3", 22));
        assert!(entry("10.0.0.0/8").matches("10.1.2.3", 443));
    }

    #[test]
    fn suffixes_match_strictly_below() {
        let e = entry("*.example.com");
        assert!(e.matches("a.b.example.com", 443));
        assert!(!e.matches("example.com", 443));
        assert!(!e.matches("badexample.com", 443));
    }

    #[test]
    fn address_blocks_match_literals_and_resolved_addresses() {
        let e = entry("127.0.0.0/8:*");
        assert!(e.matches("127.0.0.1", 9));
        assert!(e.matches("[::ffff:127.0.0.1]", 9), "a v4-mapped literal is its IPv4 address");
        assert!(e.matches_address("127.9.9.9".parse().unwrap(), 1));
        assert!(!entry("pypi.org").matches_address("127.0.0.1".parse().unwrap(), 443));
        assert!(!e.matches("localhost", 9), "a name is matched by name, never by a block");
    }

    #[test]
    fn bad_entries_name_the_entry() {
        for bad in [
            "",
            "!",
            "a b",
            "10.0.0.0/33",
            "host:99999",
            "host:x",
            "*.",
            "-x.com",
            "127.1",
            "example.123",
            "2001:db8::/200",
            "[::1",
            "a/b",
        ] {
            let err = bad.parse::<AllowlistEntry>().unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidInput, "{bad:?}");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }
}
