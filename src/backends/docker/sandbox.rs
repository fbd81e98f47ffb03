//! One `docker://` sandbox as its handles see it: the state a handle and its in-flight
//! operations share ([`Shared`]), the handle for each exec path ([`handle`]: sandboxd's in
//! `sandboxd_path/`, the exec API's in `exec_api/`, each its own `BackendSandbox`), and
//! what both do alike: capabilities, the network's enforcement, `kill`, marking a
//! detached container.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bollard::Docker;

use crate::backend::{BackendSandbox, BoxFuture, KillOutcome};
use crate::error::{Error, Result};
use crate::policy::{Capabilities, NetworkPolicy};
use crate::secret::SecretString;

use super::client::{self, provider, sandbox_error};
use super::create::force_remove;
use super::{CAPABILITIES, SCHEME, exec_api, owner_link, rt, sandboxd_path};

/// The name prefix of a detached sandbox's container: labels cannot change after creation,
/// so `detach` renames the container to mark it.
pub(super) const DETACHED_NAME_PREFIX: &str = "sandboxio-detached-";

/// One sandbox's state, shared by its handle and its in-flight operations.
pub(crate) struct Shared {
    pub(super) docker: Docker,
    pub(super) id: String,
    pub(super) user: Option<String>,
    pub(super) workdir: String,
    pub(super) secret_env: Vec<(String, SecretString)>,
    pub(super) network: Option<NetworkPolicy>,
    pub(super) metadata: BTreeMap<String, String>,
    pub(super) killed: AtomicBool,
    /// Why sandboxio removed the container itself, when it did (what `SandboxGone` says).
    pub(super) gone_reason: std::sync::OnceLock<&'static str>,
    /// Seeds this handle's command gids (unique across handles and processes).
    pub(super) nonce: String,
    /// Whether the image has `python3` (and so `RUN_CODE`).
    pub(super) python: AtomicBool,
    /// The sandbox user as numbers, resolved once when the sandbox is prepared: every exec
    /// runs as these numbers, never as a name the container's `/etc/passwd` (which a root
    /// sandbox user can rewrite) would map again at each exec.
    pub(super) resolved: std::sync::OnceLock<(u32, u32)>,
    /// Whether the sandbox user is root: it can then rewrite the image's files, the `sh`
    /// that decodes a later command's secrets included, so command-scoped secrets are
    /// refused (`COMMAND_SECRETS` is not kept for root users).
    pub(super) root_user: AtomicBool,
    /// Whether the engine's `top` shows this container's processes with their gids (not
    /// under gVisor, not with user-namespace remapping): the kill path's verification.
    pub(super) host_view: AtomicBool,
    pub(super) next_key: AtomicU64,
    /// The owner link (PID 1's stdin): dropping it ends PID 1, and so the container,
    /// unless detached.
    pub(super) owner_link: Mutex<Option<tokio::sync::mpsc::Sender<owner_link::LinkOp>>>,
    /// On the sandboxd path: the session every command, file operation and cell goes
    /// through, and the link that carries it (the owner link, or a `connect`ed handle's own
    /// session); closing the link ends the session.
    pub(super) session: std::sync::OnceLock<Arc<crate::sandboxd::session::Session>>,
    pub(super) sandboxd_link: Mutex<Option<sandboxd_path::Link>>,
    /// Under an allowlist, for the handle that created the sandbox: its gate and relay
    /// (`sandboxd_path/egress.rs`), then the gate's directory (dropped in that order).
    pub(super) egress:
        Mutex<Option<(crate::sandboxd::session::egress::Egress, sandboxd_path::egress::GateDir)>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandbox")
            .field("id", &self.id)
            .field("user", &self.user)
            .field("workdir", &self.workdir)
            .field("metadata", &self.metadata)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// A handle's state for container `id`, with no command run yet.
    pub(super) fn new(
        docker: Docker,
        id: String,
        user: Option<String>,
        workdir: String,
        secret_env: Vec<(String, SecretString)>,
        network: Option<NetworkPolicy>,
        metadata: BTreeMap<String, String>,
    ) -> Arc<Self> {
        Arc::new(Shared {
            docker,
            id,
            user,
            workdir,
            secret_env,
            network,
            metadata,
            killed: AtomicBool::new(false),
            gone_reason: std::sync::OnceLock::new(),
            nonce: unique_suffix(),
            python: AtomicBool::new(false),
            resolved: std::sync::OnceLock::new(),
            root_user: AtomicBool::new(true),
            host_view: AtomicBool::new(false),
            next_key: AtomicU64::new(0),
            owner_link: Mutex::new(None),
            session: std::sync::OnceLock::new(),
            sandboxd_link: Mutex::new(None),
            egress: Mutex::new(None),
        })
    }

    /// A fresh gid for one command, in [`GID_RANGE`](exec_api::GID_RANGE).
    pub(super) fn next_gid(&self) -> u32 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(self.next_key.fetch_add(1, Ordering::Relaxed));
        h.write(self.nonce.as_bytes());
        let span = u64::from(exec_api::GID_RANGE.end - exec_api::GID_RANGE.start);
        exec_api::GID_RANGE.start + u32::try_from(h.finish() % span).unwrap_or(0)
    }

    /// The user execs run as: the configured one, else root (never PID 1's supervisor id,
    /// which is the container's default user).
    pub(super) fn exec_user(&self) -> String {
        if let Some((uid, gid)) = self.resolved.get() {
            return format!("{uid}:{gid}");
        }
        self.user.as_deref().filter(|u| !u.is_empty()).unwrap_or("0").to_owned()
    }

    /// [`Shared::exec_user`] without its group: commands run with a gid of their own.
    pub(super) fn exec_user_name(&self) -> String {
        if let Some((uid, _)) = self.resolved.get() {
            return uid.to_string();
        }
        let user = self.exec_user();
        user.split_once(':').map_or(user.clone(), |(name, _)| name.to_owned())
    }

    pub(super) fn release_link(&self) {
        drop(self.owner_link.lock().unwrap_or_else(PoisonError::into_inner).take());
        drop(self.sandboxd_link.lock().unwrap_or_else(PoisonError::into_inner).take());
    }

    /// Records why sandboxio is about to remove the container itself.
    pub(super) fn set_gone_reason(&self, why: &'static str) {
        let _ = self.gone_reason.set(why);
        if let Some(session) = self.session.get() {
            session.set_gone(why);
        }
    }

    /// The sandboxd session, on the sandboxd path.
    pub(super) fn session(&self) -> Option<&Arc<crate::sandboxd::session::Session>> {
        self.session.get()
    }

    pub(super) fn check_alive(&self) -> Result<()> {
        if self.killed.load(Ordering::Acquire) {
            let why = self.gone_reason.get().copied().unwrap_or("it was killed");
            return Err(Error::SandboxGone { id: self.id.clone(), message: why.into() });
        }
        Ok(())
    }
}

/// The handle for a sandbox whose [`Shared`] is set up: sandboxd's when it has a session,
/// the exec API's otherwise.
pub(super) fn handle(shared: Arc<Shared>) -> Box<dyn BackendSandbox> {
    match shared.session().cloned() {
        Some(session) => Box::new(sandboxd_path::SandboxdSandbox::new(shared, session)),
        None => Box::new(exec_api::ExecApiSandbox::new(shared)),
    }
}

impl Shared {
    /// What this sandbox can do: `runner` says whether code contexts and rich results are
    /// possible (sandboxd's runner), the image's `python3` decides code at all, and a root
    /// user loses command-scoped secrets.
    pub(super) fn capabilities(&self, runner: bool) -> Capabilities {
        let mut capabilities = CAPABILITIES;
        // Code contexts and rich results need sandboxd's runner.
        if !runner {
            capabilities = capabilities.difference(Capabilities::STATEFUL_CODE | Capabilities::RICH_OUTPUTS);
        }
        if !self.python.load(Ordering::Acquire) {
            capabilities = capabilities.difference(
                Capabilities::RUN_CODE | Capabilities::STATEFUL_CODE | Capabilities::RICH_OUTPUTS,
            );
        }
        // A root user can rewrite the `sh` that decodes a later command's secrets.
        if self.root_user.load(Ordering::Acquire) {
            capabilities = capabilities.difference(Capabilities::COMMAND_SECRETS);
        }
        capabilities
    }

    /// Why this sandbox lacks `capability` that `docker://` declares: its image has no
    /// `python3` (code cells), or the exec-API path has no runner (contexts, rich results).
    pub(super) fn narrowed_because(&self, capability: Capabilities, runner: bool) -> Option<String> {
        let code = Capabilities::RUN_CODE | Capabilities::STATEFUL_CODE | Capabilities::RICH_OUTPUTS;
        if code.intersects(capability) && !self.python.load(Ordering::Acquire) {
            return Some(
                "its image has no python3, which code cells need: use an image with python3, such as sandboxio/python:2"
                    .to_owned(),
            );
        }
        if !runner && (Capabilities::STATEFUL_CODE | Capabilities::RICH_OUTPUTS).intersects(capability) {
            return Some(
                "the exec-API path has no code runner: use the sandboxd path (the default)".to_owned(),
            );
        }
        if capability.contains(Capabilities::COMMAND_SECRETS) && self.root_user.load(Ordering::Acquire) {
            return Some(
                "it runs as root, which could rewrite the shell that decodes a later command's secrets"
                    .to_owned(),
            );
        }
        None
    }

    /// How the sandbox's network policy is enforced.
    pub(super) fn network_enforcement(&self) -> Option<crate::policy::NetworkEnforcement> {
        // `network_mode: none` under deny-all and an allowlist, whose one way out is the gate.
        Some(match self.network.as_ref()? {
            NetworkPolicy::AllowAll => crate::policy::NetworkEnforcement::unrestricted(),
            NetworkPolicy::Allowlist(_) => crate::policy::NetworkEnforcement::egress_gate(),
            // A provider allowlist is refused at `create()` (no `PROVIDER_ALLOWLIST`).
            NetworkPolicy::DenyAll | NetworkPolicy::ProviderAllowlist(_) => {
                crate::policy::NetworkEnforcement::no_route()
            }
        })
    }
}

/// Runs `work` on the Docker runtime, as bollard needs.
pub(super) fn on_rt<T, F>(
    shared: &Arc<Shared>,
    work: impl FnOnce(Arc<Shared>) -> F,
) -> BoxFuture<'static, Result<T>>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T>> + Send + 'static,
{
    Box::pin(rt::spawn(work(Arc::clone(shared))))
}

/// `kill`, run to its end on the Docker runtime even if its caller goes away.
pub(super) fn kill_detached(shared: &Arc<Shared>) -> BoxFuture<'static, Result<KillOutcome>> {
    let shared = Arc::clone(shared);
    let (done, outcome) = tokio::sync::oneshot::channel();
    rt::detach(async move {
        let result = kill(&shared).await;
        let _ = done.send(result);
    });
    Box::pin(async move {
        outcome.await.unwrap_or_else(|_| {
            Err(Error::provider_message(SCHEME, "the kill task ended early, before it reported"))
        })
    })
}

/// Renames the container `sandboxio-detached-…`: labels cannot change after creation, and
/// `reap` must never take a detached sandbox for an orphan.
pub(super) async fn mark_detached(shared: &Shared) -> Result<()> {
    let name = format!("{DETACHED_NAME_PREFIX}{}", unique_suffix());
    shared
        .docker
        .rename_container(&shared.id, bollard::query_parameters::RenameContainerOptions { name })
        .await
        .map_err(|e| sandbox_error(&shared.id, "marking the container detached", e))
}

pub(super) async fn kill(shared: &Shared) -> Result<KillOutcome> {
    if let Some(session) = shared.session() {
        session.set_gone("it was killed");
    }
    let was = !shared.killed.swap(true, Ordering::AcqRel);
    let removed = shared.docker.remove_container(&shared.id, Some(force_remove())).await;
    // The container is gone either way; the owner link is no longer needed.
    shared.release_link();
    match removed {
        Ok(()) if was => Ok(KillOutcome::Killed),
        Ok(()) => Ok(KillOutcome::AlreadyGone),
        // Gone already, or being removed by auto-remove at its TTL.
        Err(e) if matches!(client::status(&e), Some(404 | 409)) => Ok(KillOutcome::AlreadyGone),
        Err(e) => {
            shared.killed.store(!was, Ordering::Release);
            Err(provider("removing the container", e))
        }
    }
}

/// 16 hex digits, different per call and per process.
pub(super) fn unique_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}
