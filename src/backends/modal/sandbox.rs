//! One Modal sandbox as a [`BackendSandbox`]: commands through its task's command router
//! ([`super::exec`], [`super::stream`]), files as scripts run through the router
//! ([`super::files`]), the lifetime through the control plane.
//!
//! Owner death: Modal cannot extend a sandbox's TTL (`timeout_secs`) once it runs, but it
//! ends a sandbox that stays idle (no exec running, no stdin written) for its idle timeout.
//! An owned sandbox is created with an idle timeout of at most [`OWNER_IDLE`], and a
//! keepalive task runs a `true` exec through the router every [`KEEPALIVE_EVERY`] while a
//! handle lives. When the owner process dies, the sandbox ends [`OWNER_IDLE`] after its last
//! command ended, and at its TTL at the latest (a command left running keeps it busy).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::client::Control;
use super::exec::{self, SandboxEnv};
use super::router::Router;
use super::{PORTAL, files, stream};
use crate::backend::{BackendExecStream, BackendSandbox, BoxFuture, KillOutcome};
use crate::backends::remote::lifetime::Lifetime;
use crate::error::Result;
use crate::exec::{Command, ExecResult};
use crate::fs::DirEntry;
use crate::policy::{Capabilities, EgressMechanism, NetworkEnforcement, NetworkPolicy};

/// The longest an owned sandbox stays once its owner is gone and its last command ended:
/// the idle timeout it is created with.
pub const OWNER_IDLE: Duration = Duration::from_mins(2);
/// How often the owner shows Modal that an owned sandbox is in use.
pub const KEEPALIVE_EVERY: Duration = Duration::from_secs(30);

/// What every handle of one sandbox shares.
pub(super) struct Shared {
    pub(super) id: String,
    pub(super) control: Control,
    pub(super) router: Router,
    pub(super) base: Arc<SandboxEnv>,
    pub(super) network: Option<NetworkPolicy>,
    pub(super) metadata: BTreeMap<String, String>,
    pub(super) life: Lifetime,
}

impl Shared {
    /// Starts the keepalive of an owned sandbox: a `true` exec every [`KEEPALIVE_EVERY`].
    pub(super) fn start_keepalive(self: &Arc<Self>) {
        self.life.keep_alive(&PORTAL, self, KEEPALIVE_EVERY, |s| &s.life, |shared: Arc<Self>| async move {
            let poke = exec::script("true", &[]);
            if let Err(e) = exec::helper(&shared.router, &poke, None, 0).await {
                tracing::warn!(target: "sandboxio::modal", sandbox = %shared.id, error = %e, "could not keep the sandbox busy");
            }
            true
        });
    }

    pub(super) fn check_alive(&self) -> Result<()> {
        self.life.check_alive(&self.id, "it was terminated")
    }
}

/// A handle on one Modal sandbox.
pub(super) struct ModalSandbox {
    pub(super) shared: Arc<Shared>,
}

impl std::fmt::Debug for ModalSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModalSandbox").field("id", &self.shared.id).finish_non_exhaustive()
    }
}

impl ModalSandbox {
    /// Runs `work` on the portal (tonic needs tokio); dropping the future aborts it.
    fn on_portal<T, F>(&self, work: impl FnOnce(Arc<Shared>) -> F) -> BoxFuture<'_, Result<T>>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        PORTAL.spawn_if_alive(self.shared.check_alive(), || work(Arc::clone(&self.shared)))
    }
}

impl BackendSandbox for ModalSandbox {
    fn id(&self) -> &str {
        &self.shared.id
    }

    fn capabilities(&self) -> Capabilities {
        super::CAPABILITIES
    }

    fn network_policy(&self) -> Option<NetworkPolicy> {
        self.shared.network.clone()
    }

    fn network_enforcement(&self) -> Option<NetworkEnforcement> {
        // Modal's BLOCKED is its own (gVisor's netstack); what it leaves is Modal's to say,
        // so it is not stated. A provider allowlist is Modal's name filter alone (no CIDR
        // list is sent): TLS to port 443 naming a listed host; its resolvers stay reachable
        // (names must resolve), and nothing says UDP to them is cut.
        match &self.shared.network {
            Some(NetworkPolicy::AllowAll) => Some(NetworkEnforcement::unrestricted()),
            Some(NetworkPolicy::ProviderAllowlist(_)) => {
                let mut report = NetworkEnforcement::provider_name_filter();
                report.mechanisms.retain(|m| *m == EgressMechanism::ProviderNameFilter);
                Some(report)
            }
            _ => None,
        }
    }

    fn metadata(&self) -> BTreeMap<String, String> {
        self.shared.metadata.clone()
    }

    fn run(&self, command: Command) -> BoxFuture<'_, Result<ExecResult>> {
        self.on_portal(move |s| exec::run(s.router.clone(), Arc::clone(&s.base), command))
    }

    fn stream(&self, command: Command) -> Result<Box<dyn BackendExecStream>> {
        self.shared.check_alive()?;
        Ok(Box::new(stream::start(&self.shared.router, Arc::clone(&self.shared.base), command)))
    }

    fn read(&self, path: &str, limit: u64) -> BoxFuture<'_, Result<Vec<u8>>> {
        let path = path.to_owned();
        self.on_portal(move |s| async move { files::read(&s.router, &path, limit).await })
    }

    fn write(&self, path: &str, data: Vec<u8>, mode: Option<u32>) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        self.on_portal(move |s| async move { files::write(&s.router, &path, data, mode).await })
    }

    fn list(&self, path: &str) -> BoxFuture<'_, Result<Vec<DirEntry>>> {
        let path = path.to_owned();
        self.on_portal(move |s| async move { files::list(&s.router, &path).await })
    }

    fn mkdir(&self, path: &str) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        self.on_portal(move |s| async move { files::mkdir(&s.router, &path).await })
    }

    fn remove(&self, path: &str, recursive: bool) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        self.on_portal(move |s| async move { files::remove(&s.router, &path, recursive).await })
    }

    fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
        let shared = Arc::clone(&self.shared);
        Box::pin(PORTAL.spawn(async move {
            if !shared.life.begin_kill() {
                return Ok(KillOutcome::AlreadyGone);
            }
            // Terminate is idempotent upstream: a sandbox that already ended answers with its
            // result, one Modal no longer knows is taken as ended too.
            let ended_before = shared.control.wait(&shared.id, Duration::ZERO).await.ok().flatten().is_some();
            shared.control.terminate(&shared.id).await?;
            Ok(if ended_before { KillOutcome::AlreadyGone } else { KillOutcome::Killed })
        }))
    }
}

impl Drop for ModalSandbox {
    /// An owned sandbox whose handle goes is terminated (the core calls `kill` on close and
    /// on drop teardown too; this covers a handle dropped outside the core).
    fn drop(&mut self) {
        if self.shared.life.begin_orphan_kill() {
            let (control, id) = (self.shared.control.clone(), self.shared.id.clone());
            PORTAL.detach(async move {
                let _ = control.terminate(&id).await;
            });
        }
    }
}
