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
/// # Errors
///
/// Whatever `work` returns, or [`ErrorCode::Provider`](crate::ErrorCode::Provider) when
/// the thread could not be started or `work` panicked.
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
    let shared = Arc::new(Shared { state: Mutex::new(State::default()), changed: Condvar::new() });
    let finisher = Arc::clone(&shared);
    let token = CancelToken { shared: Arc::clone(&shared) as Arc<dyn TokenState> };
    let name = backend.to_owned();
    let job: Job = Box::new(move || {
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| work(&token)))
            .unwrap_or_else(|_| Err(Error::provider_message(name, "a blocking provider call panicked")));
        finisher.finish(result);
    });
    Blocking { shared, job: Some(job), done: false, backend: backend.to_owned() }
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
    backend: String,
}

impl<T> std::fmt::Debug for Blocking<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blocking")
            .field("backend", &self.backend)
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
        if let Some(job) = self.job.take() {
            let spawned = std::thread::Builder::new().name("sandboxio-blocking".into()).spawn(job);
            if let Err(e) = spawned {
                self.done = true;
                let backend = std::mem::take(&mut self.backend);
                return Poll::Ready(Err(Error::provider(
                    backend,
                    "could not start a thread for a blocking provider call",
                    e,
                )));
            }
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
        if !hooks.is_empty() {
            // A hook makes provider calls: never on the dropping (executor) thread.
            let _ = std::thread::Builder::new()
                .name("sandboxio-cancel".into())
                .spawn(move || hooks.into_iter().for_each(|hook| hook()));
        }
    }
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
    pub fn on_cancel(&self, hook: impl FnOnce() + Send + 'static) {
        if let Some(hook) = self.shared.add_hook(Box::new(hook)) {
            hook();
        }
    }
}

/// The part of [`Shared`] a [`CancelToken`] needs, without the result's type.
trait TokenState: Send + Sync {
    fn cancelled(&self) -> bool;
    fn wait(&self, timeout: Duration) -> bool;
    /// Keeps `hook` for a later cancellation, or hands it back when already cancelled.
    fn add_hook(&self, hook: Hook) -> Option<Hook>;
}

impl<T: Send> TokenState for Shared<T> {
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
