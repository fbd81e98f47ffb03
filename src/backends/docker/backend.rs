//! The `docker://` backend value: its configuration (the DSN, the builder methods), the
//! engine client it connects on first use, and [`Backend`] (create, connect, list, reap).
//! Pulls and builds add their methods in `image/`, templates in `template/`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bollard::Docker;

use crate::backend::{Backend, BackendOption, BackendSandbox, BoxFuture, CreateSpec};
use crate::dsn::Dsn;
use crate::error::{Error, Result};
use crate::inventory::{ReapOptions, ReapReport};
use crate::policy::{Capabilities, IsolationTier};

use super::client::{self, Endpoint};
use super::exec_path::ExecPath;
use super::image::{PULL_STALL_TIMEOUT, PullPolicy, PullProgress, RegistryAuth, build, credentials, pull};
use super::template::{self, Template};
use super::{CAPABILITIES, SCHEME, connect, create, reap, rt, sandbox, sandboxd_path};

/// The image used when neither the DSN nor the builder names one, as `scripts/build-images
/// python` builds it (never pulled unless the pull policy says so): Debian bookworm with its `python3` (the
/// standard library but the parts Debian packages apart: `ensurepip`/`venv`, `lib2to3`,
/// `idlelib`, `dbm.gnu`) and its numpy, pandas and matplotlib packages, `MPLBACKEND=Agg` in
/// the environment, user `sandbox` (uid 1000) in `/workspace`. So `run_code` is a code
/// interpreter out of the box, with sandboxd baked in (see [`sandboxd_id`]); `docs/backends/docker.md`
/// ("Docker images") gives its size.
pub const DEFAULT_IMAGE: &str = "sandboxio/python:2";

/// `<protocol>:<sha256>` of the sandboxd this build embeds (`None`: it embeds none): the
/// image label `io.sandboxio.image.sandboxd` starts with it when the image holds this very
/// binary, then `:<layers>`, the image's layer count when labelled.
///
/// A create on the sandboxd path uploads sandboxd into every new container, unless the
/// image's label names this binary and the image still has those layers (an image built on
/// top may have changed the file): then the binary must be at `/.sandboxio/sandboxd`, mode
/// `0555` and owned by [`SUPERVISOR_ID`](super::SUPERVISOR_ID) in a directory of the same owner and mode. Likewise
/// `io.sandboxio.image.user` = `<name>:<uid>:<gid>:<home>:<layers>` spares reading the
/// image's `/etc/passwd` for user `<name>`. `scripts/build-images` labels sandboxio's images.
#[must_use]
pub fn sandboxd_id() -> Option<String> {
    crate::sandboxd::BINARY_SHA256.map(|digest| format!("{}:{digest}", crate::sandboxd::proto::VERSION))
}

/// The `docker://` backend. Cheap to clone; every backend naming the same engine endpoint
/// shares one engine connection in the process.
#[derive(Debug, Clone)]
pub struct DockerBackend {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) endpoint: Endpoint,
    pub(super) image: String,
    pub(super) runtime: Option<String>,
    pub(super) user: Option<String>,
    /// The exec path asked for (`None`: the default for this build and runtime).
    pub(super) exec_path: Option<ExecPath>,
    pub(super) audit: crate::audit::AuditConfig,
    /// How the egress gates of this backend's allowlisted sandboxes resolve names.
    pub(super) resolver: crate::policy::EgressResolver,
    /// Whether `create` pulls its image.
    pub(super) pull: PullPolicy,
    /// Where pulls find registry credentials.
    pub(super) credentials: credentials::CredentialSources,
    /// Called with every pull's progress.
    pub(super) progress: pull::Progress,
    /// How long a pull may report nothing.
    pub(super) pull_stall: std::time::Duration,
    /// Called with every line of every build's log (and template setup's output).
    pub(super) build_log: build::BuildLog,
    /// The templates `create` can start from, by name.
    pub(super) templates: Arc<template::Templates>,
    /// The engine's client and what is known of it, shared with every backend value naming
    /// the same endpoint.
    pub(super) engine: Arc<client::Engine>,
    /// Whether this backend value's first `create` has swept never-started leftovers (per
    /// value, not per engine: a process's next backend sweeps what an owner that died
    /// meanwhile left).
    pub(super) swept: AtomicBool,
}

impl DockerBackend {
    /// A backend for the engine at `DOCKER_HOST`, else `/var/run/docker.sock`, creating
    /// sandboxes from [`DEFAULT_IMAGE`]. Does no I/O.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] when `DOCKER_HOST` is
    /// set to something other than `unix://` or `tcp://`.
    pub fn from_env() -> Result<Self> {
        Ok(Self::with_endpoint(Endpoint::from_env()?))
    }

    /// A backend for the engine listening on the unix socket `path`. Does no I/O.
    #[must_use]
    pub fn with_socket(path: impl Into<String>) -> Self {
        Self::with_endpoint(Endpoint::Socket(path.into()))
    }

    fn with_endpoint(endpoint: Endpoint) -> Self {
        DockerBackend {
            inner: Arc::new(Inner {
                engine: client::engine(&endpoint),
                endpoint,
                image: DEFAULT_IMAGE.to_owned(),
                runtime: None,
                user: None,
                exec_path: None,
                audit: crate::audit::AuditConfig::new(),
                resolver: crate::policy::EgressResolver::system(),
                pull: PullPolicy::Never,
                credentials: credentials::CredentialSources::default(),
                progress: pull::Progress::default(),
                pull_stall: PULL_STALL_TIMEOUT,
                build_log: build::BuildLog::default(),
                templates: Arc::default(),
                swept: AtomicBool::new(false),
            }),
        }
    }

    fn rebuild(&self, f: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Inner {
            endpoint: self.inner.endpoint.clone(),
            image: self.inner.image.clone(),
            runtime: self.inner.runtime.clone(),
            user: self.inner.user.clone(),
            exec_path: self.inner.exec_path,
            audit: self.inner.audit.clone(),
            resolver: self.inner.resolver.clone(),
            pull: self.inner.pull,
            credentials: self.inner.credentials.clone(),
            progress: self.inner.progress.clone(),
            pull_stall: self.inner.pull_stall,
            build_log: self.inner.build_log.clone(),
            templates: Arc::clone(&self.inner.templates),
            engine: Arc::clone(&self.inner.engine),
            swept: AtomicBool::new(false),
        };
        f(&mut inner);
        DockerBackend { inner: Arc::new(inner) }
    }

    /// The same backend creating sandboxes from `image` by default.
    #[must_use]
    pub fn with_image(self, image: impl Into<String>) -> Self {
        let image = image.into();
        self.rebuild(|i| i.image = image)
    }

    /// The same backend running containers under the OCI runtime `runtime` (for example
    /// `runsc`, gVisor, registered in the engine's `daemon.json`).
    #[must_use]
    pub fn with_runtime(self, runtime: impl Into<String>) -> Self {
        let runtime = runtime.into();
        self.rebuild(|i| i.runtime = Some(runtime))
    }

    /// The same backend running every process as `user` (a name or uid in the image).
    #[must_use]
    pub fn with_user(self, user: impl Into<String>) -> Self {
        let user = user.into();
        self.rebuild(|i| i.user = Some(user))
    }

    /// The same backend reaching its sandboxes' commands through `path` (see
    /// [`DockerBackend::exec_path`] for the default; a build without sandboxd uses
    /// [`ExecPath::ExecApi`] whatever this says).
    #[must_use]
    pub fn with_exec_path(self, path: ExecPath) -> Self {
        self.rebuild(|i| i.exec_path = Some(path))
    }

    /// The way new sandboxes' commands will run: [`ExecPath::ExecApi`] when this build has no
    /// sandboxd; else the configured [`ExecPath`]; else [`ExecPath::ExecApi`] under gVisor
    /// (`runtime=runsc`: gVisor 20221219 refuses sandboxd's shepherds the child subreaper they
    /// need, see `docs/adr/0006-sandboxd.md`) and
    /// [`ExecPath::Sandboxd`] otherwise.
    #[must_use]
    pub fn exec_path(&self) -> ExecPath {
        match self.inner.exec_path {
            _ if !sandboxd_path::available() => ExecPath::ExecApi,
            Some(path) => path,
            None if self.inner.runtime.as_deref() == Some("runsc") => ExecPath::ExecApi,
            None => ExecPath::Sandboxd,
        }
    }

    /// The same backend writing every sandbox's audit records to `audit` as well.
    #[must_use]
    pub fn with_audit(self, audit: crate::audit::AuditConfig) -> Self {
        self.rebuild(|i| i.audit = audit)
    }

    /// The same backend resolving the names its allowlisted sandboxes ask for through
    /// `resolver` (default: [`EgressResolver::system`](crate::policy::EgressResolver::system)), in the
    /// egress gate on the host.
    #[must_use]
    pub fn with_egress_resolver(self, resolver: crate::policy::EgressResolver) -> Self {
        self.rebuild(|i| i.resolver = resolver)
    }

    /// The same backend pulling images by `policy` at `create` (default
    /// [`PullPolicy::Never`]; DSN option `pull=never|missing|always`).
    #[must_use]
    pub fn with_pull(self, policy: PullPolicy) -> Self {
        self.rebuild(|i| i.pull = policy)
    }

    /// When `create` pulls its image.
    #[must_use]
    pub fn pull_policy(&self) -> PullPolicy {
        self.inner.pull
    }

    /// The same backend sending `auth` to `registry` (`host[:port]` as in the image name,
    /// or `docker.io` for Docker Hub) when it pulls. These win over Docker's config file.
    /// The secret is never logged, put in an error, or shown by `Debug`.
    #[must_use]
    pub fn with_registry_auth(self, registry: impl Into<String>, auth: RegistryAuth) -> Self {
        let registry = registry.into();
        self.rebuild(|i| {
            i.credentials.typed.insert(registry, auth);
        })
    }

    /// The same backend reading registry credentials from Docker's config file at `path`
    /// (default: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`): a registry's
    /// own `credHelpers` entry, else `credsStore`, runs `docker-credential-<name> get`
    /// (bounded by [`CREDENTIAL_HELPER_TIMEOUT`](super::CREDENTIAL_HELPER_TIMEOUT)); otherwise its `auths` entry is used. The
    /// file is read at each pull, never when the backend is built.
    #[must_use]
    pub fn with_docker_config(self, path: impl Into<std::path::PathBuf>) -> Self {
        let path = path.into();
        self.rebuild(|i| i.credentials.config_file = Some(path))
    }

    /// The same backend calling `callback` with every pull's [`PullProgress`] (layers and
    /// bytes), on the Docker runtime's thread: it should return quickly. Progress also goes
    /// to `tracing` (target `sandboxio::docker::pull`: a layer done at `info`, bytes at
    /// `debug`).
    #[must_use]
    pub fn with_pull_progress(self, callback: impl Fn(&PullProgress) + Send + Sync + 'static) -> Self {
        let callback: Arc<dyn Fn(&PullProgress) + Send + Sync> = Arc::new(callback);
        self.rebuild(|i| i.progress = super::image::callback::Callback(Some(callback)))
    }

    /// The same backend failing a pull whose engine reports nothing for `stall` (default
    /// [`PULL_STALL_TIMEOUT`]) with [`ImageErrorKind::RegistryDown`](super::ImageErrorKind::RegistryDown).
    #[must_use]
    pub fn with_pull_stall_timeout(self, stall: std::time::Duration) -> Self {
        self.rebuild(|i| i.pull_stall = stall)
    }

    /// The same backend calling `callback` with each line of every build's log
    /// ([`DockerBackend::build_image`]), on the Docker runtime's thread: it should return
    /// quickly. The lines also go to `tracing` (target `sandboxio::docker::build`, `info`),
    /// escaped. The callback gets each line as the build printed it, so what a Dockerfile's
    /// `RUN` prints (terminal escapes included) arrives raw: pass it through
    /// [`text::escape`](crate::text::escape) before a terminal or a log sees it.
    #[must_use]
    pub fn with_build_log(self, callback: impl Fn(&str) + Send + Sync + 'static) -> Self {
        let callback: Arc<dyn Fn(&str) + Send + Sync> = Arc::new(callback);
        self.rebuild(|i| i.build_log = super::image::callback::Callback(Some(callback)))
    }

    /// The same backend knowing `template` as `name` (lower-case letters, digits, `-`, `_`,
    /// `.`): a sandbox builder's `.template(name)` then starts from the template's image,
    /// set up at the first such `create` (or [`DockerBackend::prepare_template`]) and found
    /// again by its content hash after that, in this process or any other using the same
    /// engine. Setup output goes where build logs go ([`DockerBackend::with_build_log`]).
    /// A backend with no template refuses `.template(..)` as an unsupported typed option.
    /// A setup inside `create` counts against its create timeout (2 minutes by default):
    /// run a long one ahead with [`DockerBackend::prepare_template`].
    #[must_use]
    pub fn with_template(self, name: impl Into<String>, template: Template) -> Self {
        let name = name.into();
        self.rebuild(|i| {
            let mut templates = (*i.templates).clone();
            templates.insert(name, template);
            i.templates = Arc::new(templates);
        })
    }

    /// The image sandboxes are created from when the builder names none.
    #[must_use]
    pub fn image(&self) -> &str {
        &self.inner.image
    }

    /// The [`BackendFactory`](crate::dsn::BackendFactory) of `docker://`.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for an unknown option,
    /// a bad `DOCKER_HOST`, or a runtime other than `runc`/`runsc`.
    pub fn from_dsn(dsn: &Dsn) -> Result<Arc<dyn Backend>> {
        Ok(Arc::new(Self::from_dsn_typed(dsn)?))
    }

    /// [`DockerBackend::from_dsn`] as a `DockerBackend`, for the calls a [`Sandbox`](crate::Sandbox)
    /// does not offer ([`DockerBackend::build_image`], [`DockerBackend::pull`], templates).
    /// Does no I/O.
    ///
    /// # Errors
    ///
    /// As [`DockerBackend::from_dsn`].
    pub fn from_dsn_typed(dsn: &Dsn) -> Result<DockerBackend> {
        dsn.reject_unknown_options(&["image", "runtime", "user", "exec", "pull"])?;
        let mut backend = if !dsn.path().is_empty() && dsn.path() != "/" {
            if !dsn.authority().is_empty() {
                return Err(Error::configuration("docker:// takes a socket path or a host:port, not both"));
            }
            DockerBackend::with_socket(dsn.path())
        } else if !dsn.authority().is_empty() {
            DockerBackend::with_endpoint(Endpoint::Tcp(dsn.authority().to_owned()))
        } else {
            DockerBackend::from_env()?
        };
        if let Some(image) = dsn.option("image") {
            backend = backend.with_image(image);
        }
        match dsn.option("runtime") {
            None | Some("runc") => {}
            Some("runsc") => backend = backend.with_runtime("runsc"),
            Some(_) => return Err(Error::configuration("docker:// option `runtime` must be runc or runsc")),
        }
        if let Some(user) = dsn.option("user") {
            backend = backend.with_user(user);
        }
        if let Some(path) = dsn.option("exec") {
            backend = backend.with_exec_path(ExecPath::parse(path)?);
        }
        if let Some(policy) = dsn.option("pull") {
            backend = backend.with_pull(PullPolicy::parse(policy)?);
        }
        Ok(backend)
    }

    /// The engine client, connected on first use.
    pub(super) async fn client(inner: &Arc<Inner>) -> Result<Docker> {
        inner.engine.client.get_or_try_init(|| client::connect(&inner.endpoint)).await.cloned()
    }

    /// Lists sandboxio's containers on this engine and removes those past their TTL, and,
    /// with [`ReapOptions::owner_dead`], the owned ones whose owner process on this host is
    /// gone. Detached sandboxes and other hosts' sandboxes are only removed at expiry. With
    /// [`ReapOptions::dry_run`] it removes nothing and reports what it would remove; with
    /// [`ReapOptions::labels`] it looks only at the containers so labelled.
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] when the engine does not answer;
    /// [`Error::Provider`] when listing fails. A container
    /// that vanishes while being removed is not an error.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the sweep between removals; a removal already sent
    /// completes on the engine.
    pub async fn reap(&self, options: ReapOptions) -> Result<ReapReport> {
        let inner = Arc::clone(&self.inner);
        rt::spawn(async move { reap::reap(&Self::client(&inner).await?, &options).await }).await
    }

    /// [`DockerBackend::reap`] for synchronous callers (blocks the calling thread).
    ///
    /// # Errors
    ///
    /// As [`DockerBackend::reap`].
    pub fn reap_blocking(&self, options: ReapOptions) -> Result<ReapReport> {
        futures_lite::future::block_on(self.reap(options))
    }
}

impl Backend for DockerBackend {
    fn scheme(&self) -> &str {
        SCHEME
    }

    fn capabilities(&self) -> Capabilities {
        match self.exec_path() {
            // gVisor does not connect to the gate's host socket (`sandboxd_path/egress.rs`).
            ExecPath::Sandboxd if self.inner.runtime.as_deref() == Some("runsc") => {
                CAPABILITIES.difference(Capabilities::NETWORK_ALLOWLIST)
            }
            ExecPath::Sandboxd => CAPABILITIES,
            // Code contexts and rich results need sandboxd's runner, and an allowlist its
            // relay.
            ExecPath::ExecApi => CAPABILITIES.difference(
                Capabilities::STATEFUL_CODE | Capabilities::RICH_OUTPUTS | Capabilities::NETWORK_ALLOWLIST,
            ),
        }
    }

    fn isolation(&self) -> IsolationTier {
        match self.inner.runtime.as_deref() {
            Some("runsc") => IsolationTier::UserspaceKernel,
            _ => IsolationTier::Container,
        }
    }

    fn supports_option(&self, option: BackendOption) -> bool {
        match option {
            BackendOption::Template => !self.inner.templates.is_empty(),
            _ => option == BackendOption::Image,
        }
    }

    fn audit(&self) -> crate::audit::AuditConfig {
        self.inner.audit.clone()
    }

    fn create(&self, spec: CreateSpec) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        Box::pin(create::create(Arc::clone(&self.inner), spec))
    }

    fn connect(&self, id: &str) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        let (inner, id) = (Arc::clone(&self.inner), id.to_owned());
        Box::pin(async move {
            let shared = rt::spawn(connect::connect(inner, id)).await?;
            Ok(sandbox::handle(shared))
        })
    }

    fn list(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> BoxFuture<'_, Result<Vec<crate::inventory::SandboxInfo>>> {
        let (inner, labels) = (Arc::clone(&self.inner), labels.clone());
        Box::pin(rt::spawn(async move { reap::list(&Self::client(&inner).await?, &labels).await }))
    }

    fn reap(&self, options: ReapOptions) -> BoxFuture<'_, Result<ReapReport>> {
        Box::pin(DockerBackend::reap(self, options))
    }
}
