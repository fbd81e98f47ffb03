//! Class 18 on `local://`: code in a sandbox under an allowlist tries every way past the
//! egress gate it can name (`egress_attacks.rs`), as the caller's uid (CI runs this binary
//! as root, whose sandboxes run as an unprivileged uid, and as an unprivileged user).

use sandboxio::{NetworkPolicy, Sandbox, audit::AuditConfig};

use crate::egress_attacks::{Target, attack_the_allowlist};
use crate::support::{block_on, is_root};

#[test]
fn class_18__nothing_but_the_listed_destinations_is_reached_from_a_local_sandbox() {
    let create = |policy: NetworkPolicy, audit: AuditConfig| {
        block_on(Sandbox::builder("local://").unwrap().network(policy).audit(audit).create()).unwrap()
    };
    let who = if is_root() { "local:// (root caller)" } else { "local:// (unprivileged caller)" };
    attack_the_allowlist(&Target {
        create: &create,
        python: "/usr/bin/python3",
        gate: "/run/sandboxio/egress.sock",
        who,
    });
}

/// The child's side of the resource attack: a sink on 127.0.0.2 that counts what reaches it,
/// a sandbox that opens 300 tunnels to it straight through the gate's socket, holds them,
/// and pushes 1 GiB through one. Prints `RESULT <tunnels opened> <descriptors before>
/// <descriptors while held> <peak RSS MiB before> <peak RSS MiB after> <bytes the sink got>`.
fn hold_tunnels_and_push_a_gib() {
    use std::io::Read as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = Arc::new(AtomicU64::new(0));
    let sink = Arc::clone(&got);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let sink = Arc::clone(&sink);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n @ 1..) = conn.read(&mut buf) {
                    sink.fetch_add(n as u64, Ordering::SeqCst);
                }
            });
        }
    });
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let sandbox = crate::support::local(NetworkPolicy::allowlist([format!("127.0.0.2:{port}")]).unwrap());
    let script = format!(
        r#"import resource, socket, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held, ok = [], 0
for _ in range(300):
    c = socket.socket(socket.AF_UNIX)
    c.connect("/run/sandboxio/egress.sock")
    try:
        c.sendall(b"CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\n")
        ok += c.recv(12) == b"HTTP/1.1 200"
    except OSError:
        pass  # over the gate's limit: answered 503 and closed at once
    held.append(c)
print("held", ok, flush=True)
sys.stdin.readline()
chunk = b"x" * (1 << 20)
for _ in range(1024):
    held[0].sendall(chunk)
print("sent", flush=True)
sys.stdin.readline()"#
    );
    let before = (fds(), crate::support::peak_rss_mib());
    let mut stream =
        sandbox.stream(sandboxio::Command::new("/usr/bin/python3").arg("-c").arg(script)).unwrap();
    let line = |stream: &mut sandboxio::exec::ExecStream| {
        let mut out = Vec::new();
        while !out.ends_with(b"\n") {
            match block_on(stream.next_chunk()) {
                Some(chunk) => out.extend_from_slice(&chunk.unwrap().data),
                None => break,
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    let held = line(&mut stream);
    let opened: u64 =
        held.trim().strip_prefix("held ").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{held}"));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let during = fds();
    block_on(stream.write_stdin(b"go\n")).unwrap();
    let sent = line(&mut stream);
    assert_eq!(sent.trim(), "sent");
    crate::support::eventually(std::time::Duration::from_secs(30), || got.load(Ordering::SeqCst) >= 1 << 30);
    let after = crate::support::peak_rss_mib();
    block_on(stream.close_stdin()).unwrap();
    let _ = block_on(stream.wait());
    block_on(sandbox.close()).unwrap();
    println!("RESULT {opened} {} {during} {} {after} {}", before.0, before.1, got.load(Ordering::SeqCst));
}

#[test]
fn class_18__tunnels_held_and_a_gib_pushed_cost_the_owner_bounded_descriptors_and_memory() {
    const TEST: &str = "local::class_18_egress::class_18__tunnels_held_and_a_gib_pushed_cost_the_owner_bounded_descriptors_and_memory";
    let Some(f) = figures(TEST, "class18-hold", hold_tunnels_and_push_a_gib) else { return };
    let [opened, fds_before, fds_during, rss_before, rss_after, bytes] = f[..] else { panic!("{f:?}") };
    println!(
        "[class 18] tunnels {opened}, owner descriptors {fds_before} -> {fds_during}, peak RSS {rss_before} -> {rss_after} MiB, sink got {bytes} bytes"
    );
    // The controls: the gate opened tunnels up to its limit, and the GiB arrived whole.
    assert_eq!(opened, 256, "the gate's connection limit");
    assert_eq!(bytes, 1 << 30, "the GiB did not arrive");
    // Per tunnel: the gate's two (its client's Unix socket, its upstream) and the sink's one
    // (it runs in this process too).
    assert!(fds_during <= fds_before + 3 * 256 + 32, "descriptors: {fds_before} -> {fds_during}");
    assert!(rss_after <= rss_before + 256, "peak RSS {rss_before} -> {rss_after} MiB");
}

/// The child's side of the stalled-tunnels attack: a listed destination that accepts and
/// never reads, 256 tunnels to it (the gate's limit) straight through the gate's socket, and
/// as much pushed into each as it takes. Prints `RESULT <bytes pushed> <peak RSS MiB before>
/// <peak RSS MiB after>`.
fn stall_tunnels() {
    use std::sync::{Arc, Mutex};
    let listener = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&accepted);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            keep.lock().unwrap().push(conn);
        }
    });
    let sandbox = crate::support::local(NetworkPolicy::allowlist([format!("127.0.0.2:{port}")]).unwrap());
    let script = format!(
        r#"import socket, time
held = []
for _ in range(256):
    c = socket.socket(socket.AF_UNIX)
    c.connect("/run/sandboxio/egress.sock")
    c.sendall(b"CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\n")
    c.recv(39)
    c.setblocking(False)
    held.append(c)
total = 0
for _ in range(200):
    for c in held:
        try:
            total += c.send(b"x" * 65536)
        except BlockingIOError:
            pass
time.sleep(1)
print(total, flush=True)"#
    );
    let before = crate::support::peak_rss_mib();
    let out =
        block_on(sandbox.run(sandboxio::Command::new("/usr/bin/python3").arg("-c").arg(script))).unwrap();
    let after = crate::support::peak_rss_mib();
    block_on(sandbox.close()).unwrap();
    println!("RESULT {} {before} {after}", out.stdout_lossy().trim());
}

#[test]
fn class_18__tunnels_to_a_destination_that_never_reads_cost_the_owner_little_memory() {
    const TEST: &str = "local::class_18_egress::class_18__tunnels_to_a_destination_that_never_reads_cost_the_owner_little_memory";
    let Some(f) = figures(TEST, "class18-stall", stall_tunnels) else { return };
    let [pushed, before, after] = f[..] else { panic!("{f:?}") };
    println!("[class 18] 256 stalled tunnels: {pushed} bytes pushed, owner peak RSS {before} -> {after} MiB");
    // The control: the tunnels took far more than the gate buffers (the kernel's socket
    // buffers hold the rest), so the gate's buffers were full.
    assert!(pushed > 128 * 1024 * 1024, "the tunnels took only {pushed} bytes");
    assert!(after <= before + 24, "256 stalled tunnels grew the owner's peak RSS {before} -> {after} MiB");
}

/// In the child for `role`, runs `child` (which prints its figures) and gives `None`;
/// otherwise runs `test` as that child and gives its figures.
fn figures(test: &str, role: &str, child: fn()) -> Option<Vec<u64>> {
    if crate::support::child_role().as_deref() == Some(role) {
        child();
        return None;
    }
    Some(crate::support::child_figures(test, role))
}
