//! [`run_blocking`]: a blocking provider call as a future any executor can await.
//!
//! An adapter whose provider offers only a blocking SDK (or a blocking HTTP client, or
//! `std::process`) must still never block the caller's executor, and dropping the future
//! it returns must stop the work. This module does the plumbing once: the call runs on a
//! thread of its own, its result wakes the awaiting task, and dropping the future before
//! the call returns cancels it through a [`CancelToken`].

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::error::{Error, Result};

/// Runs `work` on a thread of its own once the returned future is first polled, and
/// resolves to what `work` returned.
///
/// `backend` is the adapter's scheme; it names the backend in the
/// [`Error::Provider`] returned when the thread cannot be started or `work` panics.
///
/// The future is lazy: nothing runs until it is polled, so a future dropped unpolled
/// starts nothing. Each call takes one thread (named `sandboxio-blocking`) for as long as
/// `work` runs; the thread does not outlive `work`.
///
/// # Cancellation
///
/// Dropping the future before `work` returns cancels it: [`CancelToken::is_cancelled`]
/// turns `true`, [`CancelToken::wait`] returns early, and every hook registered with
/// [`CancelToken::on_cancel`] runs on a thread of its own (the drop itself never blocks).
/// `work` keeps running until it returns: stopping the provider's operation is the hook's
/// job (kill the process, delete the remote execution). Hooks do not run when `work` had
/// already returned.
///
/// Nothing here bounds `work`: a call that never returns holds its thread for good, and
/// a caller that waits for it (the blocking facade, a test harness's timeout racing the
/// future) waits with it. Give every provider call inside `work` its own deadline (a
/// client or SDK timeout, a loop on [`CancelToken::wait`] that gives up), so that `work`
/// always returns.
///
/// Every registered hook runs exactly once on cancellation, whatever the others do: a hook
/// that panics does not stop the later ones, and its panic is reported as a `tracing`
/// warning on target `sandboxio::blocking` (nobody awaits a cancelled call, so there is no
/// caller to return it to). When the host cannot start the hooks' thread, they run on the
/// dropping thread instead (blocking it for as long as they take, and warned about on the
/// same target): a hook is never dropped unrun.
///
/// # Errors
///
/// Whatever `work` returns, or [`ErrorCode::Provider`](crate::ErrorCode::Provider):
/// - when the host could not start the thread: the message says so, and
///   [`std::error::Error::source`] is the [`std::io::Error`] the spawn returned (`work`
///   never ran, so it registered no hook and left nothing to cancel);
/// - when `work` panicked: the message says so, with no source.
///
/// # Example
///
/// A blocking provider client's `exec` call, with a kill request sent if the caller drops
/// the future:
///
/// ```
/// use sandboxio::backend::run_blocking;
/// # #[derive(Clone)] struct Client;
/// # impl Client {
/// #     fn exec(&self, _id: &str) -> Result<String, std::io::Error> { Ok("done".into()) }
/// #     fn kill(&self, _id: &str) {}
/// # }
/// # futures_lite::future::block_on(async {
/// let client = Client;
/// let exec_id = "exec-1".to_owned();
/// let out = run_blocking("fly", move |cancel| {
///     let (killer, id) = (client.clone(), exec_id.clone());
///     cancel.on_cancel(move || killer.kill(&id));
///     client.exec(&exec_id).map_err(|e| sandboxio::Error::provider("fly", "exec failed", e))
/// })
/// .await?;
/// assert_eq!(out, "done");
/// # Ok::<(), sandboxio::Error>(())
/// # }).unwrap();
/// ```
pub fn run_blocking<T, F>(backend: &str, work: F) -> Blocking<T>
where
    T: Send + 'static,
    F: FnOnce(&CancelToken) -> Result<T> + Send + 'static,
{
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        changed: Condvar::new(),
        backend: backend.to_owned(),
    });
    let finisher = Arc::clone(&shared);
    let token = CancelToken { shared: Arc::clone(&shared) as Arc<dyn TokenState> };
    let name = backend.to_owned();
    let job: Job = Box::new(move || {
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| work(&token)))
            .unwrap_or_else(|_| Err(Error::provider_message(name, "a blocking provider call panicked")));
        finisher.finish(result);
    });
    Blocking { shared, job: Some(job), done: false }
}

type Job = Box<dyn FnOnce() + Send>;
type Hook = Box<dyn FnOnce() + Send>;

/// The future [`run_blocking`] returns. Dropping it before it completes cancels the
/// work (see [`run_blocking`]).
#[must_use = "futures do nothing unless polled"]
pub struct Blocking<T> {
    shared: Arc<Shared<T>>,
    /// The work, until the first poll starts its thread.
    job: Option<Job>,
    /// The result was taken: a later drop cancels nothing.
    done: bool,
}

impl<T> std::fmt::Debug for Blocking<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blocking")
            .field("backend", &self.shared.backend)
            .field("started", &self.job.is_none())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

/// Shared between the future, the worker thread and every [`CancelToken`].
struct Shared<T> {
    state: Mutex<State<T>>,
    /// Signalled on cancellation, for [`CancelToken::wait`].
    changed: Condvar,
    /// The adapter's scheme, for errors and warnings.
    backend: String,
}

struct State<T> {
    result: Option<Result<T>>,
    /// `work` returned (its result may already be taken).
    finished: bool,
    cancelled: bool,
    hooks: Vec<Hook>,
    waker: Option<Waker>,
}

impl<T> Default for State<T> {
    fn default() -> Self {
        State { result: None, finished: false, cancelled: false, hooks: Vec::new(), waker: None }
    }
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn finish(&self, result: Result<T>) {
        let mut state = self.lock();
        state.result = Some(result);
        state.finished = true;
        // Nothing is left to cancel: the hooks would only act on a finished call.
        state.hooks.clear();
        let waker = state.waker.take();
        drop(state);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T: Send + 'static> Future for Blocking<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        {
            let mut state = self.shared.lock();
            if let Some(result) = state.result.take() {
                drop(state);
                self.done = true;
                return Poll::Ready(result);
            }
            state.waker = Some(cx.waker().clone());
        }
        if let Some(job) = self.job.take()
            && let Err(e) = spawn("sandboxio-blocking", job)
        {
            // `work` never ran: no hook was registered, nothing is left to cancel.
            self.done = true;
            return Poll::Ready(Err(Error::provider(
                self.shared.backend.clone(),
                "could not start a thread for a blocking provider call (the host is out of threads or memory)",
                e,
            )));
        }
        Poll::Pending
    }
}

impl<T> Drop for Blocking<T> {
    fn drop(&mut self) {
        if self.done || self.job.is_some() {
            // Finished and taken, or never started: nothing to cancel.
            return;
        }
        let mut state = self.shared.lock();
        if state.finished {
            return;
        }
        state.cancelled = true;
        let hooks = std::mem::take(&mut state.hooks);
        drop(state);
        self.shared.changed.notify_all();
        if hooks.is_empty() {
            return;
        }
        // A hook makes provider calls: never on the dropping (executor) thread, unless no
        // thread can be had; then blocking the dropper beats leaving the provider's work
        // running with nobody to stop it.
        let backend = self.shared.backend.clone();
        let hooks = Arc::new(Mutex::new(Some(hooks)));
        let handed = Arc::clone(&hooks);
        let to_thread = Box::new(move || run_hooks(&backend, take_hooks(&handed)));
        if let Err(e) = spawn("sandboxio-cancel", to_thread) {
            tracing::warn!(
                target: "sandboxio::blocking",
                backend = %self.shared.backend,
                "could not start a thread for the cancel hooks ({e}); running them on the dropping thread"
            );
            run_hooks(&self.shared.backend, take_hooks(&hooks));
        }
    }
}

/// The hooks, once: whoever takes them first runs them (a failed spawn drops its closure
/// without running it, so the hooks must not live only inside that closure).
fn take_hooks(hooks: &Mutex<Option<Vec<Hook>>>) -> Vec<Hook> {
    hooks.lock().unwrap_or_else(PoisonError::into_inner).take().unwrap_or_default()
}

/// Runs every hook, each under its own `catch_unwind`: one hook's panic never keeps the
/// later hooks from stopping what they stop.
fn run_hooks(backend: &str, hooks: Vec<Hook>) {
    for hook in hooks {
        run_hook(backend, hook);
    }
}

/// Runs one hook; a panic is reported, not propagated (nobody awaits a cancelled call).
fn run_hook(backend: &str, hook: Hook) {
    if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(hook)) {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string payload".to_owned());
        tracing::warn!(
            target: "sandboxio::blocking",
            backend = %backend,
            "a cancel hook panicked: {what}; the other hooks still ran"
        );
    }
}

/// Starts a named thread. Under `cfg(test)` a thread-local switch makes it fail, the only
/// way to reach the paths taken when the host has no thread to give.
fn spawn(name: &str, job: Job) -> std::io::Result<()> {
    #[cfg(test)]
    if tests::SPAWN_FAILS.with(std::cell::Cell::get) {
        drop(job);
        return Err(std::io::Error::new(std::io::ErrorKind::WouldBlock, "spawn refused by the test"));
    }
    std::thread::Builder::new().name(name.to_owned()).spawn(job).map(drop)
}

/// Handed to the work of [`run_blocking`]: tells it whether the awaiting future was
/// dropped, and runs hooks when it is.
pub struct CancelToken {
    shared: Arc<dyn TokenState>,
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken").field("cancelled", &self.is_cancelled()).finish()
    }
}

impl CancelToken {
    /// Whether the future was dropped before the work returned.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancelled()
    }

    /// Blocks the calling (worker) thread for up to `timeout`, returning early with
    /// `true` once the future is dropped; `false` when the time passed uncancelled. For
    /// polling loops against a provider: `while !cancel.wait(Duration::from_millis(200))
    /// { /* ask again */ }`.
    #[must_use]
    pub fn wait(&self, timeout: Duration) -> bool {
        self.shared.wait(timeout)
    }

    /// Runs `hook` if the future is dropped before the work returns: on a thread of its
    /// own at the drop, or at once on this thread when it was already dropped. A hook
    /// registered after the work returned never runs. Use it to stop what the blocking
    /// call cannot be interrupted from (kill a child process, delete a remote execution).
    /// A hook's panic never unwinds into the caller: it is reported as a `tracing`
    /// warning (target `sandboxio::blocking`) and the other hooks still run.
    pub fn on_cancel(&self, hook: impl FnOnce() + Send + 'static) {
        if let Some(hook) = self.shared.add_hook(Box::new(hook)) {
            // Already cancelled: run it here, under the same rule as at the drop (a panic
            // is reported, and does not unwind into the work).
            run_hook(self.shared.backend(), hook);
        }
    }
}

/// The part of [`Shared`] a [`CancelToken`] needs, without the result's type.
trait TokenState: Send + Sync {
    fn backend(&self) -> &str;
    fn cancelled(&self) -> bool;
    fn wait(&self, timeout: Duration) -> bool;
    /// Keeps `hook` for a later cancellation, or hands it back when already cancelled.
    fn add_hook(&self, hook: Hook) -> Option<Hook>;
}

impl<T: Send> TokenState for Shared<T> {
    fn backend(&self) -> &str {
        &self.backend
    }

    fn cancelled(&self) -> bool {
        self.lock().cancelled
    }

    fn wait(&self, timeout: Duration) -> bool {
        let state = self.lock();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, timeout, |s| !s.cancelled)
            .unwrap_or_else(PoisonError::into_inner);
        state.cancelled
    }

    fn add_hook(&self, hook: Hook) -> Option<Hook> {
        let mut state = self.lock();
        if state.cancelled {
            return Some(hook);
        }
        if !state.finished {
            state.hooks.push(hook);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    use super::*;
    use crate::ErrorCode;

    thread_local! {
        /// Makes [`spawn`] fail on this thread.
        pub(super) static SPAWN_FAILS: Cell<bool> = const { Cell::new(false) };
    }

    fn block_on<F: Future>(fut: F) -> F::Output {
        futures_lite::future::block_on(fut)
    }

    #[test]
    fn a_thread_the_host_refuses_is_a_provider_error_with_the_io_error_as_source() {
        SPAWN_FAILS.with(|f| f.set(true));
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&ran);
        let result = block_on(run_blocking("fly", move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }));
        SPAWN_FAILS.with(|f| f.set(false));
        let err = result.unwrap_err();
        assert_eq!(err.code(), ErrorCode::Provider);
        assert!(err.to_string().contains("fly") && err.to_string().contains("thread"), "observed {err}");
        let source = std::error::Error::source(&err).expect("expected the spawn's error as source");
        assert!(
            source.downcast_ref::<std::io::Error>().is_some(),
            "expected an io::Error, observed {source:?}"
        );
        assert_eq!(ran.load(Ordering::SeqCst), 0, "expected the work never to run");
    }

    #[test]
    fn hooks_run_on_the_dropping_thread_when_no_cancel_thread_can_be_started() {
        let (registered_tx, registered_rx) = mpsc::channel();
        let (ran_tx, ran_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let mut fut = Box::pin(run_blocking("fly", move |cancel| {
            for n in 0..2 {
                let tx = ran_tx.clone();
                cancel.on_cancel(move || tx.send((n, std::thread::current().id())).unwrap());
            }
            registered_tx.send(()).unwrap();
            let _ = release_rx.recv_timeout(Duration::from_secs(10));
            Ok(())
        }));
        assert!(block_on(futures_lite::future::poll_once(fut.as_mut())).is_none());
        registered_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        SPAWN_FAILS.with(|f| f.set(true));
        drop(fut);
        SPAWN_FAILS.with(|f| f.set(false));
        release_tx.send(()).unwrap();
        let here = std::thread::current().id();
        let ran: Vec<_> = ran_rx.try_iter().collect();
        assert_eq!(ran, vec![(0, here), (1, here)], "expected both hooks, inline, by the time drop returned");
    }

    /// Counts `tracing` warnings on target `sandboxio::blocking` (this thread only).
    struct Warnings(Arc<AtomicUsize>);

    impl tracing::Subscriber for Warnings {
        fn enabled(&self, meta: &tracing::Metadata<'_>) -> bool {
            meta.target() == "sandboxio::blocking"
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            if *event.metadata().level() == tracing::Level::WARN {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn a_panicking_hook_is_reported_and_the_later_hooks_still_run() {
        let warnings = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        let hooks: Vec<Hook> = (0..3)
            .map(|n| {
                let ran = Arc::clone(&ran);
                Box::new(move || {
                    assert_ne!(n, 1, "hook 1 fails");
                    ran.fetch_add(1, Ordering::SeqCst);
                }) as Hook
            })
            .collect();
        tracing::subscriber::with_default(Warnings(Arc::clone(&warnings)), || run_hooks("fly", hooks));
        assert_eq!(ran.load(Ordering::SeqCst), 2, "expected hooks 0 and 2 to run around the panic");
        assert_eq!(warnings.load(Ordering::SeqCst), 1, "expected one warning for the panic");
    }
}
