//! What every adversarial test shares: the strict switch, loud skips, and sandboxes on each
//! backend.

use std::time::Duration;

use sandboxio::{NetworkPolicy, Sandbox};

pub use futures_lite::future::block_on;

/// The image the Docker attacks use (`scripts/build-images python`).
pub const DOCKER_IMAGE: &str = "sandboxio/python:1";

/// Whether a skipped control is a failure (CI sets `SANDBOXIO_STRICT=1`;
/// `SANDBOXIO_REQUIRE_DOCKER=1` implies it for the Docker tests).
pub fn strict() -> bool {
    std::env::var("SANDBOXIO_STRICT").is_ok_and(|v| v == "1")
}

/// Says loudly why a test (or its positive control) cannot run; panics in a strict run.
pub fn skip(test: &str, why: &str) {
    assert!(!strict(), "{test}: {why} (SANDBOXIO_STRICT=1 makes a skipped control a failure)");
    println!("[skip] {test}: {why}");
}

/// Whether this process is root (the tests prove root-only attacks only there).
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// A `local://` sandbox with `policy`.
#[cfg(feature = "local")]
pub fn local(policy: NetworkPolicy) -> Sandbox {
    block_on(Sandbox::builder("local://").unwrap().network(policy).create()).unwrap()
}

/// Whether the engine and [`DOCKER_IMAGE`] are here; skips loudly when not (a failure
/// under `SANDBOXIO_REQUIRE_DOCKER=1`).
#[cfg(feature = "docker")]
pub fn docker_ready(test: &str) -> bool {
    let ok = std::process::Command::new("docker")
        .args(["image", "inspect", "-f", "{{.Id}}", DOCKER_IMAGE])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("SANDBOXIO_REQUIRE_DOCKER").map_or(true, |v| v != "1"),
            "{test}: no Docker engine with {DOCKER_IMAGE} (SANDBOXIO_REQUIRE_DOCKER=1)"
        );
        println!("[skip] {test}: no Docker engine with {DOCKER_IMAGE} (scripts/build-images python)");
    }
    ok
}

/// A `docker://` sandbox from [`DOCKER_IMAGE`] with `policy`.
#[cfg(feature = "docker")]
pub fn docker(policy: NetworkPolicy) -> Sandbox {
    block_on(Sandbox::builder(&format!("docker://?image={DOCKER_IMAGE}")).unwrap().network(policy).create())
        .unwrap()
}

/// Polls `check` every 50 ms until it holds or `within` passes; returns whether it held.
pub fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let started = std::time::Instant::now();
    loop {
        if check() {
            return true;
        }
        if started.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
