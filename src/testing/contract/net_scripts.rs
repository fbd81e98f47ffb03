//! The default network probe commands ([`Probes::http_get`](super::Probes::http_get) and the
//! rest): Python 3 scripts, standard library only, that take their arguments from `argv`
//! (nothing is spliced into the program text) and find the sandbox's way out in its proxy
//! variables (`HTTPS_PROXY`, `https_proxy`), or connect directly where there are none.

use std::net::{IpAddr, SocketAddr};

use crate::exec::Command;

/// Finds the proxy, opens a `CONNECT` tunnel through it, reads an answer's head.
const PRELUDE: &str = r#"import os, socket, ssl, struct, sys

def proxy():
    p = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy") or ""
    if not p:
        return None
    host, port = p.split("://", 1)[-1].rstrip("/").rsplit(":", 1)
    return host, int(port)

def head(c):
    # Unbuffered: the bytes after the head stay in the socket for whoever reads next.
    f = c.makefile("rb", buffering=0)
    lines = []
    for line in iter(f.readline, b""):
        lines.append(line)
        if line in (b"\r\n", b"\n"):
            break
    return b"".join(lines)

def tunnel(host, port):
    p = proxy()
    if p is None:
        return socket.create_connection((host, port), 5)
    c = socket.create_connection(p, 5)
    c.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host, port, host, port)).encode())
    answer = head(c)
    print("proxy answered:", answer.split(b"\r\n")[0].decode("latin-1"))
    if not answer.startswith(b"HTTP/1.1 200"):
        sys.exit(1)
    return c
"#;

fn python(body: &str) -> Command {
    Command::new("python3").arg("-c").arg(format!("{PRELUDE}\n{body}"))
}

/// `GET url` through the proxy environment (`urllib`): prints the status and body; exits 0
/// on `200`, 1 on any other answer or none.
pub(crate) fn http_get(url: &str) -> Command {
    python(
        r#"import urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
        print(r.status, r.read(200).decode("latin-1"))
        sys.exit(0 if r.status == 200 else 1)
except urllib.error.HTTPError as e:
    print(e.code, e.headers.get("X-Sandboxio-Egress", ""), e.read(300).decode("latin-1"))
except OSError as e:
    print("no answer:", e)
sys.exit(1)"#,
    )
    .arg(url)
}

/// A TLS client: a tunnel to `host:port`, a handshake naming `server_name` and verified
/// against the CA `ca_pem`, then `GET path`; prints the answer's first line; exits 0 once an
/// answer came over a verified session, 1 otherwise.
pub(crate) fn tls_get(host: &str, port: u16, server_name: &str, ca_pem: &str, path: &str) -> Command {
    python(
        r#"host, port, name, ca, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
try:
    c = tunnel(host, port)
    ctx = ssl.create_default_context(cadata=ca)
    t = ctx.wrap_socket(c, server_hostname=name)
    t.sendall(("GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" % (path, name)).encode())
    line = t.recv(200).split(b"\r\n")[0]
    print("verified TLS to", name, "answered:", line.decode("latin-1"))
    sys.exit(0 if line.startswith(b"HTTP/1.0 200") else 1)
except (OSError, ssl.SSLError) as e:
    print("TLS failed:", type(e).__name__, e)
    sys.exit(1)"#,
    )
    .args([host, &port.to_string(), server_name, ca_pem, path])
}

/// Sends `payload` in one UDP datagram to `ip:port` and waits 3 s for it to come back:
/// exits 0 if it did, 1 otherwise.
pub(crate) fn udp_echo(ip: IpAddr, port: u16, payload: &str) -> Command {
    python(
        r#"ip, port, payload = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
try:
    s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(payload, (ip, port))
    back = s.recv(2048)
    print("echoed:", back)
    sys.exit(0 if back == payload else 1)
except OSError as e:
    print("no echo:", e)
    sys.exit(1)"#,
    )
    .arg(ip.to_string())
    .arg(port.to_string())
    .arg(payload)
}

/// Asks for `name` (type `A`) over UDP and over TCP: of `server`, or, for `None`, of every
/// `nameserver` in `/etc/resolv.conf` and through `getaddrinfo`. Prints what each attempt
/// got; exits 0 if any answer came back, 1 if none did.
pub(crate) fn dns_query(server: Option<SocketAddr>, name: &str) -> Command {
    python(
        r#"name, server = sys.argv[1], sys.argv[2]
q = struct.pack("!HHHHHH", 0x5b5b, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in name.rstrip(".").split(".")) + b"\0"
q += struct.pack("!HH", 1, 1)
servers = []
if server:
    h, p = server.rsplit(":", 1)
    servers.append((h.strip("[]"), int(p)))
else:
    try:
        for line in open("/etc/resolv.conf"):
            f = line.split()
            if len(f) >= 2 and f[0] == "nameserver":
                servers.append((f[1], 53))
    except OSError as e:
        print("no /etc/resolv.conf:", e)
answered = False
for h, p in servers:
    fam = socket.AF_INET6 if ":" in h else socket.AF_INET
    try:
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.settimeout(2)
        s.sendto(q, (h, p))
        print("udp", h, "answered", len(s.recv(1500)), "bytes")
        answered = True
    except OSError as e:
        print("udp", h, "no answer:", e)
    try:
        c = socket.create_connection((h, p), 2)
        c.sendall(struct.pack("!H", len(q)) + q)
        got = c.recv(1500)
        print("tcp", h, "answered", len(got), "bytes")
        answered = answered or len(got) > 0
    except OSError as e:
        print("tcp", h, "no answer:", e)
if not server:
    try:
        print("getaddrinfo answered", socket.getaddrinfo(name, 80))
        answered = True
    except OSError as e:
        print("getaddrinfo no answer:", e)
sys.exit(0 if answered else 1)"#,
    )
    .arg(name)
    .arg(server.map(|s| s.to_string()).unwrap_or_default())
}

/// Sends `first` to the proxy, reads its answer's head, then sends `then` down the same
/// connection and prints everything that comes back until it closes (5 s at most). Exits
/// 0 if the first answer was `200`, 1 if it was another, 2 where there is no proxy.
pub(crate) fn proxy_exchange(first: &str, then: &str) -> Command {
    python(
        r#"first, then = sys.argv[1].encode(), sys.argv[2].encode()
p = proxy()
if p is None:
    print("no proxy variable")
    sys.exit(2)
c = socket.create_connection(p, 5)
c.settimeout(5)
c.sendall(first)
answer = head(c)
print("first answered:", answer.split(b"\r\n")[0].decode("latin-1"))
try:
    c.sendall(then)
    rest = b""
    while True:
        b = c.recv(4096)
        if not b:
            break
        rest += b
    print("then answered:", rest[:300])
except OSError as e:
    print("then:", e)
sys.exit(0 if answer.startswith(b"HTTP/1.1 200") else 1)"#,
    )
    .arg(first)
    .arg(then)
}
