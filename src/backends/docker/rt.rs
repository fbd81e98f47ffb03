//! The private tokio runtime that drives bollard.
//!
//! bollard (through hyper) needs tokio; sandboxio's callers may run any executor, or none
//! (the blocking facade). Every Docker operation is spawned onto this runtime and awaited
//! through its [`JoinHandle`](tokio::task::JoinHandle), which any executor can poll. The
//! runtime starts on the first `create`/`connect`/`reap`, never when a backend is built,
//! and lives for the rest of the process (two worker threads named `sandboxio-docker`).

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use crate::error::{Error, Result};

fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("sandboxio-docker")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::provider(super::SCHEME, "cannot start the Docker runtime thread", e.clone()))
}

/// Spawns `work` on the Docker runtime. The returned future yields its output; dropping it
/// aborts the task (which drops bollard's futures, closing their connections). Work that
/// must finish even when the caller goes away (a kill) is spawned with [`detach`].
pub(super) fn spawn<T, F>(work: F) -> Task<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    match runtime() {
        Ok(rt) => Task { inner: Some(rt.spawn(work)), failed: None },
        Err(e) => Task { inner: None, failed: Some(e) },
    }
}

/// Spawns `work` to run to completion whatever happens to the caller.
pub(super) fn detach<F>(work: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    if let Ok(rt) = runtime() {
        drop(rt.spawn(work));
    }
}

/// A task on the Docker runtime, aborted when dropped.
pub(super) struct Task<T> {
    inner: Option<tokio::task::JoinHandle<Result<T>>>,
    failed: Option<Error>,
}

impl<T> Future for Task<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        if let Some(e) = self.failed.take() {
            return Poll::Ready(Err(e));
        }
        let Some(handle) = self.inner.as_mut() else {
            return Poll::Ready(Err(Error::provider_message(
                super::SCHEME,
                "the task was already awaited (polled after completion)",
            )));
        };
        match Pin::new(handle).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(done) => {
                self.inner = None;
                Poll::Ready(done.unwrap_or_else(|e| {
                    Err(Error::provider(super::SCHEME, "a Docker task panicked or was cancelled", e))
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
