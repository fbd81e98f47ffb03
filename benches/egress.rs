//! The egress gate against a direct connection to the same test server, side by side in
//! one run: `cargo bench --bench egress --features local,docker` (docker:// is measured when
//! the engine has `sandboxio/python:2`; else it says so and measures `local://` only).
//!
//! A TCP server on the host sends as many bytes as each connection asks for. For each
//! backend, one Python client in one sandbox measures itself (`iter_custom`: the time is
//! the client's own, from before its connect to its last byte, so the interpreter's start
//! is not counted):
//! - `direct`: a sandbox under `allow_all()`, connecting straight to the server;
//! - `gate`: a sandbox under an allowlist naming the server, through the proxy it is given
//!   (sandboxd's relay, the gate's Unix socket, the gate's dial): a `CONNECT`, then the
//!   same request.
//!
//! Groups: `ttfb` (connect to first byte of a 1-byte answer) and `download_100MB`
//! (throughput of a 100 MB answer). The issue's target: `gate` at least 80% of `direct`'s
//! throughput.
//!
//! What loopback can show: `direct` here is the kernel's loopback with nothing between the
//! two ends, so on a machine whose cores are all busy its rate follows the CPU each byte
//! costs, and any relay in user space (the gate's, or one hop of any design) at least doubles
//! that cost. `scripts/egress-hop-cost` counts it: on the 2-core machines the project runs
//! on, the gate's path and a single TCP-to-TCP hop both predicted 0.4 to 0.5 of direct, as
//! this benchmark measured. The gate's own rate (hundreds of MiB/s) is what decides whether it
//! slows a package install, whose downloads come over a network far slower than loopback.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sandboxio::{Command, NetworkPolicy, Sandbox};

const DOWNLOAD: u64 = 100 * 1000 * 1000;

/// A server on every host address that answers `GET <n>\n` with `n` bytes.
fn server() -> u16 {
    let listener = TcpListener::bind(("0.0.0.0", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\n") && request.len() < 64 {
                    if conn.read(&mut byte).unwrap_or(0) == 0 {
                        return;
                    }
                    request.push(byte[0]);
                }
                let text = String::from_utf8_lossy(&request);
                let mut left: u64 =
                    text.trim().strip_prefix("GET ").and_then(|n| n.parse().ok()).unwrap_or(0);
                let block = vec![b'x'; 1 << 20];
                while left > 0 {
                    let n = usize::try_from(left.min(block.len() as u64)).unwrap();
                    if conn.write_all(&block[..n]).is_err() {
                        return;
                    }
                    left -= n as u64;
                }
            });
        }
    });
    port
}

/// The client: `count` connections to `host:port` (through `$HTTPS_PROXY` when set), each
/// asking for `size` bytes; prints the seconds from connect to first byte and to last byte,
/// summed over the connections.
fn client(host: &str, port: u16, count: u64, size: u64) -> Command {
    Command::new("python3").arg("-c").arg(format!(
        r#"import os, socket, time
proxy = os.environ.get("HTTPS_PROXY", "")
first = total = 0.0
for _ in range({count}):
    t0 = time.perf_counter()
    if proxy:
        h, p = proxy.split("://", 1)[1].rstrip("/").rsplit(":", 1)
        c = socket.create_connection((h, int(p)))
        c.sendall(b"CONNECT {host}:{port} HTTP/1.1\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += c.recv(1)
        assert head.startswith(b"HTTP/1.1 200"), head
    else:
        c = socket.create_connection(({host:?}, {port}))
    c.sendall(b"GET {size}\n")
    got = len(c.recv(1 << 20))
    first += time.perf_counter() - t0
    while got < {size}:
        n = len(c.recv(1 << 20))
        assert n, "short"
        got += n
    total += time.perf_counter() - t0
    c.close()
print(first, total)"#
    ))
}

/// Runs the client in `sbx` and returns (time to first byte, total), summed.
fn measure(rt: &tokio::runtime::Runtime, sbx: &Sandbox, command: Command) -> (Duration, Duration) {
    let out = rt.block_on(sbx.run(command.timeout(Duration::from_mins(10)))).unwrap();
    assert!(out.success(), "{}", out.stderr_lossy());
    let said = out.stdout_lossy();
    let mut fields = said.split_whitespace().map(|f| f.parse::<f64>().unwrap());
    let (first, total) = (fields.next().unwrap(), fields.next().unwrap());
    (Duration::from_secs_f64(first), Duration::from_secs_f64(total))
}

/// A backend measured: its DSN, the host its sandboxes reach the server at directly, and
/// the host the gate dials for them.
struct Target {
    name: &'static str,
    dsn: &'static str,
    direct_host: String,
    gate_host: &'static str,
}

fn targets() -> Vec<Target> {
    let mut targets = vec![Target {
        name: "local",
        dsn: "local://",
        direct_host: "127.0.0.1".into(),
        gate_host: "127.0.0.1",
    }];
    let gateway = std::process::Command::new("docker")
        .args(["network", "inspect", "bridge", "-f", "{{(index .IPAM.Config 0).Gateway}}"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let image = std::process::Command::new("docker")
        .args(["image", "inspect", "sandboxio/python:2"])
        .output()
        .is_ok_and(|o| o.status.success());
    match gateway {
        Some(gateway) if cfg!(feature = "docker") && image => targets.push(Target {
            name: "docker",
            dsn: "docker://?image=sandboxio/python:2",
            direct_host: gateway,
            gate_host: "127.0.0.1",
        }),
        _ => eprintln!(
            "[skip] docker:// in the egress benchmark: no docker feature, engine or sandboxio/python:2"
        ),
    }
    targets
}

fn egress(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let port = server();
    for target in targets() {
        let sandbox = |policy: NetworkPolicy| {
            rt.block_on(Sandbox::builder(target.dsn).unwrap().network(policy).create()).unwrap()
        };
        let direct = sandbox(NetworkPolicy::allow_all());
        let gated = sandbox(NetworkPolicy::allowlist([format!("{}:{port}", target.gate_host)]).unwrap());
        let runs = [("direct", &direct, target.direct_host.as_str()), ("gate", &gated, target.gate_host)];

        let mut group = c.benchmark_group(format!("{}/ttfb", target.name));
        for (name, sbx, host) in runs {
            group.bench_function(name, |b| {
                b.iter_custom(|iters| measure(&rt, sbx, client(host, port, iters, 1)).0);
            });
        }
        group.finish();

        let mut group = c.benchmark_group(format!("{}/download_100MB", target.name));
        group.sample_size(10).throughput(Throughput::Bytes(DOWNLOAD));
        for (name, sbx, host) in runs {
            group.bench_function(name, |b| {
                b.iter_custom(|iters| measure(&rt, sbx, client(host, port, iters, DOWNLOAD)).1);
            });
        }
        group.finish();
        for sbx in [direct, gated] {
            rt.block_on(sbx.close()).unwrap();
        }
    }
}

criterion_group!(benches, egress);
criterion_main!(benches);
