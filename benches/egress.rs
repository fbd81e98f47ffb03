//! The egress gate against a direct connection to the same test server, side by side in
//! one run: `cargo bench --bench egress --features local,docker` (docker:// is measured when
//! the engine has `sandboxio/python:2`; else it says so and measures `local://` only).
//!
//! A TCP server sends as many bytes as each connection asks for. For each target, one
//! Python client in one sandbox measures itself (`iter_custom`: the time is the client's
//! own, from before its connect to its last byte, so the interpreter's start is not
//! counted):
//! - `direct`: a sandbox under `allow_all()`, connecting straight to the server;
//! - `gate`: a sandbox under an allowlist naming the server, through the proxy it is given
//!   (`sandboxd relay` accepts the client and hands its socket over to the gate, which
//!   dials the server and splices the two sockets): a `CONNECT`, then the same request.
//!
//! Targets: `local` and `docker`, with the server on the host's loopback (the docker
//! bridge's gateway for `direct` from a container); and, on demand, `local-link`: the server
//! on sandboxio's test network (`scripts/testnet up`, root) behind a link shaped to
//! [`LINK_RATE`] (`SANDBOXIO_BENCH_LINK=1`, rate from `SANDBOXIO_BENCH_LINK_RATE`), the shape
//! of a download from a package index.
//!
//! Groups: `ttfb` (connect to first byte of a 1-byte answer) and `download_100MB`
//! (throughput of a 100 MB answer); after each download group, the CPU seconds per GB the
//! client and this process (server and gate) spent, direct and through the gate. The
//! issue's target: `gate` at least 80% of `direct`'s throughput, so that the gate is not the
//! bottleneck of a package install.
//!
//! What loopback shows: `direct` there is one TCP connection at memory speed, so on the
//! 2-core machines the project runs on its rate follows the CPU each byte costs. Through the
//! gate a byte crosses two TCP connections (client to relay's listener, gate to server):
//! the copies into and out of user space are the same (the gate splices), but the kernel's
//! TCP work is done twice, and the CPU figure shows it (gate about twice direct's CPU per
//! GB, so about half its loopback rate when the cores are the limit). Over a link slower
//! than the gate's own rate (hundreds of MiB/s on loopback), both run at the link's rate:
//! that is `local-link`.

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
/// summed over the connections, and the CPU seconds the client spent on them.
fn client(host: &str, port: u16, count: u64, size: u64) -> Command {
    Command::new("python3").arg("-c").arg(format!(
        r#"import os, socket, time
proxy = os.environ.get("HTTPS_PROXY", "")
first = total = 0.0
cpu = sum(os.times()[:2])
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
print(first, total, sum(os.times()[:2]) - cpu)"#
    ))
}

/// What one run of the client measured: times summed over its connections, and the CPU
/// seconds spent on them by the client and by this process (the server's thread and, for
/// the gate's runs, the gate's).
struct Measured {
    first: Duration,
    total: Duration,
    cpu: f64,
}

/// Runs the client in `sbx`.
fn measure(rt: &tokio::runtime::Runtime, sbx: &Sandbox, command: Command) -> Measured {
    let before = own_cpu();
    let out = rt.block_on(sbx.run(command.timeout(Duration::from_mins(10)))).unwrap();
    let ours = own_cpu() - before;
    assert!(out.success(), "{}", out.stderr_lossy());
    let said = out.stdout_lossy();
    let mut fields = said.split_whitespace().map(|f| f.parse::<f64>().unwrap());
    let (first, total, client) = (fields.next().unwrap(), fields.next().unwrap(), fields.next().unwrap());
    Measured {
        first: Duration::from_secs_f64(first),
        total: Duration::from_secs_f64(total),
        cpu: client + ours,
    }
}

/// This process's CPU seconds so far (user and system, from `/proc/self/stat`, in the
/// kernel's 100 Hz ticks).
fn own_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The fields after the command's parenthesised name; utime and stime are the 14th and
    // 15th of the line.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// A backend measured: its DSN, the host its sandboxes reach the server at directly, the
/// host the gate dials for them, and the server's port.
struct Target {
    name: &'static str,
    dsn: &'static str,
    direct_host: String,
    gate_host: String,
    port: u16,
}

/// The rate the shaped link of the `local-link` target carries (`tc`'s units), unless
/// `SANDBOXIO_BENCH_LINK_RATE` says otherwise: faster than a package index serves one
/// download.
const LINK_RATE: &str = "1gbit";

/// The port of the download server the `local-link` target starts on the test network.
const LINK_PORT: u16 = 9100;

/// The same server as [`server`], in Python, for the test network's namespace.
const LINK_SERVER: &str = r#"import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
block = memoryview(b"x" * (1 << 20))
def serve(c):
    req = b""
    while not req.endswith(b"\n") and len(req) < 64:
        b = c.recv(1)
        if not b: return
        req += b
    left = int(req.split()[1])
    try:
        while left > 0:
            n = min(left, len(block)); c.sendall(block[:n]); left -= n
    except OSError: pass
    c.close()
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// The test network's web host behind a shaped link, while it lives: a download server in
/// the network's namespace and a `tbf` qdisc on the namespace's side of the veth, both gone
/// when dropped.
struct Link {
    server: std::process::Child,
    device: String,
}

impl Link {
    /// With `SANDBOXIO_BENCH_LINK=1`, as root, with the test network up (`scripts/testnet
    /// up`): the shaped link and its host's address. Else `None`, saying why.
    fn start() -> Option<(Link, String)> {
        if std::env::var_os("SANDBOXIO_BENCH_LINK").is_none_or(|v| v != "1") {
            eprintln!(
                "[skip] local-link in the egress benchmark: set SANDBOXIO_BENCH_LINK=1 (root, scripts/testnet up)"
            );
            return None;
        }
        let conf = std::fs::read_to_string("/run/sandboxio-testnet/net.conf").ok()?;
        let host = conf.lines().find_map(|l| l.strip_prefix("web_addr="))?.to_owned();
        let ns = "sandboxio-testnet";
        let links = std::process::Command::new("ip").args(["-n", ns, "-o", "link", "show"]).output().ok()?;
        // The namespace's one veth: the link that is not loopback.
        let device = String::from_utf8_lossy(&links.stdout)
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|name| name.split('@').next().unwrap_or(name).to_owned())
            .find(|name| name != "lo")?;
        let rate = std::env::var("SANDBOXIO_BENCH_LINK_RATE").unwrap_or_else(|_| LINK_RATE.to_owned());
        let shaped = std::process::Command::new("ip")
            .args([
                "netns", "exec", ns, "tc", "qdisc", "replace", "dev", &device, "root", "tbf", "rate", &rate,
            ])
            .args(["burst", "256kb", "latency", "50ms"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(shaped, "could not shape {device} in {ns} (tc, root?)");
        let server = std::process::Command::new("ip")
            .args(["netns", "exec", ns, "python3", "-c", LINK_SERVER, &host, &LINK_PORT.to_string()])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        eprintln!("local-link: the test network's {host} behind {rate} (tbf on {device} in {ns})");
        Some((Link { server, device }, host))
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::process::Command::new("ip")
            .args(["netns", "exec", "sandboxio-testnet", "tc", "qdisc", "del", "dev", &self.device, "root"])
            .status();
    }
}

fn targets(port: u16, link: Option<&str>) -> Vec<Target> {
    let mut targets = vec![Target {
        name: "local",
        dsn: "local://",
        direct_host: "127.0.0.1".into(),
        gate_host: "127.0.0.1".into(),
        port,
    }];
    if let Some(host) = link {
        targets.push(Target {
            name: "local-link",
            dsn: "local://",
            direct_host: host.to_owned(),
            gate_host: host.to_owned(),
            port: LINK_PORT,
        });
    }
    // The bridge's gateway, as the engine reports it or (engines that leave it out of the
    // network's IPAM settings, as Debian's 20.10 does) as docker0's own address.
    let output = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .filter(|text| !text.is_empty())
    };
    let gateway = output(
        "docker",
        &["network", "inspect", "bridge", "-f", "{{range .IPAM.Config}}{{.Gateway}}{{end}}"],
    )
    .or_else(|| {
        let docker0 = output("ip", &["-4", "-o", "addr", "show", "docker0"])?;
        let cidr = docker0.split_whitespace().skip_while(|w| *w != "inet").nth(1)?;
        Some(cidr.split('/').next()?.to_owned())
    });
    let image = std::process::Command::new("docker")
        .args(["image", "inspect", "sandboxio/python:2"])
        .output()
        .is_ok_and(|o| o.status.success());
    match gateway {
        Some(gateway) if cfg!(feature = "docker") && image => targets.push(Target {
            name: "docker",
            dsn: "docker://?image=sandboxio/python:2",
            direct_host: gateway,
            gate_host: "127.0.0.1".into(),
            port,
        }),
        _ => eprintln!(
            "[skip] docker:// in the egress benchmark: no docker feature, engine or sandboxio/python:2"
        ),
    }
    targets
}

fn egress(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let link = Link::start();
    for target in targets(server(), link.as_ref().map(|(_, host)| host.as_str())) {
        let port = target.port;
        let sandbox = |policy: NetworkPolicy| {
            rt.block_on(Sandbox::builder(target.dsn).unwrap().network(policy).create()).unwrap()
        };
        let direct = sandbox(NetworkPolicy::allow_all());
        let gated = sandbox(NetworkPolicy::allowlist([format!("{}:{port}", target.gate_host)]).unwrap());
        let runs =
            [("direct", &direct, target.direct_host.as_str()), ("gate", &gated, target.gate_host.as_str())];

        let mut group = c.benchmark_group(format!("{}/ttfb", target.name));
        for (name, sbx, host) in runs {
            group.bench_function(name, |b| {
                b.iter_custom(|iters| measure(&rt, sbx, client(host, port, iters, 1)).first);
            });
        }
        group.finish();

        let mut group = c.benchmark_group(format!("{}/download_100MB", target.name));
        group.sample_size(10).throughput(Throughput::Bytes(DOWNLOAD));
        let mut cpu_per_gb = Vec::new();
        for (name, sbx, host) in runs {
            let spent = std::cell::Cell::new((0.0f64, 0u64));
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let m = measure(&rt, sbx, client(host, port, iters, DOWNLOAD));
                    let (cpu, bytes) = spent.get();
                    spent.set((cpu + m.cpu, bytes + iters * DOWNLOAD));
                    m.total
                });
            });
            let (cpu, bytes) = spent.get();
            #[expect(clippy::cast_precision_loss, reason = "a figure to print")]
            cpu_per_gb.push((name, cpu / (bytes as f64 / 1e9)));
        }
        group.finish();
        // The CPU each byte costs decides the rate when the cores are busy (a loaded machine,
        // or 2 cores shared by server, client and gate): the load-independent figure.
        let (direct_cpu, gate_cpu) = (cpu_per_gb[0].1, cpu_per_gb[1].1);
        // (A group left out by a filter measured nothing.)
        if direct_cpu.is_finite() && gate_cpu.is_finite() {
            eprintln!(
                "{}/download_100MB CPU: direct {direct_cpu:.3} s/GB, gate {gate_cpu:.3} s/GB (client and this process); direct/gate {:.2}",
                target.name,
                direct_cpu / gate_cpu
            );
        }
        for sbx in [direct, gated] {
            rt.block_on(sbx.close()).unwrap();
        }
    }
}

criterion_group!(benches, egress);
criterion_main!(benches);
