//! Class 21: caller values at their extremes. Every duration the API takes, from zero and
//! one nanosecond to `u64::MAX` seconds and `Duration::MAX`, either saturates at
//! `MAX_TIMEOUT` (timeouts, graces) or is refused with `InvalidInput` (TTLs), and never
//! panics or hangs. `Code::timeout(Duration::from_secs(u64::MAX))` panicked the caller
//! ("overflow when adding duration to instant") on `local://` and `docker://`, and the
//! fake's virtual clock overflowed in the same way.
//!
//! The property test drives every duration entry point on the fake; the bounded cases run
//! the same extremes on `local://` and `docker://`, where real clocks are involved. Each
//! check has its own positive control in the same run: a timeout that must fire does
//! (`ExecutionTimeout`, `CreateTimeout`), and a TTL in range is accepted.

use std::time::Duration;

use futures_lite::future::block_on;
use proptest::prelude::*;
use sandboxio::testing::{FakeBackend, sbx_fake_like, sbx_fake_with};
use sandboxio::{Code, Command, ErrorCode, NetworkPolicy, Sandbox, builder::MAX_TTL, exec::MAX_TIMEOUT};

/// The values the property test always tries, besides random ones.
const EXTREMES: &[Duration] = &[
    Duration::ZERO,
    Duration::from_nanos(1),
    Duration::from_millis(1),
    Duration::from_millis(u32::MAX as u64 - 1),
    Duration::from_millis(u32::MAX as u64),
    Duration::from_millis(u32::MAX as u64 + 1),
    Duration::from_secs(u32::MAX as u64),
    MAX_TTL,
    Duration::from_nanos(30 * 24 * 3600 * 1_000_000_000 + 1),
    Duration::from_millis(u64::MAX),
    Duration::from_secs(u64::MAX / 2),
    Duration::from_secs(u64::MAX),
    Duration::MAX,
];

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        proptest::sample::select(EXTREMES),
        (any::<u64>(), 0..1_000_000_000_u32).prop_map(|(s, n)| Duration::new(s, n)),
        (0..u64::from(u32::MAX) * 2).prop_map(Duration::from_millis),
    ]
}

/// `ran` is what a one-second piece of work gives under `timeout`: done within a timeout
/// of at least a second, `ExecutionTimeout` (naming a saturated timeout) under a shorter one.
fn one_second_under<T: std::fmt::Debug>(what: &str, timeout: Duration, ran: sandboxio::Result<T>) {
    match ran {
        Ok(_) => assert!(timeout >= Duration::from_secs(1), "{what}: {timeout:?} let a 1 s sleep finish"),
        Err(e) => {
            assert_eq!(e.code(), ErrorCode::ExecutionTimeout, "{what}: {timeout:?}: {e}");
            assert!(timeout < Duration::from_secs(1), "{what}: {timeout:?} fired before 1 s: {e}");
            if let sandboxio::Error::ExecutionTimeout { timeout: reported, .. } = &e {
                assert!(*reported <= MAX_TIMEOUT, "{what}: reported {reported:?}");
            }
        }
    }
}

/// Every duration entry point on the fake, with `d`.
fn drive_the_fake(d: Duration) {
    let harness = sbx_fake_like("fake");
    let sbx = &harness.sandbox;
    // Command and cell timeouts: a one-second sleep runs to its end exactly when the
    // timeout is at least a second (a saturated one included).
    one_second_under("run", d, block_on(sbx.run(Command::new("sleep").arg("1").timeout(d))));
    let streamed = sbx.stream(Command::new("sleep").arg("1").timeout(d)).map(|mut s| block_on(s.wait()));
    one_second_under("stream", d, streamed.and_then(|r| r));
    let cell = || Code::new("import time\ntime.sleep(1)\n").timeout(d);
    one_second_under("run_code", d, block_on(sbx.run_code(cell())));
    let code_stream = sbx.run_code_stream(cell()).map(|mut s| block_on(s.wait()));
    one_second_under("run_code_stream", d, code_stream.and_then(|r| r));
    // File calls: done, or timed out at once under a zero-length deadline.
    let fs = sbx.fs().timeout(d);
    let written = block_on(fs.write("extreme.txt", "x"));
    if let Err(e) = &written {
        assert_eq!(e.code(), ErrorCode::ExecutionTimeout, "fs write under {d:?}: {e}");
    }
    if let Err(e) = block_on(fs.read("extreme.txt")) {
        // A write cut off by its deadline left no file: the read may find none first.
        let missing = written.is_err() && e.code() == ErrorCode::NotFound;
        assert!(missing || e.code() == ErrorCode::ExecutionTimeout, "fs read under {d:?}: {e}");
    }
    // TTLs: in (0, MAX_TTL] accepted, else InvalidInput, at create and at extend.
    let ttl_ok = !d.is_zero() && d <= MAX_TTL;
    match block_on(sbx.extend_ttl(d)) {
        Ok(()) => assert!(ttl_ok, "extend_ttl({d:?}) accepted"),
        Err(e) => {
            assert!(!ttl_ok, "extend_ttl({d:?}): {e}");
            assert_eq!(e.code(), ErrorCode::InvalidInput, "extend_ttl({d:?})");
        }
    }
    let made =
        block_on(Sandbox::builder("fake://").unwrap().network(NetworkPolicy::deny_all()).ttl(d).create());
    match made {
        Ok(s) => {
            assert!(ttl_ok, "ttl({d:?}) accepted");
            block_on(s.close()).unwrap();
        }
        Err(e) => {
            assert!(!ttl_ok, "ttl({d:?}): {e}");
            assert_eq!(e.code(), ErrorCode::InvalidInput, "ttl({d:?})");
        }
    }
    // Create timeouts against a create that takes one (virtual) second, and create
    // latencies against the default timeout of two minutes.
    let slow = FakeBackend::new().with_create_latency(Duration::from_secs(1));
    let made =
        block_on(Sandbox::builder_with(slow).network(NetworkPolicy::deny_all()).create_timeout(d).create());
    match made {
        Ok(s) => {
            assert!(d >= Duration::from_secs(1), "create_timeout({d:?}) let a 1 s create finish");
            block_on(s.close()).unwrap();
        }
        Err(e) => {
            assert_eq!(e.code(), ErrorCode::CreateTimeout, "create_timeout({d:?}): {e}");
            assert!(d < Duration::from_secs(1), "create_timeout({d:?}) fired early");
        }
    }
    let latent = FakeBackend::new().with_create_latency(d);
    match block_on(Sandbox::builder_with(latent).network(NetworkPolicy::deny_all()).create()) {
        Ok(s) => {
            assert!(
                d <= sandboxio::builder::DEFAULT_CREATE_TIMEOUT,
                "a create of {d:?} within the default timeout"
            );
            block_on(s.close()).unwrap();
        }
        Err(e) => assert_eq!(e.code(), ErrorCode::CreateTimeout, "create latency {d:?}: {e}"),
    }
    // A teardown grace of any length, for a sandbox dropped without close().
    let graced = block_on(
        Sandbox::builder_with(FakeBackend::new())
            .network(NetworkPolicy::deny_all())
            .teardown_grace(d)
            .create(),
    )
    .unwrap();
    drop(graced);
    // The fake's virtual clock, advanced twice by `d`: the sandbox then answers, or is
    // gone past its TTL.
    let clocked = sbx_fake_with(FakeBackend::new());
    clocked.advance_clock(d);
    clocked.advance_clock(d);
    if let Err(e) = block_on(clocked.sandbox.run(Command::new("true"))) {
        assert_eq!(e.code(), ErrorCode::SandboxGone, "after advancing {d:?} twice: {e}");
        assert!(d >= sandboxio::builder::DEFAULT_TTL / 2, "gone after {d:?} twice");
    }
}

#[test]
fn class_21__every_extreme_duration_on_the_fake_saturates_or_is_refused() {
    for d in EXTREMES {
        drive_the_fake(*d);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn class_21__any_duration_on_the_fake_saturates_or_is_refused(d in any_duration()) {
        drive_the_fake(d);
    }
}

/// The bounded real-clock case: each command, cell, stream and file call with a timeout of
/// `Duration::MAX` and `u64::MAX` seconds finishes, and one with zero times out (the
/// control that timeouts are in force); create with the same extremes as its create timeout
/// and teardown grace works.
#[cfg(any(feature = "local", feature = "docker"))]
pub fn extremes_on(sbx: &Sandbox, dsn: &str) {
    for d in [Duration::MAX, Duration::from_secs(u64::MAX), Duration::from_millis(u64::MAX)] {
        let ran =
            block_on(sbx.run(Command::new("true").timeout(d))).unwrap_or_else(|e| panic!("run {d:?}: {e}"));
        assert_eq!(ran.status.code(), Some(0));
        let cell = block_on(sbx.run_code(Code::new("6 * 7").timeout(d)))
            .unwrap_or_else(|e| panic!("cell {d:?}: {e}"));
        assert!(cell.success(), "{cell:?}");
        let mut stream = sbx.stream(Command::new("echo").arg("hi").timeout(d)).unwrap();
        assert_eq!(block_on(stream.wait()).unwrap().status.code(), Some(0));
        let mut cells = sbx.run_code_stream(Code::new("print(1)").timeout(d)).unwrap();
        assert!(block_on(cells.wait()).unwrap().success());
        let fs = sbx.fs().timeout(d);
        block_on(fs.write("extreme.txt", "x")).unwrap();
        assert_eq!(block_on(fs.read("extreme.txt")).unwrap(), b"x");
    }
    // Controls: a zero timeout is in force on each kind of call.
    let zero = Duration::ZERO;
    let e = block_on(sbx.run(Command::new("sleep").arg("5").timeout(zero))).unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionTimeout, "{e}");
    let e = block_on(sbx.run_code(Code::new("import time\ntime.sleep(5)").timeout(zero))).unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionTimeout, "{e}");
    let made = block_on(
        Sandbox::builder(dsn)
            .unwrap()
            .network(NetworkPolicy::deny_all())
            .create_timeout(Duration::MAX)
            .teardown_grace(Duration::MAX)
            .create(),
    )
    .unwrap_or_else(|e| panic!("create with Duration::MAX timeouts: {e}"));
    assert_eq!(block_on(made.run(Command::new("true"))).unwrap().status.code(), Some(0));
    block_on(made.close()).unwrap();
    let refused = block_on(
        Sandbox::builder(dsn).unwrap().network(NetworkPolicy::deny_all()).ttl(Duration::MAX).create(),
    );
    assert_eq!(refused.err().map(|e| e.code()), Some(ErrorCode::InvalidInput), "ttl(Duration::MAX)");
}

#[cfg(feature = "local")]
#[test]
fn class_21__extreme_timeouts_on_local_finish_or_fire_never_panic() {
    let sbx = crate::support::local(NetworkPolicy::deny_all());
    extremes_on(&sbx, "local://");
    block_on(sbx.close()).unwrap();
}

/// The `docker://` case, in a module of its own so its name holds `docker::` (the
/// unprivileged run skips it by that, the exec-API run selects it by it).
#[cfg(feature = "docker")]
mod docker {
    use super::{NetworkPolicy, block_on, extremes_on};

    #[test]
    fn class_21__extreme_timeouts_on_docker_finish_or_fire_never_panic() {
        if !crate::support::docker_ready("class_21__extreme_timeouts_on_docker_finish_or_fire_never_panic") {
            return;
        }
        let sbx = crate::support::docker(NetworkPolicy::deny_all());
        let dsn =
            format!("docker://?image={}{}", crate::support::DOCKER_IMAGE, crate::support::exec_option());
        extremes_on(&sbx, &dsn);
        block_on(sbx.close()).unwrap();
    }
}
