//! `local://`: a sandbox built from Linux namespaces with `bwrap` (bubblewrap), one `bwrap`
//! per sandbox with sandboxd as its init. Feature `local`.
//!
//! `create` starts the sandbox's one `bwrap` (`launch.rs`): fresh user, mount, PID, network,
//! IPC and UTS namespaces, the host's `/usr` read-only, a private `/tmp`, a read-only
//! `/proc`, the sandbox's own `/etc/passwd` and `/etc/group`, the sandbox's workspace (a
//! host directory) at `/workspace`, its working directory, and a read-only root. Its
//! program is sandboxd (`crate::sandboxd`, written once per process to a file bound
//! read-only into every sandbox, `session/binary.rs`), the init of the sandbox's PID namespace,
//! spoken to over bwrap's stdin and stdout (`session/`). sandboxd is no host daemon: it
//! lives inside the sandbox and ends with it. Every `run`, `stream`, code cell and file
//! operation is a request on that session (`sandboxd::session`): a command's end, timeout, kill or
//! dropped stream ends everything it started (even after `setsid` or a double fork), its
//! environment, secrets included, travels in frames and never reaches a host process's
//! environment or argv, and its exit status is exact (a signal death is
//! [`ExitStatus::Signal`](crate::ExitStatus)).
//!
//! **Lifetime.** The session is the owner link: when the owner closes it (`close()`,
//! `kill()`, the last handle dropped) or dies, even by `SIGKILL`, sandboxd kills every
//! process of the sandbox and exits, and bwrap with it. `kill()` also kills sandboxd itself
//! (its PID namespace's init: everything in it dies with it). `detach()` tells sandboxd to
//! outlive the owner until the sandbox's TTL (`--ttl-ms`); `connect(id)` reaches it from
//! another process of the same host user through sandboxd's socket in the sandbox's host
//! directory, which only that user can enter and which is not in the sandbox's filesystem
//! (see `session/`: code inside cannot open a session of its own).
//!
//! A root caller's sandboxes run as the dedicated host uid [`ROOT_CALLER_SANDBOX_UID`],
//! never as the host's uid 0. The network is a namespace with only loopback unless the
//! policy is allow-all; under an allowlist its one way out is the egress gate. The whole
//! sandbox, sandboxd included, runs under a seccomp filter (x86-64 and aarch64: kernel
//! keyrings, BPF, perf, modules, mounts, file handles and the like fail with `EPERM`), with `no_new_privs`, with every capability dropped, and cannot
//! create nested user namespaces (`--disable-userns`). File operations reach only the
//! workspace: any other path is [`Error::PermissionDenied`]. See
//! `docs/adr/0004-local-backend.md` for the choices and their limits.
//!
//! Declared capabilities: `RUN`, `RUN_CODE`, `STATEFUL_CODE` and `RICH_OUTPUTS` (sandboxd's
//! runner on the host's `/usr/bin/python3` and its packages: one interpreter per code
//! context, results by MIME type; a host without it declares none of the three), `STREAM`,
//! `STDIN`, `FILESYSTEM`, `NETWORK_DENY`, `NETWORK_ALLOWLIST` (an egress gate in the owner's
//! process, reached through a relay inside: `egress.rs`), `CONNECT`, `DETACH`. Isolation tier:
//! [`IsolationTier::Process`]. Not declared (and so refused): command-scoped secrets (the
//! user namespace maps one uid and one gid, so every command of a sandbox is the same user
//! and can read another's `/proc/<pid>/environ`) and resource limits.

mod dirs;
mod fs;
mod launch;
mod reactor;
mod record;
mod seccomp;
mod session;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::backend::{
    Backend, BackendCodeStream, BackendExecStream, BackendSandbox, BoxFuture, CreateSpec, KillOutcome,
    TransferMeter, collect_cell,
};
use crate::backends::owner::Owner;
use crate::dsn::Dsn;
use crate::error::{Error, Result};
use crate::exec::{Code, CodeContext, CodeResult, Command, ExecResult};
use crate::fs::DirEntry;
use crate::policy::{Capabilities, IsolationTier, NetworkPolicy};
use crate::sandboxd::session::{Identity, Session, egress};

use dirs::{current_gid, current_uid, remove_sandbox_dir, run_as};
use session::Link;

const SCHEME: &str = "local";

/// The path of the workspace inside every local sandbox.
pub const WORKDIR: &str = "/workspace";

/// The host uid and gid a root caller's sandboxes run as: never the host's uid 0 (whose
/// files `/proc/sys` and `core_pattern` are), and a number no distribution assigns to a
/// user or daemon (systemd's dynamic users end at 65519; container subordinate ranges
/// start at 100000 and are handed out in blocks of 65536 well below it). It owns each
/// sandbox's workspace; no host account has it.
pub const ROOT_CALLER_SANDBOX_UID: u32 = 2_000_000_000;

/// How long a kill waits for the sandbox's processes to be gone.
const KILL_BOUND: Duration = Duration::from_secs(5);

/// The interpreter code cells run with (sandboxd's runner, `python3` on the sandbox's
/// `PATH`): the host's system Python.
const PYTHON: &str = "/usr/bin/python3";

/// The `PATH` every command starts with.
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

// What `local://` sandboxes can do: one definition, in `crate::backends::capabilities`.
use crate::backends::capabilities::LOCAL as CAPABILITIES;

/// The `local://` backend. Cheap to clone; clones share their sandboxes.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    audit: crate::AuditConfig,
    /// How the egress gates of this backend's allowlisted sandboxes resolve names.
    resolver: crate::EgressResolver,
    bwrap: PathBuf,
    root: PathBuf,
    sandboxes: Mutex<HashMap<String, Arc<State>>>,
    /// The seccomp filter file, written on the first `create` (`None`: no filter for this
    /// architecture).
    seccomp: OnceLock<Option<PathBuf>>,
}

/// One sandbox as a handle sees it, shared by the handle, its timer and the backend.
#[derive(Debug)]
struct State {
    id: String,
    dir: PathBuf,
    metadata: BTreeMap<String, String>,
    /// `None` for a `connect`ed handle (the record does not keep it).
    network: Option<NetworkPolicy>,
    /// What `stored_config` shows (the spec, secrets redacted).
    config: String,
    expires: Instant,
    /// Set by [`LocalBackend::expire`]: the TTL is over now.
    expired_early: AtomicBool,
    alive: AtomicBool,
    session: Arc<Session>,
    link: Link,
    /// The sandbox's bwrap, for the handle that started it.
    bwrap: Mutex<Option<Child>>,
    sandboxd: Owner,
    /// The inode of the sandbox's PID namespace (the processes probe).
    pid_namespace: Option<u64>,
    /// The gate and relay of a sandbox under an allowlist (`sandboxd/session/egress.rs`), held by the handle
    /// that created it.
    egress: Mutex<Option<egress::Egress>>,
    /// The owner's TTL timer on the reactor (`start_ttl_timer`); dropped with the state.
    ttl: Mutex<Option<reactor::Timer>>,
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
                audit: crate::AuditConfig::new(),
                resolver: crate::EgressResolver::system(),
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
    pub fn with_audit(self, audit: crate::AuditConfig) -> Self {
        self.rebuilt(audit, self.inner.resolver.clone())
    }

    /// The same backend resolving the names its allowlisted sandboxes ask for through
    /// `resolver` (default: [`EgressResolver::system`](crate::EgressResolver::system)), in the
    /// egress gate on the host. Call it before creating sandboxes.
    #[must_use]
    pub fn with_egress_resolver(self, resolver: crate::EgressResolver) -> Self {
        self.rebuilt(self.inner.audit.clone(), resolver)
    }

    /// A backend with these settings and the same `bwrap` and root, owning no sandbox yet.
    fn rebuilt(&self, audit: crate::AuditConfig, resolver: crate::EgressResolver) -> Self {
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

    fn sandboxes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<State>>> {
        self.inner.sandboxes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Descriptions (`pid N (comm)`) of the processes of a sandbox still running on this
    /// host, found by the sandbox's PID namespace, wherever they were re-parented, and after
    /// the sandbox was killed (the contract suite's orphan probe): empty means none.
    /// sandboxd's own processes (named `sandboxd`) are not listed. Reads `/proc`: processes
    /// of another user are not seen.
    #[must_use]
    pub fn running_processes(&self, sandbox_id: &str) -> Vec<String> {
        let known = self.sandboxes().get(sandbox_id).and_then(|s| s.pid_namespace);
        let namespace = known.or_else(|| {
            let sandboxd = record::sandboxd(&record::read(&self.inner.root.join(sandbox_id))?)?;
            let namespace = launch::pid_namespace(sandboxd.pid)?;
            // Read after the namespace: the pid was still the sandbox's sandboxd then.
            (Owner::of(sandboxd.pid)? == sandboxd).then_some(namespace)
        });
        namespace.map(launch::processes_in).unwrap_or_default()
    }

    /// Ids of this backend's live sandboxes whose metadata has `key` = `value`.
    #[must_use]
    pub fn live_sandboxes_labelled(&self, key: &str, value: &str) -> Vec<String> {
        self.sandboxes()
            .values()
            .filter(|s| s.is_alive() && s.metadata.get(key).is_some_and(|v| v == value))
            .map(|s| s.id.clone())
            .collect()
    }

    /// Everything the backend stores about a sandbox, as text (secret values appear only as
    /// `[redacted]`).
    #[must_use]
    pub fn stored_config(&self, sandbox_id: &str) -> Option<String> {
        self.sandboxes().get(sandbox_id).map(|s| s.config.clone())
    }

    /// Ends a sandbox's TTL now, as if it had expired (its commands are killed and its
    /// next operation raises `SandboxGone`). Returns whether it was alive. Operators use it
    /// to cut a sandbox short; the contract suite's `expire_sandbox` probe uses it too.
    #[expect(clippy::must_use_candidate, reason = "expiring is the point; the answer is optional")]
    pub fn expire(&self, sandbox_id: &str) -> bool {
        let Some(state) = self.sandboxes().get(sandbox_id).cloned() else { return false };
        let was = state.is_alive();
        state.expired_early.store(true, Ordering::Release);
        let _ = state.check_alive();
        was
    }

    /// Removes the local sandboxes past their TTL and, with
    /// [`ReapOptions::owner_dead`](crate::ReapOptions::owner_dead), the owned
    /// (not detached) sandboxes whose owner process on this host is gone: kills their
    /// sandboxd if it still runs (normally it ended with its owner's session, or at its
    /// TTL), then removes their directory. Judged by the record written beside each
    /// workspace (owner pid *and* start time), so a running process never loses its
    /// sandboxes to another's sweep, and a detached sandbox is kept until its TTL. With
    /// [`ReapOptions::dry_run`](crate::ReapOptions::dry_run) it removes nothing and reports
    /// what it would remove; with [`ReapOptions::labels`](crate::ReapOptions::labels) it
    /// looks only at the sandboxes so labelled.
    ///
    /// # Errors
    ///
    /// [`Error::Provider`] when the workspace root cannot be
    /// read. A workspace that vanishes meanwhile is not an error.
    ///
    /// # Cancel safety
    ///
    /// The sweep runs on a library thread and completes even if the future is dropped.
    pub async fn reap(&self, options: crate::ReapOptions) -> Result<crate::ReapReport> {
        let root = self.inner.root.clone();
        let live: Vec<String> = self.sandboxes().keys().cloned().collect();
        crate::runtime::unblock(move || {
            let mut report = crate::ReapReport::default();
            let entries = match std::fs::read_dir(&root) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
                Err(e) => return Err(Error::provider(SCHEME, "cannot read the workspace root", e)),
            };
            for entry in entries.flatten() {
                let id = entry.file_name().to_string_lossy().into_owned();
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                let text = record::read(&entry.path());
                if text.as_deref().is_some_and(|t| !record::info(&id, t).has_labels(&options.labels)) {
                    continue;
                }
                if !is_dir || live.contains(&id) || !record::sweepable(&entry.path(), options.owner_dead) {
                    report.kept += usize::from(is_dir);
                    continue;
                }
                if options.dry_run {
                    report.removed.push(id);
                    continue;
                }
                if let Some(sandboxd) = text.as_deref().and_then(record::sandboxd) {
                    session::kill(&sandboxd);
                    wait_gone(&sandboxd);
                }
                remove_sandbox_dir(&entry.path());
                if !entry.path().exists() {
                    report.removed.push(id);
                }
            }
            Ok(report)
        })
        .await
    }

    /// Every sandbox recorded under the workspace root (this host's, whichever process
    /// created it) whose labels hold every pair of `labels`.
    async fn list_recorded(&self, labels: &BTreeMap<String, String>) -> Result<Vec<crate::SandboxInfo>> {
        let root = self.inner.root.clone();
        let labels = labels.clone();
        crate::runtime::unblock(move || {
            let entries = match std::fs::read_dir(&root) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(Error::provider(SCHEME, "cannot read the workspace root", e)),
            };
            let mut listed: Vec<crate::SandboxInfo> = entries
                .flatten()
                .filter_map(|entry| {
                    let id = entry.file_name().to_string_lossy().into_owned();
                    Some(record::info(&id, &record::read(&entry.path())?))
                })
                .filter(|info| info.has_labels(&labels))
                .collect();
            listed.sort_by(|a, b| a.id.cmp(&b.id));
            Ok(listed)
        })
        .await
    }

    /// [`LocalBackend::reap`] for synchronous callers (blocks the calling thread).
    ///
    /// # Errors
    ///
    /// As [`LocalBackend::reap`].
    pub fn reap_blocking(&self, options: crate::ReapOptions) -> Result<crate::ReapReport> {
        futures_lite::future::block_on(self.reap(options))
    }

    /// The labels recorded with a sandbox.
    #[must_use]
    pub fn labels(&self, sandbox_id: &str) -> Option<BTreeMap<String, String>> {
        self.sandboxes().get(sandbox_id).map(|s| s.metadata.clone())
    }

    /// The uid and gid of the sandbox user, as the host and the sandbox both see them (the
    /// user namespace maps it to itself).
    fn sandbox_user() -> (u32, u32) {
        run_as().unwrap_or_else(|| (current_uid(), current_gid()))
    }

    /// The sandbox's session over `client`: commands run as sandboxd does (the user namespace maps one uid
    /// and one gid, so sandboxd could not switch), with `PATH`, `HOME` and the sandbox's
    /// variables.
    fn open_session(
        id: &str,
        client: crate::sandboxd::client::Client,
        network: Option<&NetworkPolicy>,
        spec: Option<&CreateSpec>,
    ) -> Arc<Session> {
        let identity = Identity { user: Self::sandbox_user(), command_gids: false, switch_user: false };
        let mut env = vec![("PATH".to_owned(), PATH.to_owned()), ("HOME".to_owned(), WORKDIR.to_owned())];
        let mut secrets = Vec::new();
        if matches!(network, Some(NetworkPolicy::Allowlist(_))) {
            // Before the sandbox's own variables, which may set their own proxy.
            env.extend(egress::proxy_env());
        }
        if let Some(spec) = spec {
            env.extend(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
            secrets.extend(spec.secret_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        Arc::new(Session::new(client, SCHEME, id.to_owned(), WORKDIR.to_owned(), identity, env, secrets))
    }

    async fn create_sandbox(&self, spec: CreateSpec) -> Result<LocalSandbox> {
        if !self.inner.bwrap.is_file() {
            return Err(spawn_error(&self.inner.bwrap, std::io::ErrorKind::NotFound.into()));
        }
        // Unguessable, and without the owner's pid.
        let id = format!("local-{}", dirs::random_hex());
        let dir = self.inner.root.join(&id);
        let started = Instant::now();
        let timeout = spec.create_timeout;
        let (root, made_dir) = (self.inner.root.clone(), dir.clone());
        let made = crate::runtime::unblock(move || {
            dirs::ensure_private_root(&root)?;
            dirs::make_sandbox_dir(&made_dir)
                .map_err(|e| Error::provider(SCHEME, "cannot create the workspace", e))
        });
        let bounded = futures_lite::future::or(async { Some(made.await) }, async {
            futures_timer::Delay::new(crate::duration::saturate(timeout)).await;
            None
        });
        // A dropped or failed `create()` leaves no directory behind.
        let dir_guard = Undo::new(dir.clone(), |dir: PathBuf| remove_sandbox_dir(&dir));
        match bounded.await {
            // Creation that finished but took longer than allowed is a timeout too.
            Some(made) if started.elapsed() <= timeout => made?,
            _ => return Err(Error::CreateTimeout { timeout }),
        }
        record::write_record(&dir, &spec)?;
        if self.inner.seccomp.get().is_none() {
            let root = self.inner.root.clone();
            let filter = crate::runtime::unblock(move || seccomp::install(&root)).await?;
            drop(self.inner.seccomp.set(filter));
        }
        let root = self.inner.root.clone();
        let sandboxd = crate::runtime::unblock(move || session::installed_binary(&root)).await?;
        let listen = session::bind_socket(&dir)
            .map_err(|e| Error::provider(SCHEME, "cannot make sandboxd's socket", e))?;
        let launch = launch::Launch {
            bwrap: &self.inner.bwrap,
            seccomp: self.inner.seccomp.get().and_then(Option::as_deref),
            run_as: run_as(),
            dir: &dir,
            sandboxd: &sandboxd,
            listen: &listen,
            network: &spec.network,
            ttl: spec.ttl,
        };
        // The gate listens before the sandbox starts: its socket is in the `run` directory
        // bound into it. A failed `create()` drops it (and its socket) here.
        let gate = match &spec.network {
            NetworkPolicy::Allowlist(_) => Some(egress::serve_gate(
                &dir.join("run").join(egress::SOCKET),
                SCHEME,
                &id,
                &spec,
                &self.inner.resolver,
            )?),
            _ => None,
        };
        let left = timeout.saturating_sub(started.elapsed());
        let started = session::start(&launch, left).await?;
        // sandboxd holds the socket now; the host keeps no copy (see `session::start`).
        drop(listen);
        let state = Arc::new(State {
            id: id.clone(),
            dir: dir.clone(),
            metadata: spec.metadata.clone(),
            network: Some(spec.network.clone()),
            config: format!("{spec:?}"),
            expires: crate::duration::after(Instant::now(), spec.ttl),
            expired_early: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            session: Self::open_session(&id, started.client, Some(&spec.network), Some(&spec)),
            link: started.link,
            pid_namespace: launch::pid_namespace(started.sandboxd.pid),
            bwrap: Mutex::new(Some(started.bwrap)),
            sandboxd: started.sandboxd,
            egress: Mutex::new(None),
            ttl: Mutex::new(None),
        });
        // From here a dropped `create()` destroys the sandbox (and its directory).
        let guard = Undo::new(Arc::clone(&state), |state: Arc<State>| {
            let _ = state.destroy("its creation was abandoned");
        });
        dir_guard.disarm();
        if let Some(gate) = gate {
            let started = egress::start_relay(
                &state.session,
                gate,
                launch::SANDBOXD_PATH,
                &format!("{}/{}", launch::RUN_DIR, egress::SOCKET),
            )
            .await?;
            *state.egress.lock().unwrap_or_else(PoisonError::into_inner) = Some(started);
        }
        let recorded = record::set(&dir, "sandboxd", &state.sandboxd.label())
            .and_then(|()| record::set(&dir, "network", &egress::policy_label(&spec.network)));
        recorded.map_err(|e| Error::provider(SCHEME, "cannot record the sandbox", e))?;
        if spec.detached {
            state.session.client().detach().await.map_err(|why| state.session.gone_error(&why))?;
            keep_egress_while_running(&state);
        }
        guard.disarm();
        self.sandboxes().insert(id, Arc::clone(&state));
        start_ttl_timer(&state);
        Ok(LocalSandbox { backend: self.clone(), state })
    }

    async fn connect_sandbox(&self, id: &str) -> Result<LocalSandbox> {
        let unknown = || Error::connect(SCHEME, format!("no sandbox {id}"));
        let well_formed = id
            .strip_prefix("local-")
            .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
        if !well_formed {
            return Err(unknown());
        }
        let dir = self.inner.root.join(id);
        let text = record::read(&dir).ok_or_else(unknown)?;
        let gone = |message: &str| Error::SandboxGone { id: id.to_owned(), message: message.to_owned() };
        if record::expired(&text) {
            return Err(gone("its TTL expired"));
        }
        let sandboxd = record::sandboxd(&text).ok_or_else(unknown)?;
        if sandboxd.is_dead_here() != Some(false) {
            return Err(gone("its sandboxd is not running"));
        }
        let (client, link) = session::connect(id, &dir, &sandboxd).await?;
        // Recorded at create (sandboxes from before the record line: unknown).
        let network = record::field(&text, "network").and_then(egress::policy_of_label);
        let ttl_left = record::field(&text, "expires")
            .and_then(|e| e.parse::<u64>().ok())
            .map_or(0, |at| at.saturating_sub(crate::backends::owner::unix_now()));
        let state = Arc::new(State {
            id: id.to_owned(),
            dir,
            metadata: BTreeMap::new(),
            network: network.clone(),
            config: String::new(),
            // The record is the host's, but a corrupt `expires` must not panic `connect`.
            expires: crate::duration::after(Instant::now(), Duration::from_secs(ttl_left)),
            expired_early: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            session: Self::open_session(id, client, network.as_ref(), None),
            link,
            bwrap: Mutex::new(None),
            pid_namespace: launch::pid_namespace(sandboxd.pid),
            sandboxd,
            egress: Mutex::new(None),
            ttl: Mutex::new(None),
        });
        Ok(LocalSandbox { backend: self.clone(), state })
    }
}

/// Undoes part of a `create()` that failed or was dropped (its directory, or its started
/// sandbox): runs `undo` on the value unless disarmed.
struct Undo<T> {
    value: Option<T>,
    undo: fn(T),
}

impl<T> Undo<T> {
    fn new(value: T, undo: fn(T)) -> Self {
        Undo { value: Some(value), undo }
    }

    fn disarm(mut self) {
        self.value = None;
    }
}

impl<T> Drop for Undo<T> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take() {
            (self.undo)(value);
        }
    }
}

/// Waits (at most [`KILL_BOUND`]) until `process` is gone.
fn wait_gone(process: &Owner) {
    let deadline = Instant::now() + KILL_BOUND;
    while process.is_dead_here() == Some(false) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Destroys the sandbox at its expiry, even if no handle is left: a timer on the reactor's
/// thread (no thread of its own), cancelled when the last handle goes.
fn start_ttl_timer(state: &Arc<State>) {
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
fn keep_egress_while_running(state: &Arc<State>) {
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

impl Default for LocalBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl State {
    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
            && !self.expired_early.load(Ordering::Acquire)
            && Instant::now() < self.expires
    }

    fn check_alive(&self) -> Result<()> {
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
    fn destroy(&self, why: &str) -> bool {
        let was = self.alive.swap(false, Ordering::AcqRel);
        self.session.set_gone(why);
        drop(self.egress.lock().unwrap_or_else(PoisonError::into_inner).take());
        self.link.close();
        session::kill(&self.sandboxd);
        match self.bwrap.lock().unwrap_or_else(PoisonError::into_inner).take() {
            // bwrap exits once its child, the init, has reaped the whole namespace.
            Some(mut bwrap) => drop(bwrap.wait()),
            None => wait_gone(&self.sandboxd),
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

pub(super) fn spawn_error(bwrap: &Path, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        return Error::Configuration {
            message: format!(
                "bwrap (bubblewrap) is not installed at {}; install Debian's `bubblewrap` package, or use docker://",
                bwrap.display()
            ),
            source: Some(Box::new(e)),
        };
    }
    Error::provider(SCHEME, format!("cannot start {}", bwrap.display()), e)
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

    fn audit(&self) -> crate::AuditConfig {
        self.inner.audit.clone()
    }

    fn create(&self, spec: CreateSpec) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        Box::pin(async move { Ok(Box::new(self.create_sandbox(spec).await?) as Box<dyn BackendSandbox>) })
    }

    fn connect(&self, id: &str) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        let id = id.to_owned();
        Box::pin(async move { Ok(Box::new(self.connect_sandbox(&id).await?) as Box<dyn BackendSandbox>) })
    }

    fn list(&self, labels: &BTreeMap<String, String>) -> BoxFuture<'_, Result<Vec<crate::SandboxInfo>>> {
        let labels = labels.clone();
        Box::pin(async move { self.list_recorded(&labels).await })
    }

    fn reap(&self, options: crate::ReapOptions) -> BoxFuture<'_, Result<crate::ReapReport>> {
        Box::pin(LocalBackend::reap(self, options))
    }
}

/// One local sandbox handle.
#[derive(Debug)]
pub(super) struct LocalSandbox {
    backend: LocalBackend,
    state: Arc<State>,
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

    fn network_enforcement(&self) -> Option<crate::NetworkEnforcement> {
        Some(match self.state.network.as_ref()? {
            NetworkPolicy::AllowAll => crate::NetworkEnforcement::unrestricted(),
            NetworkPolicy::Allowlist(_) => crate::NetworkEnforcement::egress_gate(),
            _ => crate::NetworkEnforcement::no_route(),
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
