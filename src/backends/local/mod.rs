//! `local://`: a daemonless sandbox built from Linux namespaces with `bwrap`
//! (bubblewrap). Feature `local`.
//!
//! Each command runs in fresh user, mount, PID, network, IPC and UTS namespaces, with the
//! host's `/usr` read-only, a private `/tmp`, a read-only `/proc`, the sandbox's own
//! `/etc/passwd` and `/etc/group`, and the sandbox's workspace (a host directory) bound at
//! `/workspace`, its working directory. A command starts behind a gate (see
//! `process.rs`): its environment, secrets included, travels on a pipe into the namespaces
//! and never reaches a host process's environment or argv, and nothing runs before every
//! parent-death link is armed. Every process a command starts carries a mark in its mount
//! table that it cannot remove, so a command's end, timeout, kill or dropped stream, and
//! `close()`, kill everything it started (even after `setsid` or a double fork), and
//! `--die-with-parent` ends every command when the owner process dies, even by `SIGKILL`.
//! A root caller's sandboxes run as the dedicated host uid [`ROOT_CALLER_SANDBOX_UID`],
//! never as the host's uid 0. The network is a namespace with only loopback unless the
//! policy is allow-all. Every command also runs under a seccomp filter (x86-64 and aarch64:
//! kernel keyrings, BPF, perf, modules, mounts, file handles and the like fail with
//! `EPERM`), with `no_new_privs`, with every capability dropped, and cannot create nested
//! user namespaces (`--disable-userns`). Env var names must be shell names. File operations
//! reach only the workspace: any other path is [`Error::PermissionDenied`]. See
//! `docs/adr/0004-local-backend.md` for the choices and their limits.
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

/// Where each command's mark is mounted (`<MARK_ROOT>/<sandbox id>/<n>`, see
/// [`process::marked`]), and where a code cell finds its private record directory.
const MARK_ROOT: &str = "/run/sandboxio";

/// Each command's private directory inside the sandbox: a fresh host directory bound for
/// that one command, where the waiter writes the command's exit status and a code cell its
/// error record; no other command or cell can see it, so none can plant what it reports.
const PRIVATE_DIR: &str = "/run/sandboxio-private";

/// The waiter that gives a command's exact exit status (a signal death is not an exit code
/// 128 + n, whatever bwrap's own exit code says): the host's perl (Debian's `perl-base` is
/// essential, so always there), when it has one.
const PERL: &str = "/usr/bin/perl";

/// The host uid and gid a root caller's sandboxes run as: never the host's uid 0 (whose
/// files `/proc/sys` and `core_pattern` are), and a number no distribution assigns to a
/// user or daemon (systemd's dynamic users end at 65519; container subordinate ranges
/// start at 100000 and are handed out in blocks of 65536 well below it). It owns each
/// sandbox's workspace; no host account has it.
pub const ROOT_CALLER_SANDBOX_UID: u32 = 2_000_000_000;

/// The launcher's first part under bash: close every descriptor above 2.
const LAUNCH_CLOSE_ALL: &str = r#"for __d in /proc/$$/fd/*; do __n=${__d##*/}; [ "$__n" -gt 2 ] 2>/dev/null && eval "exec $__n>&-"; done
"#;

/// The launcher's first part under a POSIX `sh`, which can name descriptors 0 to 9 only.
const LAUNCH_CLOSE_LOW: &str = "exec 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-\n";

/// The launcher's second part: `$1` the filter (empty: none), `$2` bwrap, then its argv.
/// bwrap starts with an empty environment (`env -i`): the shell's own variables (`SHLVL`,
/// `PWD`, `_`) would otherwise reach the sandbox.
const LAUNCH: &str = r#"f=$1; shift
if [ -n "$f" ]; then exec /usr/bin/env -i "$@" 3<"$f"; else exec /usr/bin/env -i "$@"; fi"#;

/// How long a kill keeps looking for a command's processes before it reports survivors.
const KILL_BOUND: Duration = Duration::from_secs(5);

/// The interpreter code cells run with: the host's system Python.
const PYTHON: &str = "/usr/bin/python3";

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
    /// [`Error::Configuration`] for an option, host or path.
    pub fn from_dsn(dsn: &Dsn) -> Result<Arc<dyn Backend>> {
        dsn.reject_unknown_options(&[])?;
        if !dsn.authority().is_empty() || !dsn.path().is_empty() {
            return Err(Error::configuration("local:// takes no host or path"));
        }
        Ok(Arc::new(LocalBackend::new()))
    }

    fn host(&self) -> Host<'_> {
        Host {
            bwrap: &self.inner.bwrap,
            seccomp: self.inner.seccomp.get().and_then(Option::as_deref),
            run_as: run_as(),
        }
    }

    fn sandboxes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<State>>> {
        self.inner.sandboxes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Descriptions of the processes of a sandbox still running on this host, found by a
    /// mark in their mount table that sandboxed code cannot remove, wherever they were
    /// re-parented, and after the sandbox was killed (the contract suite's orphan probe):
    /// empty means none. Reads `/proc`: processes of another user are not seen.
    #[must_use]
    pub fn running_processes(&self, sandbox_id: &str) -> Vec<String> {
        // By the mark every process of the sandbox carries, not by the backend's own list:
        // a process re-parented to init, or left by a killed sandbox, is found too.
        process::marked::find(&format!("{MARK_ROOT}/{sandbox_id}/"), true)
            .into_iter()
            .map(|(pid, comm)| format!("pid {pid} ({comm})"))
            .collect()
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
    #[expect(clippy::must_use_candidate, reason = "expiring is the point; the answer is optional")]
    pub fn expire(&self, sandbox_id: &str) -> bool {
        let Some(state) = self.sandboxes().get(sandbox_id).cloned() else { return false };
        let was = state.is_alive();
        state.expired_early.store(true, Ordering::Release);
        let _ = state.check_alive();
        was
    }

    /// Removes the workspaces of local sandboxes past their TTL and, with
    /// [`ReapOptions::owner_dead`](crate::backends::ReapOptions::owner_dead), of owned sandboxes whose owner process on this host is
    /// gone, after killing any of their processes still found on this host (by the mark
    /// each carries; normally none is left: they die with their owner, `bwrap
    /// --die-with-parent`). Judged by
    /// the record written beside each workspace (owner pid *and* start time), so a running
    /// process never loses its sandboxes to another's sweep.
    ///
    /// # Errors
    ///
    /// [`Error::Provider`] when the workspace root cannot be
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
                // Whatever of it still runs first (a bwrap orphaned while its owner died
                // can wait forever for a parent that is gone), found by its mark.
                let _ = process::marked::kill_all(&format!("{MARK_ROOT}/{id}/"), true, KILL_BOUND);
                remove_sandbox_dir(&entry.path());
                if !entry.path().exists() {
                    report.removed.push(id);
                }
            }
            // Processes of sandboxes whose directory is gone (a bwrap child orphaned while
            // its owner died can wait forever): nothing else would ever find them.
            for (id, workspace) in process::marked::bwraps(&format!("{MARK_ROOT}/")) {
                let gone = workspace.parent().is_none_or(|dir| !dir.exists());
                if gone && !live.contains(&id) {
                    let left = process::marked::kill_all(&format!("{MARK_ROOT}/{id}/"), true, KILL_BOUND);
                    tracing::info!(sandbox = %id, survivors = left.len(), "reap killed the processes of a sandbox whose directory is gone");
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

/// Whether `name` can be `export`ed by the gate: a shell name, not one of the gate's own
/// `__sbx_` variables.
fn shell_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__sbx_")
}

/// Makes sure the root of this user's workspaces is a real directory that this user owns and
/// no one else can change: another local user must never plant or swap files there (the
/// seccomp filter, or a workspace). `0700`, or for a root caller `0710` with the group of
/// [`ROOT_CALLER_SANDBOX_UID`]: its sandboxes must pass through it, and no other host user
/// may (a sandbox can open its own workspace up, even plant a setuid program there; a
/// host user who could reach it would become the sandbox uid).
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
    passable_by_the_sandbox_only(root, &meta)
        .map_err(|e| Error::provider(SCHEME, "cannot make the workspace root private", e))?;
    if meta.permissions().mode() & 0o777 != private_mode() {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(private_mode()))
            .map_err(|e| Error::provider(SCHEME, "cannot make the workspace root private", e))?;
    }
    Ok(())
}

/// The mode of the directories between the host and a workspace: `0710` (group: the
/// sandbox's) for a root caller, `0700` otherwise.
fn private_mode() -> u32 {
    if run_as().is_some() { 0o710 } else { 0o700 }
}

/// Gives a directory root made the sandbox's group (root callers only), so that the sandbox
/// and no other host user can pass through it.
fn passable_by_the_sandbox_only(dir: &Path, meta: &std::fs::Metadata) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    match run_as() {
        Some((_, gid)) if meta.gid() != gid => std::os::unix::fs::lchown(dir, None, Some(gid)),
        _ => Ok(()),
    }
}

/// The host uid and gid sandboxed code runs as when it is not the caller's own: `Some` for
/// a root caller.
fn run_as() -> Option<(u32, u32)> {
    (current_uid() == 0).then_some((ROOT_CALLER_SANDBOX_UID, ROOT_CALLER_SANDBOX_UID))
}

/// The host uid sandboxed processes run as: [`ROOT_CALLER_SANDBOX_UID`] for a root caller,
/// the caller's own otherwise.
fn sandbox_uid() -> u32 {
    run_as().map_or_else(current_uid, |(uid, _)| uid)
}

/// Makes `path` (a directory sandboxio just created, in a directory the sandbox cannot
/// write) the sandbox user's, `0700`. Never follows a link.
fn hand_over(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if !std::fs::symlink_metadata(path)?.is_dir() {
        return Err(std::io::Error::other("not a directory sandboxio made"));
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
    if let Some((uid, gid)) = run_as() {
        std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// The sandbox's own `/etc/passwd` and `/etc/group`: root, nobody, and `sandbox` for the
/// uid the code runs as (the host's user database is not shown).
fn user_database(dir: &Path) -> std::io::Result<()> {
    let (uid, gid) = run_as().unwrap_or_else(|| (current_uid(), current_gid()));
    std::fs::write(
        dir.join("passwd"),
        format!(
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}:sandbox:/workspace:/bin/sh\n"
        ),
    )?;
    std::fs::write(dir.join("group"), format!("root:x:0:\nnogroup:x:65534:\nsandbox:x:{gid}:\n"))
}

/// 16 random hex digits from the kernel (sandbox ids: unguessable, and no owner pid in them).
fn random_hex() -> String {
    use std::io::Read as _;
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).is_err() {
        use std::hash::{BuildHasher as _, Hasher as _};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
        );
        bytes = h.finish().to_ne_bytes();
    }
    bytes.iter().fold(String::with_capacity(16), |mut hex, b| {
        use std::fmt::Write as _;
        let _ = write!(hex, "{b:02x}");
        hex
    })
}

/// What every command of a backend is started with.
struct Host<'a> {
    bwrap: &'a Path,
    seccomp: Option<&'a Path>,
    run_as: Option<(u32, u32)>,
}

/// The real user id of this process (workspaces are kept per user, so that users on one
/// host never share or block each other's directory).
fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
}

fn current_gid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.gid())
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

    /// Kills every command, and every process any of them left wherever it was re-parented
    /// (found by the sandbox's marks, [`process::marked`]), then removes the sandbox's
    /// directory: the record is marked expired first and removed last, so a removal that
    /// fails still leaves something [`LocalBackend::reap`] finds. Returns whether it was
    /// alive. Blocks for as long as the kill takes (a few milliseconds; at most
    /// [`KILL_BOUND`]).
    fn destroy(&self) -> bool {
        let was = self.alive.swap(false, Ordering::AcqRel);
        let processes: Vec<Arc<Running>> =
            self.processes.lock().unwrap_or_else(PoisonError::into_inner).drain().map(|(_, p)| p).collect();
        for p in &processes {
            p.kill();
        }
        let left = process::marked::kill_all(&self.mark_prefix(), true, KILL_BOUND);
        if !left.is_empty() {
            tracing::error!(sandbox = %self.id, ?left, "local:// processes survived SIGKILL past the bound");
        }
        if was {
            remove_sandbox_dir(&self.dir);
        }
        was
    }

    /// The start of every mark of this sandbox's commands.
    fn mark_prefix(&self) -> String {
        format!("{MARK_ROOT}/{}/", self.id)
    }

    /// A new command's private directory (see [`PRIVATE_DIR`]), owned by the uid the code
    /// runs as.
    fn new_private(&self) -> Result<PathBuf> {
        let private = self.dir.join("private").join(random_hex());
        std::fs::create_dir(&private)
            .and_then(|()| hand_over(&private))
            .map_err(|e| Error::provider(SCHEME, "cannot create the command's private directory", e))?;
        Ok(private)
    }

    /// A new command's mark.
    fn next_mark(&self) -> String {
        format!("{}{}", self.mark_prefix(), self.next_process.fetch_add(1, Ordering::Relaxed))
    }

    /// The `bwrap` command line for `command` and the environment block its gate reads
    /// (see [`process`]): no value the caller gave is in the host process's environment or
    /// argv. `mark` is the command's mount-point mark ([`process::marked`]); `private` is
    /// the command's own directory, bound at [`PRIVATE_DIR`].
    fn bwrap(
        &self,
        host: &Host<'_>,
        command: &Command,
        mark: &str,
        private: &Path,
    ) -> Result<(OsCommand, Vec<u8>)> {
        // A host shell closes every descriptor the owner process left open without
        // close-on-exec (a directory fd there would be a way out of every namespace), opens
        // the seccomp filter on fd 3 and becomes bwrap (same pid, so killing it still kills
        // bwrap). bash (essential on Debian) can close any descriptor; a POSIX `sh` only
        // 3 to 9.
        let (shell, close) = if Path::new("/bin/bash").is_file() {
            ("/bin/bash", LAUNCH_CLOSE_ALL)
        } else {
            ("/bin/sh", LAUNCH_CLOSE_LOW)
        };
        let mut cmd = OsCommand::new(shell);
        cmd.arg("-c").arg(format!("{close}{LAUNCH}")).arg("sandboxio-local");
        cmd.arg(host.seccomp.map_or(Path::new(""), |f| f)).arg(host.bwrap);
        if host.seccomp.is_some() {
            cmd.args(["--seccomp", "3"]);
        }
        // Nothing of the owner's working directory reaches the launcher's `PWD`.
        cmd.current_dir("/");
        cmd.env_clear();
        if let Some((uid, gid)) = host.run_as {
            // A root caller's sandboxes never run as the host's uid 0 (std also drops the
            // supplementary groups when root sets a uid).
            std::os::unix::process::CommandExt::uid(&mut cmd, uid);
            std::os::unix::process::CommandExt::gid(&mut cmd, gid);
        }
        // The mark first: every process of the command carries it from bwrap's first mount.
        cmd.arg("--tmpfs").arg(mark);
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
        for etc in ["/etc/alternatives", "/etc/ssl", "/etc/resolv.conf", "/etc/hosts"] {
            cmd.args(["--ro-bind-try", etc, etc]);
        }
        // The sandbox's own user database, not the host's.
        for file in ["passwd", "group"] {
            cmd.arg("--ro-bind").arg(self.dir.join(file)).arg(format!("/etc/{file}"));
        }
        // `/proc` read-only: kernel settings (`/proc/sys`, even the sandbox's own IPC and PID
        // namespaces' ones) cannot be changed from inside, whatever uid the code has.
        cmd.args(["--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]);
        cmd.arg("--bind").arg(self.workspace()).arg(WORKDIR);
        cmd.arg("--bind").arg(private).arg(PRIVATE_DIR);
        let cwd = crate::path::resolve(WORKDIR, command.working_dir().unwrap_or("."));
        if !cwd.starts_with(WORKDIR) {
            return Err(Error::PermissionDenied { path: cwd });
        }
        let host_cwd = fs::host_path(&self.workspace(), &cwd)?;
        if !host_cwd.is_dir() {
            return Err(Error::NotFound { path: cwd });
        }
        cmd.arg("--chdir").arg(&cwd);
        let mut vars: Vec<(&str, &str)> =
            vec![("PATH", "/usr/local/bin:/usr/bin:/bin"), ("HOME", WORKDIR), ("PWD", cwd.as_str())];
        for (k, v) in self.spec.env.iter().chain(command.env_vars()) {
            vars.push((k, v));
        }
        for (k, v) in self.spec.secret_env.iter().chain(command.secret_env_vars()) {
            vars.push((k, v.expose_secret()));
        }
        if let Some((name, _)) = vars.iter().find(|(k, _)| !shell_name(k)) {
            return Err(Error::invalid_input(format!(
                "env var name {name:?}: local:// needs letters, digits and '_', not starting with a digit or __sbx_"
            )));
        }
        let block = process::env_block(vars);
        let waiter = if Path::new(PERL).is_file() { process::WAITER } else { "" };
        cmd.args(["--", "/bin/sh", "-c", process::GATE, "sandboxio", waiter]).args(command.argv());
        Ok((cmd, block))
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

/// Kills a command and forgets it when the operation running it ends or is dropped. A
/// command that did not end on its own is killed by its mark as well, on a short-lived
/// thread, so that nothing it started survives, whatever it was re-parented to.
pub(super) struct ProcessGuard {
    state: Arc<State>,
    running: Arc<Running>,
    key: u64,
    mark: String,
    private: PathBuf,
}

impl ProcessGuard {
    fn new(state: &Arc<State>, running: Running, mark: String, private: PathBuf) -> Self {
        let running = Arc::new(running);
        let key = state.register(&running);
        ProcessGuard { state: Arc::clone(state), running, key, mark, private }
    }

    /// Kills the command and waits until no process carries its mark (at most
    /// [`KILL_BOUND`]).
    async fn kill_and_wait(&self) {
        self.running.kill();
        let mark = self.mark.clone();
        let _ =
            crate::runtime::unblock(move || Ok(process::marked::kill_all(&mark, false, KILL_BOUND))).await;
    }

    /// The command's exit status once bwrap has exited with `bwrap`: the waiter's exact
    /// report from the private directory (a signal death is `Signal(n)`), or bwrap's own
    /// when there is none (no waiter on this host, or bwrap was killed); and, with
    /// `record`, a code cell's error record. Both are read without following links and
    /// with a bound.
    async fn outcome(&self, bwrap: std::process::ExitStatus, record: bool) -> (ExitStatus, Option<Vec<u8>>) {
        let private = self.private.clone();
        let read = crate::runtime::unblock(move || {
            let status = read_record(&private.join("status"), 64);
            let record = if record { read_record(&private.join("error"), 1 << 20) } else { None };
            Ok((status, record))
        })
        .await;
        let (status, record) = read.unwrap_or((None, None));
        let exact = status.as_deref().and_then(parse_status);
        (exact.unwrap_or_else(|| exit_status(bwrap)), record)
    }
}

/// The waiter's report: `exit <code>` or `signal <n>`.
fn parse_status(bytes: &[u8]) -> Option<ExitStatus> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (kind, n) = text.trim().split_once(' ')?;
    let n: i32 = n.parse().ok()?;
    match kind {
        "exit" if (0..=255).contains(&n) => Some(ExitStatus::Code(n)),
        "signal" if (1..=64).contains(&n) => Some(ExitStatus::Signal(n)),
        _ => None,
    }
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        let ended = !self.running.is_running();
        self.running.kill();
        self.state.unregister(self.key);
        let private = std::mem::take(&mut self.private);
        if ended {
            let _ = remove_tree(&private);
            return;
        }
        let mark = std::mem::take(&mut self.mark);
        let _ = std::thread::Builder::new().name("sandboxio-local-kill".into()).spawn(move || {
            process::marked::kill_all(&mark, false, KILL_BOUND);
            let _ = remove_tree(&private);
        });
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
    // Written whole or not at all: a sweep in another process must never read half of it.
    let tmp = dir.join(format!(".{RECORD_FILE}.tmp"));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, dir.join(RECORD_FILE)))
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
        .is_some_and(|at| at <= crate::backends::owner::unix_now());
    let detached = field("detached") == Some("true");
    let dead = field("owner").and_then(crate::backends::owner::Owner::parse).and_then(|o| o.is_dead_here())
        == Some(true);
    expired || (owner_dead && !detached && dead)
}

/// Marks the record in `dir` expired (so that [`LocalBackend::reap`] sweeps whatever a
/// failed removal leaves), removes the workspace and the rest, and the record last.
fn remove_sandbox_dir(dir: &Path) {
    let record = dir.join(RECORD_FILE);
    if let Ok(text) = std::fs::read_to_string(&record) {
        let expired: String = text
            .lines()
            .map(|l| if l.starts_with("expires ") { "expires 0".to_owned() } else { l.to_owned() })
            .map(|l| l + "\n")
            .collect();
        let tmp = dir.join(format!(".{RECORD_FILE}.tmp"));
        let _ = std::fs::write(&tmp, expired).and_then(|()| std::fs::rename(&tmp, &record));
    }
    for part in ["workspace", "private"] {
        if remove_tree(&dir.join(part)).is_err() {
            return;
        }
    }
    let _ = remove_tree(dir);
}

/// Removes a tree the sandboxed code wrote, without following links. Code can leave
/// directories it made unwritable or unreadable (`chmod 0`): for a caller that is not root
/// (and so owns them) they get `0700` back first; root needs no permission, and never
/// changes a mode by path in a tree the sandbox wrote. A tree deeper than the descriptors
/// `std`'s removal may hold goes to `rm -rf`, which removes trees of any depth.
fn remove_tree(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Ok(()) => return Ok(()),
        Err(_) => {}
    }
    if run_as().is_none() {
        // Iterative: the code decides how deep the tree is.
        let mut dirs = Vec::new();
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
            dirs.push(path.to_path_buf());
        }
        while let Some(dir) = dirs.pop() {
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
            if let Ok(entries) = std::fs::read_dir(&dir) {
                dirs.extend(
                    entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()),
                );
            }
        }
    }
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Ok(()) => return Ok(()),
        Err(_) => {}
    }
    let removed = OsCommand::new("/bin/rm")
        .arg("-rf")
        .arg("--one-file-system")
        .arg("--")
        .arg(path)
        .env_clear()
        .status()?;
    if removed.success() && !path.exists() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("rm -rf could not remove {}", path.display())))
    }
}

/// A file a command left in its private directory, read on the host without following a
/// link it may have put in its place, and at most `max` bytes of it. `None` when there is no
/// regular file.
fn read_record(host: &Path, max: u64) -> Option<Vec<u8>> {
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
    file.take(max).read_to_end(&mut bytes).ok()?;
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
        Box::pin(async move {
            if !self.inner.bwrap.is_file() {
                return Err(spawn_error(&self.inner.bwrap, std::io::ErrorKind::NotFound.into()));
            }
            // Unguessable, and without the owner's pid (sandboxed code sees its id in its
            // mount table).
            let id = format!("local-{}", random_hex());
            let dir = self.inner.root.join(&id);
            let timeout = spec.create_timeout;
            let (root, made_dir) = (self.inner.root.clone(), dir.clone());
            let made = crate::runtime::unblock(move || {
                ensure_private_root(&root)?;
                make_sandbox_dir(&made_dir)
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
                    remove_sandbox_dir(&dir);
                    return Err(Error::CreateTimeout { timeout });
                }
            }
            let expires = Instant::now() + spec.ttl;
            if let Err(e) = write_record(&dir, &spec) {
                remove_sandbox_dir(&dir);
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
            // From here a dropped `create()` destroys what it made.
            let guard = CreateGuard(Some(Arc::clone(&state)));
            if self.inner.seccomp.get().is_none() {
                let root = self.inner.root.clone();
                let filter = crate::runtime::unblock(move || seccomp::install(&root)).await?;
                drop(self.inner.seccomp.set(filter));
            }
            preflight(&self.host(), &state).await?;
            guard.disarm();
            self.sandboxes().insert(id.clone(), Arc::clone(&state));
            start_ttl_timer(&state);
            Ok(Box::new(LocalSandbox { backend: self.clone(), state }) as Box<dyn BackendSandbox>)
        })
    }
}

/// Destroys a sandbox whose `create()` failed or was dropped before it was handed over.
struct CreateGuard(Option<Arc<State>>);

impl CreateGuard {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CreateGuard {
    fn drop(&mut self) {
        if let Some(state) = self.0.take() {
            state.destroy();
        }
    }
}

/// Makes a sandbox's directory: the workspace and the commands' private directories, owned by the uid
/// the code runs as, and the sandbox's own user database.
fn make_sandbox_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    std::fs::DirBuilder::new().mode(0o700).create(dir)?;
    // A root caller's sandbox user must pass through it to reach the workspace; no other
    // host user may.
    passable_by_the_sandbox_only(dir, &std::fs::symlink_metadata(dir)?)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(private_mode()))?;
    std::fs::create_dir(dir.join("workspace"))?;
    hand_over(&dir.join("workspace"))?;
    // The commands' private directories are made (and handed over) by the host inside a
    // directory the sandbox cannot write: it can never swap one for a link between the
    // host's `mkdir` and its `chown`.
    std::fs::create_dir(dir.join("private"))?;
    passable_by_the_sandbox_only(&dir.join("private"), &std::fs::symlink_metadata(dir.join("private"))?)?;
    std::fs::set_permissions(dir.join("private"), std::fs::Permissions::from_mode(private_mode()))?;
    user_database(dir)
}

/// Starts `true` in the sandbox's namespaces once, so that a host that cannot create them
/// fails `create()` with a configuration error saying why, not every later command.
async fn preflight(host: &Host<'_>, state: &Arc<State>) -> Result<()> {
    let mark = state.next_mark();
    let private = state.new_private()?;
    let (cmd, block) = state.bwrap(host, &Command::new("true"), &mark, &private)?;
    let running = process::spawn(cmd, block, true).map_err(|e| spawn_error(host.bwrap, e))?;
    let guard = ProcessGuard::new(state, running, mark, private);
    let running = &guard.running;
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
    // bwrap says "Unknown option --disable-userns" (or another option) when it is too old.
    if said.contains("Unknown option") {
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
    /// Runs `command` to its end (or its timeout); with `record`, also returns the error
    /// record a code cell left in its private directory.
    async fn run_with(&self, command: Command, record: bool) -> Result<(ExecResult, Option<Vec<u8>>)> {
        let started = Instant::now();
        let guard = self.start(&command, command.stdin_bytes().is_some())?;
        let running = Arc::clone(&guard.running);
        let limit = command.output_limit_bytes();
        let mut out = (Vec::new(), Vec::new());
        let mut truncated = false;
        // Output is taken while stdin is fed: a command that writes before it reads would
        // otherwise fill the bounded queue and wait on us while we wait on it.
        let feed = async {
            if let Some(data) = command.stdin_bytes() {
                // A command that exits without reading all its stdin is not an error.
                let _ = running.write_stdin(data.to_vec()).await;
                running.close_stdin();
            }
        };
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
        let both = futures_lite::future::zip(feed, collect);
        let deadline = command.timeout_duration();
        let timed_out = if let Some(d) = deadline {
            futures_lite::future::or(
                async {
                    both.await;
                    false
                },
                async {
                    futures_timer::Delay::new(d).await;
                    true
                },
            )
            .await
        } else {
            both.await;
            false
        };
        if timed_out {
            // Keep what was already read, then end everything the command started before
            // reporting the timeout.
            while let Some(Piece::Output(stream, data)) = running.pieces.try_pop() {
                let buf = if stream == StreamKind::Stdout { &mut out.0 } else { &mut out.1 };
                let room = limit.saturating_sub(buf.len());
                truncated |= data.len() > room;
                buf.extend_from_slice(&data[..data.len().min(room)]);
            }
            guard.kill_and_wait().await;
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
        let (status, record) = guard.outcome(status, record).await;
        drop(guard);
        self.state.check_alive()?;
        let result = ExecResult::new(0, out.0, out.1)
            .with_status(status)
            .with_truncated(truncated)
            .with_duration(started.elapsed());
        Ok((result, record))
    }

    /// Starts `command` (its stdin ends after the environment block unless `pipe_stdin`).
    fn start(&self, command: &Command, pipe_stdin: bool) -> Result<ProcessGuard> {
        self.state.check_alive()?;
        let host = self.backend.host();
        let mark = self.state.next_mark();
        let private = self.state.new_private()?;
        let (cmd, block) = match self.state.bwrap(&host, command, &mark, &private) {
            Ok(made) => made,
            Err(e) => {
                let _ = remove_tree(&private);
                return Err(e);
            }
        };
        match process::spawn(cmd, block, !pipe_stdin) {
            Ok(running) => Ok(ProcessGuard::new(&self.state, running, mark, private)),
            Err(e) => {
                let _ = remove_tree(&private);
                Err(spawn_error(host.bwrap, e))
            }
        }
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
            // The record is read from the cell's private directory, bound for this cell
            // alone: no other command or cell can plant it.
            let command = code_runner::command(SCHEME, PYTHON, &code, &format!("{PRIVATE_DIR}/error"))?;
            let (ran, record) = self.run_with(command, true).await?;
            code_runner::result(ran, record.as_deref(), started.elapsed())
        })
    }

    fn metadata(&self) -> BTreeMap<String, String> {
        self.state.spec.metadata.clone()
    }

    fn run(&self, command: Command) -> BoxFuture<'_, Result<ExecResult>> {
        Box::pin(async move { self.run_with(command, false).await.map(|(result, _)| result) })
    }

    fn stream(&self, command: Command) -> Result<Box<dyn BackendExecStream>> {
        let guard = self.start(&command, true)?;
        Ok(Box::new(stream::LocalExecStream::new(guard, &command)))
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

    fn upload<'a>(&'a self, host_path: &'a Path, path: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(fs::upload(self, host_path, path))
    }

    fn download<'a>(&'a self, path: &'a str, host_path: &'a Path, budget: u64) -> BoxFuture<'a, Result<()>> {
        Box::pin(fs::download(self, path, host_path, budget))
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
