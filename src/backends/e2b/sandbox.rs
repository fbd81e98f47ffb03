//! One E2B sandbox as a [`BackendSandbox`]: commands through envd ([`super::exec`],
//! [`super::stream`]), files through envd's `/files` and `filesystem.Filesystem`, code
//! through the code interpreter ([`super::cell`]), the lifetime through the control plane.
//!
//! Owner death: a remote sandbox cannot see its owner die, so an owned sandbox is created
//! with a TTL of at most [`OWNER_TTL`], which a keepalive task renews every
//! [`KEEPALIVE_EVERY`] while the handle lives (never past the TTL the caller asked for).
//! When the owner process dies, the sandbox ends within [`OWNER_TTL`]. `detach` sets the
//! TTL to what is left of the caller's and stops renewing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::cell::{self, Running};
use super::client::Api;
use super::envd::Envd;
use super::errors::reply_of;
use super::interpreter::Interpreter;
use super::{PORTAL, exec, stream};
use crate::backend::{
    BackendCodeStream, BackendExecStream, BackendSandbox, BoxFuture, KillOutcome, collect_cell,
};
use crate::backends::remote::lifetime::Lifetime;
use crate::error::{Error, Result};
use crate::exec::{Code, CodeContext, CodeResult, Command, ExecResult};
use crate::fs::{DirEntry, FileKind};
use crate::policy::{Capabilities, NetworkEnforcement, NetworkPolicy};
use crate::secret::SecretString;

/// The longest an owned sandbox outlives its owner: its TTL is never set further ahead.
pub const OWNER_TTL: Duration = Duration::from_mins(2);
/// How often the owner renews an owned sandbox's TTL.
pub const KEEPALIVE_EVERY: Duration = Duration::from_secs(30);

/// How an owned sandbox is kept alive: created with a TTL of at most `ttl`, renewed to
/// that every `every`. [`OWNER_TTL`] and [`KEEPALIVE_EVERY`] in production; tests of
/// owner death shorten both (`E2bBackend::with_owner_lease`, feature `contract`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Lease {
    pub(super) ttl: Duration,
    pub(super) every: Duration,
}

impl Lease {
    pub(super) const DEFAULT: Lease = Lease { ttl: OWNER_TTL, every: KEEPALIVE_EVERY };
}

// Several renewals fit in one lease, so one lost or late renewal never ends a live owner's
// sandbox (the tests run the renewal path with a 1-s period; this keeps the real pair sane).
const _: () = assert!(KEEPALIVE_EVERY.as_secs() * 3 <= OWNER_TTL.as_secs());

/// What every handle of one sandbox shares.
pub(super) struct Shared {
    pub(super) id: String,
    pub(super) api: Api,
    pub(super) envd: Envd,
    pub(super) interpreter: Interpreter,
    pub(super) caps: Capabilities,
    pub(super) network: Option<NetworkPolicy>,
    pub(super) metadata: BTreeMap<String, String>,
    pub(super) secrets: Arc<Vec<(String, SecretString)>>,
    /// When the caller's TTL ends (moved by `extend_ttl`).
    pub(super) deadline: Mutex<Instant>,
    pub(super) life: Lifetime,
    pub(super) lease: Lease,
    pub(super) running: Running,
}

impl Shared {
    /// Starts the keepalive of an owned sandbox: its TTL renewed to at most the lease's
    /// every period, never past the caller's TTL (it stops once that is reached).
    pub(super) fn start_keepalive(self: &Arc<Self>) {
        let lease = self.lease;
        self.life.keep_alive(&PORTAL, self, lease.every, |s| &s.life, move |shared: Arc<Self>| async move {
            let left = shared.left();
            if left.is_zero() {
                return false;
            }
            if let Err(e) = shared.api.set_timeout(&shared.id, left.min(lease.ttl)).await {
                tracing::warn!(target: "sandboxio::e2b", sandbox = %shared.id, error = %e, "could not renew the TTL");
            }
            true
        });
    }

    /// How long until the caller's TTL ends.
    fn left(&self) -> Duration {
        self.deadline.lock().unwrap_or_else(PoisonError::into_inner).saturating_duration_since(Instant::now())
    }

    fn check_alive(&self) -> Result<()> {
        self.life.check_alive(&self.id, "it was killed")
    }
}

/// A handle on one E2B sandbox.
pub(super) struct E2bSandbox {
    pub(super) shared: Arc<Shared>,
}

impl std::fmt::Debug for E2bSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bSandbox").field("id", &self.shared.id).finish_non_exhaustive()
    }
}

impl E2bSandbox {
    /// Runs `work` on the portal (reqwest needs tokio); dropping the future aborts it.
    fn on_portal<T, F>(&self, work: impl FnOnce(Arc<Shared>) -> F) -> BoxFuture<'_, Result<T>>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        PORTAL.spawn_if_alive(self.shared.check_alive(), || work(Arc::clone(&self.shared)))
    }
}

/// envd's `EntryInfo` as a [`DirEntry`] (`size` is an int64, so a JSON string).
fn dir_entry(entry: &serde_json::Value) -> DirEntry {
    let kind = match entry["type"].as_str() {
        Some("FILE_TYPE_DIRECTORY") => FileKind::Dir,
        Some("FILE_TYPE_SYMLINK") => FileKind::Symlink,
        Some("FILE_TYPE_FILE") => FileKind::File,
        _ => FileKind::Other,
    };
    let size =
        entry["size"].as_str().and_then(|s| s.parse().ok()).or_else(|| entry["size"].as_u64()).unwrap_or(0);
    let mode = entry["mode"].as_u64().and_then(|m| u32::try_from(m).ok()).unwrap_or(0) & 0o7777;
    DirEntry::new(entry["name"].as_str().unwrap_or_default(), kind, size, mode)
}

/// Why `MakeDir` of `path` failed, in the contract's words, when a regular file is in the
/// way: at the path (`InvalidInput`) or on the way (`NotFound`, as `ENOTDIR` is reported
/// everywhere). envd's own answer for both is a bare `invalid_argument`. Asked only after a
/// failure, so a working `mkdir` costs no extra call.
async fn file_in_the_way(envd: &Envd, path: &str) -> Option<Error> {
    for (depth, at) in std::path::Path::new(path).ancestors().enumerate() {
        let at = at.to_str().filter(|a| !a.is_empty())?;
        match envd.fs("Stat", at).await {
            Ok(reply) if reply["entry"]["type"] == "FILE_TYPE_DIRECTORY" => return None,
            Ok(_) if depth == 0 => {
                return Some(Error::invalid_input(format!("{path} exists and is not a directory")));
            }
            Ok(_) => return Some(Error::not_found(path)),
            Err(e) if e.code() == crate::ErrorCode::NotFound => {}
            Err(_) => return None,
        }
    }
    None
}

impl BackendSandbox for E2bSandbox {
    fn id(&self) -> &str {
        &self.shared.id
    }

    fn capabilities(&self) -> Capabilities {
        self.shared.caps
    }

    fn network_policy(&self) -> Option<NetworkPolicy> {
        self.shared.network.clone()
    }

    fn network_enforcement(&self) -> Option<NetworkEnforcement> {
        // E2B's deny-all is `allow_internet_access: false`, its firewall's deny of
        // 0.0.0.0/0; what that leaves (DNS, UDP) is E2B's to say, so it is not stated. A
        // provider allowlist is E2B's name filter over that deny, with its resolver open.
        match &self.shared.network {
            Some(NetworkPolicy::AllowAll) => Some(NetworkEnforcement::unrestricted()),
            Some(NetworkPolicy::ProviderAllowlist(_)) => Some(NetworkEnforcement::provider_name_filter()),
            _ => None,
        }
    }

    fn metadata(&self) -> BTreeMap<String, String> {
        self.shared.metadata.clone()
    }

    fn run(&self, command: Command) -> BoxFuture<'_, Result<ExecResult>> {
        self.on_portal(move |s| exec::run(s.envd.clone(), Arc::clone(&s.secrets), command))
    }

    fn stream(&self, command: Command) -> Result<Box<dyn BackendExecStream>> {
        self.shared.check_alive()?;
        Ok(Box::new(stream::start(&self.shared.envd, Arc::clone(&self.shared.secrets), command)))
    }

    fn run_code(&self, code: Code) -> BoxFuture<'_, Result<CodeResult>> {
        match self.run_code_stream(code) {
            Ok(stream) => Box::pin(collect_cell(stream)),
            Err(e) => Box::pin(async { Err(e) }),
        }
    }

    fn run_code_stream(&self, code: Code) -> Result<Box<dyn BackendCodeStream>> {
        self.shared.check_alive()?;
        Ok(Box::new(cell::stream(&self.shared.interpreter, &self.shared.running, code)))
    }

    fn create_context(&self, language: &str) -> BoxFuture<'_, Result<CodeContext>> {
        let language = language.to_owned();
        self.on_portal(move |s| async move {
            let info = s.interpreter.create_context(&language).await?;
            Ok(CodeContext { id: info.id, language })
        })
    }

    fn interrupt(&self, context_id: &str) -> BoxFuture<'_, Result<()>> {
        if let Some(abort) =
            self.shared.running.lock().unwrap_or_else(PoisonError::into_inner).remove(context_id)
        {
            abort.abort();
        }
        Box::pin(async { Ok(()) })
    }

    fn read(&self, path: &str, limit: u64) -> BoxFuture<'_, Result<Vec<u8>>> {
        let path = path.to_owned();
        self.on_portal(move |s| async move { s.envd.read_file(&path, limit).await })
    }

    fn write(&self, path: &str, data: Vec<u8>, mode: Option<u32>) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        self.on_portal(move |s| async move {
            s.envd.write_file(&path, data).await?;
            if let Some(mode) = mode {
                let chmod = Command::new("chmod").arg(format!("{:o}", mode & 0o7777)).arg(&path);
                exec::run(s.envd.clone(), Arc::new(Vec::new()), chmod).await?;
            }
            Ok(())
        })
    }

    fn list(&self, path: &str) -> BoxFuture<'_, Result<Vec<DirEntry>>> {
        let path = path.to_owned();
        self.on_portal(move |s| async move {
            let reply = s.envd.fs("ListDir", &path).await?;
            Ok(reply["entries"].as_array().map(|es| es.iter().map(dir_entry).collect()).unwrap_or_default())
        })
    }

    fn mkdir(&self, path: &str) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        self.on_portal(move |s| async move {
            match s.envd.fs("MakeDir", &path).await {
                // An existing directory is not an error here; envd says `already_exists`.
                Err(e) if reply_of(&e).is_some_and(|r| r.connect_code() == "already_exists") => Ok(()),
                Err(e) => Err(file_in_the_way(&s.envd, &path).await.unwrap_or(e)),
                Ok(_) => Ok(()),
            }
        })
    }

    fn remove(&self, path: &str, recursive: bool) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        self.on_portal(move |s| async move {
            // envd's Remove is `os.RemoveAll`; a non-recursive remove refuses a non-empty
            // directory first.
            if !recursive && s.envd.fs("Stat", &path).await?["entry"]["type"] == "FILE_TYPE_DIRECTORY" {
                let listed = s.envd.fs("ListDir", &path).await?;
                if listed["entries"].as_array().is_some_and(|e| !e.is_empty()) {
                    return Err(Error::invalid_input(format!(
                        "{path} is a directory that is not empty; remove it recursively"
                    )));
                }
            }
            s.envd.fs("Remove", &path).await.map(drop)
        })
    }

    fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
        let shared = Arc::clone(&self.shared);
        Box::pin(PORTAL.spawn(async move {
            if !shared.life.begin_kill() {
                return Ok(KillOutcome::AlreadyGone);
            }
            Ok(if shared.api.kill(&shared.id).await? {
                KillOutcome::Killed
            } else {
                KillOutcome::AlreadyGone
            })
        }))
    }

    /// E2B's `POST /sandboxes/{id}/timeout` moves the end to `ttl` from now. An owned
    /// sandbox is still sent at most [`OWNER_TTL`] ahead (the keepalive renews it up to the
    /// new deadline), so it still ends soon after its owner.
    fn extend_ttl(&self, ttl: Duration) -> BoxFuture<'_, Result<()>> {
        self.on_portal(move |s| async move {
            *s.deadline.lock().unwrap_or_else(PoisonError::into_inner) =
                crate::duration::after(Instant::now(), ttl);
            let sent = if s.life.is_owned() { ttl.min(OWNER_TTL) } else { ttl };
            s.api.set_timeout(&s.id, sent).await
        })
    }

    fn detach(&self) -> BoxFuture<'_, Result<()>> {
        self.on_portal(move |s| async move {
            s.life.disown();
            let left = s.left();
            s.api.set_timeout(&s.id, left).await
        })
    }
}

impl Drop for E2bSandbox {
    /// An owned sandbox whose handle goes is killed (the core calls `kill` on close and on
    /// drop teardown too; this covers a handle dropped outside the core).
    fn drop(&mut self) {
        if self.shared.life.begin_orphan_kill() {
            let (api, id) = (self.shared.api.clone(), self.shared.id.clone());
            PORTAL.detach(async move {
                let _ = api.kill(&id).await;
            });
        }
    }
}
