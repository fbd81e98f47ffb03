//! What each contract test gets: the backend, its probes, a unique label, and helpers that
//! turn observations into readable failures.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::audit::{OperationRecord, RecordingSink};
use crate::backend::Backend;
use crate::policy::{Capabilities, NetworkPolicy};
use crate::{Error, Sandbox, SandboxBuilder};

use super::facade::{AnyBuilder, AnySandbox, Facade};
use super::probes::{ProbeFuture, Probes};
use super::version::ContractVersion;

/// The metadata key the suite puts on every sandbox it creates, with a value unique to the
/// test, so that orphan probes can find exactly that test's sandboxes.
pub const LABEL_KEY: &str = "sandboxio.contract.test";

/// How long an orphan check waits for background cleanup to settle before it fails.
pub(crate) const SETTLE: Duration = Duration::from_secs(10);

/// A test's verdict: `Err` carries "expected …, observed …".
pub(crate) type Verdict = std::result::Result<(), String>;

pub(crate) struct Ctx {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) probes: Arc<dyn Probes>,
    pub(crate) audit: Option<Arc<RecordingSink>>,
    pub(crate) caps: Capabilities,
    /// The API this run drives: every sandbox operation of a test goes through it.
    pub(crate) facade: Facade,
    /// The contract version this run holds the backend to.
    pub(crate) version: ContractVersion,
    /// Unique per test run: the value of [`LABEL_KEY`].
    pub(crate) token: String,
    /// Set when a positive control could not run: the test is then reported skipped with
    /// this reason (a failure under a strict run), whatever its verdict.
    control_skip: Mutex<Option<String>>,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl Ctx {
    pub(crate) fn new(
        backend: Arc<dyn Backend>,
        probes: Arc<dyn Probes>,
        audit: Option<Arc<RecordingSink>>,
        facade: Facade,
        version: ContractVersion,
        case: &'static str,
    ) -> Self {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let caps = backend.capabilities();
        // Short enough for any provider's label limits (Kubernetes: 63 characters), unique
        // per process and test: a hash of the test name, the pid and a counter.
        let hash = case
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        let token = format!("t{:08x}-{}-{n}", hash & 0xffff_ffff, std::process::id());
        Ctx { backend, probes, audit, caps, facade, version, token, control_skip: Mutex::new(None) }
    }

    /// A builder of this run's facade, with the probes' configuration and this test's label.
    pub(crate) fn builder(&self) -> AnyBuilder {
        self.builder_with(Arc::clone(&self.backend))
    }

    /// As [`Ctx::builder`], on another backend (a wrapper around the one under test).
    pub(crate) fn builder_with(&self, backend: Arc<dyn Backend>) -> AnyBuilder {
        self.facade
            .builder(backend)
            .configure(|b| self.probes.configure(b))
            .metadata(LABEL_KEY, self.token.clone())
    }

    /// A builder of the blocking facade whatever this run's facade (the Sync parity tests),
    /// with the probes' configuration and this test's label.
    pub(crate) fn sync_builder(&self) -> crate::sync::SandboxBuilder {
        let builder = crate::sync::Sandbox::builder_with(Arc::clone(&self.backend));
        crate::sync::SandboxBuilder::from(self.probes.configure(builder.inner))
            .metadata(LABEL_KEY, self.token.clone())
    }

    /// Attaches to the sandbox `id` through this run's facade.
    pub(crate) async fn connect(&self, id: &str) -> crate::Result<AnySandbox> {
        self.facade.connect(Arc::clone(&self.backend), id).await
    }

    /// For tests of async-only behaviour (cancellation by dropping a future), which the
    /// runner reports n/a under [`Facade::Blocking`]: the async builder, or an error should
    /// such a test ever run under the blocking facade.
    pub(crate) fn async_builder(&self) -> std::result::Result<SandboxBuilder, String> {
        self.ensure_async()?;
        Ok(self
            .probes
            .configure(Sandbox::builder_with(Arc::clone(&self.backend)))
            .metadata(LABEL_KEY, self.token.clone()))
    }

    /// Fails unless this run drives the async API: the guard of async-only tests.
    pub(crate) fn ensure_async(&self) -> Verdict {
        match self.facade {
            Facade::Async => Ok(()),
            Facade::Blocking => Err("this test is async-only (it drops futures) and must not run \
                 under the blocking facade, where it would prove nothing"
                .to_owned()),
        }
    }

    /// As [`Ctx::sandbox`], through the async API only (see [`Ctx::async_builder`]).
    pub(crate) async fn async_sandbox(&self) -> std::result::Result<Sandbox, String> {
        self.async_builder()?
            .network(self.default_policy())
            .create()
            .await
            .map_err(|e| self.unexpected("create()", &e))
    }

    /// The strictest policy the backend enforces: deny-all where declared.
    pub(crate) fn default_policy(&self) -> NetworkPolicy {
        if self.caps.contains(Capabilities::NETWORK_DENY) {
            NetworkPolicy::deny_all()
        } else {
            NetworkPolicy::allow_all()
        }
    }

    /// A sandbox under the default policy, through this run's facade.
    pub(crate) async fn sandbox(&self) -> std::result::Result<AnySandbox, String> {
        self.builder()
            .network(self.default_policy())
            .create()
            .await
            .map_err(|e| self.unexpected("create()", &e))
    }

    /// "`what` failed unexpectedly: error".
    pub(crate) fn unexpected(&self, what: &str, e: &Error) -> String {
        match self.facade {
            Facade::Async => format!("{what} failed unexpectedly on {}://: {e}", self.backend.scheme()),
            Facade::Blocking => {
                format!("{what} failed unexpectedly on {}:// (blocking facade): {e}", self.backend.scheme())
            }
        }
    }

    /// Runs a behaviour probe the case declared it needs.
    pub(crate) async fn probe<T>(
        &self,
        name: &str,
        probe: Option<ProbeFuture<T>>,
    ) -> std::result::Result<T, String> {
        match probe {
            Some(fut) => fut.await.map_err(|e| format!("probe {name} failed: {e}")),
            None => Err(format!("probe {name} is not implemented (the case should have been skipped)")),
        }
    }

    /// Fails if any process started in sandbox `sandbox_id` is still running once
    /// [`SETTLE`] has passed (real backends kill a dropped operation's process in the
    /// background).
    pub(crate) async fn no_processes(&self, sandbox_id: &str, when: &str) -> Verdict {
        let started = std::time::Instant::now();
        loop {
            let left = self.probe("running_processes", self.probes.running_processes(sandbox_id)).await?;
            if left.is_empty() {
                return Ok(());
            }
            if started.elapsed() > SETTLE {
                return Err(format!(
                    "expected no process left {when} (waited {SETTLE:?}), observed {left:?}"
                ));
            }
            futures_timer::Delay::new(Duration::from_millis(50)).await;
        }
    }

    /// Fails if any sandbox with this test's label is still alive after `grace` (for its
    /// background teardown) plus [`SETTLE`]. It polls this test's own sandboxes only: other
    /// tests' teardowns, running in parallel, do not delay it.
    pub(crate) async fn no_sandboxes(&self, when: &str, grace: Duration) -> Verdict {
        let started = std::time::Instant::now();
        let limit = grace + SETTLE;
        loop {
            let left =
                self.probe("live_sandboxes", self.probes.live_sandboxes(LABEL_KEY, &self.token)).await?;
            if left.is_empty() {
                return Ok(());
            }
            if started.elapsed() > limit {
                return Err(format!("expected no sandbox left {when} (waited {limit:?}), observed {left:?}"));
            }
            futures_timer::Delay::new(Duration::from_millis(50)).await;
        }
    }

    /// The audit records of this test's sandboxes, oldest first.
    pub(crate) fn records(&self) -> Vec<OperationRecord> {
        self.audit
            .as_ref()
            .map(|sink| {
                sink.records()
                    .into_iter()
                    .filter(|r| r.metadata.get(LABEL_KEY).is_some_and(|v| *v == self.token))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// `Err("what: expected {expected:?}, observed {observed:?}")` unless equal. Takes values
/// so call sites read as `expect_eq(observed, expected, what)`.
#[expect(
    clippy::needless_pass_by_value,
    reason = "call sites pass values: `expect_eq(observed, expected, what)`"
)]
pub(crate) fn expect_eq<T: PartialEq + std::fmt::Debug>(observed: T, expected: T, what: &str) -> Verdict {
    if observed == expected {
        Ok(())
    } else {
        Err(format!("{what}: expected {expected:?}, observed {observed:?}"))
    }
}

/// `Err(message)` unless `condition`.
pub(crate) fn expect(condition: bool, message: impl FnOnce() -> String) -> Verdict {
    if condition { Ok(()) } else { Err(message()) }
}

/// Expects `result` to be an error with `code`.
pub(crate) fn expect_code<T: std::fmt::Debug>(
    result: &crate::Result<T>,
    code: crate::ErrorCode,
    what: &str,
) -> Verdict {
    match result {
        Err(e) if e.code() == code => Ok(()),
        Err(e) => Err(format!("{what}: expected error {code}, observed {e}")),
        Ok(v) => Err(format!("{what}: expected error {code}, observed success {v:?}")),
    }
}

impl Ctx {
    /// Ends the test because its positive control could not run: the negative check it
    /// guards would prove nothing. Returns the `Err` to propagate with `?`; the runner
    /// reports the test as skipped with `why` (never as passed), and a strict run
    /// ([`ContractSuite::strict`](super::ContractSuite::strict)) fails it.
    pub(crate) fn control_unavailable(&self, why: impl Into<String>) -> String {
        let why = why.into();
        *self.control_skip.lock().unwrap_or_else(PoisonError::into_inner) = Some(why.clone());
        format!("positive control could not run: {why}")
    }

    /// The reason recorded by [`Ctx::control_unavailable`], if any.
    pub(crate) fn control_skip(&self) -> Option<String> {
        self.control_skip.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Fails unless the probe sees a process running in sandbox `sandbox_id`: proof that
    /// the orphan checks are not vacuous.
    pub(crate) async fn some_processes(&self, sandbox_id: &str, when: &str) -> Verdict {
        let running = self.probe("running_processes", self.probes.running_processes(sandbox_id)).await?;
        if running.is_empty() {
            Err(format!("expected the running_processes probe to see the command {when}, observed none"))
        } else {
            Ok(())
        }
    }

    /// As [`Ctx::no_processes`], owning its description (for closures).
    pub(crate) async fn no_processes_owned(&self, sandbox_id: &str, when: String) -> Verdict {
        self.no_processes(sandbox_id, &when).await
    }
}

/// Positive controls: each proves, in the test that then checks for an absence, that the
/// probe behind the check does observe the thing when it is there. When one cannot run,
/// the test ends through [`Ctx::control_unavailable`].
impl Ctx {
    /// The `running_processes` probe sees a command of `sandbox` while it runs: a command
    /// that prints a line and keeps running is started (streamed where `STREAM` is
    /// declared, else `run` in the background), and the probe is asked until it reports a
    /// process (within [`SETTLE`]). The command is then dropped, and the probe must come
    /// back empty again.
    pub(crate) async fn processes_control(&self, sandbox: &AnySandbox) -> Verdict {
        let seen = if self.caps.contains(Capabilities::STREAM) {
            let mut stream =
                sandbox.stream(self.probes.lingering_output()).map_err(|e| self.unexpected("stream", &e))?;
            match stream.next_chunk().await {
                Some(Ok(_)) => {}
                other => {
                    return Err(self.control_unavailable(format!(
                        "the lingering_output probe command printed nothing before it ended ({other:?})"
                    )));
                }
            }
            let seen = self.eventually_some_processes(sandbox.id()).await?;
            drop(stream);
            seen
        } else if let AnySandbox::Blocking(blocking) = sandbox {
            // The blocking facade's `run` holds its thread until the command ends and cannot
            // be dropped: it runs on a thread of its own, bounded by a timeout past the
            // watch's window, while this thread asks the probe.
            let hang = self.probes.hang().timeout(SETTLE + Duration::from_secs(5));
            std::thread::scope(|scope| {
                let runner = scope.spawn(|| blocking.run(hang));
                let seen = futures_lite::future::block_on(self.eventually_some_processes(sandbox.id()));
                let ended =
                    runner.join().map_err(|_| "the hang probe command's thread panicked".to_owned())?;
                match seen {
                    Ok(false) => {
                        Err(format!("the probe never saw the hang probe command, which ended: {ended:?}"))
                    }
                    other => other,
                }
            })
            .map_err(|e| self.control_unavailable(e))?
        } else {
            let run = async {
                let out = sandbox.run(self.probes.hang()).await;
                Err(format!("the hang probe command ended before the probe saw it: {out:?}"))
            };
            let watch = async { self.eventually_some_processes(sandbox.id()).await };
            futures_lite::future::or(watch, run).await.map_err(|e| self.control_unavailable(e))?
        };
        if !seen {
            return Err(self.control_unavailable(format!(
                "the running_processes probe saw no process in {} within {SETTLE:?} while a command \
                 ran there: its empty answers after a command ends would prove nothing",
                sandbox.id()
            )));
        }
        self.no_processes(sandbox.id(), "after the control command was dropped").await
    }

    /// The `running_processes` probe reports a process in `sandbox_id`, where a command
    /// the caller started is running, within [`SETTLE`].
    pub(crate) async fn running_control(&self, sandbox_id: &str) -> Verdict {
        if self.eventually_some_processes(sandbox_id).await? {
            Ok(())
        } else {
            Err(self.control_unavailable(format!(
                "the running_processes probe saw no process in {sandbox_id} within {SETTLE:?} while a \
                 command ran there: its empty answers after the command ends would prove nothing"
            )))
        }
    }

    /// Whether the `running_processes` probe reports a process in `sandbox_id` within
    /// [`SETTLE`].
    async fn eventually_some_processes(&self, sandbox_id: &str) -> std::result::Result<bool, String> {
        let started = std::time::Instant::now();
        loop {
            let running = self.probe("running_processes", self.probes.running_processes(sandbox_id)).await?;
            if !running.is_empty() {
                return Ok(true);
            }
            if started.elapsed() > SETTLE {
                return Ok(false);
            }
            futures_timer::Delay::new(Duration::from_millis(50)).await;
        }
    }

    /// The `live_sandboxes` probe lists the live sandbox `id`, labelled for this test.
    pub(crate) async fn sandbox_visible(&self, id: &str) -> Verdict {
        let live = self.probe("live_sandboxes", self.probes.live_sandboxes(LABEL_KEY, &self.token)).await?;
        if live.iter().any(|l| l == id) {
            Ok(())
        } else {
            Err(self.control_unavailable(format!(
                "the live_sandboxes probe does not list the live sandbox {id} labelled {LABEL_KEY}={} \
                 (it listed {live:?}): its empty answers after a teardown would prove nothing",
                self.token
            )))
        }
    }

    /// For tests that never hold a sandbox of their own (a refused or cancelled create):
    /// creates one with this test's label, checks the `live_sandboxes` probe lists it,
    /// closes it and checks the probe no longer does.
    pub(crate) async fn sandboxes_control(&self) -> Verdict {
        let sandbox = self.sandbox().await?;
        let visible = self.sandbox_visible(sandbox.id()).await;
        sandbox.close().await.map_err(|e| self.unexpected("close() of the control sandbox", &e))?;
        visible?;
        self.no_sandboxes("after the control sandbox was closed", Duration::ZERO).await
    }

    /// The egress probe reaches `canary` from a sandbox under allow-all (which needs no
    /// capability): the same probe failing under a stricter policy then means the policy
    /// blocked it, not that the probe cannot connect at all (its program missing from the
    /// image, a canary nobody reaches).
    pub(crate) async fn egress_control(&self, canary: &super::probes::Canary) -> Verdict {
        let out = self.egress(NetworkPolicy::allow_all(), &canary.host, canary.port).await?;
        if out.success() {
            return Ok(());
        }
        let command = self.probes.egress(&canary.host, canary.port);
        Err(self.control_unavailable(format!(
            "the egress probe {:?} did not reach the canary {}:{} even under allow-all ({}, stderr {:?}): \
             the probe program or the canary does not work here (override Probes::egress for this image)",
            command.argv(),
            canary.host,
            canary.port,
            out.status,
            out.stderr_lossy().trim()
        )))
    }

    /// The test network the backend's probes name: a test that needs it (and declared the
    /// `test_network` probe) ends through [`Ctx::control_unavailable`] when none is up.
    pub(crate) fn test_network(&self) -> std::result::Result<crate::testing::TestNetwork, String> {
        match self.probes.test_network() {
            Some(Ok(net)) => Ok(net),
            Some(Err(why)) => Err(self.control_unavailable(why)),
            None => {
                Err("probe test_network is not implemented (the case should have been skipped)".to_owned())
            }
        }
    }

    /// Runs the egress probe towards `host:port` in a new sandbox under `policy`.
    pub(crate) async fn egress(
        &self,
        policy: NetworkPolicy,
        host: &str,
        port: u16,
    ) -> std::result::Result<crate::ExecResult, String> {
        let sandbox = self
            .builder()
            .network(policy.clone())
            .create()
            .await
            .map_err(|e| self.unexpected("create()", &e))?;
        let out = sandbox.run(self.probes.egress(host, port).timeout(Duration::from_secs(30))).await;
        let _ = sandbox.close().await;
        out.map_err(|e| self.unexpected(&format!("run(egress) under {policy}"), &e))
    }
}
