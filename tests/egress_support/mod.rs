//! What the egress tests of every backend share (`local_egress.rs`, `docker_egress.rs`):
//! servers on the host that count or record what reaches them, and Python probes that go
//! through the proxy a sandbox under an allowlist is given.
#![allow(dead_code, reason = "each test binary uses its own part")]

use std::io::Read as _;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sandboxio::{Command, NetworkPolicy, Sandbox, policy::NetworkEnforcement};

pub fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    futures_lite::future::block_on(f)
}

/// A TCP server on `ip` that counts its connections and answers "canary" to each.
pub fn canary(ip: &str) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind((ip, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            seen.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                use std::io::Write as _;
                let _ = conn.write_all(b"canary");
                let mut sink = [0u8; 64];
                let _ = conn.read(&mut sink);
            });
        }
    });
    (port, count)
}

/// A Python probe (`python`: the interpreter in the sandbox): `CONNECT target` through `$HTTPS_PROXY`; prints the gate's status line
/// and, once the tunnel is open, the first bytes the destination sent.
pub fn through_proxy(python: &str, target: &str) -> Command {
    python_after_connect(
        python,
        target,
        r#"for line in head.split(b"\r\n"):
    if line.lower().startswith(b"x-sandboxio-egress"):
        print(line.decode())
if head.startswith(b"HTTP/1.1 200"):
    c.settimeout(5)
    print(c.recv(64).decode())"#,
    )
}

/// A Python probe that sends `CONNECT target` through `$HTTPS_PROXY`, reads the gate's
/// answer head into `head` (printing its status line), then runs `rest` with the socket `c`.
pub fn python_after_connect(python: &str, target: &str, rest: &str) -> Command {
    Command::new(python).arg("-c").arg(format!(
        r#"import os, socket, ssl
host, port = os.environ["HTTPS_PROXY"].split("://", 1)[1].rstrip("/").rsplit(":", 1)
c = socket.create_connection((host, int(port)), 5)
c.sendall(b"CONNECT {target} HTTP/1.1\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    chunk = c.recv(1)
    if not chunk:
        break
    head += chunk
print(head.split(b"\r\n")[0].decode())
{rest}"#
    ))
}

pub fn run(sbx: &Sandbox, command: Command) -> String {
    let out = block_on(sbx.run(command)).unwrap();
    format!("{}{}", out.stdout_lossy(), out.stderr_lossy())
}

/// A TCP server on `ip` that records the first bytes each connection sends (connections that
/// send nothing are not recorded: the gate dials before it has read a tunnel's `ClientHello`).
pub fn recorder(ip: &str) -> (u16, Arc<std::sync::Mutex<Vec<Vec<u8>>>>) {
    let listener = TcpListener::bind((ip, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&log);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || {
                let mut buf = [0u8; 512];
                if let Ok(n @ 1..) = conn.read(&mut buf) {
                    seen.lock().unwrap().push(buf[..n].to_vec());
                }
            });
        }
    });
    (port, log)
}

/// A Python probe: a TLS handshake naming `server_name` through a `CONNECT` to `target`
/// (the handshake itself fails: the destination is no TLS server; what matters is whether
/// the `ClientHello` got through). Prints the gate's status line.
pub fn tls_through_proxy(python: &str, target: &str, server_name: &str) -> Command {
    python_after_connect(
        python,
        target,
        &format!(
            r#"if head.startswith(b"HTTP/1.1 200"):
    c.settimeout(3)
    try:
        ssl.create_default_context().wrap_socket(c, server_hostname={server_name:?})
    except Exception as e:
        print(type(e).__name__)"#
        ),
    )
}

/// Set in the child process that creates a detached sandbox and exits
/// ([`detached_way_out_lasts_while_its_process_does`]): the allowlisted target.
const OWNER_CHILD: &str = "SANDBOXIO_TEST_EGRESS_OWNER";

/// Whether this process is that child.
pub fn is_owner_child() -> bool {
    std::env::var_os(OWNER_CHILD).is_some()
}

/// A detached sandbox on `dsn` under an allowlist: its way out outlives the handle that
/// created it, for a `connect`ed handle of the same process (which reports the policy and
/// gives its commands the proxy); `while_up` sees that handle before it kills the sandbox
/// and `after_kill` gets what it returned. Then, made by a child process (this test binary
/// running `test` again) that exits: the sandbox stays, its way out does not.
pub fn detached_way_out_lasts_while_its_process_does<T>(
    dsn: &str,
    python: &str,
    test: &str,
    while_up: impl FnOnce(&Sandbox) -> T,
    after_kill: impl FnOnce(T),
) {
    let detached = |target: &str| {
        let policy = NetworkPolicy::allowlist([target]).unwrap();
        block_on(Sandbox::builder(dsn).unwrap().network(policy).detached(true).create()).unwrap()
    };
    if let Ok(target) = std::env::var(OWNER_CHILD) {
        let sbx = detached(&target);
        let out = run(&sbx, through_proxy(python, &target));
        assert!(out.contains("canary"), "{out}");
        println!("sandbox-id={}", sbx.id());
        std::process::exit(0);
    }
    let (port, seen) = canary("127.0.0.2");
    let target = format!("127.0.0.2:{port}");
    let creator = detached(&target);
    assert_eq!(creator.network_enforcement(), Some(NetworkEnforcement::egress_gate()));
    let out = run(&creator, Command::shell("echo $HTTPS_PROXY $http_proxy $npm_config_https_proxy"));
    assert_eq!(out.trim(), "http://127.0.0.1:3128 http://127.0.0.1:3128 http://127.0.0.1:3128");
    let id = creator.id().to_owned();
    drop(creator);
    let connected = block_on(Sandbox::connect(dsn, &id)).unwrap();
    assert_eq!(connected.network_policy(), Some(&NetworkPolicy::allowlist([&target]).unwrap()));
    assert_eq!(connected.network_enforcement(), Some(NetworkEnforcement::egress_gate()));
    let out = run(&connected, through_proxy(python, &target));
    assert!(out.starts_with("HTTP/1.1 200") && out.contains("canary"), "{out}");
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    let seen_up = while_up(&connected);
    block_on(connected.kill()).unwrap();
    after_kill(seen_up);

    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(OWNER_CHILD, &target)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&child.stdout);
    let id = said.lines().find_map(|l| l.split("sandbox-id=").nth(1)).unwrap_or_else(|| {
        panic!("the child made no sandbox: {said} {}", String::from_utf8_lossy(&child.stderr))
    });
    assert_eq!(seen.load(Ordering::SeqCst), 2, "the child's control did not reach the canary");
    let orphan = block_on(Sandbox::connect(dsn, id.trim())).unwrap();
    let out = run(&orphan, through_proxy(python, &target));
    assert!(!out.contains("canary"), "the way out outlived the process that held its gate: {out}");
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    block_on(orphan.kill()).unwrap();
}

/// Every decision of a sandbox's gate is an audit record for the sandbox's sinks: a relayed
/// connection with the address dialled, a refused one with the gate's reason.
pub fn gate_decisions_are_audit_records(dsn: &str, python: &str) {
    use sandboxio::{
        ErrorCode,
        audit::{AuditConfig, OperationKind, Outcome, RecordingSink},
    };
    let (port, _) = canary("127.0.0.2");
    let sink = RecordingSink::new();
    let policy = NetworkPolicy::allowlist([format!("127.0.0.2:{port}")]).unwrap();
    let sbx = block_on(
        Sandbox::builder(dsn)
            .unwrap()
            .network(policy.clone())
            .audit(AuditConfig::new().with_sink(sink.clone()))
            .create(),
    )
    .unwrap();
    let out = run(&sbx, through_proxy(python, &format!("127.0.0.2:{port}")));
    assert!(out.contains("canary"), "{out}");
    let out = run(&sbx, through_proxy(python, "unlisted.invalid:443"));
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    let id = sbx.id().to_owned();
    block_on(sbx.close()).unwrap();
    let records = sink.records_of(OperationKind::Egress);
    assert_eq!(records.len(), 2, "{records:#?}");
    let (allowed, refused) = (&records[0], &records[1]);
    assert_eq!(allowed.outcome, Outcome::Ok);
    assert_eq!(allowed.policy.as_ref(), Some(&policy));
    let egress = allowed.egress.as_ref().unwrap();
    assert_eq!((egress.host.as_str(), egress.port), ("127.0.0.2", port));
    assert_eq!(egress.address, Some(format!("127.0.0.2:{port}").parse().unwrap()));
    assert_eq!(egress.refused, None);
    assert_eq!(refused.outcome, Outcome::Error(ErrorCode::NetworkPolicyViolation));
    let egress = refused.egress.as_ref().unwrap();
    assert_eq!((egress.host.as_str(), egress.port, egress.address), ("unlisted.invalid", 443, None));
    assert_eq!(egress.refused.as_deref(), Some("not-listed"));
    assert!(records.iter().all(|r| r.sandbox_id.as_deref() == Some(id.as_str())), "{records:#?}");
}
