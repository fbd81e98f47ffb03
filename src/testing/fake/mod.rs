//! [`FakeBackend`]: the in-memory backend, a supported product surface for tests.

mod machine;
mod python;
mod shell;
mod stream;
mod vfs;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_lite::future;

use crate::audit::{AuditConfig, OperationKind, OperationRecord, RecordingSink};
use crate::backend::{
    Backend, BackendExecStream, BackendOption, BackendSandbox, BoxFuture, CreateSpec, KillOutcome,
};
use crate::dsn::Dsn;
use crate::error::{Error, Result};
use crate::exec::{Code, CodeContext, CodeResult, Command, ExecResult, ExitStatus};
use crate::fs::DirEntry;
use crate::policy::{Capabilities, IsolationTier, NetworkPolicy};

use machine::{Proc, Rng, Stdin, Stop, Trace, World as ProgramWorld};
use vfs::Vfs;
pub use vfs::WORKDIR;

const SCHEME: &str = "fake";

/// How long a fake `create()` takes on the virtual clock unless
/// [`FakeBackend::with_create_latency`] says otherwise: 50 ms, so that a create timeout
/// shorter than that fires, as it would on any real provider.
pub const DEFAULT_CREATE_LATENCY: Duration = Duration::from_millis(50);

/// A failure the fake produces on demand.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// The command or cell times out: [`Error::ExecutionTimeout`] with empty partial output,
    /// after the virtual clock advances by the command's timeout.
    Timeout,
    /// [`Error::NetworkPolicyViolation`], as a backend that reports blocked egress raises it.
    NetworkPolicyViolation,
    /// The command exits with this code and no output.
    ExitCode(i32),
    /// The sandbox's TTL expires now: this call and every later one get
    /// [`Error::SandboxGone`].
    Expire,
    /// [`Error::RateLimited`] with this retry-after.
    RateLimited(Option<Duration>),
    /// [`Error::Provider`] with this message.
    Provider(String),
    /// [`Error::Auth`]: the provider refused the credentials.
    Auth,
}

/// One call the fake received, for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FakeCall {
    /// Which operation.
    pub kind: OperationKind,
    /// The sandbox it was made on (`None` for a failed create).
    pub sandbox_id: Option<String>,
    /// The network policy in effect for that sandbox.
    pub network: NetworkPolicy,
    /// The argv, for `run` and `stream`.
    pub argv: Vec<String>,
    /// The source, for `run_code`.
    pub code: Option<String>,
    /// The path, for file operations.
    pub path: Option<String>,
    /// The virtual time of the call.
    pub at: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Alive,
    Killed,
    Expired,
}

#[derive(Debug)]
struct SandboxState {
    spec: CreateSpec,
    created_at: Duration,
    vfs: Vfs,
    contexts: BTreeMap<String, python::Globals>,
    life: Life,
}

#[derive(Debug)]
struct Rule<T> {
    matcher: String,
    value: T,
}

#[derive(Debug)]
struct World {
    clock: Duration,
    rng: Rng,
    sandboxes: BTreeMap<String, SandboxState>,
    run_scripts: Vec<Rule<ExecResult>>,
    code_scripts: Vec<Rule<CodeResult>>,
    fail_on: Vec<Rule<Failure>>,
    fail_next: Vec<Failure>,
    flaky: Option<(u64, Failure)>,
    exec_calls: u64,
    calls: Vec<FakeCall>,
    processes: BTreeMap<u64, String>,
    next_pid: u64,
    next_context: u64,
    /// Sandboxes whose `kill` hangs forever (the `simulate_kill_hang` probe).
    kill_hangs: std::collections::BTreeSet<String>,
    reaped_children: usize,
}

#[derive(Debug)]
struct Config {
    seed: u64,
    capabilities: Capabilities,
    isolation: IsolationTier,
    options: Vec<BackendOption>,
    audit: AuditConfig,
    create_latency: Duration,
    /// The environment variable that must hold an API key for `create()` to succeed.
    api_key_env: Option<String>,
}

struct Inner {
    config: Config,
    recorder: Arc<RecordingSink>,
    world: Mutex<World>,
}

/// The in-memory backend (`fake://`): no Docker, no cloud, no network, no thread.
///
/// - **Deterministic**: ids and `$RANDOM`/`/dev/urandom` come from a seed (`fake://?seed=7`
///   or [`FakeBackend::with_seed`]); time is a virtual clock, so a 30-second sleep or timeout
///   finishes at once.
/// - **Simulates what it declares**: commands run in a small POSIX shell and Python subset
///   against an in-memory file system, so the contract suite's default probes (echo, exit
///   codes, stderr, env, sleep, binary output, background children, syntax and runtime
///   errors, contexts) behave as on a real backend; network policy is enforced on simulated
///   egress (`curl`, `wget`, `nc`, `socket.create_connection`, `urllib.request.urlopen`).
///   What the subsets do not model fails loudly (exit 2, `NotImplementedError`), never with
///   a guess. Its tier is [`IsolationTier::None`].
/// - **Scriptable**: [`FakeBackend::on_run`] and [`FakeBackend::on_run_code`] answer matching
///   calls; [`FakeBackend::fail_next`], [`FakeBackend::fail_on`] and
///   [`FakeBackend::flaky_every`] inject failures.
/// - **Observable**: [`FakeBackend::calls`] lists every call with the policy in effect;
///   [`FakeBackend::audit_records`] holds the audit records of every sandbox it created;
///   [`FakeBackend::live_processes`] finds orphans.
///
/// Clones share one world. It yields at each simulated step, so a caller can cancel any
/// operation mid-way.
#[derive(Clone)]
pub struct FakeBackend {
    inner: Arc<Inner>,
}

impl fmt::Debug for FakeBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeBackend")
            .field("seed", &self.inner.config.seed)
            .field("capabilities", &self.inner.config.capabilities)
            .field("isolation", &self.inner.config.isolation)
            .finish_non_exhaustive()
    }
}

impl Default for FakeBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeBackend {
    /// Every capability, seed 0, tier [`IsolationTier::None`], no typed options.
    #[must_use]
    pub fn new() -> Self {
        Self::from_config(Config {
            seed: 0,
            capabilities: Capabilities::all(),
            isolation: IsolationTier::None,
            options: Vec::new(),
            audit: AuditConfig::new(),
            create_latency: DEFAULT_CREATE_LATENCY,
            api_key_env: None,
        })
    }

    fn from_config(config: Config) -> Self {
        let world = World {
            clock: Duration::ZERO,
            rng: Rng::new(config.seed),
            sandboxes: BTreeMap::new(),
            run_scripts: Vec::new(),
            code_scripts: Vec::new(),
            fail_on: Vec::new(),
            fail_next: Vec::new(),
            flaky: None,
            exec_calls: 0,
            calls: Vec::new(),
            processes: BTreeMap::new(),
            next_pid: 1,
            next_context: 1,
            kill_hangs: std::collections::BTreeSet::new(),
            reaped_children: 0,
        };
        FakeBackend {
            inner: Arc::new(Inner { config, recorder: RecordingSink::new(), world: Mutex::new(world) }),
        }
    }

    fn reconfigure(self, change: impl FnOnce(&mut Config)) -> Self {
        let mut config = Config {
            seed: self.inner.config.seed,
            capabilities: self.inner.config.capabilities,
            isolation: self.inner.config.isolation,
            options: self.inner.config.options.clone(),
            audit: self.inner.config.audit.clone(),
            create_latency: self.inner.config.create_latency,
            api_key_env: self.inner.config.api_key_env.clone(),
        };
        change(&mut config);
        Self::from_config(config)
    }

    /// The same configuration with another seed (and a fresh world).
    #[must_use]
    pub fn with_seed(self, seed: u64) -> Self {
        self.reconfigure(|c| c.seed = seed)
    }

    /// Declares only `capabilities` (and a fresh world); the rest behave as undeclared.
    #[must_use]
    pub fn with_capabilities(self, capabilities: Capabilities) -> Self {
        self.reconfigure(|c| c.capabilities = capabilities)
    }

    /// Reports another isolation tier (and a fresh world). For testing tier checks only:
    /// the fake isolates nothing.
    #[must_use]
    pub fn with_isolation(self, tier: IsolationTier) -> Self {
        self.reconfigure(|c| c.isolation = tier)
    }

    /// Accepts these typed builder options (and a fresh world). By default it accepts none,
    /// so `.image(..)` on the fake raises `CapabilityNotSupported` as on any backend without
    /// images.
    #[must_use]
    pub fn with_options(self, options: &[BackendOption]) -> Self {
        self.reconfigure(|c| c.options = options.to_vec())
    }

    /// Adds audit sinks every sandbox writes to (and a fresh world).
    #[must_use]
    pub fn with_audit(self, audit: AuditConfig) -> Self {
        self.reconfigure(|c| c.audit = audit)
    }

    /// Makes `create()` take this long on the virtual clock (and a fresh world); a create
    /// timeout shorter than it raises [`Error::CreateTimeout`].
    #[must_use]
    pub fn with_create_latency(self, latency: Duration) -> Self {
        self.reconfigure(|c| c.create_latency = latency)
    }

    /// Simulates a provider that needs an API key (and a fresh world): `create()` fails with
    /// [`Error::Auth`] naming `var` while that environment variable is unset or empty, as a
    /// cloud backend does. The value itself is never read beyond that check.
    #[must_use]
    pub fn with_api_key_env(self, var: &str) -> Self {
        self.reconfigure(|c| c.api_key_env = Some(var.to_owned()))
    }

    /// The [`BackendFactory`](crate::dsn::BackendFactory) of `fake://`. Options: `seed`
    /// (an unsigned integer, default 0).
    ///
    /// Every `fake://` DSN with the same seed reaches the same process-wide fake, so ids
    /// stay unique within a process and `Sandbox::connect("fake://", id)` finds sandboxes
    /// made through the DSN. For an isolated, reproducible world per test, build a
    /// [`FakeBackend`] in code and use `Sandbox::builder_with`.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`](crate::Error::Configuration) for an unknown option, a bad seed, or
    /// an authority or path (the fake has neither).
    pub fn from_dsn(dsn: &Dsn) -> Result<Arc<dyn Backend>> {
        static SHARED: std::sync::OnceLock<Mutex<BTreeMap<u64, FakeBackend>>> = std::sync::OnceLock::new();
        dsn.reject_unknown_options(&["seed"])?;
        if !dsn.authority().is_empty() || !dsn.path().is_empty() {
            return Err(Error::configuration(
                "fake:// takes no host or path; options go in the query, for example fake://?seed=7",
            ));
        }
        let seed = match dsn.option("seed") {
            Some(seed) => seed.parse::<u64>().map_err(|_| {
                Error::configuration(format!("fake:// option seed={seed:?} is not an unsigned integer"))
            })?,
            None => 0,
        };
        let mut shared = SHARED.get_or_init(Mutex::default).lock().unwrap_or_else(PoisonError::into_inner);
        let backend = shared.entry(seed).or_insert_with(|| FakeBackend::new().with_seed(seed)).clone();
        Ok(Arc::new(backend))
    }

    fn world(&self) -> MutexGuard<'_, World> {
        self.inner.world.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers every `run` or `stream` whose argv, joined with spaces, contains `matcher`
    /// with `returns` (later rules win over earlier ones).
    pub fn on_run(&self, matcher: &str, returns: ExecResult) {
        self.world().run_scripts.push(Rule { matcher: matcher.to_owned(), value: returns });
    }

    /// Answers every `run_code` whose source contains `matcher` with `returns` (an
    /// [`ExecResult`] or a [`CodeResult`]); later rules win.
    pub fn on_run_code(&self, matcher: &str, returns: impl Into<CodeResult>) {
        self.world().code_scripts.push(Rule { matcher: matcher.to_owned(), value: returns.into() });
    }

    /// The next `run`, `run_code` or `stream` fails this way.
    pub fn fail_next(&self, failure: Failure) {
        self.world().fail_next.push(failure);
    }

    /// Every `run`/`stream` whose argv (joined with spaces) or `run_code` whose source
    /// contains `matcher` fails this way.
    pub fn fail_on(&self, matcher: &str, failure: Failure) {
        self.world().fail_on.push(Rule { matcher: matcher.to_owned(), value: failure });
    }

    /// Every `n`-th `run`, `run_code` or `stream` (the n-th, 2n-th, …) fails this way.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn flaky_every(&self, n: u64, failure: Failure) {
        assert!(n > 0, "flaky_every(0) would never run a call");
        self.world().flaky = Some((n, failure));
    }

    /// Expires a sandbox now, as if its TTL had passed. Returns whether it was alive.
    #[allow(clippy::must_use_candidate)] // expiring is the point; the answer is optional
    pub fn expire(&self, sandbox_id: &str) -> bool {
        let mut world = self.world();
        let World { sandboxes, processes, .. } = &mut *world;
        match sandboxes.get_mut(sandbox_id) {
            Some(s) if s.life == Life::Alive => {
                s.life = Life::Expired;
                processes.retain(|_, owner| owner != sandbox_id);
                true
            }
            _ => false,
        }
    }

    /// Makes `kill` of one sandbox hang forever (the `simulate_kill_hang` probe), so that
    /// teardown's grace bound can be observed. `false` restores it.
    pub fn simulate_kill_hang(&self, sandbox_id: &str, hang: bool) {
        let mut world = self.world();
        if hang {
            world.kill_hangs.insert(sandbox_id.to_owned());
        } else {
            world.kill_hangs.remove(sandbox_id);
        }
    }

    /// Advances the virtual clock (sandboxes past their TTL expire).
    pub fn advance_clock(&self, by: Duration) {
        self.world().clock += by;
    }

    /// The virtual clock.
    #[must_use]
    pub fn now(&self) -> Duration {
        self.world().clock
    }

    /// Every call so far, oldest first.
    #[must_use]
    pub fn calls(&self) -> Vec<FakeCall> {
        self.world().calls.clone()
    }

    /// Forgets the calls so far.
    pub fn clear_calls(&self) {
        self.world().calls.clear();
    }

    /// The audit records of every sandbox this backend created or connected to. They are
    /// kept for the backend's lifetime: in a long test run, call `audit_sink().clear()`
    /// between tests (or build a fresh backend per test).
    #[must_use]
    pub fn audit_records(&self) -> Vec<OperationRecord> {
        self.inner.recorder.records()
    }

    /// The sink behind [`FakeBackend::audit_records`].
    #[must_use]
    pub fn audit_sink(&self) -> Arc<RecordingSink> {
        Arc::clone(&self.inner.recorder)
    }

    /// Processes still running (streams not finished, runs in flight) in every sandbox:
    /// `0` means no orphan.
    #[must_use]
    pub fn live_processes(&self) -> usize {
        self.world().processes.len()
    }

    /// Processes still running in one sandbox.
    #[must_use]
    pub fn processes_in(&self, sandbox_id: &str) -> usize {
        self.world().processes.values().filter(|owner| *owner == sandbox_id).count()
    }

    /// Live sandboxes whose metadata has `key` = `value`.
    #[must_use]
    pub fn live_sandboxes_labelled(&self, key: &str, value: &str) -> Vec<String> {
        self.live_where(|s| s.spec.metadata.get(key).is_some_and(|v| v == value))
    }

    /// Ids of live sandboxes (neither killed nor expired) that `keep` selects.
    fn live_where(&self, keep: impl Fn(&SandboxState) -> bool) -> Vec<String> {
        let mut world = self.world();
        let now = world.clock;
        world
            .sandboxes
            .iter_mut()
            .filter_map(|(id, s)| {
                refresh_ttl(s, now);
                (s.life == Life::Alive && keep(s)).then(|| id.clone())
            })
            .collect()
    }

    /// The resource limits a sandbox was created with, as the fake enforces them.
    #[must_use]
    pub fn limits(&self, sandbox_id: &str) -> Option<crate::ResourceLimits> {
        self.world().sandboxes.get(sandbox_id).map(|s| s.spec.limits)
    }

    /// Background children killed because their parent command exited (with its process
    /// group), summed over every command so far.
    #[must_use]
    pub fn reaped_children(&self) -> usize {
        self.world().reaped_children
    }

    /// Ids of sandboxes neither killed nor expired.
    #[must_use]
    pub fn live_sandboxes(&self) -> Vec<String> {
        self.live_where(|_| true)
    }

    /// Everything the fake stores about a sandbox, as text (the fake's `docker inspect`):
    /// secret values appear only as `[redacted]`.
    #[must_use]
    pub fn stored_config(&self, sandbox_id: &str) -> Option<String> {
        self.world().sandboxes.get(sandbox_id).map(|s| format!("{:?}", s.spec))
    }

    /// The metadata labels a sandbox was created with (as a provider would show them).
    #[must_use]
    pub fn labels(&self, sandbox_id: &str) -> Option<BTreeMap<String, String>> {
        self.world().sandboxes.get(sandbox_id).map(|s| s.spec.metadata.clone())
    }

    /// Writes a symlink into a sandbox (the fake's file API has no way to make one), so
    /// tests can check that links are never followed on the host side.
    ///
    /// # Errors
    ///
    /// [`Error::SandboxGone`] for an unknown or dead sandbox.
    pub fn plant_symlink(&self, sandbox_id: &str, path: &str, target: &str) -> Result<()> {
        let mut world = self.world();
        let sandbox = world
            .sandboxes
            .get_mut(sandbox_id)
            .filter(|s| s.life == Life::Alive)
            .ok_or_else(|| gone(sandbox_id, "no such live sandbox"))?;
        sandbox.vfs.symlink(&crate::path::resolve(WORKDIR, path), target)
    }
}

fn gone(id: &str, why: &str) -> Error {
    Error::SandboxGone { id: id.to_owned(), message: why.to_owned() }
}

fn refresh_ttl(s: &mut SandboxState, now: Duration) {
    if s.life == Life::Alive && now >= s.created_at.saturating_add(s.spec.ttl) {
        s.life = Life::Expired;
    }
}

impl World {
    fn record(&mut self, kind: OperationKind, sandbox_id: &str, f: impl FnOnce(&mut FakeCall)) {
        let network =
            self.sandboxes.get(sandbox_id).map_or(NetworkPolicy::DenyAll, |s| s.spec.network.clone());
        let mut call = FakeCall {
            kind,
            sandbox_id: Some(sandbox_id.to_owned()),
            network,
            argv: Vec::new(),
            code: None,
            path: None,
            at: self.clock,
        };
        f(&mut call);
        self.calls.push(call);
    }

    fn alive(&mut self, id: &str) -> Result<&mut SandboxState> {
        let now = self.clock;
        let s = self.sandboxes.get_mut(id).ok_or_else(|| gone(id, "no such sandbox"))?;
        refresh_ttl(s, now);
        match s.life {
            Life::Alive => Ok(s),
            Life::Killed => Err(gone(id, "it was killed")),
            Life::Expired => Err(gone(id, "its TTL expired")),
        }
    }

    /// The failure injected for this exec call, if any.
    fn take_failure(&mut self, subject: &str) -> Option<Failure> {
        self.exec_calls += 1;
        if !self.fail_next.is_empty() {
            return Some(self.fail_next.remove(0));
        }
        if let Some(rule) = self.fail_on.iter().rev().find(|r| subject.contains(&r.matcher)) {
            return Some(rule.value.clone());
        }
        match &self.flaky {
            Some((n, failure)) if self.exec_calls.is_multiple_of(*n) => Some(failure.clone()),
            _ => None,
        }
    }

    /// Applies a failure; `Ok(code)` for [`Failure::ExitCode`].
    fn apply_failure(&mut self, id: &str, failure: Failure, timeout: Option<Duration>) -> Result<i32> {
        match failure {
            Failure::ExitCode(code) => Ok(code),
            Failure::Timeout => {
                let timeout = timeout.unwrap_or_default();
                self.clock += timeout;
                Err(Error::ExecutionTimeout { timeout, partial: Box::new(ExecResult::new(-1, "", "")) })
            }
            Failure::NetworkPolicyViolation => {
                let policy = self.sandboxes.get(id).map(|s| s.spec.network.to_string()).unwrap_or_default();
                Err(Error::NetworkPolicyViolation {
                    message: format!("simulated egress from sandbox {id} refused by policy {policy}"),
                })
            }
            Failure::Expire => {
                if let Some(s) = self.sandboxes.get_mut(id) {
                    s.life = Life::Expired;
                }
                self.processes.retain(|_, owner| owner != id);
                Err(gone(id, "its TTL expired"))
            }
            Failure::RateLimited(retry_after) => {
                Err(Error::RateLimited { backend: SCHEME.into(), retry_after, source: None })
            }
            Failure::Provider(message) => {
                Err(Error::Provider { backend: SCHEME.into(), message, source: None })
            }
            Failure::Auth => Err(Error::Auth {
                backend: SCHEME.into(),
                message: "simulated: the provider refused the credentials".into(),
                env_var: None,
                source: None,
            }),
        }
    }

    fn spawn(&mut self, id: &str) -> u64 {
        let pid = self.next_pid;
        self.next_pid += 1;
        self.processes.insert(pid, id.to_owned());
        pid
    }
}

/// Everything a simulated process needs, cut from the world under the lock.
struct Launch {
    env: BTreeMap<String, String>,
    /// The earlier of the command's timeout and the sandbox's remaining TTL.
    deadline: Option<Duration>,
    /// Whether the deadline is the TTL (expiry) rather than the timeout.
    deadline_is_ttl: bool,
    timeout: Option<Duration>,
    /// The absolute working directory.
    cwd: String,
    /// The sandbox's memory limit in bytes, if it has one.
    memory_limit: Option<u64>,
}

fn launch(
    clock: Duration,
    s: &SandboxState,
    extra_env: &[(String, String)],
    extra_secret: &[(String, crate::SecretString)],
    timeout: Option<Duration>,
) -> Launch {
    let mut env = BTreeMap::new();
    env.insert("HOME".to_owned(), WORKDIR.to_owned());
    env.insert("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned());
    env.insert("HOSTNAME".to_owned(), "fake".to_owned());
    for (k, v) in s.spec.env.iter().chain(extra_env) {
        env.insert(k.clone(), v.clone());
    }
    for (k, v) in s.spec.secret_env.iter().chain(extra_secret) {
        env.insert(k.clone(), v.expose_secret().to_owned());
    }
    let ttl_left = s.created_at.saturating_add(s.spec.ttl).saturating_sub(clock);
    let (deadline, deadline_is_ttl) = match timeout {
        Some(t) if t < ttl_left => (Some(t), false),
        _ => (Some(ttl_left), true),
    };
    let memory_limit = s.spec.limits.memory_mib.map(|mib| mib.saturating_mul(1024 * 1024));
    Launch { env, deadline, deadline_is_ttl, timeout, cwd: WORKDIR.to_owned(), memory_limit }
}

/// Sets the command's working directory, which must be an existing directory.
fn with_cwd(mut launch: Launch, s: &SandboxState, cwd: Option<&str>) -> Result<Launch> {
    if let Some(dir) = cwd {
        let abs = crate::path::resolve(WORKDIR, dir);
        if !matches!(s.vfs.get(&abs), Some(vfs::Node::Dir { .. })) {
            return Err(Error::NotFound { path: abs });
        }
        launch.env.insert("PWD".to_owned(), abs.clone());
        launch.cwd = abs;
    }
    Ok(launch)
}

/// Runs `argv` to a trace against the sandbox's world. `Err(stop)` only for
/// [`Stop::NeedsStdin`].
fn simulate(
    world: &mut World,
    id: &str,
    argv: &[String],
    stdin: Stdin,
    launch: &Launch,
    limit: usize,
) -> Result<std::result::Result<Trace, Stop>> {
    let World { sandboxes, rng, .. } = world;
    let sandbox = sandboxes.get_mut(id).ok_or_else(|| gone(id, "no such sandbox"))?;
    let proc = Proc::new(launch.deadline, limit, launch.env.clone(), launch.cwd.clone())
        .with_memory_limit(launch.memory_limit);
    // The process runs on a scratch copy; its changes are replayed as it is delivered.
    let mut scratch = sandbox.vfs.scratch();
    let mut program_world = ProgramWorld { vfs: &mut scratch, policy: &sandbox.spec.network, rng };
    let mut sh = shell::Shell::new(&mut program_world, proc);
    let result = sh.run_argv(argv, stdin);
    let proc = sh.proc;
    let mut trace = match result {
        Ok(code) | Err(Stop::Exit(code) | Stop::Unmodelled(code)) => proc.finish(Some(code)),
        Err(Stop::Signal(n)) => proc.finish_with(Some(ExitStatus::Signal(n))),
        // A program's out-of-memory kill becomes a signal death where it runs (see the
        // shell); one that reaches here killed the command's main process.
        Err(Stop::OomKilled) => proc.finish_with(Some(ExitStatus::Signal(9))),
        Err(Stop::TimedOut) => proc.finish(None),
        Err(stop @ Stop::NeedsStdin) => return Ok(Err(stop)),
    };
    trace.effects = settled_effects(scratch.take_journal(), trace.elapsed);
    world.reaped_children += trace.killed_children;
    Ok(Ok(trace))
}

/// The changes a process made before it ended (later ones belong to background children
/// killed with it), in time order.
fn settled_effects(journal: Vec<(Duration, vfs::Effect)>, end: Duration) -> Vec<(Duration, vfs::Effect)> {
    let mut effects: Vec<_> = journal.into_iter().filter(|(at, _)| *at <= end).collect();
    effects.sort_by_key(|(at, _)| *at);
    effects
}

/// Applies, in order, the effects due by `until` and not applied yet; `next` is the index
/// of the first one not applied.
fn apply_due(vfs: &mut Vfs, effects: &[(Duration, vfs::Effect)], next: &mut usize, until: Duration) {
    while let Some((at, effect)) = effects.get(*next) {
        if *at > until {
            break;
        }
        vfs.apply(effect.clone());
        *next += 1;
    }
}

/// The error of a process that reached its deadline.
fn deadline_error(id: &str, launch: &Launch, partial: ExecResult) -> Error {
    if launch.deadline_is_ttl {
        gone(id, "its TTL expired while the command ran")
    } else {
        Error::ExecutionTimeout { timeout: launch.timeout.unwrap_or_default(), partial: Box::new(partial) }
    }
}

fn joined(argv: &[String]) -> String {
    argv.join(" ")
}

impl Backend for FakeBackend {
    fn scheme(&self) -> &str {
        SCHEME
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.config.capabilities
    }

    fn isolation(&self) -> IsolationTier {
        self.inner.config.isolation
    }

    fn supports_option(&self, option: BackendOption) -> bool {
        self.inner.config.options.contains(&option)
    }

    fn audit(&self) -> AuditConfig {
        self.inner.config.audit.clone().with_sink(Arc::clone(&self.inner.recorder))
    }

    fn create(&self, spec: CreateSpec) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        Box::pin(async move {
            future::yield_now().await;
            if let Some(var) = &self.inner.config.api_key_env
                && std::env::var_os(var).is_none_or(|v| v.is_empty())
            {
                return Err(Error::Auth {
                    backend: SCHEME.into(),
                    message: format!("no API key: set the environment variable {var}"),
                    env_var: Some(var.clone()),
                    source: None,
                });
            }
            // Nothing is awaited after the sandbox is inserted, so a dropped create
            // leaves nothing behind.
            let mut world = self.world();
            let latency = self.inner.config.create_latency;
            if latency > spec.create_timeout {
                world.clock += spec.create_timeout;
                return Err(Error::CreateTimeout { timeout: spec.create_timeout });
            }
            world.clock += latency;
            let id = format!("fake-{:016x}", world.rng.next_u64());
            let created_at = world.clock;
            world.sandboxes.insert(
                id.clone(),
                SandboxState {
                    spec,
                    created_at,
                    vfs: Vfs::new(),
                    contexts: BTreeMap::new(),
                    life: Life::Alive,
                },
            );
            world.record(OperationKind::Create, &id, |_| {});
            Ok(Box::new(FakeSandbox { backend: self.clone(), id }) as Box<dyn BackendSandbox>)
        })
    }

    fn connect(&self, id: &str) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        let id = id.to_owned();
        Box::pin(async move {
            future::yield_now().await;
            let mut world = self.world();
            if world.alive(&id).is_err() {
                return Err(Error::connect(SCHEME, format!("no live sandbox with id {id:?}")));
            }
            world.record(OperationKind::Connect, &id, |_| {});
            Ok(Box::new(FakeSandbox { backend: self.clone(), id }) as Box<dyn BackendSandbox>)
        })
    }
}

/// One fake sandbox handle.
#[derive(Debug)]
struct FakeSandbox {
    backend: FakeBackend,
    id: String,
}

/// What a scripted rule decides before a command is simulated.
#[derive(Debug)]
enum Early {
    /// A failure injected with `fail_next`, `fail_on` or `flaky_every`.
    Fail(Failure),
    /// An answer scripted with `on_run`.
    Answer(ExecResult),
}

/// Unregisters a process when the operation running it ends or is dropped.
struct ProcessGuard<'a> {
    backend: &'a FakeBackend,
    pid: u64,
}

impl Drop for ProcessGuard<'_> {
    fn drop(&mut self) {
        self.backend.world().processes.remove(&self.pid);
    }
}

impl FakeSandbox {
    fn world(&self) -> MutexGuard<'_, World> {
        self.backend.world()
    }

    /// Delivers a trace step by step on the virtual clock: output is collected and file
    /// changes land on the sandbox as the replay reaches their time, so a run dropped mid-way
    /// has made exactly the changes made before that point. A sandbox killed meanwhile ends
    /// the process with [`Error::SandboxGone`].
    async fn replay(&self, trace: &Trace, start: Duration) -> Result<(Vec<u8>, Vec<u8>)> {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut applied = 0;
        for event in &trace.events {
            future::yield_now().await;
            self.advance(trace, start, event.at, &mut applied)?;
            match event.stream {
                crate::StreamKind::Stdout => stdout.extend_from_slice(&event.data),
                crate::StreamKind::Stderr => stderr.extend_from_slice(&event.data),
            }
        }
        future::yield_now().await;
        self.advance(trace, start, trace.elapsed, &mut applied)?;
        Ok((stdout, stderr))
    }

    /// Moves a replay to `at` (since the process started): checks the sandbox is alive,
    /// advances the clock and applies the file changes due.
    fn advance(&self, trace: &Trace, start: Duration, at: Duration, applied: &mut usize) -> Result<()> {
        let mut world = self.world();
        let now = world.clock.max(start + at);
        world.clock = now;
        let sandbox = world.alive(&self.id)?;
        apply_due(&mut sandbox.vfs, &trace.effects, applied, at);
        Ok(())
    }

    async fn fs_op<T>(
        &self,
        kind: OperationKind,
        path: &str,
        op: impl FnOnce(&mut Vfs, String) -> Result<T>,
    ) -> Result<T> {
        future::yield_now().await;
        let mut world = self.world();
        world.record(kind, &self.id, |c| c.path = Some(path.to_owned()));
        let sandbox = world.alive(&self.id)?;
        let abs = crate::path::resolve(WORKDIR, path);
        op(&mut sandbox.vfs, abs)
    }

    /// Checks liveness, records the call and finds a scripted failure or answer.
    fn prologue(&self, world: &mut World, kind: OperationKind, argv: &[String]) -> Result<Option<Early>> {
        world.record(kind, &self.id, |c| c.argv = argv.to_vec());
        world.alive(&self.id)?;
        let subject = joined(argv);
        if let Some(failure) = world.take_failure(&subject) {
            return Ok(Some(Early::Fail(failure)));
        }
        let answer = world.run_scripts.iter().rev().find(|r| subject.contains(&r.matcher));
        Ok(answer.map(|r| Early::Answer(r.value.clone())))
    }
}

impl BackendSandbox for FakeSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    fn capabilities(&self) -> Capabilities {
        self.backend.inner.config.capabilities
    }

    fn network_policy(&self) -> Option<NetworkPolicy> {
        self.world().sandboxes.get(&self.id).map(|s| s.spec.network.clone())
    }

    fn metadata(&self) -> BTreeMap<String, String> {
        self.world().sandboxes.get(&self.id).map(|s| s.spec.metadata.clone()).unwrap_or_default()
    }

    fn run(&self, command: Command) -> BoxFuture<'_, Result<ExecResult>> {
        Box::pin(async move {
            future::yield_now().await;
            let argv = command.argv().to_vec();
            let (trace, start, launch, pid) = {
                let mut world = self.world();
                match self.prologue(&mut world, OperationKind::Run, &argv)? {
                    Some(Early::Answer(answer)) => return Ok(answer),
                    Some(Early::Fail(failure)) => {
                        let code = world.apply_failure(&self.id, failure, command.timeout_duration())?;
                        return Ok(ExecResult::new(code, "", ""));
                    }
                    None => {}
                }
                let clock = world.clock;
                let s = world.alive(&self.id)?;
                let launch = launch(
                    clock,
                    s,
                    command.env_vars(),
                    command.secret_env_vars(),
                    command.timeout_duration(),
                );
                let launch = with_cwd(launch, s, command.working_dir())?;
                let stdin = Stdin::Bytes(command.stdin_bytes().unwrap_or_default().to_vec());
                let trace =
                    simulate(&mut world, &self.id, &argv, stdin, &launch, command.output_limit_bytes())?
                        .map_err(|_| Error::Provider {
                            backend: SCHEME.into(),
                            message: "the command waited for stdin that never closes".into(),
                            source: None,
                        })?;
                let pid = world.spawn(&self.id);
                (trace, clock, launch, pid)
            };
            let _running = ProcessGuard { backend: &self.backend, pid };
            let (stdout, stderr) = self.replay(&trace, start).await?;
            let result = ExecResult::new(0, stdout, stderr)
                .with_duration(trace.elapsed)
                .with_truncated(trace.truncated)
                .with_oom_killed(trace.oom_killed);
            match trace.exit {
                Some(status) => Ok(result.with_status(status)),
                None => Err(deadline_error(&self.id, &launch, result.with_status(ExitStatus::Signal(9)))),
            }
        })
    }

    fn stream(&self, command: Command) -> Result<Box<dyn BackendExecStream>> {
        let argv = command.argv().to_vec();
        let mut world = self.world();
        let early = self.prologue(&mut world, OperationKind::Stream, &argv)?;
        let clock = world.clock;
        let s = world.alive(&self.id)?;
        let launch =
            launch(clock, s, command.env_vars(), command.secret_env_vars(), command.timeout_duration());
        let launch = with_cwd(launch, s, command.working_dir())?;
        let pid = world.spawn(&self.id);
        drop(world);
        Ok(Box::new(stream::FakeExecStream::start(
            self.backend.clone(),
            self.id.clone(),
            pid,
            command,
            launch,
            clock,
            early,
        )))
    }

    fn run_code(&self, code: Code) -> BoxFuture<'_, Result<CodeResult>> {
        Box::pin(async move {
            future::yield_now().await;
            let (outcome, trace, start, launch, pid) = {
                let mut world = self.world();
                world.record(OperationKind::RunCode, &self.id, |c| c.code = Some(code.source().to_owned()));
                world.alive(&self.id)?;
                if code.language_name() != "python" {
                    return Err(Error::unsupported(
                        SCHEME,
                        format!("code language {:?}", code.language_name()),
                    ));
                }
                if let Some(failure) = world.take_failure(code.source()) {
                    let status = world.apply_failure(&self.id, failure, code.timeout_duration())?;
                    return Ok(CodeResult::new(status, "", ""));
                }
                if let Some(rule) =
                    world.code_scripts.iter().rev().find(|r| code.source().contains(&r.matcher))
                {
                    return Ok(rule.value.clone());
                }
                let clock = world.clock;
                let World { sandboxes, rng, .. } = &mut *world;
                let sandbox = sandboxes.get_mut(&self.id).ok_or_else(|| gone(&self.id, "no such sandbox"))?;
                let launch = launch(clock, sandbox, &[], &[], code.timeout_duration());
                let mut globals = match code.context_id() {
                    Some(ctx) => sandbox.contexts.get(ctx).cloned().ok_or_else(|| {
                        Error::invalid_input(format!("no code context {ctx:?} in sandbox {}", self.id))
                    })?,
                    None => python::Globals::default(),
                };
                let proc = Proc::new(
                    launch.deadline,
                    crate::DEFAULT_OUTPUT_LIMIT,
                    launch.env.clone(),
                    WORKDIR.to_owned(),
                )
                .with_memory_limit(launch.memory_limit);
                let mut scratch = sandbox.vfs.scratch();
                let mut host = CellHost {
                    world: ProgramWorld { vfs: &mut scratch, policy: &sandbox.spec.network, rng },
                    proc,
                };
                let result = python::run(code.source(), "<cell>", &mut globals, &mut host);
                let proc = host.proc;
                if let Some(ctx) = code.context_id() {
                    sandbox.contexts.insert(ctx.to_owned(), globals);
                }
                let (outcome, mut trace) = match result {
                    Ok(outcome) => (Ok(outcome), proc.finish(Some(0))),
                    // The interpreter was killed: by the out-of-memory killer, or a signal.
                    Err(Stop::OomKilled) => (Err(Some(ExitStatus::Signal(9))), proc.finish(None)),
                    Err(Stop::Signal(n)) => (Err(Some(ExitStatus::Signal(n))), proc.finish(None)),
                    Err(_) => (Err(None), proc.finish(None)),
                };
                trace.effects = settled_effects(scratch.take_journal(), trace.elapsed);
                let pid = world.spawn(&self.id);
                (outcome, trace, clock, launch, pid)
            };
            let _running = ProcessGuard { backend: &self.backend, pid };
            let (stdout, stderr) = self.replay(&trace, start).await?;
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(Some(killed)) => {
                    return Ok(CodeResult::new(0, stdout, stderr)
                        .with_status(killed)
                        .with_duration(trace.elapsed)
                        .with_oom_killed(trace.oom_killed));
                }
                Err(None) => {
                    let partial = ExecResult::new(0, stdout, stderr).with_status(ExitStatus::Signal(2));
                    return Err(deadline_error(&self.id, &launch, partial.with_duration(trace.elapsed)));
                }
            };
            let status = outcome.exit_code.unwrap_or(i32::from(outcome.error.is_some()));
            let mut result = CodeResult::new(status, stdout, stderr).with_duration(trace.elapsed);
            if let Some(error) = outcome.error {
                result = result.with_error(error);
            }
            if let Some(bundle) = outcome.display {
                result = result.with_result(bundle);
            }
            Ok(result)
        })
    }

    fn create_context(&self, language: &str) -> BoxFuture<'_, Result<CodeContext>> {
        let language = language.to_owned();
        Box::pin(async move {
            future::yield_now().await;
            let mut world = self.world();
            world.record(OperationKind::CreateContext, &self.id, |_| {});
            if language != "python" {
                return Err(Error::unsupported(SCHEME, format!("code language {language:?}")));
            }
            let id = format!("ctx-{}", world.next_context);
            world.next_context += 1;
            world.alive(&self.id)?.contexts.insert(id.clone(), python::Globals::default());
            Ok(CodeContext { id, language })
        })
    }

    fn read(&self, path: &str, limit: u64) -> BoxFuture<'_, Result<Vec<u8>>> {
        let path = path.to_owned();
        Box::pin(async move {
            self.fs_op(OperationKind::FsRead, &path, |vfs, abs| {
                let data = vfs.read(&abs)?;
                if data.len() as u64 > limit {
                    return Err(crate::transfer::over_read_limit(&abs, limit));
                }
                Ok(data)
            })
            .await
        })
    }

    fn write(&self, path: &str, data: Vec<u8>, mode: Option<u32>) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        Box::pin(async move {
            self.fs_op(OperationKind::FsWrite, &path, |vfs, abs| vfs.write(&abs, data, mode, false)).await
        })
    }

    fn list(&self, path: &str) -> BoxFuture<'_, Result<Vec<DirEntry>>> {
        let path = path.to_owned();
        Box::pin(async move { self.fs_op(OperationKind::FsList, &path, |vfs, abs| vfs.list(&abs)).await })
    }

    fn mkdir(&self, path: &str) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        Box::pin(
            async move { self.fs_op(OperationKind::FsMkdir, &path, |vfs, abs| vfs.mkdir_all(&abs)).await },
        )
    }

    fn remove(&self, path: &str, recursive: bool) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        Box::pin(async move {
            self.fs_op(OperationKind::FsRemove, &path, |vfs, abs| vfs.remove(&abs, recursive)).await
        })
    }

    fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
        Box::pin(async move {
            future::yield_now().await;
            if self.world().kill_hangs.contains(&self.id) {
                future::pending::<()>().await;
            }
            let mut world = self.world();
            world.record(OperationKind::Kill, &self.id, |_| {});
            let World { sandboxes, processes, .. } = &mut *world;
            let outcome = match sandboxes.get_mut(&self.id) {
                Some(s) if s.life == Life::Alive => {
                    s.life = Life::Killed;
                    KillOutcome::Killed
                }
                _ => KillOutcome::AlreadyGone,
            };
            processes.retain(|_, owner| *owner != self.id);
            Ok(outcome)
        })
    }

    fn detach(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            future::yield_now().await;
            let mut world = self.world();
            world.record(OperationKind::Detach, &self.id, |_| {});
            world.alive(&self.id).map(|s| s.spec.detached = true)
        })
    }
}

/// The process side of a code cell.
struct CellHost<'a> {
    world: ProgramWorld<'a>,
    proc: Proc,
}

impl python::Host for CellHost<'_> {
    fn write(&mut self, stream: crate::StreamKind, data: &[u8]) {
        self.proc.output(stream, data);
    }

    fn sleep(&mut self, d: Duration) -> std::result::Result<(), Stop> {
        self.proc.sleep(d)
    }

    fn read_stdin(&mut self) -> std::result::Result<Vec<u8>, Stop> {
        Ok(Vec::new())
    }

    fn env(&self) -> &BTreeMap<String, String> {
        &self.proc.env
    }

    fn permits(&self, host: &str, port: u16) -> bool {
        self.world.policy.permits(host, port)
    }

    fn read_file(&mut self, path: &str) -> Result<Vec<u8>> {
        self.world.vfs.read(&crate::path::resolve(WORKDIR, path))
    }

    fn write_file(&mut self, path: &str, data: &[u8], append: bool) -> Result<()> {
        self.world.vfs.now = self.proc.elapsed;
        self.world.vfs.write(&crate::path::resolve(WORKDIR, path), data.to_vec(), None, append)
    }

    fn allocate(&mut self, bytes: u64) -> std::result::Result<(), Stop> {
        self.proc.allocate(bytes)
    }
}
