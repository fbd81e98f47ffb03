//! The private tokio runtime that drives bollard: a [`Portal`] (see
//! `src/backends/common/portal.rs`) whose two worker threads are named `sandboxio-docker`.
//!
//! bollard (through hyper) needs tokio; sandboxio's callers may run any executor, or none
//! (the blocking facade). Every Docker operation is spawned onto this runtime and awaited
//! through its [`Task`], which any executor can poll. The runtime starts on the first
//! `create`/`connect`/`reap`, never when a backend is built, and lives for the rest of the
//! process.

use std::future::Future;

use crate::backends::common::portal::Portal;
pub(super) use crate::backends::common::portal::Task;
use crate::error::Result;

static PORTAL: Portal = Portal::new(super::SCHEME, "sandboxio-docker");

/// Spawns `work` on the Docker runtime; dropping the returned [`Task`] aborts it.
pub(super) fn spawn<T, F>(work: F) -> Task<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    PORTAL.spawn(work)
}

/// Spawns `work` to run to completion whatever happens to the caller.
pub(super) fn detach<F>(work: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    PORTAL.detach(work);
}
