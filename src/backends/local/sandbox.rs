//! One `local://` sandbox as its handles see it: the [`State`] a handle, its TTL timer and
//! the backend share (alive, expired, destroyed), and the handle itself, whose every
//! operation is a request on the sandbox's sandboxd [`Session`](crate::sandboxd::session::Session).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::backend::{
    BackendCodeStream, BackendExecStream, BackendSandbox, BoxFuture, KillOutcome, TransferMeter, collect_cell,
};
use crate::backends::owner::Owner;
use crate::error::{Error, Result};
use crate::exec::{Code, CodeContext, CodeResult, Command, ExecResult};
use crate::fs::DirEntry;
use crate::policy::{Capabilities, NetworkPolicy};
use crate::sandboxd::session::{Session, egress};

use super::backend::LocalBackend;
use super::dirs::remove_sandbox_dir;
use super::session::Link;
use super::{CAPABILITIES, PYTHON, SCHEME, WORKDIR, fs, reactor, record, session};

/// One sandbox as a handle sees it, shared by the handle, its timer and the backend.
#[derive(Debug)]
pub(super) struct State {
    pub(super) id: String,
    pub(super) dir: PathBuf,
    pub(super) metadata: BTreeMap<String, String>,
    /// `None` for a `connect`ed handle (the record does not keep it).
    pub(super) network: Option<NetworkPolicy>,
    /// What `stored_config` shows (the spec, secrets redacted).
    #[cfg_attr(
        not(feature = "contract"),
        expect(dead_code, reason = "read by the test hooks only (hooks.rs)")
    )]
    pub(super) config: String,
    pub(super) expires: Instant,
    /// Set by the `expire` test hook (`hooks.rs`): the TTL is over now.
    pub(super) expired_early: AtomicBool,
    pub(super) alive: AtomicBool,
    pub(super) session: Arc<Session>,
    pub(super) link: Link,
    /// The sandbox's bwrap, for the handle that started it.
    pub(super) bwrap: Mutex<Option<Child>>,
    pub(super) sandboxd: Owner,
    /// The inode of the sandbox's PID namespace (the processes probe).
    #[cfg_attr(
        not(feature = "contract"),
        expect(dead_code, reason = "read by the test hooks only (hooks.rs)")
    )]
    pub(super) pid_namespace: Option<u64>,
    /// The gate and relay of a sandbox under an allowlist (`sandboxd/session/egress.rs`), held by the handle
    /// that created it.
    pub(super) egress: Mutex<Option<egress::Egress>>,
    /// The owner's TTL timer on the reactor (`start_ttl_timer`); dropped with the state.
    pub(super) ttl: Mutex<Option<reactor::Timer>>,
}

impl State {
    pub(super) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
            && !self.expired_early.load(Ordering::Acquire)
            && Instant::now() < self.expires
    }

    pub(super) fn check_alive(&self) -> Result<()> {
        if !self.is_alive() {
            if self.alive.load(Ordering::Acquire) {
                self.destroy("its TTL expired");
            }
            return Err(self.session.gone_error("it was killed"));
        }
        self.session.check_alive()
    }

    /// Ends the sandbox: closes the session, kills sandboxd (every process of the sandbox
    /// dies with its PID namespace's init), waits for it (at most [`KILL_BOUND`]), then
    /// removes the sandbox's directory. Returns whether it was alive. Blocks for as long as
    /// that takes (a few milliseconds).
    pub(super) fn destroy(&self, why: &str) -> bool {
        let was = self.alive.swap(false, Ordering::AcqRel);
        self.session.set_gone(why);
        drop(self.egress.lock().unwrap_or_else(PoisonError::into_inner).take());
        self.link.close();
        session::kill(&self.sandboxd);
        match self.bwrap.lock().unwrap_or_else(PoisonError::into_inner).take() {
            // bwrap exits once its child, the init, has reaped the whole namespace.
            Some(mut bwrap) => drop(bwrap.wait()),
            None => session::wait_gone(&self.sandboxd),
        }
        if was {
            remove_sandbox_dir(&self.dir);
        }
        was
    }
}

impl Drop for State {
    /// The handle's session ends: for an owner that did not detach, sandboxd then ends the
    /// sandbox (`kill` normally did already); bwrap is waited for off this thread.
    fn drop(&mut self) {
        self.link.close();
        if let Some(mut bwrap) = self.bwrap.get_mut().unwrap_or_else(PoisonError::into_inner).take() {
            let _ =
                std::thread::Builder::new().name("sandboxio-local-reap".into()).spawn(move || bwrap.wait());
        }
    }
}

/// Destroys the sandbox at its expiry, even if no handle is left: a timer on the reactor's
/// thread (no thread of its own), cancelled when the last handle goes.
pub(super) fn start_ttl_timer(state: &Arc<State>) {
    let weak = Arc::downgrade(state);
    let timer = reactor::at(state.expires, move || {
        let Some(state) = weak.upgrade() else { return };
        if !state.alive.load(Ordering::Acquire) {
            return;
        }
        // `destroy` waits for bwrap: not on the reactor's thread, which reads every sandbox.
        let destroying = Arc::clone(&state);
        let spawned = std::thread::Builder::new()
            .name("sandboxio-local-ttl".into())
            .spawn(move || destroying.destroy("its TTL expired"));
        if spawned.is_err() {
            state.destroy("its TTL expired");
        }
    });
    match timer {
        Ok(timer) => *state.ttl.lock().unwrap_or_else(PoisonError::into_inner) = Some(timer),
        // Without the reactor no session could have started; the record's TTL still bounds `connect`.
        Err(e) => tracing::warn!(sandbox = %state.id, error = %e, "cannot set the sandbox's TTL timer"),
    }
}

/// Keeps a detached sandbox's way out for as long as its sandboxd runs (until its TTL or a
/// kill through any handle) or this process lives: the handle that created it may go, but
/// the relay is a command of that handle's sandboxd session and the gate is in its state,
/// so the state is held until sandboxd is gone. Nothing is held for a sandbox without a gate.
pub(super) fn keep_egress_while_running(state: &Arc<State>) {
    if state.egress.lock().unwrap_or_else(PoisonError::into_inner).is_none() {
        return;
    }
    let held = Arc::clone(state);
    let _ = std::thread::Builder::new().name("sandboxio-local-egress".into()).spawn(move || {
        while held.sandboxd.is_dead_here() == Some(false) && Instant::now() < held.expires {
            std::thread::sleep(Duration::from_millis(500));
        }
        drop(held);
    });
}

/// One local sandbox handle.
#[derive(Debug)]
pub(super) struct LocalSandbox {
    pub(super) backend: LocalBackend,
    pub(super) state: Arc<State>,
}

impl LocalSandbox {
    /// `Err` unless `command`'s working directory is in the workspace.
    fn check_cwd(command: &Command) -> Result<()> {
        let cwd = crate::path::resolve(WORKDIR, command.working_dir().unwrap_or("."));
        if cwd == WORKDIR || cwd.starts_with(&format!("{WORKDIR}/")) {
            Ok(())
        } else {
            Err(Error::PermissionDenied { path: cwd })
        }
    }

    /// Runs `command` with the sandbox's and its own secrets.
    async fn run_command(&self, command: &Command) -> Result<ExecResult> {
        self.state.check_alive()?;
        Self::check_cwd(command)?;
        self.state.session.run(command, true).await
    }
}

impl BackendSandbox for LocalSandbox {
    fn id(&self) -> &str {
        &self.state.id
    }

    fn capabilities(&self) -> Capabilities {
        if Path::new(PYTHON).is_file() {
            CAPABILITIES
        } else {
            CAPABILITIES
                .difference(Capabilities::RUN_CODE | Capabilities::STATEFUL_CODE | Capabilities::RICH_OUTPUTS)
        }
    }

    fn network_policy(&self) -> Option<NetworkPolicy> {
        self.state.network.clone()
    }

    fn network_enforcement(&self) -> Option<crate::policy::NetworkEnforcement> {
        Some(match self.state.network.as_ref()? {
            NetworkPolicy::AllowAll => crate::policy::NetworkEnforcement::unrestricted(),
            NetworkPolicy::Allowlist(_) => crate::policy::NetworkEnforcement::egress_gate(),
            _ => crate::policy::NetworkEnforcement::no_route(),
        })
    }

    fn run_code(&self, code: Code) -> BoxFuture<'_, Result<CodeResult>> {
        let stream = self.run_code_stream(code);
        Box::pin(async move { collect_cell(stream?).await })
    }

    fn run_code_stream(&self, code: Code) -> Result<Box<dyn BackendCodeStream>> {
        self.state.check_alive()?;
        Ok(Box::new(self.state.session.run_code_stream(code)?))
    }

    fn create_context(&self, language: &str) -> BoxFuture<'_, Result<CodeContext>> {
        let language = language.to_owned();
        Box::pin(async move {
            self.state.check_alive()?;
            self.state.session.create_context(&language).await
        })
    }

    fn interrupt(&self, context_id: &str) -> BoxFuture<'_, Result<()>> {
        let result = self.state.check_alive().and_then(|()| self.state.session.interrupt(context_id));
        Box::pin(async move { result })
    }

    fn metadata(&self) -> BTreeMap<String, String> {
        self.state.metadata.clone()
    }

    fn run(&self, command: Command) -> BoxFuture<'_, Result<ExecResult>> {
        Box::pin(async move { self.run_command(&command).await })
    }

    fn stream(&self, command: Command) -> Result<Box<dyn BackendExecStream>> {
        self.state.check_alive()?;
        Self::check_cwd(&command)?;
        Ok(Box::new(self.state.session.stream_piped(&command, true)?))
    }

    fn read(&self, path: &str, limit: u64) -> BoxFuture<'_, Result<Vec<u8>>> {
        let path = path.to_owned();
        Box::pin(async move { fs::read(self, &path, limit).await })
    }

    fn write(&self, path: &str, data: Vec<u8>, mode: Option<u32>) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        Box::pin(async move { fs::write(self, &path, data, mode).await })
    }

    fn list(&self, path: &str) -> BoxFuture<'_, Result<Vec<DirEntry>>> {
        let path = path.to_owned();
        Box::pin(async move { fs::list(self, &path).await })
    }

    fn mkdir(&self, path: &str) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        Box::pin(async move { fs::mkdir(self, &path).await })
    }

    fn remove(&self, path: &str, recursive: bool) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        Box::pin(async move { fs::remove(self, &path, recursive).await })
    }

    fn upload<'a>(
        &'a self,
        host_path: &'a Path,
        path: &'a str,
        meter: TransferMeter,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(fs::upload(self, host_path, path, meter))
    }

    fn download<'a>(
        &'a self,
        path: &'a str,
        host_path: &'a Path,
        budget: u64,
        meter: TransferMeter,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(fs::download(self, path, host_path, budget, meter))
    }

    fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
        Box::pin(async move {
            let state = Arc::clone(&self.state);
            let was = crate::runtime::unblock(move || Ok(state.destroy("it was killed"))).await?;
            // A killed sandbox is forgotten; its handles keep their own state.
            self.backend.sandboxes().remove(&self.state.id);
            Ok(if was { KillOutcome::Killed } else { KillOutcome::AlreadyGone })
        })
    }

    fn detach(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.state.check_alive()?;
            let session = &self.state.session;
            session.client().detach().await.map_err(|why| session.gone_error(&why))?;
            // `reap` must never take a detached sandbox for an orphan.
            record::set(&self.state.dir, "detached", "true")
                .map_err(|e| Error::provider(SCHEME, "cannot record the sandbox detached", e))?;
            keep_egress_while_running(&self.state);
            Ok(())
        })
    }
}
