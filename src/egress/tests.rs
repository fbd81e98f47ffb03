//! The gate end to end over an in-memory client connection, against servers on loopback and
//! a resolver table that counts its lookups. Each refusal sits next to its positive control.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::TcpListener;

use super::gate::{Event, Gate};
use super::resolve::Resolve;
use super::sni::tests::hello;

/// A resolver answering from a table, counting every lookup by name.
#[derive(Default)]
struct Table {
    names: HashMap<String, Vec<IpAddr>>,
    asked: Mutex<Vec<String>>,
}

impl Resolve for Table {
    fn lookup<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
        self.asked.lock().unwrap().push(name.to_owned());
        let found = self.names.get(name).cloned();
        Box::pin(async move { found.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such name")) })
    }
}

/// A TCP server on loopback that records what each connection sent (until it paused for
/// 200 ms or closed) and answers `reply`.
struct Server {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
}

async fn server(reply: &'static [u8]) -> Server {
    server_on("127.0.0.1", reply).await
}

async fn server_on(ip: &str, reply: &'static [u8]) -> Server {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&received);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(Ok(n)) =
                    tokio::time::timeout(Duration::from_millis(200), conn.read(&mut buf)).await
                {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                // A connection that sent nothing (the gate dials before it reads the tunnel's
                // ClientHello) is not recorded.
                if !got.is_empty() {
                    log.lock().unwrap().push(got);
                }
                let _ = conn.write_all(reply).await;
            });
        }
    });
    Server { addr, received }
}

struct Setup {
    gate: Arc<Gate>,
    table: Arc<Table>,
    events: Arc<Mutex<Vec<Event>>>,
}

fn setup(entries: &[&str], names: &[(&str, &str)]) -> Setup {
    let table = Arc::new(Table {
        names: names.iter().map(|(n, ip)| ((*n).to_owned(), vec![ip.parse().unwrap()])).collect(),
        asked: Mutex::default(),
    });
    let events = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&events);
    let mut gate = Gate::new(
        entries.iter().map(|e| e.parse().unwrap()).collect(),
        Arc::new(move |e| log.lock().unwrap().push(e)),
    );
    gate.resolver = Arc::clone(&table) as Arc<dyn Resolve>;
    gate.read_timeout = Duration::from_millis(500);
    gate.dial_timeout = Duration::from_secs(2);
    Setup { gate: Arc::new(gate), table, events }
}

/// A client connection served by the gate.
fn connect(gate: &Arc<Gate>) -> DuplexStream {
    let (client, served) = tokio::io::duplex(256 * 1024);
    let gate = Arc::clone(gate);
    tokio::spawn(async move { gate.serve(served, Vec::new()).await });
    client
}

/// Everything the client receives until the gate closes, within 5 s.
async fn read_all(client: &mut DuplexStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut out)).await;
    out
}

/// Sends a request head and reads the gate's answer head (up to its blank line).
async fn ask(client: &mut DuplexStream, head: &str) -> String {
    client.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(5), client.read(&mut byte)).await {
            Ok(Ok(1)) => got.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn reason_of(answer: &str) -> Option<&str> {
    let rest = answer.lines().find_map(|l| l.strip_prefix("X-Sandboxio-Egress: refused; reason="))?;
    Some(rest.split(';').next().unwrap_or(rest))
}

#[tokio::test]
async fn a_tunnel_to_a_listed_name_carries_tls_for_that_name_and_no_other() {
    let up = server(b"welcome").await;
    let port = up.addr.port();
    let s = setup(&["allowed.test:*", "127.0.0.1/32:*"], &[("allowed.test", "127.0.0.1")]);
    // The positive control: CONNECT, then a ClientHello naming the same host, reaches the
    // server byte for byte, and its answer comes back.
    let mut c = connect(&s.gate);
    let answer = ask(&mut c, &format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let flight = hello(Some("allowed.test"), false);
    c.write_all(&flight).await.unwrap();
    assert_eq!(read_all(&mut c).await, b"welcome");
    assert_eq!(up.received.lock().unwrap().as_slice(), &[flight]);
    // The same tunnel with TLS for another name: closed, and the server got nothing.
    for (sni, ech) in [(Some("other.test"), false), (None, false), (Some("allowed.test"), true)] {
        let mut c = connect(&s.gate);
        let answer = ask(&mut c, &format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        c.write_all(&hello(sni, ech)).await.unwrap();
        assert_eq!(read_all(&mut c).await, b"", "{sni:?} ech={ech}");
    }
    // Not TLS at all: closed too.
    let mut c = connect(&s.gate);
    ask(&mut c, &format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n")).await;
    c.write_all(b"SSH-2.0-probe\r\n").await.unwrap();
    assert_eq!(read_all(&mut c).await, b"");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.received.lock().unwrap().len(), 1, "a refused tunnel reached the server");
    let events = s.events.lock().unwrap();
    assert!(matches!(&events[0], Event::Allowed { host, .. } if host == "allowed.test"));
    assert_eq!(
        events.iter().filter(|e| matches!(e, Event::Refused { reason: "sni-mismatch", .. })).count(),
        4
    );
}

#[tokio::test]
async fn unlisted_names_ports_and_addresses_are_refused_at_once() {
    // The server is on 127.0.0.2, the address allowed.test resolves to and the only one listed:
    // every spelling of 127.0.0.1 and ::1 names an address no entry lists.
    let up = server_on("127.0.0.2", b"welcome").await;
    let port = up.addr.port();
    let s = setup(
        &[&format!("allowed.test:{port}"), &format!("127.0.0.2:{port}")],
        &[("allowed.test", "127.0.0.2"), ("other.test", "127.0.0.2")],
    );
    // The control: the listed name on its port.
    let mut c = connect(&s.gate);
    assert!(
        ask(&mut c, &format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n"))
            .await
            .starts_with("HTTP/1.1 200")
    );
    let cases = [
        (format!("other.test:{port}"), "not-listed"),
        (format!("allowed.test:{}", port.wrapping_add(1).max(1)), "not-listed"),
        (format!("127.1:{port}"), "not-listed"),
        (format!("2130706433:{port}"), "not-listed"),
        (format!("0x7f000001:{port}"), "not-listed"),
        (format!("[::1]:{port}"), "not-listed"),
        (format!("[::ffff:127.0.0.1]:{port}"), "not-listed"),
        (format!("127.0.0.3:{port}"), "not-listed"),
        (format!("local host:{port}"), "malformed-request"),
    ];
    for (authority, reason) in cases {
        let mut c = connect(&s.gate);
        let answer = ask(&mut c, &format!("CONNECT {authority} HTTP/1.1\r\n\r\n")).await;
        assert_eq!(reason_of(&answer), Some(reason), "{authority}: {answer}");
        assert!(
            answer.starts_with(if reason == "malformed-request" { "HTTP/1.1 400" } else { "HTTP/1.1 403" }),
            "{answer}"
        );
    }
    // The control for literals: the listed address, in any spelling, is the address.
    for spelling in ["127.0.0.2", "2130706434", "127.2", "[::ffff:127.0.0.2]"] {
        let mut c = connect(&s.gate);
        let answer = ask(&mut c, &format!("CONNECT {spelling}:{port} HTTP/1.1\r\n\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{spelling}: {answer}");
    }
    // A refused name was never looked up: only the listed one was.
    assert_eq!(s.table.asked.lock().unwrap().as_slice(), &["allowed.test".to_owned()]);
}

#[tokio::test]
async fn a_refusal_by_a_denying_entry_names_it_in_its_header() {
    let s = setup(&["*.test:*", "!evil.test"], &[("evil.test", "127.0.0.2")]);
    let mut c = connect(&s.gate);
    let answer = ask(&mut c, "CONNECT evil.test:443 HTTP/1.1\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(
        answer.contains("X-Sandboxio-Egress: refused; reason=denied; rule=\"!evil.test:*\"\r\n"),
        "{answer}"
    );
    // A refusal no entry decided names none.
    let mut c = connect(&s.gate);
    let answer = ask(&mut c, "CONNECT evil.example:443 HTTP/1.1\r\n\r\n").await;
    assert!(answer.contains("X-Sandboxio-Egress: refused; reason=not-listed\r\n"), "{answer}");
}

#[tokio::test]
async fn a_listed_name_that_resolves_to_a_private_address_needs_the_address_listed() {
    let up = server(b"welcome").await;
    let port = up.addr.port();
    let names = [("allowed.test", "127.0.0.1")];
    let s = setup(&[&format!("allowed.test:{port}")], &names);
    let mut c = connect(&s.gate);
    let answer = ask(&mut c, &format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n")).await;
    assert_eq!(reason_of(&answer), Some("non-public-address"), "{answer}");
    let body = String::from_utf8(read_all(&mut c).await).unwrap();
    assert!(body.contains("127.0.0.1, a loopback address"), "{body}");
    // The control: the same name with its address listed.
    let s = setup(&[&format!("allowed.test:{port}"), "127.0.0.0/8:*"], &names);
    let mut c = connect(&s.gate);
    assert!(
        ask(&mut c, &format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n"))
            .await
            .starts_with("HTTP/1.1 200")
    );
}

#[tokio::test]
async fn a_plain_request_reaches_its_host_rewritten_and_a_mismatched_host_header_does_not() {
    let up = server(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let port = up.addr.port();
    let s = setup(&[&format!("mirror.test:{port}"), "127.0.0.1/32:*"], &[("mirror.test", "127.0.0.1")]);
    let mut c = connect(&s.gate);
    c.write_all(format!("GET http://mirror.test:{port}/simple/ HTTP/1.1\r\nHost: mirror.test:{port}\r\nProxy-Connection: keep-alive\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let answer = read_all(&mut c).await;
    assert!(answer.ends_with(b"\r\n\r\nok"), "{}", String::from_utf8_lossy(&answer));
    let got = up.received.lock().unwrap()[0].clone();
    assert_eq!(
        String::from_utf8(got).unwrap(),
        format!("GET /simple/ HTTP/1.1\r\nHost: mirror.test:{port}\r\nConnection: close\r\n\r\n")
    );
    let mut c = connect(&s.gate);
    let answer =
        ask(&mut c, &format!("GET http://mirror.test:{port}/ HTTP/1.1\r\nHost: other.test\r\n\r\n")).await;
    assert_eq!(reason_of(&answer), Some("malformed-request"), "{answer}");
}

#[tokio::test]
async fn slow_oversized_and_unreachable_requests_end_promptly() {
    let s = setup(&["allowed.test:*", "127.0.0.1/32:*"], &[("allowed.test", "127.0.0.1")]);
    // A head that never ends: refused after the read timeout, not held open.
    let mut c = connect(&s.gate);
    c.write_all(b"CONNECT allowed.test:1 HTTP/1.1\r\n").await.unwrap();
    let answer = String::from_utf8(read_all(&mut c).await).unwrap();
    assert_eq!(reason_of(&answer), Some("malformed-request"), "{answer}");
    // A head over the limit.
    let mut c = connect(&s.gate);
    let huge = format!("CONNECT allowed.test:1 HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let _ = c.write_all(huge.as_bytes()).await;
    let answer = String::from_utf8(read_all(&mut c).await).unwrap();
    assert!(answer.contains("over 16384 bytes"), "{answer}");
    // A listed destination where nothing listens: 502.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let mut c = connect(&s.gate);
    let answer = ask(&mut c, &format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert_eq!(reason_of(&answer), Some("unreachable"));
    // A name the resolver does not know: 502 too.
    let s = setup(&["*.test:*"], &[]);
    let mut c = connect(&s.gate);
    let answer = ask(&mut c, "CONNECT nowhere.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(reason_of(&answer), Some("unresolved"), "{answer}");
}

/// The whole way out as a sandbox will use it: a TCP client on loopback, `sandboxd relay`,
/// the gate on its Unix socket, the destination. Then the gate goes, and the way out with it.
#[cfg(any(feature = "local", feature = "docker"))]
#[test]
fn through_sandboxd_relay_to_the_gate_and_closed_when_the_gate_goes() {
    use std::io::{Read as _, Write as _};
    use std::os::unix::fs::PermissionsExt;

    let Some(binary) = crate::sandboxd::BINARY else {
        eprintln!("[skip] through_sandboxd_relay...: this build has no sandboxd");
        return;
    };
    let dir = std::env::temp_dir().join(format!("sandboxio-egress-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sandboxd = dir.join("sandboxd");
    std::fs::write(&sandboxd, binary).unwrap();
    std::fs::set_permissions(&sandboxd, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The destination, on 127.0.0.2: it answers "welcome" to whatever it is sent.
    let upstream = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    let port = upstream.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in upstream.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                if matches!(conn.read(&mut buf), Ok(n) if n > 0) {
                    let _ = conn.write_all(b"welcome");
                }
            });
        }
    });
    let s = setup(
        &[&format!("allowed.test:{port}"), &format!("127.0.0.2:{port}")],
        &[("allowed.test", "127.0.0.2")],
    );
    let socket = dir.join("gate.sock");
    let gate = Arc::try_unwrap(s.gate).ok().expect("the only reference");
    let server = super::server::GateServer::start(&socket, gate).unwrap();
    let relay_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut relay = std::process::Command::new(&sandboxd)
        .args(["relay", &format!("127.0.0.1:{relay_port}")])
        .arg(&socket)
        .spawn()
        .unwrap();
    let open = || {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(c) = std::net::TcpStream::connect(("127.0.0.1", relay_port)) {
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                return c;
            }
            assert!(std::time::Instant::now() < deadline, "the relay never listened");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let head = |c: &mut std::net::TcpStream| {
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") && matches!(c.read(&mut byte), Ok(1)) {
            got.push(byte[0]);
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    // Allowed: the tunnel opens and carries TLS for the listed name.
    let mut c = open();
    c.write_all(format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n").as_bytes()).unwrap();
    assert!(head(&mut c).starts_with("HTTP/1.1 200"));
    c.write_all(&hello(Some("allowed.test"), false)).unwrap();
    let mut reply = Vec::new();
    let _ = c.read_to_end(&mut reply);
    assert_eq!(reply, b"welcome");
    // Refused: the gate's answer comes back through the relay.
    let mut c = open();
    c.write_all(format!("CONNECT other.test:{port} HTTP/1.1\r\n\r\n").as_bytes()).unwrap();
    let answer = head(&mut c);
    assert_eq!(reason_of(&answer), Some("not-listed"), "{answer}");
    // The gate goes: the next connection is closed at once, and nothing is answered.
    drop(server);
    assert!(!socket.exists(), "the gate's socket was left behind");
    let mut c = open();
    let _ = c.write_all(format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n").as_bytes());
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    let _ = relay.kill();
    let _ = relay.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_plain_connection_carries_one_request_with_its_declared_body_and_nothing_after() {
    let up = server(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let port = up.addr.port();
    let s = setup(&[&format!("mirror.test:{port}"), "127.0.0.1/32:*"], &[("mirror.test", "127.0.0.1")]);
    let head = format!("POST http://mirror.test:{port}/up HTTP/1.1\r\nContent-Length: 5\r\n\r\n");
    let second = "GET /second HTTP/1.1\r\nHost: other.test\r\n\r\n";
    // The control: a body that comes in two writes reaches the server whole; what follows it
    // in the second write (a request for another virtual host) does not.
    let mut c = connect(&s.gate);
    c.write_all(format!("{head}hel").as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.write_all(format!("lo{second}").as_bytes()).await.unwrap();
    let answer = read_all(&mut c).await;
    assert!(answer.ends_with(b"\r\n\r\nok"), "{}", String::from_utf8_lossy(&answer));
    let got = String::from_utf8(up.received.lock().unwrap()[0].clone()).unwrap();
    assert_eq!(
        got,
        format!(
            "POST /up HTTP/1.1\r\nContent-Length: 5\r\nHost: mirror.test:{port}\r\nConnection: close\r\n\r\nhello"
        )
    );
    // A second request sent with the first, after a body or without one: refused before any
    // dial, and the server sees nothing more.
    for request in
        [format!("{head}hello{second}"), format!("GET http://mirror.test:{port}/ HTTP/1.1\r\n\r\n{second}")]
    {
        let mut c = connect(&s.gate);
        let answer = ask(&mut c, &request).await;
        assert_eq!(reason_of(&answer), Some("malformed-request"), "{answer}");
    }
    // Chunked framing and two lengths (where the request ends would be the server's call).
    for framing in
        ["Transfer-Encoding: chunked\r\nContent-Length: 4", "Content-Length: 0\r\nContent-Length: 40"]
    {
        let mut c = connect(&s.gate);
        let answer = ask(
            &mut c,
            &format!("POST http://mirror.test:{port}/ HTTP/1.1\r\n{framing}\r\n\r\n0\r\n\r\n{second}"),
        )
        .await;
        assert_eq!(reason_of(&answer), Some("malformed-request"), "{answer}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.received.lock().unwrap().len(), 1, "a refused request reached the server");
}

/// Code in the sandbox can open the gate's socket directly, as often as it likes: the gate
/// serves a bounded number at once, answers the next at once, and serves again once some
/// close.
#[test]
fn the_gate_serves_a_bounded_number_of_connections_and_answers_the_rest_at_once() {
    use std::io::{Read as _, Write as _};
    use std::os::unix::net::UnixStream;

    let dir = std::env::temp_dir().join(format!("sandboxio-egress-limit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("gate.sock");
    let s = setup(&["allowed.test:*"], &[("allowed.test", "127.0.0.1")]);
    let events = Arc::clone(&s.events);
    let mut gate = Arc::try_unwrap(s.gate).ok().expect("the only reference");
    gate.read_timeout = Duration::from_secs(30);
    gate.max_connections = 4;
    let server = super::server::GateServer::start(&socket, gate).unwrap();
    let open = || {
        let c = UnixStream::connect(&socket).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c
    };
    // Four clients that send nothing hold the four places.
    let held: Vec<UnixStream> = (0..4).map(|_| open()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = open();
    let mut answer = String::new();
    let _ = extra.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(answer.contains("reason=too-many-connections"), "{answer}");
    // The refusal is an event (an audit record) like any other.
    assert!(
        events
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, Event::Refused { reason: "too-many-connections", .. })),
        "the 503 was not reported"
    );
    // The control: once one closes, the gate serves a new client (a refusal of its own).
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    let mut c = open();
    c.write_all(b"CONNECT other.test:443 HTTP/1.1\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = c.read_to_string(&mut answer);
    assert_eq!(reason_of(&answer), Some("not-listed"), "{answer}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether `text` holds a character a terminal or a line-based log reader acts on.
fn has_control(text: &str) -> bool {
    text.chars().any(|c| {
        (c.is_control() && c != '\t') || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}')
    })
}

#[tokio::test]
async fn what_the_sandbox_names_reaches_the_gates_events_as_printable_ascii_only() {
    let up = server(b"welcome").await;
    let port = up.addr.port();
    let s = setup(&[&format!("allowed.test:{port}"), "127.0.0.1/32:*"], &[("allowed.test", "127.0.0.1")]);
    // The control: a matching ClientHello is relayed, and its event names the host.
    let mut c = connect(&s.gate);
    ask(&mut c, &format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n")).await;
    c.write_all(&hello(Some("allowed.test"), false)).await.unwrap();
    assert_eq!(read_all(&mut c).await, b"welcome");
    // A server name with a line break and a terminal escape (it would forge a log line), and
    // CONNECT hosts with a bidirectional override, a C1 control and a line separator.
    let mut c = connect(&s.gate);
    ask(&mut c, &format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n")).await;
    c.write_all(&hello(Some("a.test\n2026-01-01T00:00:00Z INFO forged\u{1b}[2J"), false)).await.unwrap();
    assert_eq!(read_all(&mut c).await, b"");
    for host in ["\u{202e}tset.dewolla", "x\u{9b}2J", "a\u{2028}b", "a\tb"] {
        let mut c = connect(&s.gate);
        let answer = ask(&mut c, &format!("CONNECT {host}:{port} HTTP/1.1\r\n\r\n")).await;
        assert_eq!(reason_of(&answer), Some("malformed-request"), "{host:?}: {answer}");
    }
    let events = s.events.lock().unwrap();
    assert!(matches!(&events[0], Event::Allowed { host, .. } if host == "allowed.test"), "{events:?}");
    assert_eq!(events.len(), 6, "{events:?}");
    for event in events.iter() {
        if let Event::Refused { host, detail, .. } = event {
            assert!(!has_control(host) && !has_control(detail), "{event:?}");
            assert!(host.is_ascii() && detail.is_ascii(), "{event:?}");
        }
    }
    assert!(
        matches!(&events[1], Event::Refused { detail, .. } if detail.contains(r"a.test\u{a}2026")),
        "the escaped server name is still readable: {events:?}"
    );
}

/// Sends `data` on `conn` with `fds` attached (`SCM_RIGHTS`), as `sandboxd relay` hands a
/// client over, or as the sandbox's own code could.
fn send_with_fds(conn: &std::os::unix::net::UnixStream, data: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
    }
    rustix::net::sendmsg(conn, &[std::io::IoSlice::new(data)], &mut control, SendFlags::NOSIGNAL).unwrap();
}

/// A connected pair on loopback: (the client's end, the end a relay would hand over).
fn tcp_pair() -> (std::net::TcpStream, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (served, _) = listener.accept().unwrap();
    (client, served)
}

/// The relay hands each client's TCP socket over to the gate (`handover.rs`); the sandbox's
/// code can send the gate anything in its place. Only one connected TCP socket with the
/// hand-over byte is served; every other message is refused as malformed, and every
/// descriptor it carried is closed.
#[test]
fn a_hand_over_is_one_connected_tcp_socket_and_anything_else_is_refused_and_closed() {
    use std::io::{Read as _, Write as _};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    let dir = std::env::temp_dir().join(format!("sandboxio-egress-handover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("gate.sock");
    let s = setup(&["allowed.test:*"], &[("allowed.test", "127.0.0.1")]);
    let events = Arc::clone(&s.events);
    let gate = Arc::try_unwrap(s.gate).ok().expect("the only reference");
    let gate_server = super::server::GateServer::start(&socket, gate).unwrap();
    let open = || {
        let c = UnixStream::connect(&socket).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c
    };
    let answer_on = |mut c: &UnixStream| {
        let mut answer = String::new();
        let _ = c.read_to_string(&mut answer);
        answer
    };

    // The control: a client handed over is served on its own socket, and the gate's answer
    // comes there, not on the Unix connection.
    let (mut client, served) = tcp_pair();
    let conn = open();
    send_with_fds(&conn, &[0], &[served.as_fd()]);
    drop(served);
    client.write_all(b"CONNECT other.test:443 HTTP/1.1\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = client.read_to_string(&mut answer);
    assert_eq!(reason_of(&answer), Some("not-listed"), "{answer}");
    assert_eq!(answer_on(&conn), "", "the Unix connection got an answer meant for the client");
    // And a client speaking HTTP on the socket itself is served there.
    let mut direct = open();
    direct.write_all(b"CONNECT other.test:443 HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(reason_of(&answer_on(&direct)), Some("not-listed"));

    // The hand-over byte without a socket.
    let conn = open();
    send_with_fds(&conn, &[0], &[]);
    let answer = answer_on(&conn);
    assert_eq!(reason_of(&answer), Some("malformed-request"), "{answer}");
    assert!(answer.contains("hand-over"), "{answer}");

    // A pipe: refused, and the gate's copy closed (its writer then sees no reader left).
    let (reader, writer) = rustix::pipe::pipe().unwrap();
    let mut writer = std::fs::File::from(writer);
    writer.write_all(b"x").unwrap(); // the control: a reader is there
    let conn = open();
    send_with_fds(&conn, &[0], &[reader.as_fd()]);
    drop(reader);
    let answer = answer_on(&conn);
    assert_eq!(reason_of(&answer), Some("malformed-request"), "{answer}");
    assert!(answer.contains("not a socket"), "{answer}");
    let err = writer.write_all(b"x").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe, "the gate kept the pipe open");

    // A UDP socket, and a TCP socket that is not connected.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.connect("127.0.0.1:9").unwrap();
    let unconnected = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    for (fd, words) in [(udp.as_fd(), "not a TCP socket"), (unconnected.as_fd(), "not connected")] {
        let conn = open();
        send_with_fds(&conn, &[0], &[fd]);
        let answer = answer_on(&conn);
        assert_eq!(reason_of(&answer), Some("malformed-request"), "{answer}");
        assert!(answer.contains(words), "{words}: {answer}");
    }

    // Two sockets at once, and one with more than the byte: refused, and each client's
    // connection ends at once (nothing holds it open).
    let (mut first, first_served) = tcp_pair();
    let (mut second, second_served) = tcp_pair();
    let conn = open();
    send_with_fds(&conn, &[0], &[first_served.as_fd(), second_served.as_fd()]);
    drop((first_served, second_served));
    assert_eq!(reason_of(&answer_on(&conn)), Some("malformed-request"));
    let (mut third, third_served) = tcp_pair();
    let conn = open();
    send_with_fds(&conn, b"\0CONNECT", &[third_served.as_fd()]);
    drop(third_served);
    assert_eq!(reason_of(&answer_on(&conn)), Some("malformed-request"));
    for (name, client) in [("first", &mut first), ("second", &mut second), ("third", &mut third)] {
        let mut rest = Vec::new();
        let read = client.read_to_end(&mut rest);
        assert!(
            read.is_ok() && rest.is_empty(),
            "the {name} client's connection was held: {read:?} {rest:?}"
        );
    }
    assert!(
        events
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, Event::Refused { reason: "malformed-request", .. })),
        "the refusals were not reported"
    );
    drop(gate_server);
    let _ = std::fs::remove_dir_all(&dir);
}
