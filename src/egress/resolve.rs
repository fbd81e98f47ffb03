//! How the gate looks names up: the [`Resolve`] trait, the host's resolver, and one DNS
//! server asked directly ([`EgressResolver::dns_server`]).

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;

use crate::policy::EgressResolver;

/// Looks names up for the gate: the host's resolver or one DNS server in production, a
/// table in tests.
pub(crate) trait Resolve: Send + Sync + 'static {
    /// The addresses of `name`, in preference order.
    fn lookup<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;
}

/// The host's own resolver (`getaddrinfo` through tokio).
pub(crate) struct SystemResolver;

impl Resolve for SystemResolver {
    fn lookup<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((name, 0)).await?.map(|a| a.ip()).collect()) })
    }
}

/// One DNS server, asked for `A` and `AAAA` over UDP with TCP after a truncated or lost
/// answer, without `/etc/hosts` or search domains.
struct DnsServer {
    resolver: TokioResolver,
}

impl Resolve for DnsServer {
    fn lookup<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(async move {
            // Fully qualified: asked as written, never with a search domain appended.
            let fqdn = format!("{}.", name.trim_end_matches('.'));
            let found = self.resolver.lookup_ip(fqdn.as_str()).await.map_err(io::Error::other)?;
            Ok(found.iter().collect())
        })
    }
}

/// The gate's resolver for `config`.
///
/// # Errors
///
/// When the DNS client cannot be set up.
pub(crate) fn resolver_for(config: &EgressResolver) -> io::Result<Arc<dyn Resolve>> {
    let Some(server) = config.server() else {
        return Ok(Arc::new(SystemResolver));
    };
    let mut name_server = NameServerConfig::udp_and_tcp(server.ip());
    for connection in &mut name_server.connections {
        connection.port = server.port();
    }
    let mut builder = TokioResolver::builder_with_config(
        ResolverConfig::from_parts(None, Vec::new(), vec![name_server]),
        TokioRuntimeProvider::default(),
    );
    let options = builder.options_mut();
    options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    options.use_hosts_file = ResolveHosts::Never;
    options.ndots = 0;
    options.try_tcp_on_error = true;
    let resolver = builder.build().map_err(io::Error::other)?;
    Ok(Arc::new(DnsServer { resolver }))
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, UdpSocket};

    use super::*;

    /// The question's name, type and end in a DNS message.
    fn question(msg: &[u8]) -> (String, u16, usize) {
        let (mut at, mut labels) = (12, Vec::new());
        while msg[at] != 0 {
            let n = usize::from(msg[at]);
            labels.push(String::from_utf8_lossy(&msg[at + 1..=at + n]).into_owned());
            at += 1 + n;
        }
        (labels.join("."), u16::from_be_bytes([msg[at + 1], msg[at + 2]]), at + 5)
    }

    /// The answer to `query`: two `A` records or one `AAAA`, or, `truncated`, none and the TC bit.
    fn reply(query: &[u8], truncated: bool) -> Vec<u8> {
        let (_, qtype, end) = question(query);
        let records: Vec<Vec<u8>> = match qtype {
            _ if truncated => vec![],
            1 => vec![vec![198, 51, 100, 10], vec![198, 51, 100, 11]],
            28 => vec!["2001:db8::10".parse::<std::net::Ipv6Addr>().unwrap().octets().to_vec()],
            _ => vec![],
        };
        let flags: u16 = 0x8400 | if truncated { 0x0200 } else { 0 };
        let mut out = query[..2].to_vec();
        out.extend_from_slice(&flags.to_be_bytes());
        out.extend_from_slice(&[0, 1, 0, u8::try_from(records.len()).unwrap(), 0, 0, 0, 0]);
        out.extend_from_slice(&query[12..end]);
        for data in records {
            out.extend_from_slice(&[0xc0, 0x0c]);
            out.extend_from_slice(&qtype.to_be_bytes());
            out.extend_from_slice(&[0, 1, 0, 0, 0, 5, 0, u8::try_from(data.len()).unwrap()]);
            out.extend_from_slice(&data);
        }
        out
    }

    /// A DNS server on loopback whose UDP answers are all truncated, so that only TCP
    /// answers; it logs `udp NAME` and `tcp NAME` for every query.
    async fn truncating_server() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let udp = UdpSocket::bind(addr).await.unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let udp_log = Arc::clone(&log);
        tokio::spawn(async move {
            let mut buf = [0u8; 1500];
            while let Ok((n, from)) = udp.recv_from(&mut buf).await {
                udp_log.lock().unwrap().push(format!("udp {}", question(&buf[..n]).0));
                let _ = udp.send_to(&reply(&buf[..n], true), from).await;
            }
        });
        let tcp_log = Arc::clone(&log);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = tcp.accept().await {
                let log = Arc::clone(&tcp_log);
                tokio::spawn(async move {
                    let mut len = [0u8; 2];
                    while conn.read_exact(&mut len).await.is_ok() {
                        let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
                        if conn.read_exact(&mut query).await.is_err() {
                            return;
                        }
                        log.lock().unwrap().push(format!("tcp {}", question(&query).0));
                        let answer = reply(&query, false);
                        let mut framed = u16::try_from(answer.len()).unwrap().to_be_bytes().to_vec();
                        framed.extend_from_slice(&answer);
                        let _ = conn.write_all(&framed).await;
                    }
                });
            }
        });
        (addr, log)
    }

    #[tokio::test]
    async fn a_dns_server_resolver_asks_only_its_server_for_every_address_falling_back_to_tcp() {
        let (server, log) = truncating_server().await;
        let resolver = resolver_for(&EgressResolver::dns_server(server)).unwrap();
        let mut found = resolver.lookup("many.test").await.unwrap();
        found.sort();
        let expected: Vec<IpAddr> =
            ["198.51.100.10", "198.51.100.11", "2001:db8::10"].iter().map(|a| a.parse().unwrap()).collect();
        assert_eq!(found, expected, "every A and AAAA record");
        let log = log.lock().unwrap().clone();
        // Asked as written (no search domain), first over UDP, then, truncated, over TCP.
        assert!(log.iter().all(|l| l.ends_with(" many.test")), "{log:?}");
        assert!(
            log.iter().any(|l| l.starts_with("udp ")) && log.iter().any(|l| l.starts_with("tcp ")),
            "{log:?}"
        );
        // A name the server does not answer is an error, never an empty success.
        assert!(resolver_for(&EgressResolver::system()).is_ok());
    }
}
