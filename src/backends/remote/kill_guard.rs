//! The kill a command's future or stream leaves behind when it is dropped before the
//! command ended: run detached on the backend's portal (nobody is left to wait for it),
//! whatever runtime the caller used, bounded by [`KILL_DEADLINE`], never a panic.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::backends::common::portal::Portal;
use crate::error::Result;

/// The longest a kill sent on drop may take; past it, it is given up with a warning.
pub(crate) const KILL_DEADLINE: Duration = Duration::from_mins(1);

/// A kill on its way.
pub(crate) type KillFuture = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// What a guard kills: one command of one sandbox, as its adapter names it.
pub(crate) trait KillTarget: Send + 'static {
    /// The command and its sandbox, for the warning a failed kill logs.
    fn describe(&self) -> String;
    /// Kills the command's processes.
    fn kill(self) -> KillFuture;
}

/// Kills its target on the portal when dropped armed: a cancelled `run`, a dropped stream.
/// Armed from before the start is sent (a start whose reply never came may still have
/// started the command) until the command ended or was killed otherwise.
pub(crate) struct KillOnDrop<T: KillTarget> {
    portal: &'static Portal,
    target: Option<T>,
}

impl<T: KillTarget> KillOnDrop<T> {
    pub(crate) fn new(portal: &'static Portal, target: T) -> Self {
        KillOnDrop { portal, target: Some(target) }
    }

    /// The target, to add what was learnt since (a pid); `None` once disarmed.
    #[cfg_attr(
        not(any(feature = "docker", feature = "e2b", feature = "local")),
        allow(dead_code, reason = "built with modal too, used by the other backends")
    )]
    pub(crate) fn target_mut(&mut self) -> Option<&mut T> {
        self.target.as_mut()
    }

    pub(crate) fn disarm(&mut self) {
        self.target = None;
    }
}

impl<T: KillTarget> Drop for KillOnDrop<T> {
    fn drop(&mut self) {
        let Some(target) = self.target.take() else { return };
        let (what, kill) = (target.describe(), target.kill());
        self.portal.detach(async move {
            match tokio::time::timeout(KILL_DEADLINE, kill).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(target: "sandboxio::orphan", command = %what, error = %e, "could not kill a command's processes");
                }
                Err(_) => {
                    tracing::warn!(target: "sandboxio::orphan", command = %what, deadline = ?KILL_DEADLINE, "gave up killing a command's processes");
                }
            }
        });
    }
}
