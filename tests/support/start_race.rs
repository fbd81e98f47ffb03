//! The cancel-vs-start race of the remote backends (`e2b://`, `modal://`), against their
//! stubs: a future dropped after its start request reached the service, before the service
//! said what it started. Each stub has a one-shot switch that takes a start and runs it only
//! later, and counts the starts it took; these helpers drop a future at that moment and
//! wait for what it left behind.

#![allow(dead_code, reason = "each test crate uses part of it")]

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a start switched to slow waits before its command starts (longer than any
/// search the kill makes for a process it cannot name).
pub const START_DELAY: Duration = Duration::from_millis(3500);

/// How long after the delay a command that was not stopped is surely running.
pub const SETTLE: Duration = Duration::from_millis(2500);

/// Waits (up to 10 s) until `taken()` (how many starts the stub took) is past `before`.
///
/// # Panics
///
/// When it never is.
pub async fn until_taken(taken: impl Fn() -> usize, before: usize) {
    let until = Instant::now() + Duration::from_secs(10);
    while taken() == before {
        assert!(Instant::now() < until, "the start never reached the stub");
        futures_timer::Delay::new(Duration::from_millis(5)).await;
    }
}

/// Polls `work` until the stub took one more start (`taken()` counts them), then drops it.
///
/// # Panics
///
/// When `work` ends first (it should be waiting for its slow start).
pub async fn drop_when_taken<T>(work: impl Future<Output = T>, taken: impl Fn() -> usize) {
    let before = taken();
    let dropped = futures_lite::future::or(
        async {
            let _ = work.await;
            false
        },
        async {
            until_taken(taken, before).await;
            true
        },
    )
    .await;
    assert!(dropped, "the work ended before its start was taken");
}

/// Waits until `count()` is `want` (true), or `within` passed (false).
pub async fn until_count(count: impl Fn() -> usize, want: usize, within: Duration) -> bool {
    let until = Instant::now() + within;
    loop {
        if count() == want {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        futures_timer::Delay::new(Duration::from_millis(50)).await;
    }
}

/// How many processes named `comm` run among `processes` (`running_processes`'s lines,
/// `pid N (comm)`).
pub fn named(processes: &[String], comm: &str) -> usize {
    processes.iter().filter(|p| p.ends_with(&format!("({comm})"))).count()
}

/// One backend's stub, as the race needs it.
pub struct Race<'a> {
    /// Switches the stub's next start to slow ([`START_DELAY`]).
    pub slow: &'a dyn Fn(),
    /// How many starts the stub took.
    pub taken: &'a dyn Fn() -> usize,
    /// How many processes of a name run in the sandbox under test.
    pub running: &'a dyn Fn(&str) -> usize,
}

impl Race<'_> {
    /// The positive control: a slow start that is kept runs, and the probe sees it (`sleep`,
    /// then `cat`, its first start slow); dropped once running, each ends.
    pub async fn control(&self, sandbox: &sandboxio::Sandbox) {
        (self.slow)();
        let kept = sandbox.stream(sandboxio::Command::new("sleep").arg("600")).unwrap();
        assert!(
            until_count(|| (self.running)("sleep"), 1, START_DELAY + SETTLE).await,
            "the probe never saw the slow command that was kept"
        );
        let kept_cat = sandbox.stream(sandboxio::Command::new("cat")).unwrap();
        assert!(until_count(|| (self.running)("cat"), 1, SETTLE).await, "the probe never saw `cat`");
        drop((kept, kept_cat));
        assert!(
            until_count(|| (self.running)("sleep") + (self.running)("cat"), 0, Duration::from_secs(10)).await,
            "a started stream, dropped, left its command"
        );
    }

    /// Switches the next start to slow, drops `work` once that start is taken, and checks
    /// that, after the start came, nothing named `comm` runs.
    ///
    /// # Panics
    ///
    /// When something named `comm` runs then.
    pub async fn dropped<T>(&self, work: impl Future<Output = T>, comm: &str, what: &str) {
        (self.slow)();
        drop_when_taken(work, self.taken).await;
        futures_timer::Delay::new(START_DELAY + SETTLE).await;
        assert_eq!(
            (self.running)(comm),
            0,
            "{what} dropped while its start was on the way left `{comm}` running"
        );
    }
}

/// A stream of `command` on `sandbox`, held until the future is dropped.
pub async fn held_stream(sandbox: &sandboxio::Sandbox, command: sandboxio::Command) {
    let _stream = sandbox.stream(command).unwrap();
    std::future::pending::<()>().await;
}

/// A backend's stub, as the race needs it (each test file implements it for its stub).
pub trait RaceStub {
    /// Starts the stub.
    fn start() -> Self;
    /// A sandbox builder on a backend pointed at the stub.
    fn builder(&self) -> sandboxio::SandboxBuilder;
    /// Switches the stub's next start to slow ([`START_DELAY`]).
    fn slow_next_start(&self);
    /// How many starts the stub took.
    fn starts_taken(&self) -> usize;
    /// How many processes named `comm` run in sandbox `id`.
    fn running(&self, id: &str, comm: &str) -> usize;
    /// Switches the stub's next create to answer [`CREATE_DELAY`] after it made the sandbox.
    fn slow_next_create_reply(&self);
    /// How many create requests the stub took.
    fn creates_taken(&self) -> usize;
    /// How many sandboxes the stub made.
    fn made(&self) -> usize;
    /// How many of them are alive.
    fn live(&self) -> usize;
}

/// How long a create switched to slow waits before it answers, its sandbox made.
pub const CREATE_DELAY: Duration = Duration::from_millis(1500);

/// A create dropped after the service made the sandbox, before its reply came (so before
/// the client knows its id), leaves no sandbox alive: the creation runs to its end on the
/// portal and the sandbox nobody received is ended. Positive control, same run: the same
/// slow create, kept, gives a sandbox the same probe sees.
pub fn dropped_at_create<S: RaceStub>() {
    let stub = S::start();
    futures_lite::future::block_on(async {
        let deny = sandboxio::NetworkPolicy::deny_all;
        stub.slow_next_create_reply();
        let kept = stub.builder().network(deny()).create().await.expect("a sandbox on the stub");
        assert_eq!(stub.live(), 1, "the probe sees the sandbox of a slow create that was kept");
        kept.close().await.unwrap();
        assert!(until_count(|| stub.live(), 0, Duration::from_secs(10)).await, "a closed sandbox lives on");

        stub.slow_next_create_reply();
        drop_when_taken(stub.builder().network(deny()).create(), || stub.creates_taken()).await;
        assert!(
            until_count(|| stub.made(), 2, Duration::from_secs(10)).await,
            "the stub never made the second sandbox"
        );
        assert!(
            until_count(|| stub.live(), 0, CREATE_DELAY + Duration::from_secs(10)).await,
            "a create dropped while its reply was on the way left its sandbox alive"
        );
    });
}

/// The work a race drops: one operation on the sandbox under test.
pub type Op = fn(&sandboxio::Sandbox) -> std::pin::Pin<Box<dyn Future<Output = ()> + '_>>;

/// Runs the race of one operation on a fresh sandbox of stub `S`: the positive control (a
/// slow start that is kept runs, and the probe sees it), then `op` dropped once the stub
/// took its start, before the client heard back; after the start came, nothing named
/// `comm` may run. Before the tombstone, the kill could not find a command not started yet,
/// and the command ran until the sandbox ended.
pub fn dropped_at_start<S: RaceStub>(op: Op, comm: &str, what: &str) {
    let stub = S::start();
    futures_lite::future::block_on(async {
        let sandbox = stub
            .builder()
            .network(sandboxio::NetworkPolicy::deny_all())
            .create()
            .await
            .expect("a sandbox on the stub");
        let id = sandbox.id().to_owned();
        let (slow, taken, running) =
            (|| stub.slow_next_start(), || stub.starts_taken(), |comm: &str| stub.running(&id, comm));
        let race = Race { slow: &slow, taken: &taken, running: &running };
        race.control(&sandbox).await;
        race.dropped(op(&sandbox), comm, what).await;
        sandbox.close().await.unwrap();
    });
}

/// [`Op`]: a `run` of `sleep 600`.
pub fn run_sleep(sandbox: &sandboxio::Sandbox) -> std::pin::Pin<Box<dyn Future<Output = ()> + '_>> {
    Box::pin(async { drop(sandbox.run(sandboxio::Command::new("sleep").arg("600")).await) })
}

/// [`Op`]: a stream of `sleep 600`.
pub fn stream_sleep(sandbox: &sandboxio::Sandbox) -> std::pin::Pin<Box<dyn Future<Output = ()> + '_>> {
    Box::pin(held_stream(sandbox, sandboxio::Command::new("sleep").arg("600")))
}

/// [`Op`]: a file write (a file script's `cat` waits for the data).
pub fn write_file(sandbox: &sandboxio::Sandbox) -> std::pin::Pin<Box<dyn Future<Output = ()> + '_>> {
    Box::pin(async { drop(sandbox.fs().write("/tmp/raced", b"data".to_vec()).await) })
}
