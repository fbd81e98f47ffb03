//! What every adversarial test shares: the strict switch, loud skips, and sandboxes on each
//! backend.

use std::time::Duration;

#[cfg(any(feature = "local", feature = "docker"))]
use sandboxio::NetworkPolicy;
use sandboxio::Sandbox;

pub use futures_lite::future::block_on;

/// The helpers the other integration tests share (`tests/support`).
#[path = "../support/mod.rs"]
pub mod shared;

/// The image the Docker attacks use (`scripts/build-images python`).
pub const DOCKER_IMAGE: &str = "sandboxio/python:2";

/// The DSN option that picks the `docker://` exec path these tests run on: none (the
/// default, sandboxd) unless `SANDBOXIO_TEST_DOCKER_EXEC` names one (`.ci/run` runs the
/// Docker attacks once more with `api`).
pub fn exec_option() -> String {
    match std::env::var("SANDBOXIO_TEST_DOCKER_EXEC") {
        Ok(path) if !path.is_empty() => format!("&exec={path}"),
        _ => String::new(),
    }
}

/// sandboxd's protocol version (`VERSION` in `sandboxd/src/proto/mod.rs`), read from its
/// source, for payloads that speak the protocol themselves (a `Hello` with another version
/// is refused, which would turn their positive controls into vacuous failures).
pub fn sandboxd_protocol() -> String {
    include_str!("../../sandboxd/src/proto/mod.rs")
        .lines()
        .find_map(|l| l.strip_prefix("pub const VERSION: u16 = ")?.strip_suffix(';'))
        .expect("`pub const VERSION: u16 = N;` in sandboxd/src/proto/mod.rs")
        .to_owned()
}

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
    shared::docker_image_ready(test, DOCKER_IMAGE, "python")
}

/// A `docker://` sandbox from [`DOCKER_IMAGE`] with `policy`.
#[cfg(feature = "docker")]
pub fn docker(policy: NetworkPolicy) -> Sandbox {
    block_on(
        Sandbox::builder(&format!("docker://?image={DOCKER_IMAGE}{}", exec_option()))
            .unwrap()
            .network(policy)
            .create(),
    )
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

/// Host processes (other than this one) whose mount table or argv mention `needle`: an
/// independent scan (not the adapter's), that finds a sandbox's processes wherever they
/// were re-parented, as `(pid, command name)`.
pub fn processes_mentioning(needle: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return found };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let mentions = |file: &str| {
            std::fs::read(format!("/proc/{pid}/{file}"))
                .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
        };
        if mentions("mountinfo") || mentions("cmdline") {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            found.push((pid, comm.trim().to_owned()));
        }
    }
    found
}

/// The host directory under which `local://` keeps this user's sandboxes.
pub fn local_root() -> std::path::PathBuf {
    let uid = std::fs::metadata("/proc/self").map_or(0, |m| std::os::unix::fs::MetadataExt::uid(&m));
    std::env::temp_dir().join(format!("sandboxio-local-{uid}"))
}

/// Whether this test binary was re-run as a child for `role` (see [`spawn_child`]).
pub fn child_role() -> Option<String> {
    std::env::var("SANDBOXIO_ADVERSARIAL_CHILD").ok()
}

/// Re-runs this test binary as a child that runs only `test` with `role` in its
/// environment (and `envs`), stdout piped.
pub fn spawn_child(test: &str, role: &str, envs: &[(&str, &str)]) -> std::process::Child {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"]).env("SANDBOXIO_ADVERSARIAL_CHILD", role);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::inherit()).spawn().unwrap()
}

/// The peak resident set of this process (`VmHWM`), in MiB.
pub fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Polls a stream once with a no-op waker.
pub fn poll_once<S: futures_lite::Stream + Unpin>(stream: &mut S) -> bool {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    std::pin::Pin::new(stream).poll_next(&mut cx).is_ready()
}

/// The child side of the unread-stream proof: a stream of 1 GiB from `sandbox`, left unread
/// for two seconds (the producer must block, not the host buffer), then drained. Prints
/// `RESULT <bytes drained> <peak RSS MiB>` for [`unread_stream_figures`].
pub fn drain_an_unread_gib(sandbox: Sandbox) {
    let mut stream = sandbox.stream(sandboxio::Command::shell("head -c 1073741824 /dev/zero")).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let mut drained = 0u64;
    while let Some(chunk) = block_on(futures_lite::StreamExt::next(&mut stream)) {
        drained += chunk.unwrap().data.len() as u64;
    }
    block_on(sandbox.close()).unwrap();
    println!("RESULT {drained} {}", peak_rss_mib());
}

/// Runs `child_test` (which calls [`drain_an_unread_gib`]) as a child process with `role`
/// and returns its `(bytes drained, peak RSS in MiB)`.
pub fn unread_stream_figures(child_test: &str, role: &str) -> (u64, u64) {
    let figures = child_figures(child_test, role);
    (figures[0], figures[1])
}

/// Runs `child_test` as a child process with `role` (see [`spawn_child`]); the numbers it
/// printed after `RESULT `.
pub fn child_figures(child_test: &str, role: &str) -> Vec<u64> {
    use std::io::Read as _;
    let mut child = spawn_child(child_test, role, &[]);
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(child.wait().unwrap().success(), "the child failed: {out}");
    let result = out
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no result: {out}"));
    result.split_whitespace().map(|f| f.parse::<u64>().unwrap()).collect()
}

/// How many cancellation points a stress run makes (`SANDBOXIO_STRESS_POINTS`; CI's
/// bounded run: 100; `scripts/stress-local` and `scripts/stress-docker` ask for 400+).
pub fn stress_points() -> usize {
    std::env::var("SANDBOXIO_STRESS_POINTS").ok().and_then(|v| v.parse().ok()).unwrap_or(100)
}

/// The stress runs' delays: a cheap xorshift sequence (spread, not quality), seeded from
/// `SANDBOXIO_STRESS_SEED` or `default`, so a failing run can be replayed.
pub struct StressRng(u64);

impl StressRng {
    /// Seeded from `SANDBOXIO_STRESS_SEED`, else `default`.
    pub fn from_env(default: u64) -> Self {
        let seed =
            std::env::var("SANDBOXIO_STRESS_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
        StressRng(seed | 1)
    }

    /// The next value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
