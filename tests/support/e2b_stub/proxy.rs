//! An HTTP `CONNECT` proxy on loopback that tunnels every host under the stub's domain to
//! the stub, and refuses every other host. It stands in for name resolution when a client
//! other than ours drives the stub (E2B's official SDKs take a `proxy` option): the client
//! names `api.<domain>` and `49983-<id>.<domain>` as it would in production, sends the
//! same SNI and `Host`, and verifies the stub's certificate; nothing on the machine's
//! resolver or `/etc/hosts` changes, and no connection leaves the loopback interface.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The most bytes of a `CONNECT` request head the proxy reads.
const MAX_HEAD: usize = 8 << 10;

/// Binds the proxy on a loopback port and serves it on the current runtime.
pub async fn start(domain: &'static str, stub: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port for the proxy");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else { continue };
            tokio::spawn(tunnel(client, domain, stub));
        }
    });
    addr
}

/// The host of a `CONNECT host:port HTTP/1.1` request head, if it is one.
fn connect_host(head: &str) -> Option<&str> {
    let mut words = head.lines().next()?.split(' ');
    let (method, target) = (words.next()?, words.next()?);
    if method != "CONNECT" {
        return None;
    }
    target.rsplit_once(':').map(|(host, _port)| host)
}

async fn tunnel(mut client: TcpStream, domain: &str, stub: SocketAddr) {
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
    let host = connect_host(&text).map(str::to_ascii_lowercase);
    let ours = host.as_deref().is_some_and(|h| h == domain || h.ends_with(&format!(".{domain}")));
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
