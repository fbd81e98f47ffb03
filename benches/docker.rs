//! `docker://` against raw bollard, side by side in one run (`cargo bench --bench docker
//! --features docker`). Needs an engine and `sandboxio/busybox:1`
//! (`scripts/build-images busybox`).
//!
//! Every group measures sandboxio on its sandboxd path (the default), and where it applies
//! on its exec-API path (`exec=api`) and raw bollard, in the same run:
//!
//! - `exec_round_trip`: `run(true)`; raw: bollard's create/start/drain/inspect exec on the
//!   same container;
//! - `write_read_1kib`: `fs().write` then `fs().read` of 1 KiB;
//! - `create_exec_kill`: builder → `create` → `run(true)` → `kill` vs the raw sequence
//!   (create, start, exec, remove), on the busybox image; `create_exec_kill_default_image`
//!   the same on the default image (`sandboxio/python:2`, `scripts/build-images python`);
//! - `concurrent_20`: 20 sandboxes created, used and closed at once through sandboxio (and the
//!   engine checked for leaks afterwards);
//! - `stream_100mb`: 100 MB of stdout streamed through sandboxio vs drained raw;
//! - `concurrent_execs`: 256 `run(true)` on one sandbox (sandboxd path), 16, 64 and 256 at
//!   once, in commands per second (the twin of `benches/local.rs`'s; issue #28's target: the
//!   rate at 64 at least the rate at 16).
//! - `files_100mb`: `fs().write` (`upload/…`) and `fs().read` (`download/…`) of a 100 MB
//!   file, against `docker cp` of the same bytes to and from the same directory of the same
//!   container (issue #28's target: the sandboxd path within 1.1× of `docker cp`).
//!
//! On a shared, loaded machine criterion's consecutive samples drift with the load between
//! one path and the next. `SANDBOXIO_BENCH_INTERLEAVED=N` runs N rounds instead, each round
//! one iteration of every path in turn (the stream and the creates), and prints each path's
//! median and its ratio to the others.

use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, ExecConfig, HostConfig};
use bollard::query_parameters::RemoveContainerOptions;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use futures_lite::StreamExt as _;
use sandboxio::{Command, NetworkPolicy, Sandbox};

const IMAGE: &str = "sandboxio/busybox:1";
const DSN: &str = "docker://?image=sandboxio/busybox:1";
const DSN_EXEC_API: &str = "docker://?image=sandboxio/busybox:1&exec=api";
const DEFAULT_IMAGE: &str = sandboxio::backends::docker::DEFAULT_IMAGE;
const HUNDRED_MB: &str = "head -c 100000000 /dev/zero";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

async fn raw_client() -> Docker {
    Docker::connect_with_socket_defaults().unwrap().negotiate_version().await.unwrap()
}

/// One raw exec: create, start attached, drain, inspect. Returns the stdout byte count.
async fn raw_exec(docker: &Docker, id: &str, cmd: &[&str]) -> usize {
    let exec = docker
        .create_exec(
            id,
            ExecConfig {
                cmd: Some(cmd.iter().map(|s| (*s).to_owned()).collect()),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut bytes = 0;
    if let bollard::exec::StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&exec.id, None).await.unwrap()
    {
        while let Some(frame) = output.next().await {
            if let LogOutput::StdOut { message } = frame.unwrap() {
                bytes += message.len();
            }
        }
    }
    while docker.inspect_exec(&exec.id).await.unwrap().running == Some(true) {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    bytes
}

async fn raw_create(docker: &Docker, image: &str) -> String {
    let body = ContainerCreateBody {
        image: Some(image.into()),
        cmd: Some(vec!["sleep".into(), "600".into()]),
        host_config: Some(HostConfig {
            init: Some(true),
            auto_remove: Some(true),
            network_mode: Some("none".into()),
            cap_drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = docker.create_container(None, body).await.unwrap().id;
    docker.start_container(&id, None).await.unwrap();
    id
}

async fn raw_remove(docker: &Docker, id: &str) {
    docker
        .remove_container(id, Some(RemoveContainerOptions { force: true, ..Default::default() }))
        .await
        .unwrap();
}

async fn sandbox() -> Sandbox {
    sandbox_at(DSN).await
}

async fn sandbox_at(dsn: &str) -> Sandbox {
    Sandbox::builder(dsn).unwrap().network(NetworkPolicy::deny_all()).create().await.unwrap()
}

fn available(image: &str) -> bool {
    std::process::Command::new("docker")
        .args(["image", "inspect", image])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn benches(c: &mut Criterion) {
    if !available(IMAGE) {
        eprintln!("[skip] docker benchmarks: no engine with {IMAGE} (scripts/build-images busybox)");
        return;
    }
    let rt = runtime();
    let docker = rt.block_on(raw_client());
    if let Some(rounds) = std::env::var("SANDBOXIO_BENCH_INTERLEAVED").ok().and_then(|n| n.parse().ok()) {
        interleaved(&rt, &docker, rounds);
        return;
    }
    per_command(c, &rt, &docker);
    per_sandbox(c, &rt, &docker);
    let left = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", "label=io.sandboxio.managed=true"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(left.trim().is_empty(), "sandboxio containers left after the benchmarks: {left}");
    eprintln!("leak check: no sandboxio container left");
}

/// The groups that reuse one sandbox per path: a command, a file round trip, a stream.
fn per_command(c: &mut Criterion, rt: &tokio::runtime::Runtime, docker: &Docker) {
    let sb = rt.block_on(sandbox());
    let api = rt.block_on(sandbox_at(DSN_EXEC_API));
    let id = sb.id().to_owned();
    let paths = [("sandboxd", &sb), ("exec_api", &api)];

    let mut group = c.benchmark_group("exec_round_trip");
    group.sample_size(30);
    for (name, sb) in paths {
        group.bench_function(name, |b| {
            b.iter(|| rt.block_on(async { assert!(sb.run(Command::new("true")).await.unwrap().success()) }));
        });
    }
    group.bench_function("raw_bollard", |b| b.iter(|| rt.block_on(raw_exec(docker, &id, &["true"]))));
    group.finish();

    let mut group = c.benchmark_group("write_read_1kib");
    group.sample_size(20);
    for (name, sb) in paths {
        group.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    sb.fs().write("bench.bin", vec![7u8; 1024]).await.unwrap();
                    assert_eq!(sb.fs().read("bench.bin").await.unwrap().len(), 1024);
                });
            });
        });
    }
    group.finish();

    let mut group = c.benchmark_group("stream_100mb");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    for (name, sb) in paths {
        group.bench_function(name, |b| b.iter(|| stream_100mb(rt, sb)));
    }
    group.bench_function("raw_bollard", |b| {
        b.iter(|| {
            rt.block_on(async {
                assert_eq!(raw_exec(docker, &id, &["sh", "-c", HUNDRED_MB]).await, 100_000_000);
            });
        });
    });
    group.finish();

    files_100mb(c, rt, paths);

    let mut group = c.benchmark_group("concurrent_execs");
    group.sample_size(10);
    group.throughput(criterion::Throughput::Elements(BURST as u64));
    let shared = std::sync::Arc::new(sb);
    for at_once in [16, 64, 256] {
        group.bench_function(format!("sandboxd/{at_once}"), |b| {
            b.iter(|| rt.block_on(burst(&shared, at_once)));
        });
    }
    group.finish();
    rt.block_on(std::sync::Arc::into_inner(shared).unwrap().close()).unwrap();
    rt.block_on(api.close()).unwrap();
}

/// Commands per `concurrent_execs` iteration.
const BURST: usize = 256;

/// Runs [`BURST`] `run(true)` on `sandbox`, `at_once` at a time.
async fn burst(sandbox: &std::sync::Arc<Sandbox>, at_once: usize) {
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(at_once));
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

/// The bytes of `files_100mb`.
const FILE_BYTES: usize = 100_000_000;

/// 100 MB up and down through each path, and through `docker cp` (the CLI, as a user would
/// copy) into the same directory of the first path's container.
fn files_100mb(c: &mut Criterion, rt: &tokio::runtime::Runtime, paths: [(&str, &Sandbox); 2]) {
    let data: Vec<u8> = (0..=250u8).cycle().take(FILE_BYTES).collect();
    let (_, first) = paths[0];
    let id = first.id().to_owned();
    let pwd = rt.block_on(first.run(Command::new("pwd"))).unwrap();
    let dir = String::from_utf8(pwd.stdout).unwrap().trim().to_owned();
    let host = std::env::temp_dir().join(format!("sandboxio-bench-cp-{}", std::process::id()));
    std::fs::create_dir_all(&host).unwrap();
    let (up, down) = (host.join("up.bin"), host.join("down.bin"));
    std::fs::write(&up, &data).unwrap();
    let cp = |from: &str, to: &str| {
        let out = std::process::Command::new("docker").args(["cp", "-q", from, to]).output().unwrap();
        assert!(out.status.success(), "docker cp: {}", String::from_utf8_lossy(&out.stderr));
    };

    let mut group = c.benchmark_group("files_100mb");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    for (name, sb) in paths {
        group.bench_function(format!("upload/{name}"), |b| {
            b.iter_batched(
                || data.clone(),
                |bytes| rt.block_on(sb.fs().write("bench-100mb.bin", bytes)).unwrap(),
                BatchSize::PerIteration,
            );
        });
    }
    let target = format!("{id}:{dir}/bench-cp.bin");
    group.bench_function("upload/docker_cp", |b| b.iter(|| cp(up.to_str().unwrap(), &target)));
    for (name, sb) in paths {
        group.bench_function(format!("download/{name}"), |b| {
            b.iter(|| {
                let back =
                    rt.block_on(sb.fs().read_limit(FILE_BYTES as u64).read("bench-100mb.bin")).unwrap();
                assert_eq!(back.len(), FILE_BYTES);
            });
        });
    }
    group.bench_function("download/docker_cp", |b| {
        b.iter(|| {
            cp(&target, down.to_str().unwrap());
            assert_eq!(std::fs::metadata(&down).unwrap().len(), FILE_BYTES as u64);
        });
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&host);
}

/// Streams 100 MB of stdout through `sb` and counts it.
fn stream_100mb(rt: &tokio::runtime::Runtime, sb: &Sandbox) {
    rt.block_on(async {
        let mut stream = sb.stream(Command::shell(HUNDRED_MB)).unwrap();
        let mut bytes = 0;
        while let Some(chunk) = stream.next().await {
            bytes += chunk.unwrap().data.len();
        }
        assert_eq!(bytes, 100_000_000);
    });
}

/// The groups that create a sandbox per iteration.
fn per_sandbox(c: &mut Criterion, rt: &tokio::runtime::Runtime, docker: &Docker) {
    create_exec_kill(c, rt, docker, "create_exec_kill", IMAGE);
    if available(DEFAULT_IMAGE) {
        create_exec_kill(c, rt, docker, "create_exec_kill_default_image", DEFAULT_IMAGE);
    } else {
        eprintln!("[skip] create_exec_kill_default_image: no {DEFAULT_IMAGE} (scripts/build-images python)");
    }

    let mut group = c.benchmark_group("concurrent_20");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(30));
    group.bench_function("sandboxio", |b| {
        b.iter(|| {
            rt.block_on(async {
                let work: Vec<_> = (0..20)
                    .map(|i| {
                        tokio::spawn(async move {
                            let sb = sandbox().await;
                            let out = sb.run(Command::new("echo").arg(i.to_string())).await.unwrap();
                            assert_eq!(out.stdout, format!("{i}\n").as_bytes());
                            sb.close().await.unwrap();
                        })
                    })
                    .collect();
                for task in work {
                    task.await.unwrap();
                }
            });
        });
    });
    group.finish();
}

/// builder → `create` → `run(true)` → `kill` on `image` through both paths, and the raw
/// sequence (create, start, exec, remove) beside them.
fn create_exec_kill(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    docker: &Docker,
    group: &str,
    image: &str,
) {
    let mut group = c.benchmark_group(group);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(15));
    for (name, option) in [("sandboxd", ""), ("exec_api", "&exec=api")] {
        let dsn = format!("docker://?image={image}{option}");
        group.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    let sb = sandbox_at(&dsn).await;
                    assert!(sb.run(Command::new("true")).await.unwrap().success());
                    sb.kill().await.unwrap();
                });
            });
        });
    }
    group.bench_function("raw_bollard", |b| {
        b.iter(|| {
            rt.block_on(async {
                let id = raw_create(docker, image).await;
                raw_exec(docker, &id, &["true"]).await;
                raw_remove(docker, &id).await;
            });
        });
    });
    group.finish();
}

/// `rounds` rounds of one iteration per path, in turn (see the module docs); prints medians.
fn interleaved(rt: &tokio::runtime::Runtime, docker: &Docker, rounds: usize) {
    let time = |work: &mut dyn FnMut()| {
        let started = std::time::Instant::now();
        work();
        started.elapsed()
    };
    let report = |what: &str, names: &[&str], samples: &[Vec<Duration>]| {
        let medians: Vec<Duration> = samples
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s.sort();
                s[s.len() / 2]
            })
            .collect();
        let figures: Vec<String> = names.iter().zip(&medians).map(|(n, m)| format!("{n} {m:.2?}")).collect();
        let ratios: Vec<String> = names[1..]
            .iter()
            .zip(&medians[1..])
            .map(|(n, m)| format!("{:.2}x {n}", medians[0].as_secs_f64() / m.as_secs_f64()))
            .collect();
        println!(
            "{what}: medians of {rounds}: {}; {} is {}",
            figures.join(", "),
            names[0],
            ratios.join(", ")
        );
    };
    let sb = rt.block_on(sandbox());
    let api = rt.block_on(sandbox_at(DSN_EXEC_API));
    let id = sb.id().to_owned();
    let stream = |sb: &Sandbox| stream_100mb(rt, sb);
    let mut samples = vec![Vec::new(); 3];
    for _ in 0..rounds {
        samples[0].push(time(&mut || stream(&sb)));
        samples[1].push(time(&mut || stream(&api)));
        samples[2].push(time(&mut || {
            assert_eq!(rt.block_on(raw_exec(docker, &id, &["sh", "-c", HUNDRED_MB])), 100_000_000);
        }));
    }
    report("stream_100mb", &["sandboxd", "exec_api", "raw_bollard"], &samples);
    rt.block_on(sb.close()).unwrap();
    rt.block_on(api.close()).unwrap();
    for image in [IMAGE, DEFAULT_IMAGE] {
        let mut samples = vec![Vec::new(); 3];
        for _ in 0..rounds {
            for (i, option) in ["", "&exec=api"].into_iter().enumerate() {
                let dsn = format!("docker://?image={image}{option}");
                samples[i].push(time(&mut || {
                    rt.block_on(async {
                        let sb = sandbox_at(&dsn).await;
                        assert!(sb.run(Command::new("true")).await.unwrap().success());
                        sb.kill().await.unwrap();
                    });
                }));
            }
            samples[2].push(time(&mut || {
                rt.block_on(async {
                    let id = raw_create(docker, image).await;
                    raw_exec(docker, &id, &["true"]).await;
                    raw_remove(docker, &id).await;
                });
            }));
        }
        report(&format!("create_exec_kill {image}"), &["sandboxd", "exec_api", "raw_bollard"], &samples);
    }
}

criterion_group!(docker, benches);
criterion_main!(docker);
