//! The [`FakeBackend`] handle: its configuration, the methods that script and observe it,
//! and its [`Backend`] implementation (create and connect).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_lite::future;

use crate::audit::{AuditConfig, OperationKind, OperationRecord, RecordingSink};
use crate::backend::{Backend, BackendOption, BackendSandbox, BoxFuture, CreateSpec};
use crate::dsn::Dsn;
use crate::error::{Error, Result};
use crate::exec::{CodeResult, ExecResult};
use crate::inventory::{ReapOptions, ReapReport, SandboxInfo};
use crate::policy::{Capabilities, IsolationTier};

use super::sandbox::FakeSandbox;
use super::world::{Life, Rule, SandboxState, World};
use super::{DEFAULT_CREATE_LATENCY, Failure, FakeCall, SCHEME};

/// What a [`FakeBackend`] is built with; changing it starts a fresh world.
#[derive(Debug, Clone)]
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

/// What clones of one [`FakeBackend`] share.
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
///   [`FakeBackend::live_processes`] finds orphans, [`FakeBackend::live_sandboxes`] leaked
///   sandboxes.
/// - **Probe hooks** (with the `contract` feature): what the contract suite's probes ask
///   of a backend's provider side (the labels and limits it stored, processes per sandbox,
///   a hanging `kill`, a missing API key), for this crate's own tests.
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
        let world = World::new(config.seed);
        FakeBackend {
            inner: Arc::new(Inner { config, recorder: RecordingSink::new(), world: Mutex::new(world) }),
        }
    }

    fn reconfigure(self, change: impl FnOnce(&mut Config)) -> Self {
        let mut config = self.inner.config.clone();
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
    #[cfg(feature = "contract")]
    #[cfg_attr(docsrs, doc(cfg(feature = "contract")))]
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

    pub(super) fn world(&self) -> MutexGuard<'_, World> {
        self.inner.world.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers every `run` or `stream` whose argv, joined with spaces, contains `matcher`
    /// with `returns` (later rules win over earlier ones).
    pub fn on_run(&self, matcher: &str, returns: ExecResult) {
        self.world().run_scripts.push(Rule { matcher: matcher.to_owned(), value: returns });
    }

    /// Answers every `run_code` (and `run_code_stream`) whose source contains `matcher` with
    /// `returns` (an [`ExecResult`] or a [`CodeResult`]); later rules win. A streamed cell
    /// delivers the answer's stdout, then its stderr, as one chunk each.
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
    #[expect(clippy::must_use_candidate, reason = "expiring is the point; the answer is optional")]
    pub fn expire(&self, sandbox_id: &str) -> bool {
        self.world().end(sandbox_id, Life::Expired)
    }

    /// Advances the virtual clock (sandboxes past their TTL expire).
    pub fn advance_clock(&self, by: Duration) {
        let world = &mut self.world();
        world.clock = world.clock.saturating_add(by);
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

    /// Ids of sandboxes neither killed nor expired.
    #[must_use]
    pub fn live_sandboxes(&self) -> Vec<String> {
        self.world().live_where(|_| true)
    }
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
                world.clock = world.clock.saturating_add(spec.create_timeout);
                return Err(Error::CreateTimeout { timeout: spec.create_timeout });
            }
            world.clock = world.clock.saturating_add(latency);
            let id = format!("fake-{:016x}", world.rng.next_u64());
            let created_at = world.clock;
            world.sandboxes.insert(id.clone(), SandboxState::new(spec, created_at));
            world.record(OperationKind::Create, &id, |_| {});
            Ok(Box::new(FakeSandbox::new(self.clone(), id)) as Box<dyn BackendSandbox>)
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
            Ok(Box::new(FakeSandbox::new(self.clone(), id)) as Box<dyn BackendSandbox>)
        })
    }

    /// The live sandboxes of this backend's world, with ages and TTLs on its virtual clock;
    /// a fake sandbox has no owner process (`owner_alive` is `None`).
    fn list(&self, labels: &BTreeMap<String, String>) -> BoxFuture<'_, Result<Vec<SandboxInfo>>> {
        let labels = labels.clone();
        Box::pin(async move {
            future::yield_now().await;
            let mut world = self.world();
            let now = world.clock;
            let live = world.live_where(|s| labels.iter().all(|(k, v)| s.spec.metadata.get(k) == Some(v)));
            Ok(live
                .into_iter()
                .filter_map(|id| {
                    let s = world.sandboxes.get(&id)?;
                    let mut info = SandboxInfo::new(id.clone(), SCHEME);
                    info.age = Some(now.saturating_sub(s.created_at));
                    info.ttl_left = Some(s.created_at.saturating_add(s.spec.ttl).saturating_sub(now));
                    info.detached = Some(s.spec.detached);
                    info.labels = s.spec.metadata.clone();
                    Some(info)
                })
                .collect())
        })
    }

    /// The fake ends a sandbox the moment its virtual TTL passes, and has no owner
    /// processes, so a sweep finds nothing to remove: every live sandbox is kept.
    fn reap(&self, options: ReapOptions) -> BoxFuture<'_, Result<ReapReport>> {
        let _ = options;
        Box::pin(async move {
            future::yield_now().await;
            let kept = self.world().live_where(|_| true).len();
            Ok(ReapReport { kept, ..Default::default() })
        })
    }
}
