//! A private tokio runtime for a backend whose client library needs tokio (bollard for
//! `docker://`, reqwest for `e2b://`).
//!
//! sandboxio's callers may run any executor, or none (the blocking facade). A backend's
//! network work is spawned onto its [`Portal`] and awaited through a [`Task`], which any
//! executor can poll. A portal's runtime starts on first use, never when a backend is built,
//! and lives for the rest of the process (two worker threads named after the portal).

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use crate::error::{Error, Result};

/// One backend's runtime: built lazily, shared by every sandbox of that backend.
pub(crate) struct Portal {
    /// The backend's scheme, for errors.
    scheme: &'static str,
    /// The worker threads' name.
    thread_name: &'static str,
    runtime: OnceLock<std::result::Result<tokio::runtime::Runtime, String>>,
}

impl Portal {
    /// A portal that starts nothing until its first [`Portal::spawn`].
    pub(crate) const fn new(scheme: &'static str, thread_name: &'static str) -> Self {
        Portal { scheme, thread_name, runtime: OnceLock::new() }
    }

    fn runtime(&self) -> Result<&tokio::runtime::Runtime> {
        self.runtime
            .get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name(self.thread_name)
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| Error::provider(self.scheme, "cannot start the backend's runtime thread", e.clone()))
    }

    /// Spawns `work` on the runtime. The returned future yields its output; dropping it
    /// aborts the task (which drops the client's futures, closing their connections). Work
    /// that must finish even when the caller goes away (a kill) is spawned with
    /// [`Portal::detach`].
    pub(crate) fn spawn<T, F>(&'static self, work: F) -> Task<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        match self.runtime() {
            Ok(rt) => Task { scheme: self.scheme, inner: Some(rt.spawn(work)), failed: None },
            Err(e) => Task { scheme: self.scheme, inner: None, failed: Some(e) },
        }
    }

    /// Spawns `work` to run to completion whatever happens to the caller.
    pub(crate) fn detach<F>(&'static self, work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if let Ok(rt) = self.runtime() {
            drop(rt.spawn(work));
        }
    }
}

#[cfg(any(feature = "e2b", feature = "modal"))]
impl Portal {
    /// `work` spawned when `alive` is `Ok` (a sandbox handle's check), else its error: the
    /// shape of every operation of a remote sandbox.
    pub(crate) fn spawn_if_alive<T, F>(
        &'static self,
        alive: Result<()>,
        work: impl FnOnce() -> F,
    ) -> Pin<Box<dyn Future<Output = Result<T>> + Send + 'static>>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        match alive {
            Ok(()) => Box::pin(self.spawn(work())),
            Err(e) => Box::pin(async { Err(e) }),
        }
    }

    /// Runs a remote sandbox's creation to its end on the runtime whatever the caller does
    /// (a request cut off mid-flight could still create a sandbox nobody knows about), and
    /// gives its result if it comes within `timeout`. A created sandbox nobody receives (the
    /// timeout passed, the caller's future was dropped) goes to `orphan`, which ends it.
    ///
    /// # Errors
    ///
    /// `work`'s error; [`Error::CreateTimeout`] after `timeout`.
    pub(crate) async fn create_to_end<T, F>(
        &'static self,
        timeout: std::time::Duration,
        work: F,
        orphan: impl FnOnce(T) + Send + 'static,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let (deliver, delivered) = tokio::sync::oneshot::channel::<Result<T>>();
        self.detach(async move {
            if let Err(Ok(unwanted)) = deliver.send(work.await) {
                orphan(unwanted);
            }
        });
        let timed = futures_lite::future::or(async { Some(delivered.await) }, async {
            futures_timer::Delay::new(crate::duration::saturate(timeout)).await;
            None
        });
        match timed.await {
            Some(Ok(created)) => created,
            Some(Err(_)) => Err(Error::provider_message(
                self.scheme,
                "the runtime dropped the creation before it had a result",
            )),
            None => Err(Error::create_timeout(timeout)),
        }
    }
}

/// A task on a [`Portal`], aborted when dropped.
pub(crate) struct Task<T> {
    scheme: &'static str,
    inner: Option<tokio::task::JoinHandle<Result<T>>>,
    failed: Option<Error>,
}

#[cfg(any(feature = "e2b", feature = "modal"))]
impl<T> Task<T> {
    /// A handle that aborts the task from elsewhere (an interrupt), `None` when it never
    /// started.
    #[cfg_attr(
        not(any(feature = "docker", feature = "e2b", feature = "local")),
        allow(dead_code, reason = "built with modal too, used by the other backends")
    )]
    pub(crate) fn abort_handle(&self) -> Option<tokio::task::AbortHandle> {
        self.inner.as_ref().map(tokio::task::JoinHandle::abort_handle)
    }

    /// Lets the task run on its own (this value no longer aborts it) and returns what can
    /// still stop it: for background work with an owner elsewhere (a keepalive).
    pub(crate) fn into_abort_handle(mut self) -> Option<tokio::task::AbortHandle> {
        self.inner.take().map(|handle| handle.abort_handle())
    }
}

impl<T> Future for Task<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        if let Some(e) = self.failed.take() {
            return Poll::Ready(Err(e));
        }
        let scheme = self.scheme;
        let Some(handle) = self.inner.as_mut() else {
            return Poll::Ready(Err(Error::provider_message(
                scheme,
                "the task was already awaited (polled after completion)",
            )));
        };
        match Pin::new(handle).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(done) => {
                self.inner = None;
                Poll::Ready(done.unwrap_or_else(|e| {
                    Err(Error::provider(scheme, "a backend task panicked or was cancelled", e))
                }))
            }
        }
    }
}

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        if let Some(handle) = self.inner.take() {
            handle.abort();
        }
    }
}
