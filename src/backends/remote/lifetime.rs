//! A remote sandbox handle's lifetime: whether the caller owns it (it is ended when the
//! last handle goes), whether it was killed, and the keepalive task that renews an owned
//! one (how it renews is the adapter's: a TTL on E2B, an exec on Modal).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::backends::common::portal::{Portal, Task};
use crate::error::{Error, Result};

/// The flags and keepalive of one sandbox, shared by all its handles.
pub(crate) struct Lifetime {
    owned: AtomicBool,
    killed: AtomicBool,
    keepalive: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Lifetime {
    /// A sandbox this process owns (`owned`) or only reaches (connected, detached).
    pub(crate) fn new(owned: bool) -> Self {
        Lifetime {
            owned: AtomicBool::new(owned),
            killed: AtomicBool::new(false),
            keepalive: Mutex::default(),
        }
    }

    pub(crate) fn is_owned(&self) -> bool {
        self.owned.load(Ordering::SeqCst)
    }

    pub(crate) fn is_killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    /// [`Error::SandboxGone`] for sandbox `id` once it was killed (`ended` says how).
    pub(crate) fn check_alive(&self, id: &str, ended: &str) -> Result<()> {
        if self.is_killed() {
            return Err(Error::sandbox_gone(id, ended));
        }
        Ok(())
    }

    /// Marks the sandbox killed and stops its keepalive: `true` for the first kill, `false`
    /// when it was killed before (the kill is then not sent again).
    pub(crate) fn begin_kill(&self) -> bool {
        let first = !self.killed.swap(true, Ordering::SeqCst);
        if first {
            self.stop_keepalive();
        }
        first
    }

    /// As [`Lifetime::begin_kill`], only for an owned sandbox: what a handle dropped outside
    /// the core does (the core calls `kill` on close and on drop teardown itself).
    pub(crate) fn begin_orphan_kill(&self) -> bool {
        self.is_owned() && self.begin_kill()
    }

    /// No longer owned: not renewed, not ended when the last handle goes (`detach`).
    #[cfg_attr(
        not(any(feature = "docker", feature = "e2b", feature = "local")),
        allow(dead_code, reason = "built with modal too, used by the other backends")
    )]
    pub(crate) fn disown(&self) {
        self.stop_keepalive();
        self.owned.store(false, Ordering::SeqCst);
    }

    /// Runs `renew` every `every` on `portal` while a handle of `shared` lives and the
    /// sandbox was not killed, until it answers `false`. The task holds only a weak
    /// reference, so it ends when the last handle goes.
    pub(crate) fn keep_alive<S, F, Fut>(
        &self,
        portal: &'static Portal,
        shared: &Arc<S>,
        every: Duration,
        lifetime: fn(&S) -> &Lifetime,
        renew: F,
    ) where
        S: Send + Sync + 'static,
        F: Fn(Arc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = bool> + Send,
    {
        let weak = Arc::downgrade(shared);
        let task: Task<()> = portal.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(shared) = weak.upgrade() else { return Ok(()) };
                if lifetime(&shared).is_killed() || !renew(shared).await {
                    return Ok(());
                }
            }
        });
        *self.keepalive.lock().unwrap_or_else(PoisonError::into_inner) = task.into_abort_handle();
    }

    fn stop_keepalive(&self) {
        if let Some(task) = self.keepalive.lock().unwrap_or_else(PoisonError::into_inner).take() {
            task.abort();
        }
    }
}

impl Drop for Lifetime {
    fn drop(&mut self) {
        self.stop_keepalive();
    }
}
