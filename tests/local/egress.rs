//! `local://` under an allowlist, tried from inside the sandbox: the listed destination is
//! reached through the proxy the sandbox is given, and nothing else is reached by any route.
//! Each refusal is checked in the same sandbox as its positive control.
#![cfg(feature = "local")]
#![allow(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use std::sync::atomic::Ordering;

use sandboxio::{Command, NetworkPolicy, Sandbox};

use crate::egress_support;

use egress_support::{block_on, canary, recorder, run};

/// The host's Python, which `local://` sandboxes see.
const PYTHON: &str = "/usr/bin/python3";

fn through_proxy(target: &str) -> Command {
    egress_support::through_proxy(PYTHON, target)
}

fn tls_through_proxy(target: &str, server_name: &str) -> Command {
    egress_support::tls_through_proxy(PYTHON, target, server_name)
}

#[test]
fn local_egress__a_listed_address_is_reached_through_the_proxy_and_nothing_else_is() {
    let (port, seen) = canary("127.0.0.2");
    let (other_port, other_seen) = canary("127.0.0.1");
    let policy = NetworkPolicy::allowlist([format!("127.0.0.2:{port}")]).unwrap();
    let sbx = block_on(Sandbox::builder("local://").unwrap().network(policy).create()).unwrap();
    // The positive control: the listed address, through the gate, end to end.
    let out = run(&sbx, through_proxy(&format!("127.0.0.2:{port}")));
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("canary"), "the tunnel did not reach the canary: {out}");
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    // Refused by the gate, each with its reason: another port, another address, odd
    // spellings of loopback, a name (nothing lists one).
    for (target, reason) in [
        (format!("127.0.0.2:{}", port.wrapping_add(1).max(1)), "not-listed"),
        (format!("127.0.0.1:{other_port}"), "not-listed"),
        (format!("2130706433:{other_port}"), "not-listed"),
        (format!("127.1:{other_port}"), "not-listed"),
        (format!("[::1]:{other_port}"), "not-listed"),
        (format!("localhost:{other_port}"), "not-listed"),
    ] {
        let out = run(&sbx, through_proxy(&target));
        assert!(out.starts_with("HTTP/1.1 403"), "{target}: {out}");
        assert!(out.contains(&format!("reason={reason}")), "{target}: {out}");
    }
    // No route around the gate: direct TCP to the listed address, UDP anywhere, and DNS.
    let direct =
        format!("import socket; socket.create_connection(('127.0.0.2', {port}), 2); print('direct reached')");
    let out = run(&sbx, Command::new("/usr/bin/python3").arg("-c").arg(direct));
    assert!(!out.contains("direct reached"), "{out}");
    let udp = "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('8.8.8.8', 53)); print('udp sent')";
    let out = run(&sbx, Command::new("/usr/bin/python3").arg("-c").arg(udp));
    assert!(!out.contains("udp sent"), "{out}");
    let dns = "import socket; socket.getaddrinfo('example.com', 443); print('resolved')";
    let out = run(&sbx, Command::new("/usr/bin/python3").arg("-c").arg(dns));
    assert!(!out.contains("resolved"), "{out}");
    assert_eq!(seen.load(Ordering::SeqCst), 1, "the listed canary saw a connection that was refused");
    assert_eq!(other_seen.load(Ordering::SeqCst), 0, "an unlisted destination was reached");
    block_on(sbx.close()).unwrap();
}

#[test]
fn local_egress__commands_get_the_proxy_and_the_way_out_ends_with_the_handle() {
    let (port, _) = canary("127.0.0.2");
    let policy = NetworkPolicy::allowlist([format!("127.0.0.2:{port}")]).unwrap();
    let sbx = block_on(Sandbox::builder("local://").unwrap().network(policy).create()).unwrap();
    let enforcement = sbx.network_enforcement().expect("local:// reports its enforcement");
    assert_eq!(enforcement, sandboxio::policy::NetworkEnforcement::egress_gate());
    assert!(!enforcement.dns_from_inside && !enforcement.udp_out && enforcement.domain_fronting_possible);
    let out = run(&sbx, Command::shell("echo $HTTPS_PROXY $https_proxy $ALL_PROXY"));
    assert_eq!(out.trim(), "http://127.0.0.1:3128 http://127.0.0.1:3128 http://127.0.0.1:3128");
    // Under deny-all there is no proxy to use.
    let denied =
        block_on(Sandbox::builder("local://").unwrap().network(NetworkPolicy::deny_all()).create()).unwrap();
    assert_eq!(run(&denied, Command::shell("echo \"[$HTTPS_PROXY]\"")).trim(), "[]");
    assert_eq!(denied.network_enforcement(), Some(sandboxio::policy::NetworkEnforcement::no_route()));
    block_on(denied.close()).unwrap();
    let root = std::env::temp_dir().join(format!("sandboxio-local-{}", host_uid()));
    let socket = root.join(sbx.id()).join("run").join("egress.sock");
    assert!(socket.exists(), "no gate socket at {}", socket.display());
    block_on(sbx.close()).unwrap();
    assert!(!socket.exists(), "the gate's socket outlived the sandbox");
}

/// This process's uid, from `/proc/self/status` (no libc in the tests).
fn host_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn local_egress__a_listed_name_is_resolved_on_the_host_vetted_and_held_to_its_tls_name() {
    // `localhost` resolves (on the host, from its /etc/hosts) to loopback, which is not public.
    let (port, received) = recorder("127.0.0.1");
    let name_only = NetworkPolicy::allowlist([format!("localhost:{port}")]).unwrap();
    let sbx = block_on(Sandbox::builder("local://").unwrap().network(name_only).create()).unwrap();
    let out = run(&sbx, tls_through_proxy(&format!("localhost:{port}"), "localhost"));
    assert!(out.starts_with("HTTP/1.1 403"), "a name resolving to loopback was let through: {out}");
    block_on(sbx.close()).unwrap();
    // With the address listed too: the name is reachable, for TLS that names it.
    let both = NetworkPolicy::allowlist([format!("localhost:{port}"), format!("127.0.0.1:{port}")]).unwrap();
    let sbx = block_on(Sandbox::builder("local://").unwrap().network(both).create()).unwrap();
    let out = run(&sbx, tls_through_proxy(&format!("localhost:{port}"), "localhost"));
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let wait = || {
        for _ in 0..100 {
            if !received.lock().unwrap().is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    wait();
    {
        let got = received.lock().unwrap();
        assert_eq!(got.len(), 1, "the ClientHello naming localhost did not arrive");
        assert_eq!(got[0][0], 22, "not a TLS handshake record: {:?}", &got[0][..8.min(got[0].len())]);
    }
    // TLS naming another host through the same tunnel: it never reaches the destination.
    let out = run(&sbx, tls_through_proxy(&format!("localhost:{port}"), "other.test"));
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(received.lock().unwrap().len(), 1, "a ClientHello for another name was relayed");
    block_on(sbx.close()).unwrap();
}

/// How many descriptors this process (the sandbox's owner, where the gate runs) has open.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn local_egress__code_that_floods_the_gate_socket_directly_holds_a_bounded_number_of_host_descriptors() {
    let (port, seen) = canary("127.0.0.2");
    let policy = NetworkPolicy::allowlist([format!("127.0.0.2:{port}")]).unwrap();
    let sbx = block_on(Sandbox::builder("local://").unwrap().network(policy).create()).unwrap();
    // 1000 connections straight to the gate's socket (the relay's own limit does not apply),
    // held open while the owner counts its descriptors.
    let flood = r#"import resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1100), hard))
held = []
for _ in range(1000):
    c = socket.socket(socket.AF_UNIX)
    c.connect("/run/sandboxio/egress.sock")
    held.append(c)
print("held", len(held), flush=True)
sys.stdin.read()"#;
    let before = open_descriptors();
    let during = block_on(async {
        let mut stream = sbx.stream(Command::new("/usr/bin/python3").arg("-c").arg(flood)).unwrap();
        let mut out = Vec::new();
        while !out.ends_with(b"\n") {
            match stream.next_chunk().await {
                Some(chunk) => out.extend_from_slice(&chunk.unwrap().data),
                None => break,
            }
        }
        assert_eq!(String::from_utf8_lossy(&out).trim(), "held 1000");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let during = open_descriptors();
        stream.close_stdin().await.unwrap();
        stream.wait().await.unwrap();
        during
    });
    assert!(
        during < before + 400,
        "the gate held {} descriptors of its owner for 1000 connections from the sandbox",
        during.saturating_sub(before)
    );
    // The control: once they close, the gate serves the listed destination again.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = run(&sbx, through_proxy(&format!("127.0.0.2:{port}")));
    assert!(out.starts_with("HTTP/1.1 200") && out.contains("canary"), "{out}");
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    block_on(sbx.close()).unwrap();
}

#[test]
fn local_egress__a_detached_sandboxs_way_out_lasts_while_its_creating_process_does() {
    egress_support::detached_way_out_lasts_while_its_process_does(
        "local://",
        PYTHON,
        "egress::local_egress__a_detached_sandboxs_way_out_lasts_while_its_creating_process_does",
        |_| (),
        |()| (),
    );
}

#[test]
fn local_egress__every_gate_decision_is_an_audit_record() {
    egress_support::gate_decisions_are_audit_records("local://", PYTHON);
}

/// Set in the child of the test below.
const LIMIT_CHILD: &str = "SANDBOXIO_TEST_EGRESS_NOFILE";

/// The soft `RLIMIT_NOFILE` of this process, from `/proc/self/limits`.
fn soft_descriptor_limit() -> String {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
    line.split_whitespace().nth(3).unwrap().to_owned()
}

#[test]
fn local_egress__the_first_gate_raises_its_owners_soft_descriptor_limit() {
    let test = "local_egress__the_first_gate_raises_its_owners_soft_descriptor_limit";
    if std::env::var_os(LIMIT_CHILD).is_some() {
        let before = soft_descriptor_limit();
        let (port, _) = canary("127.0.0.2");
        let policy = NetworkPolicy::allowlist([format!("127.0.0.2:{port}")]).unwrap();
        let sbx = block_on(Sandbox::builder("local://").unwrap().network(policy).create()).unwrap();
        println!("limits={before},{}", soft_descriptor_limit());
        block_on(sbx.close()).unwrap();
        return;
    }
    let hard = std::process::Command::new("sh").args(["-c", "ulimit -Hn"]).output().unwrap();
    let hard = String::from_utf8_lossy(&hard.stdout).trim().to_owned();
    if hard.parse::<u64>().is_ok_and(|h| h <= 1024) {
        println!("[skip] {test}: the hard descriptor limit is {hard}, nothing to raise");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -Sn 1024 && exec \"$0\" --exact egress::{test} --nocapture --test-threads=1"))
        .arg(exe)
        .env(LIMIT_CHILD, "1")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&child.stdout);
    let limits = said.lines().find_map(|l| l.split("limits=").nth(1)).unwrap_or_else(|| {
        panic!("the child said nothing: {said} {}", String::from_utf8_lossy(&child.stderr))
    });
    let expected_after = hard.parse::<u64>().map_or(1 << 20, |h| h.min(1 << 20));
    // The control: the child started at 1024.
    assert_eq!(limits.trim(), format!("1024,{expected_after}"), "hard limit {hard}");
}
