//! `docker://` under an allowlist, tried from inside the container: the listed destination is
//! reached through the proxy the sandbox is given (sandboxd's relay to the egress gate's
//! bind-mounted socket), and nothing else is reached by any route. Each refusal is checked
//! in the same sandbox as its positive control. Needs an engine and `sandboxio/python:2`
//! (`scripts/build-images python`); without them each test says so and returns, unless
//! `SANDBOXIO_REQUIRE_DOCKER=1` (CI).
#![cfg(feature = "docker")]
#![allow(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use std::sync::atomic::Ordering;

use sandboxio::backends::docker::DockerBackend;
use sandboxio::{Command, ErrorCode, NetworkPolicy, Sandbox, policy::Capabilities};

use crate::egress_support;
use crate::support;

use egress_support::{block_on, canary, run, through_proxy};

const IMAGE: &str = "sandboxio/python:2";

fn ready(test: &str) -> bool {
    support::docker_image_ready(test, IMAGE, "python")
}

/// A sandbox of the Python image (as `user`, or the image's own unprivileged user) under
/// `policy`.
fn sandbox(policy: NetworkPolicy, user: Option<&str>) -> Sandbox {
    let dsn = match user {
        Some(user) => format!("docker://?image={IMAGE}&user={user}"),
        None => format!("docker://?image={IMAGE}"),
    };
    block_on(Sandbox::builder(&dsn).unwrap().network(policy).create()).unwrap()
}

/// Runs `source` with the image's `python3`.
fn python(sbx: &Sandbox, source: &str) -> String {
    run(sbx, Command::new("python3").arg("-c").arg(source))
}

fn listed_reached_and_nothing_else(user: Option<&str>) {
    let (port, seen) = canary("127.0.0.2");
    let (other_port, other_seen) = canary("127.0.0.1");
    let policy = NetworkPolicy::allowlist([format!("127.0.0.2:{port}")]).unwrap();
    let sbx = sandbox(policy, user);
    // The positive control: the listed address, through the gate, end to end.
    let out = run(&sbx, through_proxy("python3", &format!("127.0.0.2:{port}")));
    assert!(out.starts_with("HTTP/1.1 200"), "{user:?}: {out}");
    assert!(out.contains("canary"), "{user:?}: the tunnel did not reach the canary: {out}");
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    // Refused by the gate: another port, another address, loopback spelled otherwise.
    for target in [
        format!("127.0.0.2:{}", port.wrapping_add(1).max(1)),
        format!("127.0.0.1:{other_port}"),
        format!("2130706433:{other_port}"),
        format!("localhost:{other_port}"),
    ] {
        let out = run(&sbx, through_proxy("python3", &target));
        assert!(out.starts_with("HTTP/1.1 403"), "{user:?} {target}: {out}");
        assert!(out.contains("reason=not-listed"), "{user:?} {target}: {out}");
    }
    // No route around the gate: direct TCP to the listed address and to the engine's
    // bridge, UDP anywhere, DNS, and the gate's socket is read-only.
    for (host, port) in [("127.0.0.2", port), ("172.17.0.1", port), ("8.8.8.8", 53)] {
        let out = python(
            &sbx,
            &format!(
                "import socket; socket.create_connection(({host:?}, {port}), 2); print('direct reached')"
            ),
        );
        assert!(!out.contains("direct reached"), "{user:?} {host}: {out}");
    }
    let udp = "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('8.8.8.8', 53)); print('udp sent')";
    assert!(!python(&sbx, udp).contains("udp sent"), "{user:?}");
    let dns = "import socket; socket.getaddrinfo('example.com', 443); print('resolved')";
    assert!(!python(&sbx, dns).contains("resolved"), "{user:?}");
    let replace = "import os; os.unlink('/run/sandboxio-egress/egress.sock'); print('replaced')";
    assert!(!python(&sbx, replace).contains("replaced"), "{user:?}: the gate's socket could be removed");
    assert_eq!(seen.load(Ordering::SeqCst), 1, "the listed canary saw a connection that was refused");
    assert_eq!(other_seen.load(Ordering::SeqCst), 0, "an unlisted destination was reached");
    // The socket still serves after the attempt (the control for the line above).
    let out = run(&sbx, through_proxy("python3", &format!("127.0.0.2:{port}")));
    assert!(out.starts_with("HTTP/1.1 200"), "{user:?}: {out}");
    block_on(sbx.close()).unwrap();
}

#[test]
fn docker_egress__a_listed_address_is_reached_through_the_proxy_and_nothing_else_is() {
    if ready("docker_egress__a_listed_address_is_reached_through_the_proxy_and_nothing_else_is") {
        listed_reached_and_nothing_else(None);
    }
}

#[test]
fn docker_egress__a_root_sandbox_user_has_no_other_way_out() {
    if ready("docker_egress__a_root_sandbox_user_has_no_other_way_out") {
        listed_reached_and_nothing_else(Some("root"));
    }
}

#[test]
fn docker_egress__a_detached_sandboxs_way_out_lasts_while_its_creating_process_does() {
    let test = "egress::docker_egress__a_detached_sandboxs_way_out_lasts_while_its_creating_process_does";
    if egress_support::is_owner_child() || ready(test) {
        let dsn = format!("docker://?image={IMAGE}");
        egress_support::detached_way_out_lasts_while_its_process_does(
            &dsn,
            "python3",
            test,
            |connected| {
                // Its gate's directory (the container's one mount) goes when the sandbox does.
                let gate_dir = mount_source(connected.id());
                assert!(gate_dir.join("egress.sock").exists(), "no gate socket in {}", gate_dir.display());
                gate_dir
            },
            |gate_dir| {
                let mut gone = false;
                for _ in 0..100 {
                    gone = !gate_dir.exists();
                    if gone {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                assert!(gone, "the gate's directory {} outlived its sandbox", gate_dir.display());
            },
        );
    }
}

/// The host directory mounted into container `id` (its gate's directory).
fn mount_source(id: &str) -> std::path::PathBuf {
    let out = std::process::Command::new("docker")
        .args(["inspect", "-f", "{{range .Mounts}}{{.Source}}{{end}}", id])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

#[test]
fn docker_egress__a_backend_that_cannot_relay_refuses_an_allowlist_at_create() {
    // Neither the exec-API path (no sandboxd to relay) nor gVisor (no host socket) declares it.
    let declares = |dsn: &str| {
        let backend = DockerBackend::from_dsn(&sandboxio::dsn::Dsn::parse(dsn).unwrap()).unwrap();
        backend.capabilities().contains(Capabilities::NETWORK_ALLOWLIST)
    };
    for dsn in ["docker://?exec=api", "docker://?runtime=runsc", "docker://?runtime=runsc&exec=sandboxd"] {
        assert!(!declares(dsn), "{dsn}");
    }
    // The control: the default path declares it (a build with sandboxd).
    assert!(declares("docker://"));
    if !ready("docker_egress__a_backend_that_cannot_relay_refuses_an_allowlist_at_create") {
        return;
    }
    let policy = NetworkPolicy::allowlist(["pypi.org"]).unwrap();
    let err = block_on(
        Sandbox::builder(&format!("docker://?image={IMAGE}&exec=api")).unwrap().network(policy).create(),
    )
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityNotSupported, "{err}");
    assert!(err.to_string().contains("NETWORK_ALLOWLIST"), "{err}");
}

#[test]
fn docker_egress__every_gate_decision_is_an_audit_record() {
    if ready("docker_egress__every_gate_decision_is_an_audit_record") {
        egress_support::gate_decisions_are_audit_records(&format!("docker://?image={IMAGE}"), "python3");
    }
}
