//! An HTTP `CONNECT` proxy on loopback that tunnels every host under the stub's domain to
//! the stub, and refuses every other host. It stands in for name resolution when a client
//! other than ours drives the stub (E2B's official SDKs take a `proxy` option): the client
//! names `api.<domain>` and `49983-<id>.<domain>` as it would in production, sends the
//! same SNI and `Host`, and verifies the stub's certificate; nothing on the machine's
//! resolver or `/etc/hosts` changes, and no connection leaves the loopback interface.
//! The Modal stub serves on two ports under one name, so [`start_same_port`] tunnels to the
//! port the client asked for.

use std::net::{IpAddr, SocketAddr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The most bytes of a `CONNECT` request head the proxy reads.
const MAX_HEAD: usize = 8 << 10;

/// Where a tunnel goes.
#[derive(Clone, Copy)]
enum Target {
    /// Always this address.
    Fixed(SocketAddr),
    /// This address, at the port of the `CONNECT` request.
    SamePort(IpAddr),
}

/// Binds the proxy on a loopback port and serves it on the current runtime: every tunnel
/// goes to `stub`.
pub async fn start(domain: &'static str, stub: SocketAddr) -> SocketAddr {
    serve(domain, Target::Fixed(stub)).await
}

/// As [`start`], but a tunnel goes to `ip` at the port the client asked for.
pub async fn start_same_port(domain: &'static str, ip: IpAddr) -> SocketAddr {
    serve(domain, Target::SamePort(ip)).await
}

async fn serve(domain: &'static str, target: Target) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port for the proxy");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else { continue };
            tokio::spawn(tunnel(client, domain, target));
        }
    });
    addr
}

/// The host and port of a `CONNECT host:port HTTP/1.1` request head, if it is one.
fn connect_target(head: &str) -> Option<(&str, u16)> {
    let mut words = head.lines().next()?.split(' ');
    let (method, target) = (words.next()?, words.next()?);
    if method != "CONNECT" {
        return None;
    }
    let (host, port) = target.rsplit_once(':')?;
    Some((host, port.parse().ok()?))
}

async fn tunnel(mut client: TcpStream, domain: &str, target: Target) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let end = loop {
        let Ok(n) = client.read(&mut buf).await else { return };
        if n == 0 || head.len() + n > MAX_HEAD {
            return;
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    let asked = connect_target(&text).map(|(host, port)| (host.to_ascii_lowercase(), port));
    let ours = asked.as_ref().is_some_and(|(h, _)| *h == domain || h.ends_with(&format!(".{domain}")));
    let stub = match (target, &asked) {
        (Target::Fixed(addr), _) => addr,
        (Target::SamePort(ip), Some((_, port))) => SocketAddr::new(ip, *port),
        (Target::SamePort(_), None) => return,
    };
    if !ours {
        let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n").await;
        return;
    }
    let Ok(mut upstream) = TcpStream::connect(stub).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n").await;
        return;
    };
    if client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await.is_err()
        || upstream.write_all(&head[end..]).await.is_err()
    {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}
