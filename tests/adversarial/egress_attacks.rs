//! Class 18, the same on every backend that declares `NETWORK_ALLOWLIST` (`local/` and
//! `docker/` call it on their own sandboxes): code in a sandbox under an allowlist attacks the
//! egress gate and the way out to it (`egress_probe.py`: IP spellings, names for loopback,
//! plain-HTTP smuggling, chained `CONNECT`s, TLS server-name games, DNS, UDP, raw sockets,
//! Unix sockets, the relay and the gate's socket). The host's own servers are the verdict:
//! an unlisted canary on every host address, a UDP counter, an abstract Unix socket, and the
//! listed destinations' records of what reached them. The positive controls (the listed
//! address and name, end to end, also through a relay of the attacker's own) run in the same
//! sandbox. Every gate decision's log line and audit record is checked for sandbox-chosen
//! control characters.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sandboxio::{
    Command, NetworkPolicy, Sandbox,
    audit::{AuditConfig, OperationKind, RecordingSink},
};

use crate::support::block_on;

/// The attack script, run with the sandbox's `python3`.
const PROBE: &str = include_str!("egress_probe.py");

/// What connections to one server sent, each cut to 64 KiB.
type Log = Arc<Mutex<Vec<Vec<u8>>>>;

/// A TCP server on `addr` that counts connections, records what each sends (until it ends
/// or is idle for 3 s) and, when `greet`, first answers "canary".
fn server(addr: &str, greet: bool) -> (u16, Arc<AtomicUsize>, Log) {
    let listener = TcpListener::bind((addr, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (count, log) = (Arc::new(AtomicUsize::new(0)), Log::default());
    let (seen, kept) = (Arc::clone(&count), Arc::clone(&log));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            seen.fetch_add(1, Ordering::SeqCst);
            let kept = Arc::clone(&kept);
            std::thread::spawn(move || {
                if greet {
                    let _ = conn.write_all(b"canary");
                }
                let _ = conn.set_read_timeout(Some(Duration::from_secs(3)));
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = conn.read(&mut buf) {
                    if got.len() < 64 * 1024 {
                        got.extend_from_slice(&buf[..n]);
                    }
                }
                kept.lock().unwrap().push(got);
            });
        }
    });
    (port, count, log)
}

/// A UDP socket on every host address that counts datagrams.
fn udp_counter() -> (u16, Arc<AtomicUsize>) {
    let socket = UdpSocket::bind("0.0.0.0:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while socket.recv_from(&mut buf).is_ok() {
            seen.fetch_add(1, Ordering::SeqCst);
        }
    });
    (port, count)
}

/// An abstract Unix socket of the host (in this process's network namespace) that counts
/// connections.
fn abstract_counter(name: &str) -> Arc<AtomicUsize> {
    use std::os::linux::net::SocketAddrExt as _;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            if conn.is_err() {
                return;
            }
            seen.fetch_add(1, Ordering::SeqCst);
        }
    });
    count
}

/// The host's IPv4 addresses other than loopback, and its names (`/etc/hosts`, hostname).
fn host_addresses_and_names() -> (Vec<String>, Vec<String>) {
    let out = std::process::Command::new("ip").args(["-o", "-4", "addr", "show"]).output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let addrs = text
        .lines()
        .filter_map(|l| l.split_whitespace().skip_while(|w| *w != "inet").nth(1))
        .filter_map(|a| a.split('/').next())
        .filter(|a| !a.starts_with("127."))
        .map(str::to_owned)
        .collect();
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let mut names: Vec<String> = hosts
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split_whitespace().skip(1).map(str::to_owned).collect::<Vec<_>>())
        .collect();
    if let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        names.push(name.trim().to_owned());
    }
    names.sort();
    names.dedup();
    (addrs, names)
}

/// What the gate logged on target `sandboxio::egress`, as `field=value` text per event.
fn gate_log() -> &'static Mutex<Vec<String>> {
    static LOG: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    LOG.get_or_init(|| {
        struct Capture;
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                let _ = write!(self.0, "{}={value:?} ", field.name());
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                let _ = write!(self.0, "{}={value} ", field.name());
            }
        }
        impl tracing::Subscriber for Capture {
            fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
                m.target().starts_with("sandboxio::egress")
            }
            fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
                tracing::span::Id::from_u64(1)
            }
            fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
            fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
            fn event(&self, event: &tracing::Event<'_>) {
                let mut fields = Fields(String::new());
                event.record(&mut fields);
                gate_log().lock().unwrap().push(fields.0);
            }
            fn enter(&self, _: &tracing::span::Id) {}
            fn exit(&self, _: &tracing::span::Id) {}
        }
        let _ = tracing::subscriber::set_global_default(Capture);
        Mutex::new(Vec::new())
    })
}

/// Whether `text` holds a byte a terminal or a line-based log reader acts on (ASCII controls
/// but tab, C1 controls, line and paragraph separators, bidirectional overrides).
fn has_control(text: &str) -> bool {
    text.chars().any(|c| {
        (c.is_control() && c != '\t')
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

/// How a backend makes the attacked sandbox.
pub struct Target<'a> {
    /// Makes a sandbox with the policy and audit sinks given.
    pub create: &'a dyn Fn(NetworkPolicy, AuditConfig) -> Sandbox,
    /// The sandbox's Python.
    pub python: &'a str,
    /// The gate's socket inside the sandbox.
    pub gate: &'a str,
    /// Names the run in messages (backend and user).
    pub who: &'a str,
}

/// Runs the probe in a sandbox of `target` and holds the host's servers to it.
pub fn attack_the_allowlist(target: &Target<'_>) {
    let who = target.who;
    let _ = gate_log();
    let (listed, listed_count, listed_log) = server("127.0.0.2", true);
    let (unlisted, unlisted_count, unlisted_log) = server("0.0.0.0", true);
    let (tls, _, tls_log) = server("127.0.0.1", false);
    let (udp, udp_count) = udp_counter();
    let abstract_name = format!("sandboxio-class18-{}-{listed}", std::process::id());
    let abstract_count = abstract_counter(&abstract_name);
    let (host_addrs, host_names) = host_addresses_and_names();
    let policy = NetworkPolicy::allowlist([
        format!("127.0.0.2:{listed}"),
        format!("localhost:{tls}"),
        format!("127.0.0.1:{tls}"),
    ])
    .unwrap();
    let sink = RecordingSink::new();
    let sbx = (target.create)(policy, AuditConfig::new().with_sink(sink.clone()));
    let args = format!(
        r#"{{"listed": {listed}, "unlisted": {unlisted}, "tls": {tls}, "udp": {udp}, "gate": {:?}, "abstract": {abstract_name:?}, "host_addrs": {host_addrs:?}, "host_names": {host_names:?}}}"#,
        target.gate
    );
    let command = Command::new(target.python).arg("-c").arg(PROBE).arg(args).timeout(Duration::from_mins(10));
    let result = block_on(sbx.run(command)).unwrap();
    let out = result.stdout_lossy();
    let report: Vec<&str> = out.lines().filter(|l| l.starts_with("R|") || l.starts_with("C|")).collect();
    println!("[class 18 {who}]\n{}", report.join("\n"));
    assert!(out.contains("DONE"), "{who}: the probe did not finish: {out}\n{}", result.stderr_lossy());
    std::thread::sleep(Duration::from_secs(4));
    block_on(sbx.close()).unwrap();

    // The positive controls: each listed destination was reached end to end.
    let control = |name: &str| {
        report
            .iter()
            .find_map(|l| l.strip_prefix(&format!("C|{name}|")))
            .unwrap_or_else(|| panic!("{who}: no control {name:?}: {out}"))
    };
    for name in [
        "listed address",
        "gate socket direct, CONNECT listed",
        "own hand-over, CONNECT listed",
        "listed address through our own relay",
    ] {
        let saw = control(name);
        assert!(saw.starts_with("HTTP/1.1 200") && saw.contains("canary"), "{who}: control {name}: {saw}");
    }
    assert!(
        control("plain GET to the listed address").contains("canary"),
        "{who}: plain-HTTP control failed"
    );
    for name in [
        "listed name, SNI localhost",
        "SNI localhost in 1-byte records",
        "SNI localhost in 1-byte writes",
        "SNI localhost. to LOCALHOST.",
    ] {
        assert!(control(name).starts_with("HTTP/1.1 200"), "{who}: control {name}: {}", control(name));
    }
    // Hand-overs of the sandbox's own making: a well-formed one is served and judged as any
    // client is (the control above, and the unlisted one reaches nothing: the canaries below);
    // every other is refused as malformed.
    let forged: Vec<&&str> = report.iter().filter(|l| l.starts_with("R|hand-over")).collect();
    assert_eq!(forged.len(), 7, "{who}: the forged hand-overs did not all run: {forged:?}");
    for line in forged {
        assert!(line.ends_with("HTTP/1.1 400 Bad Request malformed-request"), "{who}: {line}");
    }
    let tls_got = tls_log.lock().unwrap().clone();
    let hellos = tls_got.iter().filter(|b| b.first() == Some(&22) && contains(b, b"localhost")).count();
    assert!(hellos >= 5, "{who}: the listed name's ClientHellos did not all arrive ({hellos}): {tls_got:?}");
    assert!(listed_count.load(Ordering::SeqCst) >= 4, "{who}: the listed canary saw too little");

    // The verdicts: nothing unlisted was reached, by any route.
    assert_eq!(
        unlisted_count.load(Ordering::SeqCst),
        0,
        "{who}: an unlisted destination was reached: {:?}",
        unlisted_log.lock().unwrap()
    );
    assert_eq!(udp_count.load(Ordering::SeqCst), 0, "{who}: a UDP datagram reached the host");
    assert_eq!(abstract_count.load(Ordering::SeqCst), 0, "{who}: the host's abstract socket was reached");
    for got in listed_log.lock().unwrap().iter() {
        assert!(
            !contains(got, b"SMUGGLED") || contains(got, b"CONNECT 127.0.0.1"),
            "{who}: a smuggled request reached the listed server: {}",
            String::from_utf8_lossy(got)
        );
    }
    for got in &tls_got {
        for marker in [
            &b"sni-other"[..],
            b"sni-split",
            b"sni-writes",
            b"sni-junk",
            b"sni-alert",
            b"SNI-NOT-TLS",
            b"SNI-V2",
            b"forged",
            b"127.0.0.1\x00",
        ] {
            assert!(!contains(got, marker), "{who}: a refused ClientHello reached the listed name: {got:?}");
        }
    }
    no_control_characters_logged_or_recorded(who, &sink);
}

/// Nothing of what the sandbox chose reaches a gate log line or audit record as a control
/// character; the control: refusals were logged and recorded at all.
fn no_control_characters_logged_or_recorded(who: &str, sink: &RecordingSink) {
    let logged = gate_log().lock().unwrap().clone();
    assert!(logged.iter().any(|l| l.contains("not-listed")), "{who}: the gate logged no refusal");
    for line in &logged {
        assert!(!has_control(line), "{who}: a gate log line carries a control character: {line:?}");
    }
    let records = sink.records_of(OperationKind::Egress);
    assert!(
        records.iter().any(|r| r.egress.as_ref().is_some_and(|e| e.refused.is_some())),
        "{who}: no refusal was recorded"
    );
    for r in &records {
        let host = &r.egress.as_ref().unwrap().host;
        assert!(!has_control(host), "{who}: an audit record's host carries a control character: {host:?}");
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
