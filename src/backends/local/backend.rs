//! The `local://` backend value: where its sandboxes live on the host, which `bwrap` it
//! runs, the sandboxes this process holds, and [`Backend`] (create and connect in
//! `create.rs`, list and reap in `reap.rs`, the test hooks that read the sandboxes in
//! `hooks.rs`).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::backend::{Backend, BackendSandbox, BoxFuture, CreateSpec};
use crate::dsn::Dsn;
use crate::error::{Error, Result};
use crate::policy::{Capabilities, IsolationTier};

use super::dirs::{current_gid, current_uid, run_as};
use super::sandbox::State;
use super::{CAPABILITIES, SCHEME};

/// The `local://` backend. Cheap to clone; clones share their sandboxes.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) audit: crate::audit::AuditConfig,
    /// How the egress gates of this backend's allowlisted sandboxes resolve names.
    pub(super) resolver: crate::policy::EgressResolver,
    pub(super) bwrap: PathBuf,
    pub(super) root: PathBuf,
    pub(super) sandboxes: Mutex<HashMap<String, Arc<State>>>,
    /// The seccomp filter file, written on the first `create` (`None`: no filter for this
    /// architecture).
    pub(super) seccomp: OnceLock<Option<PathBuf>>,
}

impl LocalBackend {
    /// A backend keeping sandbox workspaces under `$TMPDIR/sandboxio-local-<uid>`, running the
    /// `bwrap` found on `PATH` (or `/usr/bin/bwrap`). Does no I/O: a missing `bwrap` is
    /// reported by `create()`.
    #[must_use]
    pub fn new() -> Self {
        let bwrap = std::env::var_os("PATH")
            .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join("bwrap")).find(|p| p.is_file()))
            .unwrap_or_else(|| PathBuf::from("/usr/bin/bwrap"));
        LocalBackend {
            inner: Arc::new(Inner {
                audit: crate::audit::AuditConfig::new(),
                resolver: crate::policy::EgressResolver::system(),
                bwrap,
                root: std::env::temp_dir().join(format!("sandboxio-local-{}", current_uid())),
                sandboxes: Mutex::new(HashMap::new()),
                seccomp: OnceLock::new(),
            }),
        }
    }

    /// The same backend writing every sandbox's audit records to `audit` as well (the
    /// contract suite's recording sink, for one). Call it before creating sandboxes.
    #[must_use]
    pub fn with_audit(self, audit: crate::audit::AuditConfig) -> Self {
        self.rebuilt(audit, self.inner.resolver.clone())
    }

    /// The same backend resolving the names its allowlisted sandboxes ask for through
    /// `resolver` (default: [`EgressResolver::system`](crate::policy::EgressResolver::system)), in the
    /// egress gate on the host. Call it before creating sandboxes.
    #[must_use]
    pub fn with_egress_resolver(self, resolver: crate::policy::EgressResolver) -> Self {
        self.rebuilt(self.inner.audit.clone(), resolver)
    }

    /// A backend with these settings and the same `bwrap` and root, owning no sandbox yet.
    fn rebuilt(&self, audit: crate::audit::AuditConfig, resolver: crate::policy::EgressResolver) -> Self {
        LocalBackend {
            inner: Arc::new(Inner {
                audit,
                resolver,
                bwrap: self.inner.bwrap.clone(),
                root: self.inner.root.clone(),
                sandboxes: Mutex::new(HashMap::new()),
                seccomp: OnceLock::new(),
            }),
        }
    }

    /// The [`BackendFactory`](crate::dsn::BackendFactory) of `local://` (no options).
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for an option, host or path.
    pub fn from_dsn(dsn: &Dsn) -> Result<Arc<dyn Backend>> {
        dsn.reject_unknown_options(&[])?;
        if !dsn.authority().is_empty() || !dsn.path().is_empty() {
            return Err(Error::configuration("local:// takes no host or path"));
        }
        Ok(Arc::new(LocalBackend::new()))
    }

    pub(super) fn sandboxes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<State>>> {
        self.inner.sandboxes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The uid and gid of the sandbox user, as the host and the sandbox both see them (the
    /// user namespace maps it to itself).
    pub(super) fn sandbox_user() -> (u32, u32) {
        run_as().unwrap_or_else(|| (current_uid(), current_gid()))
    }
}

impl Default for LocalBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl Backend for LocalBackend {
    fn scheme(&self) -> &str {
        SCHEME
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn isolation(&self) -> IsolationTier {
        IsolationTier::Process
    }

    fn audit(&self) -> crate::audit::AuditConfig {
        self.inner.audit.clone()
    }

    fn create(&self, spec: CreateSpec) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        Box::pin(async move { Ok(Box::new(self.create_sandbox(spec).await?) as Box<dyn BackendSandbox>) })
    }

    fn connect(&self, id: &str) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        let id = id.to_owned();
        Box::pin(async move { Ok(Box::new(self.connect_sandbox(&id).await?) as Box<dyn BackendSandbox>) })
    }

    fn list(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> BoxFuture<'_, Result<Vec<crate::inventory::SandboxInfo>>> {
        let labels = labels.clone();
        Box::pin(async move { self.list_recorded(&labels).await })
    }

    fn reap(
        &self,
        options: crate::inventory::ReapOptions,
    ) -> BoxFuture<'_, Result<crate::inventory::ReapReport>> {
        Box::pin(LocalBackend::reap(self, options))
    }
}
