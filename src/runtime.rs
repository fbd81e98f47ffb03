//! The library's own executor: background teardown of dropped sandboxes, [`shutdown`], and
//! running blocking host I/O off the caller's executor.
//!
//! Nothing here starts before it is needed: a thread is spawned only when a sandbox is
//! dropped un-closed, or when host files are read or written.

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use event_listener::Event;
use futures_lite::{FutureExt as _, future};
use std::panic::AssertUnwindSafe;

use crate::audit::{AuditConfig, OperationKind, OperationRecord, Outcome};

/// How long a background teardown may take, by default, before the sandbox is reported
/// orphaned: 30 seconds.
pub const TEARDOWN_GRACE: Duration = Duration::from_secs(30);

static GRACE_MILLIS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(30_000);

/// Sets the process-wide grace bound of background teardowns (default
/// [`TEARDOWN_GRACE`]). Teardowns already running keep the bound they started with.
/// Zero reports a teardown that has not finished at once; a grace above
/// [`MAX_TIMEOUT`](crate::exec::MAX_TIMEOUT) (30 days) saturates at it. Kept in whole
/// milliseconds (rounded down).
pub fn set_teardown_grace(grace: Duration) {
    let millis = u64::try_from(crate::duration::saturate(grace).as_millis()).unwrap_or(u64::MAX);
    GRACE_MILLIS.store(millis, std::sync::atomic::Ordering::Relaxed);
}

/// The grace bound of background teardowns now in effect.
#[must_use]
pub fn teardown_grace() -> Duration {
    Duration::from_millis(GRACE_MILLIS.load(std::sync::atomic::Ordering::Relaxed))
}

/// Runs blocking `work` on a thread of its own and awaits its result, so that host file
/// I/O never blocks the caller's executor.
pub(crate) async fn unblock<T, F>(work: F) -> crate::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> crate::Result<T> + Send + 'static,
{
    crate::backend::run_blocking("host", |_| work()).await
}

/// Teardowns still running in the background.
struct Pending {
    count: Mutex<usize>,
    changed: Event,
}

fn pending() -> &'static Pending {
    static PENDING: std::sync::OnceLock<Pending> = std::sync::OnceLock::new();
    PENDING.get_or_init(|| Pending { count: Mutex::new(0), changed: Event::new() })
}

fn pending_count() -> usize {
    *pending().count.lock().unwrap_or_else(PoisonError::into_inner)
}

fn adjust_pending(up: bool) {
    let p = pending();
    let mut n = p.count.lock().unwrap_or_else(PoisonError::into_inner);
    if up {
        *n += 1;
    } else {
        *n -= 1;
    }
    drop(n);
    p.changed.notify(usize::MAX);
}

/// What a background teardown needs to report an orphan.
pub(crate) struct TeardownReport {
    pub(crate) audit: AuditConfig,
    pub(crate) template: OperationRecord,
}

/// Runs `teardown` on a library-owned thread, bounded by `grace` (default
/// [`teardown_grace`]). Never blocks,
/// never panics. If the grace expires, a `tracing` warning on target `sandboxio::orphan`
/// and an [`OperationKind::OrphanedSandbox`] record report the sandbox.
pub(crate) fn spawn_teardown<F>(teardown: F, report: TeardownReport, grace: Option<Duration>)
where
    F: Future<Output = Outcome> + Send + 'static,
{
    adjust_pending(true);
    let grace = crate::duration::saturate(grace.unwrap_or_else(teardown_grace));
    let spawned = std::thread::Builder::new().name("sandboxio-teardown".into()).spawn(move || {
        // Counted down however this thread ends, a panicking sink included.
        let _pending = PendingGuard;
        let started = Instant::now();
        let guarded = AssertUnwindSafe(teardown).catch_unwind();
        let bounded = future::or(async { Some(guarded.await) }, async {
            futures_timer::Delay::new(grace).await;
            None
        });
        let outcome = future::block_on(bounded);
        let mut record = report.template;
        record.duration = started.elapsed();
        let why = match outcome {
            Some(Ok(outcome)) => {
                record.kind = OperationKind::DropTeardown;
                record.outcome = outcome;
                report.audit.emit(&record);
                return;
            }
            Some(Err(_panic)) => "the backend's kill panicked".to_owned(),
            None => format!("teardown did not finish within {grace:?}"),
        };
        record.kind = OperationKind::OrphanedSandbox;
        record.outcome = Outcome::Error(crate::ErrorCode::Provider);
        tracing::warn!(
            target: "sandboxio::orphan",
            sandbox_id = record.sandbox_id.as_deref().unwrap_or(""),
            backend = %record.backend,
            labels = ?record.metadata,
            "a dropped sandbox may still be running: {why}"
        );
        report.audit.emit(&record);
    });
    if spawned.is_err() {
        adjust_pending(false);
        tracing::warn!(target: "sandboxio::orphan", "could not start a teardown thread; the sandbox is left to its TTL");
    }
}

/// Decrements the pending-teardown count when dropped.
struct PendingGuard;

impl Drop for PendingGuard {
    fn drop(&mut self) {
        adjust_pending(false);
    }
}

/// Waits until every background teardown (of sandboxes dropped without `close()`) has
/// finished, or for at most `deadline` (a duration from now; `Duration::MAX` waits as
/// long as it takes). Call it at the end of `main` so that a clean exit leaves nothing
/// running.
///
/// Returns the number of teardowns still running at the deadline (0 when all finished).
///
/// # Cancel safety
///
/// Cancel safe: dropping the future stops waiting; the teardowns go on.
pub async fn shutdown(deadline: Duration) -> usize {
    // A deadline too far to represent waits for ever, as the caller asked.
    let end = Instant::now().checked_add(deadline);
    loop {
        let listener = pending().changed.listen();
        let n = pending_count();
        if n == 0 {
            return 0;
        }
        match end {
            None => listener.await,
            Some(end) => {
                let now = Instant::now();
                if now >= end {
                    return n;
                }
                future::or(listener, futures_timer::Delay::new(end - now)).await;
            }
        }
    }
}

/// The number of background teardowns still running.
#[must_use]
pub fn pending_teardowns() -> usize {
    pending_count()
}
