//! [`SandboxBuilder`]: the typestate builder that makes "policy before run" a compile-time
//! rule.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::audit::{AuditConfig, OperationKind, Outcome};
use crate::backend::{Backend, BackendOption, CreateSpec};
use crate::error::{Error, Result};
use crate::exec::validate_env_name;
use crate::policy::{Capabilities, IsolationTier, NetworkPolicy, ResourceLimits};
use crate::secret::SecretString;

use super::op::OpContext;
use super::sandbox::Sandbox;

/// The TTL every sandbox gets unless [`SandboxBuilder::ttl`] says otherwise: 10 minutes.
pub const DEFAULT_TTL: Duration = Duration::from_mins(10);

/// The longest TTL `create()` accepts: 30 days. Longer ones are refused with
/// [`Error::InvalidInput`](crate::Error::InvalidInput), so that expiry times stay
/// representable on every provider.
pub const MAX_TTL: Duration = Duration::from_hours(30 * 24);

/// Refuses a TTL of zero (the sandbox would expire before it starts) or above [`MAX_TTL`].
pub(crate) fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl.is_zero() {
        return Err(Error::invalid_input("a TTL of zero would expire the sandbox before it starts"));
    }
    if ttl > MAX_TTL {
        return Err(Error::invalid_input(format!(
            "a TTL of {ttl:?} is above the longest sandboxio accepts, {MAX_TTL:?} (30 days)"
        )));
    }
    Ok(())
}

/// How long `create()` may take unless [`SandboxBuilder::create_timeout`] says otherwise:
/// 2 minutes.
pub const DEFAULT_CREATE_TIMEOUT: Duration = Duration::from_mins(2);

/// Type-level states of a [`SandboxBuilder`]. You never name them unless you write a
/// function that takes a builder in a particular state.
pub mod state {
    mod sealed {
        pub trait Sealed {}
    }

    /// No network policy chosen yet: `create()` is not available.
    #[derive(Debug)]
    pub enum NetworkUnset {}
    /// A network policy is chosen: `create()` is available.
    #[derive(Debug)]
    pub enum NetworkSet {}
    /// No resource limits set (they are optional).
    #[derive(Debug)]
    pub enum LimitsUnset {}
    /// `.limits(..)` was called (with limits, or with `None`) and cannot be called again.
    #[derive(Debug)]
    pub enum LimitsSet {}

    impl sealed::Sealed for NetworkUnset {}
    impl sealed::Sealed for NetworkSet {}
    impl sealed::Sealed for LimitsUnset {}
    impl sealed::Sealed for LimitsSet {}

    /// Holds once a network policy is chosen; `create()` requires it.
    #[diagnostic::on_unimplemented(
        message = "a network policy must be chosen before `create()`",
        label = "`create()` is called here on a builder with no network policy",
        note = "call `.network(NetworkPolicy::deny_all())` (or `allow_all()`, or `allowlist([..])?`) before `.create()`: sandboxio has no default policy"
    )]
    pub trait NetworkChosen: sealed::Sealed {}
    #[diagnostic::do_not_recommend]
    impl NetworkChosen for NetworkSet {}

    /// Holds while no network policy is chosen; `network()` requires it.
    #[diagnostic::on_unimplemented(
        message = "the network policy of this builder is already chosen",
        label = "second `.network(..)` call",
        note = "a sandbox has exactly one network policy, chosen once: remove one of the `.network(..)` calls"
    )]
    pub trait NetworkNotChosen: sealed::Sealed {}
    #[diagnostic::do_not_recommend]
    impl NetworkNotChosen for NetworkUnset {}

    /// Holds while no resource limits are set; `limits()` requires it.
    #[diagnostic::on_unimplemented(
        message = "the resource limits of this builder are already set",
        label = "second `.limits(..)` call",
        note = "limits are set once and cannot be unset or replaced: put every limit in one `ResourceLimits` value, or pass one `Option<ResourceLimits>` when they are chosen at run time"
    )]
    pub trait LimitsNotChosen: sealed::Sealed {}
    #[diagnostic::do_not_recommend]
    impl LimitsNotChosen for LimitsUnset {}
}

use state::{
    LimitsNotChosen, LimitsSet, LimitsUnset, NetworkChosen, NetworkNotChosen, NetworkSet, NetworkUnset,
};

/// Something a builder can take as its backend: any [`Backend`] value, or an
/// `Arc<dyn Backend>`.
pub trait IntoBackend {
    /// The shared backend.
    fn into_backend(self) -> Arc<dyn Backend>;
}

impl<B: Backend> IntoBackend for B {
    fn into_backend(self) -> Arc<dyn Backend> {
        Arc::new(self)
    }
}

impl IntoBackend for Arc<dyn Backend> {
    fn into_backend(self) -> Arc<dyn Backend> {
        self
    }
}

/// Configures a sandbox before it exists. Get one from [`Sandbox::builder`] or
/// [`Sandbox::builder_with`].
///
/// `create()` compiles only once [`SandboxBuilder::network`] has chosen a policy; the policy
/// and the [`SandboxBuilder::limits`] can each be chosen only once. Building does no I/O and
/// starts no thread.
///
/// ```
/// # futures_lite::future::block_on(async {
/// use sandboxio::{NetworkPolicy, Sandbox};
/// let sandbox = Sandbox::builder("fake://")?
///     .network(NetworkPolicy::deny_all())
///     .metadata("team", "evals")
///     .create()
///     .await?;
/// sandbox.close().await?;
/// # Ok::<(), sandboxio::Error>(()) }).unwrap();
/// ```
#[must_use = "a builder does nothing until `.create()` is awaited"]
pub struct SandboxBuilder<N = NetworkUnset, L = LimitsUnset> {
    backend: Arc<dyn Backend>,
    network: Option<NetworkPolicy>,
    limits: Option<ResourceLimits>,
    isolation: Option<IsolationTier>,
    metadata: BTreeMap<String, String>,
    env: Vec<(String, String)>,
    secret_env: Vec<(String, SecretString)>,
    ttl: Duration,
    create_timeout: Duration,
    audit: AuditConfig,
    detached: bool,
    image: Option<String>,
    template: Option<String>,
    teardown_grace: Option<Duration>,
    _state: PhantomData<fn() -> (N, L)>,
}

impl<N, L> std::fmt::Debug for SandboxBuilder<N, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxBuilder")
            .field("backend", &self.backend.scheme())
            .field("network", &self.network)
            .field("limits", &self.limits)
            .field("isolation", &self.isolation)
            .field("metadata", &self.metadata)
            .field("env", &self.env)
            .field("secret_env", &self.secret_env)
            .field("ttl", &self.ttl)
            .field("create_timeout", &self.create_timeout)
            .field("detached", &self.detached)
            .field("image", &self.image)
            .field("template", &self.template)
            .field("teardown_grace", &self.teardown_grace)
            .finish_non_exhaustive()
    }
}

impl SandboxBuilder {
    pub(crate) fn new(backend: Arc<dyn Backend>) -> Self {
        SandboxBuilder {
            backend,
            network: None,
            limits: None,
            isolation: None,
            metadata: BTreeMap::new(),
            env: Vec::new(),
            secret_env: Vec::new(),
            ttl: DEFAULT_TTL,
            create_timeout: DEFAULT_CREATE_TIMEOUT,
            audit: AuditConfig::new(),
            detached: false,
            image: None,
            template: None,
            teardown_grace: None,
            _state: PhantomData,
        }
    }
}

#[sandboxio_macros::blocking_facade]
impl<N, L> SandboxBuilder<N, L> {
    fn into_state<N2, L2>(self) -> SandboxBuilder<N2, L2> {
        SandboxBuilder {
            backend: self.backend,
            network: self.network,
            limits: self.limits,
            isolation: self.isolation,
            metadata: self.metadata,
            env: self.env,
            secret_env: self.secret_env,
            ttl: self.ttl,
            create_timeout: self.create_timeout,
            audit: self.audit,
            detached: self.detached,
            image: self.image,
            template: self.template,
            teardown_grace: self.teardown_grace,
            _state: PhantomData,
        }
    }

    /// Chooses the egress policy. Required before `create()`, allowed once.
    ///
    /// `create()` fails with [`Error::CapabilityNotSupported`] if the
    /// backend cannot enforce the policy; it is never silently weakened.
    pub fn network(self, policy: NetworkPolicy) -> SandboxBuilder<NetworkSet, L>
    where
        N: NetworkNotChosen,
    {
        let mut next = self.into_state();
        next.network = Some(policy);
        next
    }

    /// Sets resource limits (memory in MiB, CPU in millicores, process count). Optional;
    /// allowed once, and never unset.
    ///
    /// Takes a [`ResourceLimits`] or an `Option<ResourceLimits>`, so that a limit chosen at
    /// run time keeps one builder type: `.limits(want.then_some(limits))` where
    /// `if want { b.limits(l) } else { b }` would give two. `None` sets no limit and still
    /// counts as the one call: a second `.limits(..)` does not compile either way.
    ///
    /// `create()` fails with [`Error::Configuration`],
    /// before anything is provisioned, if the backend cannot apply a limit.
    ///
    /// ```
    /// use sandboxio::{NetworkPolicy, ResourceLimits, Sandbox};
    /// let want_limits = std::env::var_os("SMALL_SANDBOX").is_some();
    /// let builder = Sandbox::builder("fake://")?
    ///     .network(NetworkPolicy::deny_all())
    ///     .limits(want_limits.then(|| ResourceLimits::new().memory_mib(512)));
    /// # drop(builder);
    /// # Ok::<(), sandboxio::Error>(())
    /// ```
    pub fn limits(self, limits: impl Into<Option<ResourceLimits>>) -> SandboxBuilder<N, LimitsSet>
    where
        L: LimitsNotChosen,
    {
        let mut next = self.into_state();
        next.limits = limits.into();
        next
    }

    /// Requires at least this isolation tier; `create()` fails with
    /// [`Error::IsolationUnsatisfied`] before
    /// provisioning if the backend's tier is lower or unknown.
    pub fn require_isolation(mut self, tier: IsolationTier) -> Self {
        self.isolation = Some(tier);
        self
    }

    /// Adds a metadata label, propagated to the provider's native labels and to every audit
    /// record. Labels are not secret: never put credentials here.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Sets an environment variable for every process in the sandbox.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Sets a secret environment variable for every process. Its value never reaches a log,
    /// audit record, label, error message or the provider's stored configuration.
    pub fn secret_env(mut self, name: impl Into<String>, value: impl Into<SecretString>) -> Self {
        self.secret_env.push((name.into(), value.into()));
        self
    }

    /// How long the sandbox may live ([`DEFAULT_TTL`], 10 minutes, unless set; at most
    /// [`MAX_TTL`], 30 days). The backend destroys it at expiry even if no client is left.
    /// `create()` refuses zero and anything above [`MAX_TTL`] (`Duration::MAX` included)
    /// with [`Error::InvalidInput`] before anything is created.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long `create()` may take ([`DEFAULT_CREATE_TIMEOUT`], 2 minutes, unless set).
    /// Zero makes `create()` fail with [`Error::CreateTimeout`] (leaving nothing behind);
    /// a timeout above [`MAX_TIMEOUT`](crate::exec::MAX_TIMEOUT) (30 days) saturates at it,
    /// `Duration::MAX` included.
    pub fn create_timeout(mut self, timeout: Duration) -> Self {
        self.create_timeout = crate::duration::saturate(timeout);
        self
    }

    /// Adds audit sinks for this sandbox (on top of the backend's own).
    pub fn audit(mut self, audit: AuditConfig) -> Self {
        self.audit = audit.merged(&self.audit);
        self
    }

    /// `true`: the sandbox outlives its owner process, until its TTL (needs
    /// [`Capabilities::DETACH`]). Default `false`: it dies with its owner.
    pub fn detached(mut self, detached: bool) -> Self {
        self.detached = detached;
        self
    }

    /// How long the background teardown of this sandbox may take when its handle is
    /// dropped without `close()`, before it is reported orphaned (a `tracing` warning on
    /// target `sandboxio::orphan` and an `OrphanedSandbox` audit record). Default: the
    /// process-wide [`teardown_grace`](crate::runtime::teardown_grace), 30 s. A grace above
    /// [`MAX_TIMEOUT`](crate::exec::MAX_TIMEOUT) (30 days) saturates at it.
    pub fn teardown_grace(mut self, grace: Duration) -> Self {
        self.teardown_grace = Some(crate::duration::saturate(grace));
        self
    }

    /// The container image (a typed backend option; `create()` raises
    /// [`Error::CapabilityNotSupported`] on a backend without images).
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.image = Some(image.into());
        self
    }

    /// The provider template (a typed backend option; `create()` raises
    /// [`Error::CapabilityNotSupported`] on a backend without
    /// templates).
    pub fn template(mut self, template: impl Into<String>) -> Self {
        self.template = Some(template.into());
        self
    }
}

#[sandboxio_macros::blocking_facade]
impl<N, L> SandboxBuilder<N, L> {
    /// Everything `create` checks before it asks the backend for anything.
    fn preflight(&self) -> Result<CreateSpec> {
        let backend = &*self.backend;
        let scheme = backend.scheme();
        for (name, value) in &self.env {
            validate_env_name(name)?;
            if value.contains('\0') {
                return Err(Error::invalid_input(format!("NUL byte in the value of env var {name:?}")));
            }
        }
        for (name, value) in &self.secret_env {
            validate_env_name(name)?;
            if value.expose_secret().contains('\0') {
                return Err(Error::invalid_input(format!(
                    "NUL byte in the value of secret env var {name:?} (value redacted)"
                )));
            }
        }
        for (k, v) in &self.metadata {
            if k.is_empty() || k.contains('\0') || v.contains('\0') {
                return Err(Error::invalid_input(format!(
                    "metadata label {k:?} is empty or holds a NUL byte"
                )));
            }
        }
        if let Some(required) = self.isolation {
            let actual = backend.isolation();
            if !actual.satisfies(required) {
                return Err(Error::IsolationUnsatisfied { backend: scheme.to_owned(), required, actual });
            }
        }
        let declared = backend.capabilities();
        let network = self
            .network
            .clone()
            .ok_or_else(|| Error::configuration("no network policy chosen; call `.network(..)` first"))?;
        let needed = network.required_capability();
        if !declared.contains(needed) {
            return Err(Error::missing_capability(scheme, needed));
        }
        let limits = self.limits.unwrap_or_default();
        let missing_limits = limits.required_capabilities() - declared;
        if !missing_limits.is_empty() {
            let reason = crate::backends::capabilities::limits_refusal(scheme).unwrap_or(
                "it does not declare them (`Sandbox::capabilities_of` lists what a backend offers)",
            );
            return Err(Error::configuration(format!(
                "the {scheme} backend cannot apply resource limits {missing_limits}: {reason}; remove them from `.limits(..)`"
            )));
        }
        if self.detached && !declared.contains(Capabilities::DETACH) {
            return Err(Error::missing_capability(scheme, Capabilities::DETACH));
        }
        let options = [
            (BackendOption::Image, self.image.is_some()),
            (BackendOption::Template, self.template.is_some()),
        ];
        for (option, set) in options {
            if set && !backend.supports_option(option) {
                return Err(Error::unsupported(scheme, option));
            }
        }
        check_ttl(self.ttl)?;
        Ok(CreateSpec {
            network,
            limits,
            env: self.env.clone(),
            secret_env: self.secret_env.clone(),
            metadata: self.metadata.clone(),
            ttl: self.ttl,
            create_timeout: self.create_timeout,
            detached: self.detached,
            image: self.image.clone(),
            template: self.template.clone(),
            audit: AuditConfig::new(),
        })
    }

    /// Creates the sandbox. The returned handle owns it: dropping the handle without
    /// [`Sandbox::close`] hands teardown to the library, and the sandbox dies with the owner
    /// process unless it was created [`detached`](SandboxBuilder::detached).
    ///
    /// Available once [`SandboxBuilder::network`] has chosen a policy; calling it earlier is
    /// a compile error.
    ///
    /// # Errors
    ///
    /// Before anything is provisioned: [`Error::InvalidInput`] (env
    /// names, NUL bytes, zero TTL), [`Error::IsolationUnsatisfied`],
    /// [`Error::CapabilityNotSupported`] (policy, `detached`, typed
    /// options), [`Error::Configuration`] (limits the backend cannot
    /// apply). From the backend: [`Error::CreateTimeout`],
    /// [`Error::Connect`], [`Error::Auth`],
    /// [`Error::RateLimited`], [`Error::Provider`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes leaves no sandbox behind: backends destroy
    /// what they provisioned when the result can no longer be delivered.
    pub async fn create(self) -> Result<Sandbox>
    where
        N: NetworkChosen,
    {
        let ctx = OpContext {
            backend: Arc::from(self.backend.scheme()),
            sandbox_id: None,
            audit: self.audit.clone().merged(&self.backend.audit()),
            metadata: Arc::new(self.metadata.clone()),
            policy: self.network.clone(),
        };
        let mut guard = ctx.start(OperationKind::Create);
        let provision = async {
            let mut spec = self.preflight()?;
            spec.audit = ctx.audit.clone();
            let owned = !spec.detached;
            Ok::<_, Error>((self.backend.create(spec).await?, owned))
        };
        match tracing::Instrument::instrument(provision, ctx.span(OperationKind::Create)).await {
            Ok((handle, owned)) => {
                guard.set_sandbox_id(handle.id());
                guard.finish(Outcome::Ok);
                Ok(Sandbox::from_parts(Arc::clone(&self.backend), handle, ctx, owned)
                    .with_teardown_grace(self.teardown_grace))
            }
            Err(e) => {
                guard.finish(Outcome::Error(e.code()));
                Err(e)
            }
        }
    }
}
