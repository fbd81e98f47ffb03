//! `local://` side by side with `docker://` in one run:
//! `cargo bench --bench local --features local,docker` (without `docker`, or without an
//! engine and `sandboxio/busybox:1`, only `local://` is measured, and it says so).
//!
//! - `create_exec_kill`: builder → `create` → `run(true)` → `kill`;
//! - `exec_round_trip`: `run(true)` on a live sandbox, next to `bare_bwrap`: one bare
//!   `bwrap --unshare-all` running `true` per iteration (the baseline for `local://`, which
//!   pays one `bwrap` per sandbox, not per command);
//! - `write_read_1kib`: `fs().write` then `fs().read` of 1 KiB on a live sandbox;
//! - `concurrent_execs`: 256 `run(true)` on one live sandbox, 16, 64 and 256 at once, in
//!   commands per second (issue #28's target: the rate at 64 at least the rate at 16);
//! - `files_100mb`: `fs().write` (`upload/…`) and `fs().read` (`download/…`) of a 100 MB
//!   file, next to `host`: `std::fs::write` and `std::fs::read` of the same bytes in a
//!   directory of the host's temporary directory (where `local://` keeps its workspaces;
//!   issue #28's target: `local://` within 2× of it).

use std::time::Duration;

use std::sync::Arc;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use sandboxio::{Command, NetworkPolicy, Sandbox};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// The DSNs measured: `local://`, and `docker://` when it can run here.
fn dsns() -> Vec<&'static str> {
    let mut dsns = vec!["local://"];
    let docker_ready = cfg!(feature = "docker")
        && std::process::Command::new("docker")
            .args(["image", "inspect", "sandboxio/busybox:1"])
            .output()
            .is_ok_and(|o| o.status.success());
    if docker_ready {
        dsns.push("docker://?image=sandboxio/busybox:1");
    } else {
        eprintln!(
            "[skip] docker:// in the local benchmark: no docker feature, engine or sandboxio/busybox:1"
        );
    }
    dsns
}

async fn sandbox(dsn: &str) -> Sandbox {
    Sandbox::builder(dsn).unwrap().network(NetworkPolicy::deny_all()).create().await.unwrap()
}

fn name(dsn: &str) -> &str {
    dsn.split("://").next().unwrap_or(dsn)
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let dsns = dsns();

    let mut group = c.benchmark_group("create_exec_kill");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    for dsn in &dsns {
        group.bench_function(name(dsn), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let sb = sandbox(dsn).await;
                    assert!(sb.run(Command::new("true")).await.unwrap().success());
                    sb.kill().await.unwrap();
                });
            });
        });
    }
    group.finish();

    let mut group = c.benchmark_group("exec_round_trip");
    group.sample_size(30);
    for dsn in &dsns {
        let sb = rt.block_on(sandbox(dsn));
        group.bench_function(name(dsn), |b| {
            b.iter(|| rt.block_on(async { assert!(sb.run(Command::new("true")).await.unwrap().success()) }));
        });
        rt.block_on(sb.close()).unwrap();
    }
    group.bench_function("bare_bwrap", |b| b.iter(|| assert!(bare_bwrap().success())));
    group.finish();

    let mut group = c.benchmark_group("concurrent_execs");
    group.sample_size(10);
    group.throughput(Throughput::Elements(BURST as u64));
    for dsn in &dsns {
        let sb = Arc::new(rt.block_on(sandbox(dsn)));
        for at_once in [16, 64, 256] {
            group.bench_function(format!("{}/{at_once}", name(dsn)), |b| {
                b.iter(|| rt.block_on(burst(&sb, at_once)));
            });
        }
        rt.block_on(Arc::into_inner(sb).unwrap().close()).unwrap();
    }
    group.finish();

    let mut group = c.benchmark_group("write_read_1kib");
    group.sample_size(20);
    for dsn in &dsns {
        let sb = rt.block_on(sandbox(dsn));
        group.bench_function(name(dsn), |b| {
            b.iter(|| {
                rt.block_on(async {
                    sb.fs().write("bench.bin", vec![7u8; 1024]).await.unwrap();
                    assert_eq!(sb.fs().read("bench.bin").await.unwrap().len(), 1024);
                });
            });
        });
        rt.block_on(sb.close()).unwrap();
    }
    group.finish();

    files_100mb(c, &rt, &dsns);
}

/// The bytes of `files_100mb`.
const FILE_BYTES: usize = 100_000_000;

fn files_100mb(c: &mut Criterion, rt: &tokio::runtime::Runtime, dsns: &[&str]) {
    let data: Vec<u8> = (0..=250u8).cycle().take(FILE_BYTES).collect();
    let mut group = c.benchmark_group("files_100mb");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(15));
    for dsn in dsns {
        let sb = rt.block_on(sandbox(dsn));
        group.bench_function(format!("upload/{}", name(dsn)), |b| {
            b.iter_batched(
                || data.clone(),
                |bytes| rt.block_on(sb.fs().write("bench-100mb.bin", bytes)).unwrap(),
                BatchSize::PerIteration,
            );
        });
        group.bench_function(format!("download/{}", name(dsn)), |b| {
            b.iter(|| {
                let back =
                    rt.block_on(sb.fs().read_limit(FILE_BYTES as u64).read("bench-100mb.bin")).unwrap();
                assert_eq!(back.len(), FILE_BYTES);
            });
        });
        rt.block_on(sb.close()).unwrap();
    }
    let host = std::env::temp_dir().join(format!("sandboxio-bench-host-{}", std::process::id()));
    std::fs::create_dir_all(&host).unwrap();
    let file = host.join("bench-100mb.bin");
    group.bench_function("upload/host", |b| {
        b.iter_batched(
            || data.clone(),
            |bytes| std::fs::write(&file, bytes).unwrap(),
            BatchSize::PerIteration,
        );
    });
    group.bench_function("download/host", |b| {
        b.iter(|| assert_eq!(std::fs::read(&file).unwrap().len(), FILE_BYTES));
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&host);
}

/// Commands per `concurrent_execs` iteration.
const BURST: usize = 256;

/// Runs [`BURST`] `run(true)` on `sandbox`, `at_once` at a time.
async fn burst(sandbox: &Arc<Sandbox>, at_once: usize) {
    let gate = Arc::new(tokio::sync::Semaphore::new(at_once));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..BURST {
        let (gate, sandbox) = (gate.clone(), sandbox.clone());
        tasks.spawn(async move {
            let _place = gate.acquire_owned().await.unwrap();
            assert!(sandbox.run(Command::new("true")).await.unwrap().success());
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

/// One bare `bwrap --unshare-all` running `true`: the host's `/usr` read-only and the usual
/// `/bin` link, nothing else (bench-only; what a fresh sandbox per command costs at least).
fn bare_bwrap() -> std::process::ExitStatus {
    std::process::Command::new("bwrap")
        .args(["--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin"])
        .args(["--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--", "/usr/bin/true"])
        .status()
        .unwrap()
}

criterion_group!(local, benches);
criterion_main!(local);
