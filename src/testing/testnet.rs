//! [`TestNetwork`]: the project's own test hosts (`scripts/testnet up`), as the description
//! file the script writes tells them.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where `scripts/testnet up` writes the description, unless `SANDBOXIO_TESTNET` names
/// another file.
pub const TESTNET_DESCRIPTION: &str = "/run/sandboxio-testnet/net.conf";

/// The environment variable naming another description file than [`TESTNET_DESCRIPTION`].
pub const TESTNET_ENV: &str = "SANDBOXIO_TESTNET";

/// The hosts of sandboxio's own test network (`scripts/testnet up`, run as root by
/// `.ci/run`): addresses in the documentation range `198.51.100.0/24`, routed only to a
/// veth on this machine, and one private address.
///
/// - `web_name` (and every name below it) resolves to `web_addr`, which serves HTTP on
///   `http_port` and `unlisted_port`, HTTPS on `tls_port` (a certificate from the test CA
///   `ca_pem` for `web_name`, `*.web_name`, `other_name` and `*.other_name`) and a UDP echo
///   on `udp_echo_port`;
/// - `other_name` (and below) resolves to `other_addr`: HTTP and HTTPS as above, the host
///   an allowlist leaves out;
/// - `private_name` (and below) resolves to `private_addr`, a private address: HTTP;
/// - `dns` answers for the zone and counts every query it receives in `dns_log`; the web
///   servers log every connection and request (`http_log`).
///
/// Every log line names what it saw, so a test that puts a unique token in the names and
/// paths it uses finds its own lines among other tests'.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TestNetwork {
    /// The counting DNS server (UDP and TCP).
    pub dns: SocketAddr,
    /// The block the hosts live in (`198.51.100.0/24`): the gate must treat it as public.
    pub public_block: String,
    /// The web host's name (`web.sandboxio.test`).
    pub web_name: String,
    /// Its address.
    pub web_addr: IpAddr,
    /// The host no test lists (`other.sandboxio.test`).
    pub other_name: String,
    /// Its address.
    pub other_addr: IpAddr,
    /// A name that resolves to a private address (`private.sandboxio.test`).
    pub private_name: String,
    /// That private address.
    pub private_addr: IpAddr,
    /// The HTTP port of every host (80).
    pub http_port: u16,
    /// A second HTTP port of the web host, which tests leave unlisted (8080).
    pub unlisted_port: u16,
    /// The HTTPS port of the web and other hosts (443).
    pub tls_port: u16,
    /// The UDP echo port of the web host (7).
    pub udp_echo_port: u16,
    /// The test CA's certificate, PEM.
    pub ca_pem: String,
    /// The DNS server's query log: `<time> <udp|tcp> <client> <name> <type>` a line.
    pub dns_log: PathBuf,
    /// The web servers' log: `<addr:port> <METHOD> <path> <Host>` and
    /// `<addr:port> CONNECTION <client>` lines.
    pub http_log: PathBuf,
    /// The UDP echo's log: `<addr:port> <client> <payload>` lines.
    pub udp_log: PathBuf,
}

impl TestNetwork {
    /// The test network described at `$SANDBOXIO_TESTNET` or [`TESTNET_DESCRIPTION`].
    ///
    /// # Errors
    ///
    /// Why there is none to use (the file is missing or unreadable, a key is missing or
    /// malformed), in words a skip reason can carry.
    pub fn load() -> Result<TestNetwork, String> {
        let path =
            std::env::var_os(TESTNET_ENV).map_or_else(|| PathBuf::from(TESTNET_DESCRIPTION), PathBuf::from);
        TestNetwork::from_file(&path)
    }

    /// The test network described in the file at `path` (`key=value` lines, `#` comments).
    ///
    /// # Errors
    ///
    /// As [`TestNetwork::load`].
    pub fn from_file(path: &Path) -> Result<TestNetwork, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "no test network: cannot read {} ({e}); `scripts/testnet up` (as root) builds it",
                path.display()
            )
        })?;
        let get = |key: &str| -> Result<&str, String> {
            text.lines()
                .filter_map(|l| l.split_once('='))
                .find(|(k, _)| k.trim() == key)
                .map(|(_, v)| v.trim())
                .ok_or_else(|| format!("the test network description {} has no {key}", path.display()))
        };
        let parse = |key: &str| -> Result<IpAddr, String> {
            get(key)?.parse().map_err(|e| format!("{key} in {}: {e}", path.display()))
        };
        let port = |key: &str| -> Result<u16, String> {
            get(key)?.parse().map_err(|e| format!("{key} in {}: {e}", path.display()))
        };
        let ca = PathBuf::from(get("ca")?);
        Ok(TestNetwork {
            dns: get("dns")?.parse().map_err(|e| format!("dns in {}: {e}", path.display()))?,
            public_block: get("public_block")?.to_owned(),
            web_name: get("web_name")?.to_owned(),
            web_addr: parse("web_addr")?,
            other_name: get("other_name")?.to_owned(),
            other_addr: parse("other_addr")?,
            private_name: get("private_name")?.to_owned(),
            private_addr: parse("private_addr")?,
            http_port: port("http_port")?,
            unlisted_port: port("unlisted_port")?,
            tls_port: port("tls_port")?,
            udp_echo_port: port("udp_echo_port")?,
            ca_pem: std::fs::read_to_string(&ca).map_err(|e| format!("the test CA {}: {e}", ca.display()))?,
            dns_log: PathBuf::from(get("dns_log")?),
            http_log: PathBuf::from(get("http_log")?),
            udp_log: PathBuf::from(get("udp_log")?),
        })
    }

    /// The resolver a backend's egress gate must use to reach this network: its DNS server
    /// only, with its block treated as public.
    ///
    /// # Errors
    ///
    /// When the description's block is outside the documentation ranges.
    #[cfg(feature = "egress")]
    #[cfg_attr(docsrs, doc(cfg(feature = "egress")))]
    pub fn resolver(&self) -> crate::Result<crate::policy::EgressResolver> {
        crate::policy::EgressResolver::dns_server(self.dns).treat_as_public(&self.public_block)
    }

    /// How many queries for `name` (any case, without a trailing dot) the DNS server has
    /// counted so far.
    ///
    /// # Errors
    ///
    /// When its log cannot be read.
    pub fn dns_queries(&self, name: &str) -> Result<usize, String> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        Ok(read_log(&self.dns_log)?
            .lines()
            .filter(|l| l.split_whitespace().nth(3) == Some(name.as_str()))
            .count())
    }

    /// The web servers' log lines that contain `needle` (a test's token in a path).
    ///
    /// # Errors
    ///
    /// When the log cannot be read.
    pub fn http_lines(&self, needle: &str) -> Result<Vec<String>, String> {
        lines_with(&self.http_log, needle)
    }

    /// The UDP echo's log lines that contain `needle`.
    ///
    /// # Errors
    ///
    /// When the log cannot be read.
    pub fn udp_lines(&self, needle: &str) -> Result<Vec<String>, String> {
        lines_with(&self.udp_log, needle)
    }

    /// Sends `payload` to the web host's UDP echo from this process (outside any sandbox)
    /// and whether it came back within 3 seconds: the positive control of "UDP cannot
    /// leave the sandbox".
    ///
    /// # Errors
    ///
    /// When no UDP socket can be opened here.
    pub fn udp_echo_from_here(&self, payload: &[u8]) -> Result<bool, String> {
        let bind: SocketAddr = if self.web_addr.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }
            .parse()
            .map_err(|e| format!("{e}"))?;
        let socket = UdpSocket::bind(bind).map_err(|e| format!("a UDP socket: {e}"))?;
        socket.set_read_timeout(Some(Duration::from_secs(3))).map_err(|e| e.to_string())?;
        if socket.send_to(payload, (self.web_addr, self.udp_echo_port)).is_err() {
            return Ok(false);
        }
        let mut buf = [0u8; 2048];
        Ok(matches!(socket.recv_from(&mut buf), Ok((n, _)) if buf[..n] == *payload))
    }
}

fn read_log(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("the test network's log {}: {e}", path.display()))
}

fn lines_with(path: &Path, needle: &str) -> Result<Vec<String>, String> {
    Ok(read_log(path)?.lines().filter(|l| l.contains(needle)).map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_description_is_read_and_a_missing_one_says_how_to_make_it() {
        let dir = std::env::temp_dir().join(format!("sandboxio-testnet-desc-{}", std::process::id()));
        let write = |file: &str, text: &str| {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(file), text).unwrap();
        };
        write("ca.pem", "PEM");
        write(
            "dns.log",
            "1.0 udp 198.51.100.1 a.web.sandboxio.test 1\n1.1 tcp 198.51.100.1 A.web.sandboxio.test 28\n2.0 udp 198.51.100.1 b.web.sandboxio.test 1\n",
        );
        let conf = format!(
            "# comment\ndns=198.51.100.53:53\npublic_block=198.51.100.0/24\nweb_name=web.sandboxio.test\nweb_addr=198.51.100.10\nother_name=other.sandboxio.test\nother_addr=198.51.100.11\nprivate_name=private.sandboxio.test\nprivate_addr=10.254.77.10\nhttp_port=80\nunlisted_port=8080\ntls_port=443\nudp_echo_port=7\nca={0}/ca.pem\ndns_log={0}/dns.log\nhttp_log={0}/http.log\nudp_log={0}/udp.log\n",
            dir.display()
        );
        write("net.conf", &conf);
        let net = TestNetwork::from_file(&dir.join("net.conf")).unwrap();
        assert_eq!(net.dns, "198.51.100.53:53".parse().unwrap());
        assert_eq!(net.private_addr, "10.254.77.10".parse::<IpAddr>().unwrap());
        assert_eq!((net.http_port, net.unlisted_port, net.tls_port, net.udp_echo_port), (80, 8080, 443, 7));
        assert_eq!(net.ca_pem, "PEM");
        assert_eq!(net.dns_queries("a.web.sandboxio.test.").unwrap(), 1);
        assert_eq!(net.dns_queries("b.web.sandboxio.test").unwrap(), 1);
        assert_eq!(net.dns_queries("c.web.sandboxio.test").unwrap(), 0);
        write("net.conf", &conf.replace("tls_port=443\n", ""));
        let err = TestNetwork::from_file(&dir.join("net.conf")).unwrap_err();
        assert!(err.contains("no tls_port"), "{err}");
        let err = TestNetwork::from_file(&dir.join("absent.conf")).unwrap_err();
        assert!(err.contains("scripts/testnet up"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
