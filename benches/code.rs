//! A code cell in a warm context against a cold interpreter, side by side in one run:
//! `cargo bench --bench code --features local,docker` (docker:// is measured when the engine
//! has `sandboxio/python:2`, the default image; else it says so and measures `local://` only).
//!
//! For each backend, on one live sandbox:
//! - `warm_context`: `run_code("print(1+1)")` in a context created once (the interpreter
//!   stays up between cells; what an agent's code interpreter pays per cell);
//! - `fresh_cell`: the same cell without a context (a runner started for the cell);
//! - `cold_python`: `run(python3 -c "print(1+1)")`, the baseline: a new interpreter per cell.
//!
//! The target is `warm_context` ≤ 1/10 of `cold_python`.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use sandboxio::{Code, Command, NetworkPolicy, Sandbox};

const CELL: &str = "print(1+1)";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// The DSNs measured: `local://` (the host's `python3`), and `docker://` on the default image
/// when it can run here.
fn dsns() -> Vec<(&'static str, &'static str)> {
    let mut dsns = vec![("local", "local://")];
    let docker_ready = cfg!(feature = "docker")
        && std::process::Command::new("docker")
            .args(["image", "inspect", "sandboxio/python:2"])
            .output()
            .is_ok_and(|o| o.status.success());
    if docker_ready {
        dsns.push(("docker", "docker://?image=sandboxio/python:2"));
    } else {
        eprintln!("[skip] docker:// in the code benchmark: no docker feature, engine or sandboxio/python:2");
    }
    dsns
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    for (name, dsn) in dsns() {
        let sb = rt.block_on(async {
            Sandbox::builder(dsn).unwrap().network(NetworkPolicy::deny_all()).create().await.unwrap()
        });
        let ctx = rt.block_on(sb.create_context("python")).unwrap();
        let mut group = c.benchmark_group(format!("code_cell_{name}"));
        group.sample_size(20);
        group.measurement_time(Duration::from_secs(8));
        group.bench_function("warm_context", |b| {
            b.iter(|| {
                rt.block_on(async {
                    let out = sb.run_code(Code::new(CELL).in_context(&ctx)).await.unwrap();
                    assert_eq!(out.stdout, b"2\n");
                });
            });
        });
        group.bench_function("fresh_cell", |b| {
            b.iter(|| {
                rt.block_on(async {
                    assert_eq!(sb.run_code(CELL).await.unwrap().stdout, b"2\n");
                });
            });
        });
        group.bench_function("cold_python", |b| {
            b.iter(|| {
                rt.block_on(async {
                    let out = sb.run(Command::new("python3").args(["-c", CELL])).await.unwrap();
                    assert_eq!(out.stdout, b"2\n");
                });
            });
        });
        group.finish();
        rt.block_on(sb.close()).unwrap();
    }
}

criterion_group!(code, benches);
criterion_main!(code);
