//! Destinations as a client names them: a host name, or an IP address in any spelling the
//! C library's `inet_aton` accepts, and what kind of address an IP is. Allowlist matching
//! and the egress gate both read hosts through [`parse_host`].
//!
//! Clients and resolvers accept odd IPv4 spellings (`127.1`, `2130706433`, `0x7f000001`,
//! `0177.0.0.1`): a gate that treats those as names lets a sandbox name loopback while the
//! policy only looks for `127.0.0.1`. Every spelling is read here as the address it is, and
//! judged as an address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::allowlist::valid_host_name;

/// A destination host, canonical: a lower-case name without a trailing dot, or an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    Name(String),
    Ip(IpAddr),
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Reads `text` (the host part of an authority, brackets allowed around IPv6) as a name or an
/// address; `None` when it is neither (empty, non-ASCII, a label with other characters, or a
/// numeric last label that is no IPv4 address).
pub(crate) fn parse_host(text: &str) -> Option<Host> {
    if let Some(inner) = text.strip_prefix('[') {
        let inner = inner.strip_suffix(']')?;
        return inner.parse::<Ipv6Addr>().ok().map(|ip| Host::Ip(IpAddr::V6(ip).to_canonical()));
    }
    if let Ok(ip) = text.parse::<Ipv6Addr>() {
        return Some(Host::Ip(IpAddr::V6(ip).to_canonical()));
    }
    let lower = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
    if let Some(ip) = parse_ipv4_any(&lower) {
        return Some(Host::Ip(IpAddr::V4(ip)));
    }
    valid_host_name(&lower).then_some(Host::Name(lower))
}

/// IPv4 in the forms `inet_aton` accepts: one to four parts, each decimal, octal (leading
/// `0`) or hexadecimal (`0x`), the last part filling the remaining bytes.
fn parse_ipv4_any(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut values = Vec::with_capacity(parts.len());
    for part in &parts {
        values.push(parse_number(part)?);
    }
    let (last, leading) = values.split_last()?;
    let mut addr: u64 = 0;
    for (i, v) in leading.iter().enumerate() {
        if *v > 0xff {
            return None;
        }
        addr |= v << (24 - 8 * i);
    }
    let room = 32 - 8 * leading.len();
    if *last >= 1u64 << room {
        return None;
    }
    Some(Ipv4Addr::from(u32::try_from(addr | last).ok()?))
}

fn parse_number(part: &str) -> Option<u64> {
    if part.is_empty() || part.len() > 12 {
        return None;
    }
    let (digits, radix) = if let Some(hex) = part.strip_prefix("0x") {
        (hex, 16)
    } else if part.len() > 1 && part.starts_with('0') {
        (&part[1..], 8)
    } else {
        (part, 10)
    };
    if digits.is_empty() {
        // `0x` alone is 0 to inet_aton.
        return (radix == 16).then_some(0);
    }
    u64::from_str_radix(digits, radix).ok()
}

/// The kind of a non-public address, or `None` for an address on the public internet. A name
/// that resolves to one of these is refused unless the address itself is listed: that is how
/// a listed name pointed at loopback, a private network or a cloud metadata service would
/// otherwise reach it.
#[cfg_attr(
    all(not(feature = "egress"), not(test)),
    expect(dead_code, reason = "only the egress gate judges resolved addresses")
)]
pub(crate) fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            Some(match () {
                () if v4.is_unspecified() || a == 0 => "this-network",
                () if v4.is_loopback() => "loopback",
                () if v4.is_private() => "private",
                () if v4 == Ipv4Addr::new(169, 254, 169, 254) => "metadata",
                () if v4.is_link_local() => "link-local",
                () if a == 100 && (64..128).contains(&b) => "shared (CGNAT)",
                () if a == 192 && b == 0 && v4.octets()[2] == 0 => "IETF protocol assignments",
                () if v4.is_documentation() => "documentation",
                () if a == 198 && (b == 18 || b == 19) => "benchmarking",
                () if v4.is_multicast() => "multicast",
                () if a >= 240 => "reserved",
                () => return None,
            })
        }
        IpAddr::V6(v6) => {
            let seg = v6.segments();
            Some(match () {
                () if v6.is_unspecified() => "this-network",
                () if v6.is_loopback() => "loopback",
                () if v6.is_multicast() => "multicast",
                () if seg[0] & 0xfe00 == 0xfc00 => "unique local",
                () if seg[0] & 0xffc0 == 0xfe80 => "link-local",
                () if seg[0] == 0x2001 && seg[1] == 0x0db8 => "documentation",
                // NAT64 and 6to4 embed an IPv4 address the gate would not have judged.
                () if seg[0] == 0x64 && seg[1] == 0xff9b => "NAT64",
                () if seg[0] == 0x2002 => "6to4",
                () if seg[0] & 0xe000 != 0x2000 => "not global unicast",
                () => return None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[expect(clippy::unnecessary_wraps, reason = "compared with parse_host's answer")]
    fn ip(s: &str) -> Option<Host> {
        Some(Host::Ip(s.parse().unwrap()))
    }

    #[test]
    fn every_ipv4_spelling_is_the_address_it_names() {
        for spelling in [
            "127.0.0.1",
            "127.1",
            "127.0.1",
            "2130706433",
            "0x7f000001",
            "0177.0.0.1",
            "0x7f.1",
            "127.0.0.1.",
        ] {
            assert_eq!(parse_host(spelling), ip("127.0.0.1"), "{spelling}");
        }
        assert_eq!(parse_host("0"), ip("0.0.0.0"));
        assert_eq!(parse_host("[::1]"), ip("::1"));
        assert_eq!(parse_host("::1"), ip("::1"));
        assert_eq!(parse_host("[::ffff:127.0.0.1]"), ip("127.0.0.1"), "v4-mapped is its IPv4 address");
        assert_eq!(parse_host("[::ffff:7f00:1]"), ip("127.0.0.1"));
    }

    #[test]
    fn names_are_canonical_and_bad_hosts_are_nothing() {
        assert_eq!(parse_host("PyPI.org."), Some(Host::Name("pypi.org".into())));
        assert_eq!(parse_host("localhost."), Some(Host::Name("localhost".into())));
        assert_eq!(parse_host("127.0.0.1.nip.io"), Some(Host::Name("127.0.0.1.nip.io".into())));
        for bad in [
            "",
            "256.1.1.1",
            "1.2.3.4.5",
            "example.123",
            "a b",
            "ex\u{e4}mple.com",
            "[::1",
            "[pypi.org]",
            "08.1.1.1",
        ] {
            assert_eq!(parse_host(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn non_public_addresses_are_named() {
        for (addr, kind) in [
            ("127.0.0.1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "metadata"),
            ("169.254.1.1", "link-local"),
            ("100.64.0.1", "shared (CGNAT)"),
            ("0.0.0.0", "this-network"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "reserved"),
            ("::1", "loopback"),
            ("::", "this-network"),
            ("fd00::1", "unique local"),
            ("fe80::1", "link-local"),
            ("::ffff:10.0.0.1", "private"),
            ("64:ff9b::a00:1", "NAT64"),
            ("2002:a00:1::", "6to4"),
        ] {
            assert_eq!(non_public(addr.parse().unwrap()), Some(kind), "{addr}");
        }
        for public in ["93.184.216.34", "1.1.1.1", "2606:4700::1111"] {
            assert_eq!(non_public(public.parse().unwrap()), None, "{public}");
        }
    }
}
