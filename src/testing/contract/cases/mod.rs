//! The contract tests, one module per group of contract areas.

/// Runs `$body` with a fresh sandbox bound to `$sandbox`, and closes it whatever the verdict.
macro_rules! with_sandbox {
    ($cx:expr, |$sandbox:ident| $body:expr) => {{
        let $sandbox = $cx.sandbox().await?;
        let verdict: Verdict = async { $body }.await;
        let _ = $sandbox.close().await;
        verdict
    }};
}

mod allowlist;
mod cancellation;
mod code_stream;
mod exec;
mod facts;
mod fs;
mod honesty;
mod lifecycle;
mod observability;
mod policy;
mod same_words;
mod sync_parity;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use crate::backend::{Backend, BoxFuture};
use crate::policy::Capabilities;

use super::Row;
use super::ctx::{Ctx, Verdict};
use super::facade::AnySandbox;
use super::probes::{CancellationPoints, ProbeKind};
use super::version::{self, ContractVersion};

/// One contract test.
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) row: Row,
    /// The contract version the clause arrived in (from the frozen lists of `version.rs`).
    pub(crate) since: ContractVersion,
    /// Every one of these must be declared.
    pub(crate) requires: Capabilities,
    /// At least one of these must be declared (empty: no condition).
    pub(crate) requires_any: Capabilities,
    /// None of these may be declared (negative tests).
    pub(crate) requires_absent: Capabilities,
    /// At least one of these must be undeclared (empty: no condition).
    pub(crate) absent_any: Capabilities,
    pub(crate) probes: &'static [ProbeKind],
    pub(crate) needs_audit: bool,
    /// Waiting on other work: the test skips with this reason.
    pub(crate) pending: Option<&'static str>,
    /// Decides applicability from the backend itself: `Some(reason)` makes the test n/a.
    pub(crate) not_applicable: Option<fn(&dyn Backend) -> Option<String>>,
    /// Tests behaviour only the async API has: under the blocking facade the test is n/a
    /// with this reason.
    pub(crate) async_only: Option<&'static str>,
    pub(crate) run: fn(Arc<Ctx>) -> BoxFuture<'static, Verdict>,
}

impl Case {
    pub(crate) fn new(
        row: Row,
        name: &'static str,
        run: fn(Arc<Ctx>) -> BoxFuture<'static, Verdict>,
    ) -> Self {
        Case {
            name,
            row,
            since: version::since(name),
            requires: Capabilities::empty(),
            requires_any: Capabilities::empty(),
            requires_absent: Capabilities::empty(),
            absent_any: Capabilities::empty(),
            probes: &[],
            needs_audit: false,
            pending: None,
            not_applicable: None,
            async_only: None,
            run,
        }
    }

    pub(crate) fn requires(mut self, caps: Capabilities) -> Self {
        self.requires |= caps;
        self
    }

    pub(crate) fn requires_any(mut self, caps: Capabilities) -> Self {
        self.requires_any |= caps;
        self
    }

    pub(crate) fn absent(mut self, caps: Capabilities) -> Self {
        self.requires_absent |= caps;
        self
    }

    pub(crate) fn absent_any(mut self, caps: Capabilities) -> Self {
        self.absent_any |= caps;
        self
    }

    pub(crate) fn probes(mut self, probes: &'static [ProbeKind]) -> Self {
        self.probes = probes;
        self
    }

    pub(crate) fn unless(mut self, not_applicable: fn(&dyn Backend) -> Option<String>) -> Self {
        self.not_applicable = Some(not_applicable);
        self
    }

    /// Marks the test as one of async-only behaviour, n/a under the blocking facade for
    /// `reason`. Its body must use [`Ctx::async_sandbox`] or [`Ctx::async_builder`].
    pub(crate) fn async_only(mut self, reason: &'static str) -> Self {
        self.async_only = Some(reason);
        self
    }

    pub(crate) fn audited(mut self) -> Self {
        self.needs_audit = true;
        self
    }
}

/// Every contract test, in the order of the areas in `docs/contract.md`.
pub(crate) fn all() -> &'static [Case] {
    static ALL: OnceLock<Vec<Case>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut cases = Vec::new();
        cases.extend(lifecycle::cases());
        cases.extend(cancellation::cases());
        cases.extend(exec::cases());
        cases.extend(code_stream::cases());
        cases.extend(facts::cases());
        cases.extend(fs::cases());
        cases.extend(policy::cases());
        cases.extend(allowlist::cases());
        cases.extend(same_words::cases());
        cases.extend(honesty::cases());
        cases.extend(observability::cases());
        cases.extend(sync_parity::cases());
        cases
    })
}

/// Why the tests of cancellation by dropping a future are n/a under the blocking facade.
pub(crate) const CANCELLATION_IS_ASYNC: &str = "cancellation is dropping a future at its k-th poll; \
     a blocking call has no future for its caller to drop, it returns only once done";

/// How long a polled operation may sit without being woken before [`poll_k`] treats it as
/// idle in flight and cancels it there.
const IDLE: Duration = Duration::from_millis(500);

/// Records that the operation under test was woken.
struct WakeFlag {
    woken: AtomicBool,
    event: event_listener::Event,
}

impl Wake for WakeFlag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.event.notify(usize::MAX);
    }
}

/// Polls `fut` until it completes, or has returned `Pending` `k` times, or sits idle (not
/// woken for [`IDLE`]) while in flight, then drops it: cancellation at the k-th suspension
/// point. Wake-ups are real, so this works on any backend and executor; the idle rule
/// keeps a command that waits for an hour from stalling the test.
pub(crate) async fn poll_k<F: Future>(fut: F, k: usize) -> Option<F::Output> {
    if k == 0 {
        return None;
    }
    let mut fut = pin!(fut);
    let flag = Arc::new(WakeFlag { woken: AtomicBool::new(false), event: event_listener::Event::new() });
    let waker = Waker::from(Arc::clone(&flag));
    let mut pendings = 0;
    loop {
        flag.woken.store(false, Ordering::Release);
        if let Poll::Ready(v) = fut.as_mut().poll(&mut Context::from_waker(&waker)) {
            return Some(v);
        }
        pendings += 1;
        if pendings >= k {
            return None;
        }
        let listener = flag.event.listen();
        if !flag.woken.load(Ordering::Acquire) {
            let woke = futures_lite::future::or(
                async {
                    listener.await;
                    true
                },
                async {
                    futures_timer::Delay::new(IDLE).await;
                    false
                },
            )
            .await;
            if !woke && !flag.woken.load(Ordering::Acquire) {
                return None;
            }
        }
    }
}

/// The values of k to cancel at: 0, 1, … until `op` completes (or the adapter's sample,
/// then one run to completion). `op(k)` returns `Some` when it completed.
pub(crate) async fn each_cancellation_point<T, Fut, Op, Check, CheckFut>(
    cx: &Ctx,
    mut op: Op,
    mut check: Check,
) -> Verdict
where
    Op: FnMut(usize) -> Fut,
    Fut: Future<Output = Option<T>>,
    Check: FnMut(usize) -> CheckFut,
    CheckFut: Future<Output = Verdict>,
{
    match cx.probes.cancellation_points() {
        CancellationPoints::Every => {
            for k in 0..10_000 {
                let done = op(k).await.is_some();
                check(k).await?;
                if done {
                    // Completing on the first poll leaves no point to cancel at: cancel safe
                    // by construction.
                    return Ok(());
                }
            }
            Err("expected the operation to complete within 10000 polls, observed none".to_owned())
        }
        CancellationPoints::Sample(ks) => {
            let mut cancelled = 0;
            for k in ks {
                cancelled += usize::from(op(k).await.is_none());
                check(k).await?;
            }
            if cancelled == 0 {
                Err("expected at least one sampled cancellation point to catch the operation in flight, observed every one completing".to_owned())
            } else {
                Ok(())
            }
        }
    }
}

/// The cancellation clause for one operation on an async sandbox: `op` is started on a
/// fresh sandbox and dropped at each cancellation point ([`each_cancellation_point`]), and
/// after each drop the `running_processes` probe must find none of the sandbox's processes
/// left. The probe's positive control runs first. `dropped` says what was dropped, for the
/// failure message ("after {dropped} at poll k"). The sandbox is closed whatever the verdict.
pub(crate) async fn no_process_outlives<T>(
    cx: &Ctx,
    dropped: &str,
    op: impl for<'s> Fn(&'s AnySandbox) -> BoxFuture<'s, T>,
) -> Verdict {
    let sandbox = AnySandbox::Async(cx.async_sandbox().await?);
    let verdict = match cx.processes_control(&sandbox).await {
        Ok(()) => {
            each_cancellation_point(
                cx,
                |k| poll_k(op(&sandbox), k),
                |k| cx.no_processes_owned(sandbox.id(), format!("after {dropped} at poll {k}")),
            )
            .await
        }
        Err(e) => Err(e),
    };
    let _ = sandbox.close().await;
    verdict
}
