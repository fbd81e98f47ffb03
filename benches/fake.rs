//! What sandboxio's core costs on top of a backend, measured on the in-memory fake.
//!
//! Each group has a baseline (the backend driven directly through the adapter interface)
//! and the same work through the public API, in the same run; compare them as a ratio.
//!
//! ```text
//! cargo bench --bench fake
//! ```

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use futures_lite::future::block_on;
use sandboxio::backend::{Backend, CreateSpec};
use sandboxio::testing::FakeBackend;
use sandboxio::{Command, NetworkPolicy, Sandbox};

fn cold_start(c: &mut Criterion) {
    let mut group = c.benchmark_group("create_then_close");
    let fake = FakeBackend::new();
    group.bench_function("baseline: adapter create + kill", |b| {
        b.iter(|| {
            block_on(async {
                let handle = fake.create(CreateSpec::new(NetworkPolicy::deny_all())).await.unwrap();
                black_box(handle.kill().await.unwrap());
            });
        });
    });
    group.bench_function("sandboxio: builder + create + close", |b| {
        b.iter(|| {
            block_on(async {
                let sandbox = Sandbox::builder_with(fake.clone())
                    .network(NetworkPolicy::deny_all())
                    .create()
                    .await
                    .unwrap();
                sandbox.close().await.unwrap();
            });
        });
    });
    group.finish();
}

fn exec(c: &mut Criterion) {
    let mut group = c.benchmark_group("run_echo");
    let fake = FakeBackend::new();
    let handle = block_on(fake.create(CreateSpec::new(NetworkPolicy::deny_all()))).unwrap();
    let sandbox =
        block_on(Sandbox::builder_with(fake.clone()).network(NetworkPolicy::deny_all()).create()).unwrap();
    group.bench_function("baseline: adapter run", |b| {
        b.iter(|| black_box(block_on(handle.run(Command::new("echo").arg("hi"))).unwrap()));
    });
    group.bench_function("sandboxio: Sandbox::run", |b| {
        b.iter(|| black_box(block_on(sandbox.run(Command::new("echo").arg("hi"))).unwrap()));
    });
    group.finish();
}

fn blocking_facade(c: &mut Criterion) {
    let mut group = c.benchmark_group("facade_run_echo");
    let fake = FakeBackend::new();
    let sandbox =
        block_on(Sandbox::builder_with(fake.clone()).network(NetworkPolicy::deny_all()).create()).unwrap();
    let blocking =
        sandboxio::sync::Sandbox::builder_with(fake).network(NetworkPolicy::deny_all()).create().unwrap();
    group.bench_function("baseline: async Sandbox::run under block_on", |b| {
        b.iter(|| black_box(block_on(sandbox.run(Command::new("echo").arg("hi"))).unwrap()));
    });
    group.bench_function("sandboxio::sync::Sandbox::run", |b| {
        b.iter(|| black_box(blocking.run(Command::new("echo").arg("hi")).unwrap()));
    });
    group.finish();
}

/// What a progress callback costs an upload of 8 MiB in 64 files: the same upload without
/// one is the baseline (the path every caller who sets none takes: no meter, no timer, no
/// walk of the host tree).
fn upload_progress(c: &mut Criterion) {
    let mut group = c.benchmark_group("upload_8mib");
    let fake = FakeBackend::new();
    let sandbox =
        block_on(Sandbox::builder_with(fake.clone()).network(NetworkPolicy::deny_all()).create()).unwrap();
    let host = std::env::temp_dir().join(format!("sandboxio-bench-upload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&host);
    std::fs::create_dir_all(&host).unwrap();
    for i in 0..64u8 {
        std::fs::write(host.join(format!("f{i:02}")), vec![i; 128 * 1024]).unwrap();
    }
    group.bench_function("baseline: Fs::upload without a callback", |b| {
        b.iter(|| block_on(sandbox.fs().upload(&host, "up")).unwrap());
    });
    let report = |p: sandboxio::fs::TransferProgress| {
        black_box(p);
    };
    group.bench_function("Fs::upload with Fs::on_progress", |b| {
        b.iter(|| block_on(sandbox.fs().on_progress(&report).upload(&host, "up")).unwrap());
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&host);
}

criterion_group!(benches, cold_start, exec, blocking_facade, upload_progress);
criterion_main!(benches);
