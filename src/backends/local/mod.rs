//! `local://`: a daemonless sandbox built from Linux namespaces with `bwrap`
//! (bubblewrap). Feature `local`.
//!
//! Each command runs in fresh user, mount, PID, network, IPC and UTS namespaces, with the
//! host's `/usr` read-only, a private `/tmp`, and the sandbox's workspace (a host directory)
//! bound at `/workspace`, its working directory. Killing `bwrap` kills the command's whole
//! process tree; `--die-with-parent` ends every command when the owner process dies, even
//! by `SIGKILL`. The network is a namespace with only loopback unless the policy is
//! allow-all. Every command also runs under a seccomp filter (x86-64 and aarch64: kernel
//! keyrings, BPF, perf, modules, mounts, file handles and the like fail with `EPERM`), with
//! `no_new_privs`, with every capability dropped (even when the caller is root), and cannot
//! create nested user namespaces (`--disable-userns`). File operations reach only the
//! workspace: any other path is [`Error::PermissionDenied`]. See `docs/adr/0004-local-backend.md` for the choices and their limits.
//!
//! Declared capabilities: `RUN`, `RUN_CODE` (the host's `/usr/bin/python3`, one process per
//! cell; the structured error comes from the exception object through a record file, never
//! from parsing output; a host without it does not declare it), `STREAM`, `STDIN`,
//! `FILESYSTEM`, `NETWORK_DENY`. Isolation tier: [`IsolationTier::Process`]. Not declared
//! (and so refused): stateful code contexts, rich outputs, allowlists, resource limits,
//! connect and detach.

mod fs;
mod process;
mod seccomp;
mod stream;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command as OsCommand;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::backend::{Backend, BackendExecStream, BackendSandbox, BoxFuture, CreateSpec, KillOutcome};
use crate::backends::code_runner;
use crate::dsn::Dsn;
use crate::error::{Error, Result};
use crate::exec::{Code, CodeResult, Command, ExecResult, ExitStatus, StreamKind};
use crate::fs::DirEntry;
use crate::policy::{Capabilities, IsolationTier, NetworkPolicy};

use process::{Piece, Running};

const SCHEME: &str = "local";

/// The path of the workspace inside every local sandbox.
pub const WORKDIR: &str = "/workspace";

/// sandboxio's own directory inside every local sandbox (a host directory beside the
/// workspace, never reached by the file API).
const RUN_DIR: &str = "/run/sandboxio";

/// The interpreter code cells run with: the host's system Python.
const PYTHON: &str = "/usr/bin/python3";

/// What `local://` sandboxes can do.
pub const CAPABILITIES: Capabilities = Capabilities::RUN
    .union(Capabilities::RUN_CODE)
    .union(Capabilities::STREAM)
    .union(Capabilities::STDIN)
    .union(Capabilities::FILESYSTEM)
    .union(Capabilities::NETWORK_DENY)
    // Each command runs in its own PID namespace: no other command can read its environ.
    .union(Capabilities::COMMAND_SECRETS);

/// The `local://` backend. Cheap to clone; clones share their sandboxes.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    audit: crate::AuditConfig,
    bwrap: PathBuf,
    root: PathBuf,
    sandboxes: Mutex<HashMap<String, Arc<State>>>,
    /// The seccomp filter file, written on the first `create` (`None`: no filter for this
    /// architecture).
    seccomp: OnceLock<Option<PathBuf>>,
}

/// One sandbox's state, shared by its handles, its timer and its processes.
#[derive(Debug)]
struct State {
    id: String,
    dir: PathBuf,
    spec: CreateSpec,
    expires: Instant,
    /// Set by [`LocalBackend::expire`]: the TTL is over now.
    expired_early: AtomicBool,
    alive: AtomicBool,
    processes: Mutex<HashMap<u64, Arc<Running>>>,
    next_process: AtomicU64,
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
        LocalBackend {
            inner: Arc::new(Inner {
                audit,
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
    /// [`ErrorCode::Configuration`](crate::ErrorCode) for an option, host or path.
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

    /// Descriptions of the commands still running in a sandbox (the contract suite's
    /// orphan probe): empty means none.
    #[must_use]
    pub fn running_processes(&self, sandbox_id: &str) -> Vec<String> {
        let Some(state) = self.sandboxes().get(sandbox_id).cloned() else { return Vec::new() };
        let processes = state.processes.lock().unwrap_or_else(PoisonError::into_inner);
        processes.values().filter(|p| p.is_running()).map(|p| format!("bwrap pid {}", p.pid)).collect()
    }

    /// Ids of this backend's live sandboxes whose metadata has `key` = `value`.
    #[must_use]
    pub fn live_sandboxes_labelled(&self, key: &str, value: &str) -> Vec<String> {
        self.sandboxes()
            .values()
            .filter(|s| s.is_alive() && s.spec.metadata.get(key).is_some_and(|v| v == value))
            .map(|s| s.id.clone())
            .collect()
    }

    /// Everything the backend stores about a sandbox, as text (secret values appear only as
    /// `[redacted]`).
    #[must_use]
    pub fn stored_config(&self, sandbox_id: &str) -> Option<String> {
        self.sandboxes().get(sandbox_id).map(|s| format!("{:?}", s.spec))
    }

    /// Ends a sandbox's TTL now, as if it had expired (its commands are killed and its
    /// next operation raises `SandboxGone`). Returns whether it was alive. Operators use it
    /// to cut a sandbox short; the contract suite's `expire_sandbox` probe uses it too.
    #[allow(clippy::must_use_candidate)] // expiring is the point; the answer is optional
    pub fn expire(&self, sandbox_id: &str) -> bool {
        let Some(state) = self.sandboxes().get(sandbox_id).cloned() else { return false };
        let was = state.is_alive();
        state.expired_early.store(true, Ordering::Release);
        let _ = state.check_alive();
        was
    }

    /// Removes the workspaces of local sandboxes past their TTL and, with
    /// [`ReapOptions::owner_dead`](crate::backends::ReapOptions::owner_dead), of owned sandboxes whose owner process on this host is
    /// gone (their processes already died with it: `bwrap --die-with-parent`). Judged by
    /// the record written beside each workspace (owner pid *and* start time), so a running
    /// process never loses its sandboxes to another's sweep.
    ///
    /// # Errors
    ///
    /// [`ErrorCode::Provider`](crate::ErrorCode::Provider) when the workspace root cannot be
    /// read. A workspace that vanishes meanwhile is not an error.
    ///
    /// # Cancel safety
    ///
    /// The sweep runs on a library thread and completes even if the future is dropped.
    pub async fn reap(&self, options: crate::backends::ReapOptions) -> Result<crate::backends::ReapReport> {
        let root = self.inner.root.clone();
        let live: Vec<String> = self.sandboxes().keys().cloned().collect();
        crate::runtime::unblock(move || {
            let mut report = crate::backends::ReapReport::default();
            let entries = match std::fs::read_dir(&root) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
                Err(e) => return Err(Error::provider(SCHEME, "cannot read the workspace root", e)),
            };
            for entry in entries.flatten() {
                let id = entry.file_name().to_string_lossy().into_owned();
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                if !is_dir || live.contains(&id) || !sweepable(&entry.path(), options.owner_dead) {
                    report.kept += usize::from(is_dir);
                    continue;
                }
                if std::fs::remove_dir_all(entry.path()).is_ok() {
                    report.removed.push(id);
                }
            }
            Ok(report)
        })
        .await
    }

    /// [`LocalBackend::reap`] for synchronous callers (blocks the calling thread).
    ///
    /// # Errors
    ///
    /// As [`LocalBackend::reap`].
    pub fn reap_blocking(
        &self,
        options: crate::backends::ReapOptions,
    ) -> Result<crate::backends::ReapReport> {
        futures_lite::future::block_on(self.reap(options))
    }

    /// The labels recorded with a sandbox.
    #[must_use]
    pub fn labels(&self, sandbox_id: &str) -> Option<BTreeMap<String, String>> {
        self.sandboxes().get(sandbox_id).map(|s| s.spec.metadata.clone())
    }
}

/// Variables a host `/bin/sh` acts on at startup (bash, when it is `sh`: `SHELLOPTS=xtrace`
/// with a `PS4` holding `$(...)` runs code; `BASH_ENV`, `ENV` name files to source;
/// `BASH_FUNC_*` define functions). The launcher shell sees the command's environment, so
/// these are refused.
fn shell_control(name: &str) -> bool {
    matches!(name, "ENV" | "BASH_ENV" | "SHELLOPTS" | "BASHOPTS" | "PS4") || name.starts_with("BASH_FUNC_")
}

/// Makes sure the root of this user's workspaces is a real directory that this user owns and
/// no one else can enter (`0700`): another local user must never plant or swap files there
/// (the seccomp filter, or a workspace).
fn ensure_private_root(root: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    let refuse = |why: String| Error::Configuration { message: why, source: None };
    match std::fs::DirBuilder::new().mode(0o700).create(root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::provider(SCHEME, format!("cannot create {}", root.display()), e)),
    }
    let meta = std::fs::symlink_metadata(root)
        .map_err(|e| Error::provider(SCHEME, "cannot inspect the workspace root", e))?;
    if meta.file_type().is_symlink() || !meta.is_dir() || meta.uid() != current_uid() {
        return Err(refuse(format!(
            "the local workspace root {} is not a directory owned by this user; remove it (another user may have planted it)",
            root.display()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::provider(SCHEME, "cannot make the workspace root private", e))?;
    }
    Ok(())
}

/// The real user id of this process (workspaces are kept per user, so that users on one
/// host never share or block each other's directory).
fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
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

    fn workspace(&self) -> PathBuf {
        self.dir.join("workspace")
    }

    fn check_alive(&self) -> Result<()> {
        if self.is_alive() {
            return Ok(());
        }
        if self.alive.load(Ordering::Acquire) {
            self.destroy();
            return Err(Error::SandboxGone { id: self.id.clone(), message: "its TTL expired".into() });
        }
        Err(Error::SandboxGone { id: self.id.clone(), message: "it was killed".into() })
    }

    /// Kills every command and removes the workspace. Returns whether it was alive.
    fn destroy(&self) -> bool {
        let was = self.alive.swap(false, Ordering::AcqRel);
        let processes: Vec<Arc<Running>> =
            self.processes.lock().unwrap_or_else(PoisonError::into_inner).drain().map(|(_, p)| p).collect();
        for p in processes {
            p.kill();
        }
        if was {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        was
    }

    /// The `bwrap` command line for `command`, env passed through the environment (never on
    /// the command line, where `ps` would show secrets).
    fn bwrap(&self, bwrap: &Path, seccomp: Option<&Path>, command: &Command) -> Result<OsCommand> {
        let mut cmd = match seccomp {
            // A `sh` opens the filter on fd 3 and becomes bwrap (same pid, so killing it
            // still kills bwrap).
            Some(filter) => {
                let mut sh = OsCommand::new("/bin/sh");
                sh.args(["-c", r#"f=$1; shift; exec "$@" 3<"$f""#, "sandboxio-local"]).arg(filter).arg(bwrap);
                sh.args(["--seccomp", "3"]);
                sh
            }
            None => OsCommand::new(bwrap),
        };
        cmd.env_clear();
        // No capabilities inside, even when the caller is root (uid 0 maps to itself then).
        cmd.args(["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]);
        if self.spec.network == NetworkPolicy::AllowAll {
            cmd.arg("--share-net");
        }
        cmd.args(["--die-with-parent", "--new-session", "--hostname", "sandbox"]);
        cmd.args(["--ro-bind", "/usr", "/usr"]);
        for (link, target) in
            [("/bin", "usr/bin"), ("/sbin", "usr/sbin"), ("/lib", "usr/lib"), ("/lib64", "usr/lib64")]
        {
            if Path::new(link).exists() {
                cmd.args(["--symlink", target, link]);
            }
        }
        for etc in
            ["/etc/alternatives", "/etc/ssl", "/etc/resolv.conf", "/etc/hosts", "/etc/passwd", "/etc/group"]
        {
            cmd.args(["--ro-bind-try", etc, etc]);
        }
        cmd.args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]);
        cmd.arg("--bind").arg(self.workspace()).arg(WORKDIR);
        // sandboxio's own files for this sandbox (code cells' error records).
        cmd.arg("--bind").arg(self.dir.join("run")).arg(RUN_DIR);
        let cwd = crate::path::resolve(WORKDIR, command.working_dir().unwrap_or("."));
        if !cwd.starts_with(WORKDIR) {
            return Err(Error::PermissionDenied { path: cwd });
        }
        let host_cwd = fs::host_path(&self.workspace(), &cwd)?;
        if !host_cwd.is_dir() {
            return Err(Error::NotFound { path: cwd });
        }
        cmd.arg("--chdir").arg(&cwd);
        cmd.env("PATH", "/usr/local/bin:/usr/bin:/bin");
        cmd.env("HOME", WORKDIR);
        cmd.env("PWD", &cwd);
        let names = self.spec.env.iter().map(|(k, _)| k).chain(command.env_vars().iter().map(|(k, _)| k));
        let secret_names = self.spec.secret_env.iter().chain(command.secret_env_vars()).map(|(k, _)| k);
        if let Some(name) = names.chain(secret_names).find(|k| shell_control(k)) {
            return Err(Error::invalid_input(format!(
                "env var {name:?} steers the host shell that starts bwrap; local:// refuses it"
            )));
        }
        for (k, v) in self.spec.env.iter().chain(command.env_vars()) {
            cmd.env(k, v);
        }
        for (k, v) in self.spec.secret_env.iter().chain(command.secret_env_vars()) {
            cmd.env(k, v.expose_secret());
        }
        // Through `sh -c 'exec "$@"'`: a missing program exits 127, as in a shell and in
        // docker://, instead of bwrap's own exit 1.
        cmd.args(["--", "/bin/sh", "-c", r#"exec "$@""#, "sandboxio"]).args(command.argv());
        Ok(cmd)
    }

    fn register(&self, running: &Arc<Running>) -> u64 {
        let key = self.next_process.fetch_add(1, Ordering::Relaxed);
        self.processes.lock().unwrap_or_else(PoisonError::into_inner).insert(key, Arc::clone(running));
        key
    }

    fn unregister(&self, key: u64) {
        self.processes.lock().unwrap_or_else(PoisonError::into_inner).remove(&key);
    }
}

/// Kills a command and forgets it when the operation running it ends or is dropped.
pub(super) struct ProcessGuard {
    state: Arc<State>,
    running: Arc<Running>,
    key: u64,
}

impl ProcessGuard {
    fn new(state: &Arc<State>, running: Running) -> Self {
        let running = Arc::new(running);
        let key = state.register(&running);
        ProcessGuard { state: Arc::clone(state), running, key }
    }
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        self.running.kill();
        self.state.unregister(self.key);
    }
}

/// The file beside a sandbox's workspace that [`LocalBackend::reap`] reads: its owner, the
/// end of its TTL, whether it is detached, and its metadata (values escaped).
const RECORD_FILE: &str = "sandbox";

fn write_record(dir: &Path, spec: &CreateSpec) -> Result<()> {
    use std::fmt::Write as _;
    let owner = crate::backends::owner::Owner::current();
    let expires = crate::backends::owner::unix_now() + spec.ttl.as_secs();
    let mut text = format!("owner {}\nexpires {expires}\ndetached {}\n", owner.label(), spec.detached);
    for (k, v) in &spec.metadata {
        let _ = writeln!(text, "label {k:?}={v:?}");
    }
    std::fs::write(dir.join(RECORD_FILE), text)
        .map_err(|e| Error::provider(SCHEME, "cannot record the sandbox", e))
}

/// Whether the sandbox recorded in `dir` should be swept: past its TTL, or (with
/// `owner_dead`) owned by a process on this host that is gone. A directory with no record
/// is left alone.
fn sweepable(dir: &Path, owner_dead: bool) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join(RECORD_FILE)) else { return false };
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' '));
    let expired = field("expires")
        .and_then(|e| e.parse::<u64>().ok())
        .is_none_or(|at| at <= crate::backends::owner::unix_now());
    let detached = field("detached") == Some("true");
    let dead = field("owner").and_then(crate::backends::owner::Owner::parse).and_then(|o| o.is_dead_here())
        == Some(true);
    expired || (owner_dead && !detached && dead)
}

/// A cell's error record, read on the host without following a link the cell may have
/// put in its place (and at most 1 MiB of it). `None` when there is no regular file.
fn read_record(host: &Path) -> Option<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let meta = std::fs::symlink_metadata(host).ok().filter(std::fs::Metadata::is_file)?;
    // Never through a link, and never blocking on a FIFO swapped in after the check.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(host)
        .ok()?;
    let opened = file.metadata().ok()?;
    if (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(1 << 20).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

fn exit_status(status: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitStatus::Code(code),
        (None, Some(sig)) => ExitStatus::Signal(sig),
        (None, None) => ExitStatus::Code(-1),
    }
}

fn spawn_error(bwrap: &Path, e: std::io::Error) -> Error {
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
        // Unique across every backend value in this process, and across processes.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Box::pin(async move {
            if !self.inner.bwrap.is_file() {
                return Err(spawn_error(&self.inner.bwrap, std::io::ErrorKind::NotFound.into()));
            }
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let id = format!("local-{}-{n}", std::process::id());
            let dir = self.inner.root.join(&id);
            let ws = dir.join("workspace");
            let run_dir = dir.join("run");
            let timeout = spec.create_timeout;
            let root = self.inner.root.clone();
            let made = crate::runtime::unblock(move || {
                ensure_private_root(&root)?;
                std::fs::create_dir_all(&ws)
                    .and_then(|()| std::fs::create_dir_all(&run_dir))
                    .map_err(|e| Error::provider(SCHEME, "cannot create the workspace", e))
            });
            let bounded = futures_lite::future::or(async { Some(made.await) }, async {
                futures_timer::Delay::new(timeout).await;
                None
            });
            let started = Instant::now();
            match bounded.await {
                // Creation that finished but took longer than allowed is a timeout too.
                Some(made) if started.elapsed() <= timeout => made?,
                _ => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(Error::CreateTimeout { timeout });
                }
            }
            let expires = Instant::now() + spec.ttl;
            if let Err(e) = write_record(&dir, &spec) {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
            let state = Arc::new(State {
                id: id.clone(),
                dir,
                spec,
                expires,
                expired_early: AtomicBool::new(false),
                alive: AtomicBool::new(true),
                processes: Mutex::new(HashMap::new()),
                next_process: AtomicU64::new(0),
            });
            if self.inner.seccomp.get().is_none() {
                let root = self.inner.root.clone();
                let installed = crate::runtime::unblock(move || seccomp::install(&root)).await;
                match installed {
                    Ok(filter) => drop(self.inner.seccomp.set(filter)),
                    Err(e) => {
                        state.destroy();
                        return Err(e);
                    }
                }
            }
            let filter = self.inner.seccomp.get().and_then(Option::as_deref);
            if let Err(e) = preflight(&self.inner.bwrap, filter, &state).await {
                state.destroy();
                return Err(e);
            }
            self.sandboxes().insert(id.clone(), Arc::clone(&state));
            start_ttl_timer(&state);
            Ok(Box::new(LocalSandbox { backend: self.clone(), state }) as Box<dyn BackendSandbox>)
        })
    }
}

/// Starts `true` in the sandbox's namespaces once, so that a host that cannot create them
/// fails `create()` with a configuration error saying why, not every later command.
async fn preflight(bwrap: &Path, seccomp: Option<&Path>, state: &Arc<State>) -> Result<()> {
    let cmd = state.bwrap(bwrap, seccomp, &Command::new("true"))?;
    let running = process::spawn(cmd, false).map_err(|e| spawn_error(bwrap, e))?;
    let mut stderr = Vec::new();
    loop {
        match running.pieces.pop().await {
            Piece::End => break,
            Piece::Output(StreamKind::Stderr, data) => stderr.extend(data),
            Piece::Output(StreamKind::Stdout, _) => {}
        }
    }
    let status = running.wait().await?;
    if status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&stderr).trim().to_owned();
    if said.contains("disable-userns") || said.contains("cap-drop") || said.contains("seccomp") {
        return Err(Error::configuration(format!(
            "this bwrap is too old for local:// ({said}); it needs bubblewrap 0.8 or newer (--disable-userns)"
        )));
    }
    Err(Error::configuration(format!(
        "bwrap cannot create the sandbox's namespaces on this host ({said}); if unprivileged user namespaces are disabled, enable them (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, or on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0), or use docker://"
    )))
}

/// Destroys the sandbox at its expiry, even if no handle is left.
fn start_ttl_timer(state: &Arc<State>) {
    let weak = Arc::downgrade(state);
    let expires = state.expires;
    let _ = std::thread::Builder::new().name("sandboxio-local-ttl".into()).spawn(move || {
        loop {
            let now = Instant::now();
            if now >= expires {
                break;
            }
            std::thread::sleep((expires - now).min(Duration::from_secs(1)));
            match weak.upgrade() {
                Some(state) if state.alive.load(Ordering::Acquire) => {}
                _ => return,
            }
        }
        if let Some(state) = weak.upgrade() {
            state.destroy();
        }
    });
}

/// One local sandbox handle.
#[derive(Debug)]
pub(super) struct LocalSandbox {
    backend: LocalBackend,
    state: Arc<State>,
}

impl LocalSandbox {
    fn start(&self, command: &Command, pipe_stdin: bool) -> Result<ProcessGuard> {
        self.state.check_alive()?;
        let seccomp = self.backend.inner.seccomp.get().and_then(Option::as_deref);
        let cmd = self.state.bwrap(&self.backend.inner.bwrap, seccomp, command)?;
        let running =
            process::spawn(cmd, pipe_stdin).map_err(|e| spawn_error(&self.backend.inner.bwrap, e))?;
        Ok(ProcessGuard::new(&self.state, running))
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
            CAPABILITIES.difference(Capabilities::RUN_CODE)
        }
    }

    fn network_policy(&self) -> Option<NetworkPolicy> {
        Some(self.state.spec.network.clone())
    }

    fn run_code(&self, code: Code) -> BoxFuture<'_, Result<CodeResult>> {
        Box::pin(async move {
            let started = Instant::now();
            let name = format!("cell-{}.error", self.state.next_process.fetch_add(1, Ordering::Relaxed));
            let command = code_runner::command(SCHEME, PYTHON, &code, &format!("{RUN_DIR}/{name}"))?;
            let ran = self.run(command).await?;
            let host = self.state.dir.join("run").join(name);
            let record = crate::runtime::unblock(move || {
                let record = read_record(&host);
                let _ = std::fs::remove_file(&host);
                Ok(record)
            })
            .await?;
            code_runner::result(ran, record.as_deref(), started.elapsed())
        })
    }

    fn metadata(&self) -> BTreeMap<String, String> {
        self.state.spec.metadata.clone()
    }

    fn run(&self, command: Command) -> BoxFuture<'_, Result<ExecResult>> {
        Box::pin(async move {
            let started = Instant::now();
            let guard = self.start(&command, command.stdin_bytes().is_some())?;
            let running = Arc::clone(&guard.running);
            if let Some(data) = command.stdin_bytes() {
                // A command that exits without reading all its stdin is not an error.
                let _ = running.write_stdin(data.to_vec()).await;
                running.close_stdin();
            }
            let limit = command.output_limit_bytes();
            let mut out = (Vec::new(), Vec::new());
            let mut truncated = false;
            let deadline = command.timeout_duration();
            let collect = async {
                loop {
                    match running.pieces.pop().await {
                        Piece::End => break,
                        Piece::Output(stream, data) => {
                            let buf = if stream == StreamKind::Stdout { &mut out.0 } else { &mut out.1 };
                            let room = limit.saturating_sub(buf.len());
                            truncated |= data.len() > room;
                            buf.extend_from_slice(&data[..data.len().min(room)]);
                        }
                    }
                }
            };
            let timed_out = if let Some(d) = deadline {
                futures_lite::future::or(
                    async {
                        collect.await;
                        false
                    },
                    async {
                        futures_timer::Delay::new(d).await;
                        true
                    },
                )
                .await
            } else {
                collect.await;
                false
            };
            if timed_out {
                running.kill();
                // Keep what was already read.
                while let Some(Piece::Output(stream, data)) = running.pieces.try_pop() {
                    let buf = if stream == StreamKind::Stdout { &mut out.0 } else { &mut out.1 };
                    let room = limit.saturating_sub(buf.len());
                    buf.extend_from_slice(&data[..data.len().min(room)]);
                }
                let partial = ExecResult::new(0, out.0, out.1)
                    .with_status(ExitStatus::Signal(9))
                    .with_truncated(truncated)
                    .with_duration(started.elapsed());
                drop(guard);
                return Err(Error::ExecutionTimeout {
                    timeout: deadline.unwrap_or_default(),
                    partial: Box::new(partial),
                });
            }
            let status = running.wait().await?;
            drop(guard);
            self.state.check_alive()?;
            Ok(ExecResult::new(0, out.0, out.1)
                .with_status(exit_status(status))
                .with_truncated(truncated)
                .with_duration(started.elapsed()))
        })
    }

    fn stream(&self, command: Command) -> Result<Box<dyn BackendExecStream>> {
        let guard = self.start(&command, true)?;
        Ok(Box::new(stream::LocalExecStream::new(guard, &command)))
    }

    fn read(&self, path: &str) -> BoxFuture<'_, Result<Vec<u8>>> {
        let path = path.to_owned();
        Box::pin(async move { fs::read(self, &path).await })
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

    fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
        Box::pin(async move {
            let state = Arc::clone(&self.state);
            let was = crate::runtime::unblock(move || Ok(state.destroy())).await?;
            // A killed sandbox is forgotten; its handles keep their own state.
            self.backend.sandboxes().remove(&self.state.id);
            Ok(if was { KillOutcome::Killed } else { KillOutcome::AlreadyGone })
        })
    }
}
