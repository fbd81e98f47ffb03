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

/// The test registries `scripts/test-registry up` starts: open, and with basic auth.
pub const TEST_REGISTRY: &str = "127.0.0.1:5711";
/// The one with basic auth (user [`TEST_REGISTRY_USER`]).
pub const TEST_REGISTRY_AUTH: &str = "127.0.0.1:5712";
/// Its user.
pub const TEST_REGISTRY_USER: &str = "sandboxio";
/// Its password (`scripts/test-registry`), and a canary: the secret-leak test looks for it
/// everywhere it must not be.
pub const TEST_REGISTRY_PASSWORD: &str = "registry-canary-pw-7731";

/// What `GET /v2/` on `addr` answers (its HTTP status), if anything.
pub fn registry_status(addr: &str) -> Option<u16> {
    use std::io::{Read as _, Write as _};
    let timeout = std::time::Duration::from_secs(2);
    let mut stream = std::net::TcpStream::connect_timeout(&addr.parse().ok()?, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    write!(stream, "GET /v2/ HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// Whether both test registries answer as they should; prints why not for `test`, or
/// panics under `SANDBOXIO_REQUIRE_REGISTRY=1` (CI).
pub fn test_registries_up(test: &str) -> bool {
    let up = registry_status(TEST_REGISTRY) == Some(200) && registry_status(TEST_REGISTRY_AUTH) == Some(401);
    if !up {
        assert!(
            std::env::var("SANDBOXIO_REQUIRE_REGISTRY").map_or(true, |v| v != "1"),
            "{test}: the test registries do not answer on {TEST_REGISTRY} and {TEST_REGISTRY_AUTH} (SANDBOXIO_REQUIRE_REGISTRY=1)"
        );
        println!(
            "[skip] {test}: no test registry on {TEST_REGISTRY} and {TEST_REGISTRY_AUTH} (scripts/test-registry up)"
        );
    }
    up
}

/// What [`run_many_at_once`] saw.
#[derive(Debug)]
pub struct Burst {
    /// Commands that failed or came back with another command's or a wrong result.
    pub lost: Vec<String>,
    /// Commands finished per second, over the whole burst.
    pub per_second: f64,
}

/// Runs `total` short commands on `sandbox`, `at_once` at a time (a multi-threaded tokio
/// runtime drives them), and checks each result exactly: every eighth is `sh -c 'exit 3'`
/// (exit code 3, no output), the others `echo <index>` (that line, exit code 0). A command
/// that fails, or whose result is not its own, is counted as lost (issue #28: from about 24
/// at once, sandboxd reported some commands' shepherds killed though they had run).
pub fn run_many_at_once(sandbox: &std::sync::Arc<Sandbox>, at_once: usize, total: usize) -> Burst {
    use sandboxio::{Command, ExitStatus};
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(at_once));
        let mut tasks = tokio::task::JoinSet::new();
        let started = std::time::Instant::now();
        for i in 0..total {
            let (gate, sandbox) = (gate.clone(), sandbox.clone());
            tasks.spawn(async move {
                let _place = gate.acquire_owned().await.unwrap();
                let (command, want_status, want_out) = if i % 8 == 0 {
                    (Command::shell("exit 3"), ExitStatus::Code(3), String::new())
                } else {
                    (Command::new("echo").arg(i.to_string()), ExitStatus::Code(0), format!("{i}\n"))
                };
                match sandbox.run(command).await {
                    Ok(out) if out.status == want_status && out.stdout == want_out.as_bytes() => None,
                    Ok(out) => {
                        Some(format!("command {i}: {:?}, stdout {:?}", out.status, out.stdout_lossy()))
                    }
                    Err(e) => Some(format!("command {i}: {e}")),
                }
            });
        }
        let mut lost = Vec::new();
        while let Some(done) = tasks.join_next().await {
            lost.extend(done.unwrap());
        }
        #[allow(clippy::cast_precision_loss, reason = "a rate for a report")]
        let per_second = total as f64 / started.elapsed().as_secs_f64();
        Burst { lost, per_second }
    })
}

/// How many commands each burst of a concurrency test runs: `SANDBOXIO_STRESS_COMMANDS`, or
/// 512 (CI's bounded size; `scripts/stress-commands` runs 10,000).
pub fn stress_commands() -> usize {
    std::env::var("SANDBOXIO_STRESS_COMMANDS").ok().and_then(|n| n.parse().ok()).unwrap_or(512)
}

/// Runs [`run_many_at_once`] at 16, 64 and 256 at once on `sandbox`, prints each rate, and
/// fails when any command was lost.
pub fn no_command_lost_at_any_concurrency(sandbox: &std::sync::Arc<Sandbox>, backend: &str) {
    let total = stress_commands();
    let mut lost = Vec::new();
    for at_once in [16, 64, 256] {
        let burst = run_many_at_once(sandbox, at_once, total);
        println!(
            "{backend}: {total} commands {at_once} at once: {} lost, {:.0} commands/s",
            burst.lost.len(),
            burst.per_second
        );
        lost.extend(burst.lost.into_iter().map(|l| format!("{at_once} at once: {l}")));
    }
    assert!(
        lost.is_empty(),
        "{} commands lost on {backend}, the first: {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
}
