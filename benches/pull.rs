//! The image measure (`scripts/bench-pull`, on demand): a pull from the loopback test
//! registry through sandboxio against `docker pull` of the same image in the same run, and
//! a template's first `create` against its second.
//!
//! The engine must download for real, so the image cannot share layers with anything the
//! engine keeps: the default image's file system (`sandboxio/python:2`) is exported from a
//! container and imported again as one layer (same files, a layer of its own), pushed to
//! `127.0.0.1:5711`, and removed from the engine before every pull. Rounds alternate which
//! pull goes first; each path's median and the ratio are printed. `SANDBOXIO_BENCH_ROUNDS`
//! (default 3) sets the rounds; `SANDBOXIO_BENCH_PART=pull|template` runs one part only.
//! Needs `scripts/test-registry up` and the default image (the pull part), and
//! `sandboxio/busybox:1` (the template part).

use std::process::Command as OsCommand;
use std::time::{Duration, Instant};

use sandboxio::backends::docker::{DEFAULT_IMAGE, DockerBackend, Template};
use sandboxio::{Command, NetworkPolicy, Sandbox};

const REGISTRY: &str = "127.0.0.1:5711";

fn docker(args: &[&str]) -> bool {
    OsCommand::new("docker").args(args).output().is_ok_and(|o| o.status.success())
}

fn sh(script: &str) {
    let ok = OsCommand::new("sh").arg("-c").arg(script).status().is_ok_and(|s| s.success());
    assert!(ok, "failed: {script}");
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Pushes the default image's files, flattened into one layer of their own, as `image`,
/// and removes it from the engine.
fn prepare(image: &str) {
    let name = format!("sandboxio-bench-pull-{}", std::process::id());
    sh(&format!(
        "docker create --name {name} {DEFAULT_IMAGE} true >/dev/null && docker export {name} | docker import - {image} >/dev/null && docker rm {name} >/dev/null && docker push {image} >/dev/null && docker rmi {image} >/dev/null"
    ));
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: usize =
        std::env::var("SANDBOXIO_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    let part = std::env::var("SANDBOXIO_BENCH_PART").unwrap_or_default();
    let backend = DockerBackend::from_env().unwrap();
    if part != "template" {
        pulls(&backend, rounds);
    }
    if part != "pull" {
        templates(&backend, rounds);
    }
}

/// A pull through sandboxio against `docker pull`, `rounds` times each, alternating.
fn pulls(backend: &DockerBackend, rounds: usize) {
    assert!(docker(&["image", "inspect", DEFAULT_IMAGE]), "no {DEFAULT_IMAGE} (scripts/build-images python)");
    let image = format!("{REGISTRY}/sandboxio-bench/flat:{}", std::process::id());
    prepare(&image);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut bytes = 0;
    for round in 0..rounds {
        for first in [round % 2 == 0, round % 2 != 0] {
            let started = Instant::now();
            if first {
                bytes = backend.pull_blocking(&image).unwrap().progress.bytes_done;
                ours.push(started.elapsed());
            } else {
                assert!(docker(&["pull", "-q", &image]), "docker pull failed");
                theirs.push(started.elapsed());
            }
            assert!(docker(&["rmi", &image]));
        }
    }
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "pull of {image} ({} MB compressed), median of {rounds}: sandboxio {ours:?}, docker pull {theirs:?}, ratio {:.3}",
        bytes / 1_000_000,
        ours.as_secs_f64() / theirs.as_secs_f64()
    );
}

/// A template's first `create` (setup and commit) against its second (found by its content
/// hash), `rounds` times with content of each round's own, each `create` ending with a
/// command run in the sandbox; the old images are pruned as it goes.
fn templates(backend: &DockerBackend, rounds: usize) {
    let (mut firsts, mut seconds) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let template = Template::new("sandboxio/busybox:1")
            .file("/etc/bench", format!("{}-{round}", std::process::id()))
            .run("date > /stamp");
        let backend = backend.clone().with_template("bench", template);
        let create = || {
            let started = Instant::now();
            let sandbox = futures_lite::future::block_on(
                Sandbox::builder_with(backend.clone())
                    .template("bench")
                    .network(NetworkPolicy::deny_all())
                    .create(),
            )
            .unwrap();
            futures_lite::future::block_on(sandbox.run(Command::new("true"))).unwrap();
            let took = started.elapsed();
            futures_lite::future::block_on(sandbox.close()).unwrap();
            took
        };
        firsts.push(create());
        seconds.push(create());
        backend.prune_templates_blocking().unwrap();
        if round + 1 == rounds {
            let prepared = backend.prepare_template_blocking("bench").unwrap();
            docker(&["rmi", &prepared.image]);
        }
    }
    let (first, second) = (median(firsts), median(seconds));
    println!(
        "template create + run(true), median of {rounds}: first {first:?} (setup and commit), second {second:?} (cached), ratio {:.3}",
        second.as_secs_f64() / first.as_secs_f64()
    );
}
