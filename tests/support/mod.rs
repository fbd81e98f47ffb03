//! Helpers shared by the integration tests.
#![allow(dead_code, reason = "each test crate includes this module and uses part of it")]

use sandboxio::testing::FakeBackend;
use sandboxio::{NetworkPolicy, Sandbox};

pub use futures_lite::future::block_on;

/// A fake backend and a deny-all sandbox on it.
pub fn fake_sandbox() -> (FakeBackend, Sandbox) {
    let fake = FakeBackend::new();
    let sandbox =
        block_on(Sandbox::builder_with(fake.clone()).network(NetworkPolicy::deny_all()).create()).unwrap();
    (fake, sandbox)
}

/// Polls `fut` exactly `k` times, then drops it. Returns whether it completed.
pub fn poll_k_times<F: std::future::Future>(fut: F, k: usize) -> bool {
    poll_k_times_with_pauses(fut, k, std::time::Duration::ZERO)
}

/// Polls `fut` up to `k` times, `pause` apart (no pause when zero), then drops it. Returns
/// whether it completed.
pub fn poll_k_times_with_pauses<F: std::future::Future>(
    fut: F,
    k: usize,
    pause: std::time::Duration,
) -> bool {
    let mut fut = std::pin::pin!(fut);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    for _ in 0..k {
        if fut.as_mut().poll(&mut cx).is_ready() {
            return true;
        }
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
    false
}

/// Whether a Docker engine answers and has `image`; prints why not and returns `false`, or
/// panics when `SANDBOXIO_REQUIRE_DOCKER=1` (CI). `build` names the `scripts/build-images`
/// argument that makes the image.
pub fn docker_image_ready(test: &str, image: &str, build: &str) -> bool {
    let ok = std::process::Command::new("docker")
        .args(["image", "inspect", "-f", "{{.Id}}", image])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("SANDBOXIO_REQUIRE_DOCKER").map_or(true, |v| v != "1"),
            "{test}: no Docker engine with {image} (SANDBOXIO_REQUIRE_DOCKER=1)"
        );
        println!("[skip] {test}: no Docker engine with {image} (scripts/build-images {build})");
    }
    ok
}
