//! `docker://`: sandboxes as Docker containers, over the Engine API with bollard. Feature
//! `docker`.
//!
//! # DSN
//!
//! - `docker://` — the engine at `DOCKER_HOST` (`unix:///path` or `tcp://host:port`), else
//!   the socket `/var/run/docker.sock`;
//! - `docker:///path/to/docker.sock` — an explicit socket; `docker://host:2375` — plain TCP;
//! - options: `image=<name:tag>` (default [`DEFAULT_IMAGE`]; the builder's `.image()` wins),
//!   `pull=never|missing|always` ([`PullPolicy`], default `never`; see [Images](#images)),
//!   `runtime=runsc` (gVisor; reports [`IsolationTier::UserspaceKernel`]), `user=<name|uid>`
//!   (default: the image's configured user), `exec=sandboxd|api` (how commands run, below;
//!   default `sandboxd`).
//!
//! Building a backend does no I/O and starts no thread; the first `create`, `connect` or
//! `reap` connects (bounded by [`CONNECT_TIMEOUT`]) and negotiates the API version.
//!
//! # Two exec paths
//!
//! Commands reach a sandbox one of two ways ([`ExecPath`], DSN option `exec=sandboxd|api`,
//! the label `io.sandboxio.exec` on its container):
//!
//! - **sandboxd** (the default): sandboxd, sandboxio's supervisor (`docs/adr/0006-sandboxd.md`),
//!   is the container's PID 1, spoken to over the container's attach stream. A command is
//!   one protocol round trip (about a millisecond where an exec is tens), its exit status is
//!   exact ([`ExitStatus::Signal`](crate::ExitStatus) for a signal death), and an
//!   out-of-memory kill is marked. Everything a command starts ends with it (a per-command
//!   shepherd and child subreaper). See `sandboxd_path/` for how it is
//!   placed and protected, and [`ExecPath::Sandboxd`].
//! - **the exec API** ([`ExecPath::ExecApi`], `exec=api`; automatic in a build without
//!   sandboxd, and under gVisor unless `exec=sandboxd` asks otherwise): one engine exec per command under a shell wrapper, PID 1 a shell that arms the
//!   TTL. A signal death reads as exit code 128 + n, and out-of-memory kills are not seen.
//!   Described below.
//!
//! On both paths: one container, from an image the engine has (pulled only by the pull
//! policy; otherwise a missing image is [`Error::Configuration`], naming it), auto-removed when PID 1 ends; the **owner link** is an attach connection made
//! before the start of a `StdinOnce` container, so when the owning process closes it or dies
//! (even by `SIGKILL`, at any instant after the start request) the engine closes PID 1's
//! stdin and PID 1 ends the container within seconds (the adversarial suite bounds it at
//! 10 s); `detach` tells PID 1 to wait for the TTL instead. An owner that dies before its
//! start request reached the engine leaves a container that never started;
//! [`DockerBackend::reap`] with `owner_dead`, and the first `create` of every backend value,
//! remove those of dead owners on this host. Every container carries the [`labels`]
//! (`io.sandboxio.*` plus the user's metadata) that [`DockerBackend::reap`] reads. A
//! `connect`ed handle reaches a sandboxd container through a sandboxd session of its own (an
//! exec of sandboxd): its commands end when the handle goes.
//!
//! Hardening, always: every Linux capability dropped (on the sandboxd path PID 1 keeps
//! `CAP_SETUID`, `CAP_SETGID` and `CAP_KILL`, and every command runs with none),
//! `no-new-privileges`, a pids limit ([`DEFAULT_PIDS_LIMIT`] unless the caller sets one),
//! and no network (`network_mode: none`, loopback only) unless the policy is allow-all (under
//! an allowlist, the one way out is a Unix socket to sandboxio's egress gate, bind-mounted
//! read-only at `/run/sandboxio-egress` and relayed by sandboxd to `127.0.0.1:3128` inside).
//! Each command runs as the sandbox's user with a primary group of its own (a random gid in
//! `1000000000..2000000000`, no supplementary group): the kernel refuses `ptrace` and
//! `/proc/<pid>/environ` between commands, so a command's own `secret_env` stays its own.
//! Secrets never reach the container's or an exec's configuration (`docker inspect` does not
//! show them): on the sandboxd path they travel in the spawn request, on the exec-API path
//! on the wrapper's stdin. A handle from `connect` does not know the sandbox-wide ones. A
//! root sandbox user can rewrite any program another command runs, so command-scoped
//! secrets are refused for root users ([`Error::CapabilityNotSupported`],
//! `COMMAND_SECRETS`).
//!
//! Files are handled as the sandbox's user, inside the container, so its own permissions,
//! links and mounts apply: on the sandboxd path read, write, list, mkdir and remove are
//! sandboxd's own file requests (no process, no program of the image), and upload and
//! download one streamed `tar`; on the exec-API path all of them are commands (`sh`
//! scripts, and `tar`). Image requirements: `tar` for upload and download; on the
//! exec-API path also a POSIX `sh`, `cat`, `head`, `stat`, `mkdir`, `rm`, `chmod`, `sleep`,
//! `/proc`, a world-writable `/tmp` (busybox or Debian's minbase has them all) and, on the
//! engine's host, `ps` (procps) for `docker top`.
//!
//! # The exec-API path
//!
//! PID 1 runs under Docker's init as sandboxio's supervisor id [`SUPERVISOR_ID`] (neither
//! root nor the sandbox's user): a shell that arms the TTL and then reads its stdin, the owner
//! link. With no capability, a process can signal, trace or open `/proc/<pid>/{fd,mem,environ}`
//! of another only when their user ids match: the sandbox's user, root included, can neither
//! stop nor deceive PID 1, and PID 1 never executes a file after its start (only shell
//! builtins). No process can shed its command's gid, so it marks everything the command
//! starts, including processes that call `setsid`, double-fork or rename themselves. When the
//! main process exits, the wrapper kills every other process with the gid; a timeout, a
//! dropped future or a terminated stream does the same with a second exec. Either way the
//! host then checks through the engine's `top` (the host's `ps`, which the sandboxed code
//! cannot write or fake) that no process with the gid is left; a kill that fails, hangs or is
//! fought off is tried again (four tries in all), and then the whole sandbox is removed
//! through the engine, and the operation reports
//! [`ErrorCode::SandboxGone`](crate::ErrorCode::SandboxGone) rather than a timeout. The gid
//! lives only in the host's memory: the kill path reads nothing the sandboxed code can write.
//! The uid [`SUPERVISOR_ID`] cannot be the sandbox user.
//!
//! Declared capabilities: `RUN`, `RUN_CODE` (the image's `python3`; a sandbox whose image has
//! none does not declare it, nor the two after it), `STATEFUL_CODE` and `RICH_OUTPUTS` (on
//! the sandboxd path only: one persistent interpreter per code context driven by sandboxd's
//! runner, results by MIME type, every open matplotlib figure as PNG, `Sandbox::interrupt`;
//! on the exec-API path one process per cell and no rich results), `STREAM`, `STDIN`,
//! `FILESYSTEM`, `NETWORK_DENY`, `NETWORK_ALLOWLIST` (on the sandboxd path, and not under
//! gVisor: the container has no network and its one way out is sandboxio's egress gate, see
//! `egress.rs`), the three limits, `CONNECT`, `DETACH` and `COMMAND_SECRETS` (not for root
//! users).
//!
//! # Images
//!
//! - **Pulls** follow the backend's [`PullPolicy`] at `create` (never by default;
//!   [`DockerBackend::with_pull`], DSN `pull=`), or run at once with [`DockerBackend::pull`].
//!   The engine pulls; sandboxio sends the registry's credentials (typed with
//!   [`DockerBackend::with_registry_auth`], else from Docker's config file: a credential
//!   helper, then `auths`), follows the progress (`tracing` target `sandboxio::docker::pull`
//!   and [`DockerBackend::with_pull_progress`]: layers and bytes), checks a pinned digest
//!   (`image@sha256:…`) on the result, and fails a pull silent for
//!   [`PULL_STALL_TIMEOUT`]. A pull inside `create` is owned by the caller's future:
//!   dropping it closes the engine connection, which cancels the pull. Registry failures
//!   are typed: an [`ImageError`] (image, registry, [`ImageErrorKind`]) is the source of the
//!   [`Error`] (`Configuration` for an unknown image, `Auth`, `RateLimited`, `Connect` for
//!   a registry that is down or silent, `Provider` for a corrupt layer).
//! - **Builds**: [`DockerBackend::build_image`] sends a context directory as a tar stream
//!   (`.dockerignore` honoured) and streams the build's log.
//! - **Templates**: [`Template`] (a base image, files, setup commands) registered with
//!   [`DockerBackend::with_template`] and named by the builder's `.template(name)`: set up
//!   once in a container, committed by the engine, found again by a content hash (and
//!   trusted only on the base's layers plus one; [`DockerBackend::prune_templates`] removes
//!   old versions). The setup container is a sandbox but for its user: labelled, limited,
//!   without network by default, and ended with its owner; its commands run as root with
//!   the engine's default capabilities (see [`Template`]).

mod callback;
mod client;
mod code;
mod credentials;
mod dockerignore;
mod exec;
mod exec_path;
mod fs;
mod image_build;
pub mod labels;
mod pull;
mod reap;
mod reference;
mod rt;
mod sandboxd_path;
mod stream;
mod template;
mod template_prune;
mod template_setup;
mod users;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};

use crate::backend::{
    Backend, BackendCodeStream, BackendExecStream, BackendOption, BackendSandbox, BoxFuture, CreateSpec,
    KillOutcome, collect_cell,
};
use crate::dsn::Dsn;
use crate::error::{Error, Result};
use crate::exec::{Code, CodeResult, Command, ExecResult};
use crate::fs::DirEntry;
use crate::policy::{Capabilities, IsolationTier, NetworkPolicy};
use crate::secret::SecretString;

use crate::sandboxd::session::egress::serve_gate;
use crate::{ReapOptions, ReapReport};
pub use client::CONNECT_TIMEOUT;
use client::{Endpoint, provider, sandbox_error};
pub use credentials::{CREDENTIAL_HELPER_TIMEOUT, RegistryAuth};
pub use exec_path::ExecPath;
pub use image_build::BuiltImage;
pub use pull::{ImageError, ImageErrorKind, PULL_STALL_TIMEOUT, PullPolicy, PullProgress, PulledImage};
pub use template::{
    DEFAULT_SETUP_DISK_MIB, DEFAULT_SETUP_MEMORY_MIB, DEFAULT_SETUP_TIMEOUT, PreparedTemplate,
    TEMPLATE_HASH_LABEL, Template,
};
pub use template_prune::PrunedTemplates;
pub use template_setup::TEMPLATE_SETUP_LABEL;

const SCHEME: &str = "docker";

/// The image used when neither the DSN nor the builder names one, as `scripts/build-images
/// python` builds it (never pulled unless the pull policy says so): Debian bookworm with its `python3` (the
/// standard library but the parts Debian packages apart: `ensurepip`/`venv`, `lib2to3`,
/// `idlelib`, `dbm.gnu`) and its numpy, pandas and matplotlib packages, `MPLBACKEND=Agg` in
/// the environment, user `sandbox` (uid 1000) in `/workspace`. So `run_code` is a code
/// interpreter out of the box, with sandboxd baked in (see [`sandboxd_id`]); README's
/// "Docker images" gives its size.
pub const DEFAULT_IMAGE: &str = "sandboxio/python:2";

/// `<protocol>:<sha256>` of the sandboxd this build embeds (`None`: it embeds none): the
/// image label `io.sandboxio.image.sandboxd` starts with it when the image holds this very
/// binary, then `:<layers>`, the image's layer count when labelled.
///
/// A create on the sandboxd path uploads sandboxd into every new container, unless the
/// image's label names this binary and the image still has those layers (an image built on
/// top may have changed the file): then the binary must be at `/.sandboxio/sandboxd`, mode
/// `0555` and owned by [`SUPERVISOR_ID`] in a directory of the same owner and mode. Likewise
/// `io.sandboxio.image.user` = `<name>:<uid>:<gid>:<home>:<layers>` spares reading the
/// image's `/etc/passwd` for user `<name>`. `scripts/build-images` labels sandboxio's images.
#[must_use]
pub fn sandboxd_id() -> Option<String> {
    crate::sandboxd::BINARY_SHA256.map(|digest| format!("{}:{digest}", crate::sandboxd::proto::VERSION))
}

/// The pids limit applied when the caller sets none: 1024 processes.
pub const DEFAULT_PIDS_LIMIT: u32 = 1024;

// What `docker://` sandboxes can do: one definition, in `crate::backends::capabilities`.
use crate::backends::capabilities::DOCKER as CAPABILITIES;

/// The name prefix of a detached sandbox's container: labels cannot change after creation,
/// so [`BackendSandbox::detach`] renames the container to mark it.
const DETACHED_NAME_PREFIX: &str = "sandboxio-detached-";

/// The uid and gid of PID 1, sandboxio's supervisor in the container: neither root nor
/// any user an image defines, nor any command's gid (1000000000 to 1999999999). With every
/// capability dropped, a process may signal, trace or open `/proc/<pid>/fd` of another only
/// when their ids match, so no sandboxed process (root included) can touch PID 1.
pub const SUPERVISOR_ID: u32 = 2_147_480_001;

/// PID 1 (under Docker's init), `sh -c INIT sandboxio-init <ttl>`, run as
/// [`SUPERVISOR_ID`]: prepares `/tmp/.sandboxio`, arms the TTL, then reads its stdin, which
/// is the owner's attach connection. End-of-file (the owner closed it, or died: the engine
/// closes it either way) ends PID 1, and with it the container; the line `detach` makes it
/// wait for the TTL instead. Once it reads, everything it runs is a shell builtin: it never
/// executes a file the sandboxed code could have replaced.
const INIT: &str = r#"mkdir -p /tmp/.sandboxio 2>/dev/null && chmod 1777 /tmp/.sandboxio 2>/dev/null
(sleep "$1"; kill $$) &
while IFS= read -r l; do
  [ "$l" = detach ] && { echo detached; wait; exit 0; }
done
exit 0"#;

/// The `docker://` backend. Cheap to clone; every backend naming the same engine endpoint
/// shares one engine connection in the process.
#[derive(Debug, Clone)]
pub struct DockerBackend {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    endpoint: Endpoint,
    image: String,
    runtime: Option<String>,
    user: Option<String>,
    /// The exec path asked for (`None`: the default for this build and runtime).
    exec_path: Option<ExecPath>,
    audit: crate::AuditConfig,
    /// How the egress gates of this backend's allowlisted sandboxes resolve names.
    resolver: crate::EgressResolver,
    /// Whether `create` pulls its image.
    pull: PullPolicy,
    /// Where pulls find registry credentials.
    credentials: credentials::CredentialSources,
    /// Called with every pull's progress.
    progress: pull::Progress,
    /// How long a pull may report nothing.
    pull_stall: std::time::Duration,
    /// Called with every line of every build's log (and template setup's output).
    build_log: image_build::BuildLog,
    /// The templates `create` can start from, by name.
    templates: Arc<template::Templates>,
    /// The engine's client and what is known of it, shared with every backend value naming
    /// the same endpoint.
    engine: Arc<client::Engine>,
    /// Whether this backend value's first `create` has swept never-started leftovers (per
    /// value, not per engine: a process's next backend sweeps what an owner that died
    /// meanwhile left).
    swept: AtomicBool,
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
                audit: crate::AuditConfig::new(),
                resolver: crate::EgressResolver::system(),
                pull: PullPolicy::Never,
                credentials: credentials::CredentialSources::default(),
                progress: pull::Progress::default(),
                pull_stall: PULL_STALL_TIMEOUT,
                build_log: image_build::BuildLog::default(),
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
    pub fn with_audit(self, audit: crate::AuditConfig) -> Self {
        self.rebuild(|i| i.audit = audit)
    }

    /// The same backend resolving the names its allowlisted sandboxes ask for through
    /// `resolver` (default: [`EgressResolver::system`](crate::EgressResolver::system)), in the
    /// egress gate on the host.
    #[must_use]
    pub fn with_egress_resolver(self, resolver: crate::EgressResolver) -> Self {
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
    /// (bounded by [`CREDENTIAL_HELPER_TIMEOUT`]); otherwise its `auths` entry is used. The
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
        self.rebuild(|i| i.progress = callback::Callback(Some(callback)))
    }

    /// The same backend failing a pull whose engine reports nothing for `stall` (default
    /// [`PULL_STALL_TIMEOUT`]) with [`ImageErrorKind::RegistryDown`].
    #[must_use]
    pub fn with_pull_stall_timeout(self, stall: std::time::Duration) -> Self {
        self.rebuild(|i| i.pull_stall = stall)
    }

    /// Pulls `image` (`[registry/]repository[:tag][@sha256:digest]`) into the engine now,
    /// whatever the pull policy, with this backend's credentials and progress callback. A
    /// reference pinned by digest gets exactly that manifest, and the engine's image is
    /// checked to carry the digest.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for a malformed reference or an image the registry does not
    /// have; [`Error::Auth`] when the registry refuses; [`Error::RateLimited`];
    /// [`Error::Connect`] when the registry or the engine cannot be reached, or the pull
    /// reports nothing for the stall timeout; [`Error::Provider`] for a corrupt layer, a
    /// digest mismatch or another engine failure. Registry failures carry an
    /// [`ImageError`] (image, registry, [`ImageErrorKind`]) as their source.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future closes the engine connection, and the engine cancels the pull;
    /// layers already downloaded stay in the engine.
    pub async fn pull(&self, image: &str) -> Result<PulledImage> {
        let inner = Arc::clone(&self.inner);
        let image = reference::ImageRef::parse(image)?;
        rt::spawn(async move {
            let docker = Self::client(&inner).await?;
            Ok(pull::pull(&docker, &image, &inner.pull_setup()).await?.0)
        })
        .await
    }

    /// [`DockerBackend::pull`] for synchronous callers (blocks the calling thread).
    ///
    /// # Errors
    ///
    /// As [`DockerBackend::pull`].
    pub fn pull_blocking(&self, image: &str) -> Result<PulledImage> {
        futures_lite::future::block_on(self.pull(image))
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
        self.rebuild(|i| i.build_log = callback::Callback(Some(callback)))
    }

    /// Builds the image `tag` from the directory `context_dir` with the Dockerfile at
    /// `dockerfile` (a path relative to the context, usually `"Dockerfile"`), on the
    /// engine's classic builder. The context is sent as a tar stream through a 64 KiB pipe
    /// (the client's memory stays flat whatever its size), without what the context's
    /// `.dockerignore` excludes (the Dockerfile and `.dockerignore` themselves are always
    /// sent); links are sent as links. The build's log streams line by line to
    /// [`DockerBackend::with_build_log`]'s callback and to `tracing`. `FROM` images are
    /// pulled by the engine with the backend's typed credentials
    /// ([`DockerBackend::with_registry_auth`]).
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] when the context is not a directory, the Dockerfile is not a
    /// file inside it (or names `..`), or the tag is malformed; [`Error::Provider`] when the
    /// build fails, with the build's own error text (for example `The command '/bin/sh -c
    /// exit 3' returned a non-zero code: 3`) and an [`ImageError`] of kind
    /// [`ImageErrorKind::BuildFailed`] as its source, or when the context cannot be read;
    /// [`Error::Connect`] when the engine cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future closes the engine connection, which stops the build; the
    /// engine removes its intermediate containers (`forcerm`).
    pub async fn build_image(
        &self,
        context_dir: impl AsRef<std::path::Path>,
        dockerfile: &str,
        tag: &str,
    ) -> Result<BuiltImage> {
        let inner = Arc::clone(&self.inner);
        let request = image_build::BuildRequest {
            context: context_dir.as_ref().to_path_buf(),
            dockerfile: dockerfile.to_owned(),
            tag: tag.to_owned(),
            credentials: self.inner.credentials.typed_for_build(),
        };
        rt::spawn(async move {
            let docker = Self::client(&inner).await?;
            image_build::build(&docker, request, &inner.build_log).await
        })
        .await
    }

    /// [`DockerBackend::build_image`] for synchronous callers (blocks the calling thread).
    ///
    /// # Errors
    ///
    /// As [`DockerBackend::build_image`].
    pub fn build_image_blocking(
        &self,
        context_dir: impl AsRef<std::path::Path>,
        dockerfile: &str,
        tag: &str,
    ) -> Result<BuiltImage> {
        futures_lite::future::block_on(self.build_image(context_dir, dockerfile, tag))
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

    /// Makes sure the engine has the image of the template registered as `name`: found by
    /// its content hash (the base image's id, the files, the commands, the setup's network),
    /// or set up now (the base pulled as the pull policy says, the files written, the
    /// commands run once as root, the container committed and removed).
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for an unknown template, a bad name or file path, or a base
    /// image the engine lacks under [`PullPolicy::Never`]; the pull errors of
    /// [`DockerBackend::pull`] for the base; [`Error::Provider`] when a setup command
    /// fails or runs past [`Template::setup_timeout`] (the message ends with the setup's
    /// output, an [`ImageError`] of kind [`ImageErrorKind::BuildFailed`] as the source);
    /// [`Error::Connect`] when the engine cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops at the next engine request; the setup container is
    /// removed in the background, and no image is committed.
    pub async fn prepare_template(&self, name: &str) -> Result<PreparedTemplate> {
        let (inner, name) = (Arc::clone(&self.inner), name.to_owned());
        rt::spawn(async move { Ok(prepare_named(&inner, &name).await?.0) }).await
    }

    /// [`DockerBackend::prepare_template`] for synchronous callers (blocks the calling
    /// thread).
    ///
    /// # Errors
    ///
    /// As [`DockerBackend::prepare_template`].
    pub fn prepare_template_blocking(&self, name: &str) -> Result<PreparedTemplate> {
        futures_lite::future::block_on(self.prepare_template(name))
    }

    /// Removes the old images of the templates registered on this backend: every image
    /// tagged `sandboxio-template/<name>:…` for a registered `name` but the current one
    /// (the one its content hash names today), and the untagged images left when two
    /// processes set up one template at once. For a template whose base image is not in the
    /// engine, nothing of that name is removed (which image is current cannot be told). An
    /// image a container still uses (a live sandbox, or a stopped container) is kept, and
    /// reported so. Images of template names this backend does not know are left alone.
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] when the engine cannot be reached; [`Error::Provider`] when
    /// listing or removing fails otherwise.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops between removals; a removal already sent completes on the
    /// engine.
    pub async fn prune_templates(&self) -> Result<PrunedTemplates> {
        let inner = Arc::clone(&self.inner);
        rt::spawn(async move { template_prune::prune(&Self::client(&inner).await?, &inner.templates).await })
            .await
    }

    /// [`DockerBackend::prune_templates`] for synchronous callers (blocks the calling
    /// thread).
    ///
    /// # Errors
    ///
    /// As [`DockerBackend::prune_templates`].
    pub fn prune_templates_blocking(&self) -> Result<PrunedTemplates> {
        futures_lite::future::block_on(self.prune_templates())
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
    async fn client(inner: &Arc<Inner>) -> Result<Docker> {
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

impl Inner {
    fn pull_setup(&self) -> pull::PullSetup<'_> {
        pull::PullSetup { credentials: &self.credentials, progress: &self.progress, stall: self.pull_stall }
    }
}

/// The template registered as `name`, its image ready in the engine, and the engine's view
/// of that image.
async fn prepare_named(
    inner: &Arc<Inner>,
    name: &str,
) -> Result<(PreparedTemplate, bollard::models::ImageInspect)> {
    let Some(template) = inner.templates.get(name) else {
        let mut known: Vec<_> = inner.templates.keys().collect();
        known.sort();
        return Err(Error::configuration(format!(
            "no docker:// template {name:?}; this backend knows {known:?}"
        )));
    };
    let base = resolve_image(Arc::clone(inner), template.base().to_owned()).await?;
    let docker = DockerBackend::client(inner).await?;
    let request =
        template::SetupRequest { name, template, runtime: inner.runtime.clone(), log: &inner.build_log };
    let prepared = template::prepare(&docker, &request, &base, &inner.engine.template_builds).await?;
    // By id: the tag may be re-pointed meanwhile; the id is the image the checks passed.
    let inspected = docker
        .inspect_image(&prepared.id)
        .await
        .map_err(|e| provider(&format!("inspecting the template image {}", prepared.image), e))?;
    Ok((prepared, inspected))
}

/// The engine's view of `image`, pulled first when the policy says so.
async fn resolve_image(inner: Arc<Inner>, image: String) -> Result<bollard::models::ImageInspect> {
    let docker = DockerBackend::client(&inner).await?;
    if inner.pull == PullPolicy::Always {
        let reference = reference::ImageRef::parse(&image)?;
        return Ok(pull::pull(&docker, &reference, &inner.pull_setup()).await?.1);
    }
    match docker.inspect_image(&image).await {
        Ok(inspected) => Ok(inspected),
        Err(e) if client::status(&e) == Some(404) && inner.pull == PullPolicy::Missing => {
            let reference = reference::ImageRef::parse(&image)?;
            Ok(pull::pull(&docker, &reference, &inner.pull_setup()).await?.1)
        }
        Err(e) => Err(match client::status(&e) {
            Some(404) => Error::Configuration {
                message: format!(
                    "image {image:?} is not in the Docker engine and the pull policy is never; pull it (DSN option pull=missing, or DockerBackend::with_pull), build it (scripts/build-images builds sandboxio's) or load it first"
                ),
                source: Some(Box::new(e)),
            },
            _ => provider("inspecting the image", e),
        }),
    }
}

/// One sandbox's state, shared by its handle and its in-flight operations.
pub(crate) struct Shared {
    docker: Docker,
    id: String,
    user: Option<String>,
    workdir: String,
    secret_env: Vec<(String, SecretString)>,
    network: Option<NetworkPolicy>,
    metadata: BTreeMap<String, String>,
    killed: AtomicBool,
    /// Why sandboxio removed the container itself, when it did (what `SandboxGone` says).
    gone_reason: std::sync::OnceLock<&'static str>,
    /// Seeds this handle's command gids (unique across handles and processes).
    nonce: String,
    /// Whether the image has `python3` (and so `RUN_CODE`).
    python: AtomicBool,
    /// The sandbox user as numbers, resolved once when the sandbox is prepared: every exec
    /// runs as these numbers, never as a name the container's `/etc/passwd` (which a root
    /// sandbox user can rewrite) would map again at each exec.
    resolved: std::sync::OnceLock<(u32, u32)>,
    /// Whether the sandbox user is root: it can then rewrite the image's files, the `sh`
    /// that decodes a later command's secrets included, so command-scoped secrets are
    /// refused (`COMMAND_SECRETS` is not kept for root users).
    root_user: AtomicBool,
    /// Whether the engine's `top` shows this container's processes with their gids (not
    /// under gVisor, not with user-namespace remapping): the kill path's verification.
    host_view: AtomicBool,
    next_key: AtomicU64,
    /// The owner link (PID 1's stdin): dropping it ends PID 1, and so the container,
    /// unless detached.
    link: Mutex<Option<tokio::sync::mpsc::Sender<LinkOp>>>,
    /// On the sandboxd path: the session every command, file operation and cell goes
    /// through, and the link that carries it (the owner link, or a `connect`ed handle's own
    /// session); closing the link ends the session.
    session: std::sync::OnceLock<Arc<crate::sandboxd::session::Session>>,
    sandboxd_link: Mutex<Option<sandboxd_path::Link>>,
    /// Under an allowlist, for the handle that created the sandbox: its gate and relay
    /// (`egress.rs`), then the gate's directory (dropped in that order).
    egress: Mutex<Option<(crate::sandboxd::session::egress::Egress, sandboxd_path::egress::GateDir)>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandbox")
            .field("id", &self.id)
            .field("user", &self.user)
            .field("workdir", &self.workdir)
            .field("metadata", &self.metadata)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// A handle's state for container `id`, with no command run yet.
    fn new(
        docker: Docker,
        id: String,
        user: Option<String>,
        workdir: String,
        secret_env: Vec<(String, SecretString)>,
        network: Option<NetworkPolicy>,
        metadata: BTreeMap<String, String>,
    ) -> Arc<Self> {
        Arc::new(Shared {
            docker,
            id,
            user,
            workdir,
            secret_env,
            network,
            metadata,
            killed: AtomicBool::new(false),
            gone_reason: std::sync::OnceLock::new(),
            nonce: unique_suffix(),
            python: AtomicBool::new(false),
            resolved: std::sync::OnceLock::new(),
            root_user: AtomicBool::new(true),
            host_view: AtomicBool::new(false),
            next_key: AtomicU64::new(0),
            link: Mutex::new(None),
            session: std::sync::OnceLock::new(),
            sandboxd_link: Mutex::new(None),
            egress: Mutex::new(None),
        })
    }

    /// A fresh gid for one command, in [`exec::GID_RANGE`].
    fn next_gid(&self) -> u32 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(self.next_key.fetch_add(1, Ordering::Relaxed));
        h.write(self.nonce.as_bytes());
        let span = u64::from(exec::GID_RANGE.end - exec::GID_RANGE.start);
        exec::GID_RANGE.start + u32::try_from(h.finish() % span).unwrap_or(0)
    }

    /// The user execs run as: the configured one, else root (never PID 1's supervisor id,
    /// which is the container's default user).
    fn exec_user(&self) -> String {
        if let Some((uid, gid)) = self.resolved.get() {
            return format!("{uid}:{gid}");
        }
        self.user.as_deref().filter(|u| !u.is_empty()).unwrap_or("0").to_owned()
    }

    /// [`Shared::exec_user`] without its group: commands run with a gid of their own.
    fn exec_user_name(&self) -> String {
        if let Some((uid, _)) = self.resolved.get() {
            return uid.to_string();
        }
        let user = self.exec_user();
        user.split_once(':').map_or(user.clone(), |(name, _)| name.to_owned())
    }

    fn release_link(&self) {
        drop(self.link.lock().unwrap_or_else(PoisonError::into_inner).take());
        drop(self.sandboxd_link.lock().unwrap_or_else(PoisonError::into_inner).take());
    }

    /// Records why sandboxio is about to remove the container itself.
    fn set_gone_reason(&self, why: &'static str) {
        let _ = self.gone_reason.set(why);
        if let Some(session) = self.session.get() {
            session.set_gone(why);
        }
    }

    /// The sandboxd session, on the sandboxd path.
    fn session(&self) -> Option<&Arc<crate::sandboxd::session::Session>> {
        self.session.get()
    }

    fn check_alive(&self) -> Result<()> {
        if self.killed.load(Ordering::Acquire) {
            let why = self.gone_reason.get().copied().unwrap_or("it was killed");
            return Err(Error::SandboxGone { id: self.id.clone(), message: why.into() });
        }
        Ok(())
    }
}

/// Removes a container whose creation did not reach the caller (failed, timed out, or the
/// caller went away), unless claimed.
struct RemoveOnDrop {
    docker: Docker,
    id: Option<String>,
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let docker = self.docker.clone();
            rt::detach(async move {
                let _ = docker.remove_container(&id, Some(force_remove())).await;
            });
        }
    }
}

fn force_remove() -> RemoveContainerOptions {
    RemoveContainerOptions { force: true, v: true, link: false }
}

/// A created sandbox travelling back to the caller: removed if it never arrives.
struct Created {
    shared: Option<Arc<Shared>>,
    guard: RemoveOnDrop,
}

impl Created {
    fn claim(mut self) -> Arc<Shared> {
        self.guard.id = None;
        self.shared.take().expect("claimed once")
    }
}

impl Backend for DockerBackend {
    fn scheme(&self) -> &str {
        SCHEME
    }

    fn capabilities(&self) -> Capabilities {
        match self.exec_path() {
            // gVisor does not connect to the gate's host socket (`egress.rs`).
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

    fn audit(&self) -> crate::AuditConfig {
        self.inner.audit.clone()
    }

    fn create(&self, spec: CreateSpec) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let timeout = spec.create_timeout;
            let provision = async move {
                // The image (a pull, a template's setup) first, as a task the caller's
                // future owns: dropping it cancels the pull, and nothing exists yet to
                // clean up.
                let (image, inspected) = match (&spec.template, &spec.image) {
                    (Some(_), Some(_)) => {
                        return Err(Error::configuration(
                            "name an image or a template, not both: a docker:// template brings its own image",
                        ));
                    }
                    (Some(name), None) => {
                        let (inner, name) = (Arc::clone(&inner), name.clone());
                        let (prepared, inspected) =
                            rt::spawn(async move { prepare_named(&inner, &name).await }).await?;
                        // The container is made from the id the cache checks passed, not
                        // from a tag that could be re-pointed before the create.
                        (prepared.id, inspected)
                    }
                    (None, image) => {
                        let image = image.clone().unwrap_or_else(|| inner.image.clone());
                        if image.trim().is_empty() {
                            return Err(Error::configuration(
                                "the Docker image name is empty; name one, for example sandboxio/python:2",
                            ));
                        }
                        (image.clone(), rt::spawn(resolve_image(Arc::clone(&inner), image)).await?)
                    }
                };
                // Creation runs to its end on the Docker runtime whatever the caller does:
                // an engine request cut off mid-flight could still create a container nobody
                // knows about. A result nobody receives (timeout, dropped future) is
                // dropped, and dropping a `Created` removes its container.
                let (deliver, delivered) = tokio::sync::oneshot::channel::<Result<Created>>();
                rt::detach(async move {
                    let _ = deliver.send(create(inner, spec, image, inspected).await);
                });
                delivered.await.unwrap_or_else(|_| {
                    Err(Error::provider_message(
                        SCHEME,
                        "the Docker runtime dropped the creation before it had a result",
                    ))
                })
            };
            let timed = futures_lite::future::or(async { Some(provision.await) }, async {
                futures_timer::Delay::new(crate::duration::saturate(timeout)).await;
                None
            });
            match timed.await {
                Some(created) => {
                    let shared = created?.claim();
                    Ok(Box::new(DockerSandbox { shared }) as Box<dyn BackendSandbox>)
                }
                None => Err(Error::CreateTimeout { timeout }),
            }
        })
    }

    fn connect(&self, id: &str) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        let (inner, id) = (Arc::clone(&self.inner), id.to_owned());
        Box::pin(async move {
            let shared = rt::spawn(connect(inner, id)).await?;
            Ok(Box::new(DockerSandbox { shared }) as Box<dyn BackendSandbox>)
        })
    }

    fn list(&self, labels: &BTreeMap<String, String>) -> BoxFuture<'_, Result<Vec<crate::SandboxInfo>>> {
        let (inner, labels) = (Arc::clone(&self.inner), labels.clone());
        Box::pin(rt::spawn(async move { reap::list(&Self::client(&inner).await?, &labels).await }))
    }

    fn reap(&self, options: ReapOptions) -> BoxFuture<'_, Result<ReapReport>> {
        Box::pin(DockerBackend::reap(self, options))
    }
}

async fn create(
    inner: Arc<Inner>,
    spec: CreateSpec,
    image: String,
    inspected: bollard::models::ImageInspect,
) -> Result<Created> {
    let docker = DockerBackend::client(&inner).await?;
    if !inner.swept.swap(true, Ordering::AcqRel) {
        // Containers of owners that died between their create and start requests never
        // run; remove them, off this creation's path.
        let docker = docker.clone();
        tokio::spawn(async move {
            let _ = reap::sweep_unstarted(&docker).await;
        });
    }
    if let Some(runtime) = &inner.runtime {
        // Fail closed: never fall back to runc when a stronger runtime was asked for.
        let info = docker.info().await.map_err(|e| provider("reading the engine's runtimes", e))?;
        if !info.runtimes.unwrap_or_default().contains_key(runtime) {
            return Err(Error::configuration(format!(
                "the Docker engine has no runtime {runtime:?}; register it in /etc/docker/daemon.json (\"runtimes\") and reload dockerd"
            )));
        }
    }
    let remapped = userns_remapped(&inner, &docker).await?;
    let image_config = inspected.config.unwrap_or_default();
    let layers = inspected.root_fs.as_ref().and_then(|r| r.layers.as_ref()).map_or(0, Vec::len);
    let baked = sandboxd_path::Baked::read(
        image_config.labels.as_ref().unwrap_or(&HashMap::new()),
        layers,
        sandboxd_id().as_deref(),
    );
    let user = inner.user.clone().or_else(|| image_config.user.filter(|u| !u.is_empty()));
    // A template's image holds files its setup (root) could rewrite, /etc/passwd among
    // them: its sandboxes' user is resolved against the base image's files instead.
    let users = if spec.template.is_some() { users::Source::TemplateBase } else { users::Source::Image };
    let workdir = image_config.working_dir.filter(|w| w.starts_with('/')).unwrap_or_else(|| "/".to_owned());
    let backend = DockerBackend { inner: Arc::clone(&inner) };
    let path = backend.exec_path();
    let name = format!("sandboxio-{}", unique_suffix());
    let gate_dir = sandboxd_path::egress::gate_dir(&spec.network, &backend, &name)?;
    let env = sandboxd_path::egress::sandbox_env(gate_dir.is_some(), &spec.env);
    let body = container_body(
        &spec,
        &Setup {
            image: &image,
            user: user.as_deref(),
            users,
            workdir: &workdir,
            runtime: inner.runtime.clone(),
            path,
        },
        &env,
        gate_dir.as_ref().map(sandboxd_path::egress::GateDir::mount),
    )?;
    let made = docker
        .create_container(Some(CreateContainerOptions { name: Some(name), platform: String::new() }), body)
        .await
        .map_err(|e| provider("creating the container", e))?;
    let guard = RemoveOnDrop { docker: docker.clone(), id: Some(made.id.clone()) };
    // The gate listens in its directory (already mounted) before the container starts.
    let gate = match gate_dir {
        Some(dir) => Some((serve_gate(&dir.socket(), SCHEME, &made.id, &spec, &inner.resolver)?, dir)),
        None => None,
    };
    let host_view = inner.runtime.as_deref() != Some("runsc") && !remapped;
    let shared = Shared::new(
        docker.clone(),
        made.id.clone(),
        user,
        workdir,
        spec.secret_env.clone(),
        Some(spec.network.clone()),
        spec.metadata.clone(),
    );
    shared.host_view.store(host_view, Ordering::Release);
    if path == ExecPath::Sandboxd {
        let env = sandboxd_path::merged_env(image_config.env.as_deref().unwrap_or_default(), &env);
        sandboxd_path::start(&shared, env, spec.detached, (&baked, users), gate).await?;
        return Ok(Created { shared: Some(shared), guard });
    }
    if users == users::Source::TemplateBase {
        // Every exec, the first included, runs as the numbers the base's files give: the
        // engine would otherwise look the name up in the template's own /etc/passwd.
        let spec = users::user_spec(shared.user.as_deref());
        let resolved = match baked.user(spec) {
            Some(recorded) => users::vet(spec, recorded, users)?,
            None => users::resolve_user(&docker, &made.id, shared.user.as_deref(), users).await?,
        };
        let _ = shared.resolved.set((resolved.uid, resolved.gid));
    }
    // The owner link exists before the container starts: PID 1's stdin is this attach
    // connection from its first instant, so an owner dying at any point after the start
    // request leaves a PID 1 that reads end-of-file and ends the container.
    let bollard::container::AttachContainerResults { output, input } = docker
        .attach_container(&made.id, Some(owner_attach()))
        .await
        .map_err(|e| provider("attaching to the container", e))?;
    docker.start_container(&made.id, None).await.map_err(|e| provider("starting the container", e))?;
    // Hold the link from here on: failing below drops it, and the guard removes the
    // container. (PID 1 says nothing at start: the engine may attach its output a moment
    // after the start, so the readiness check is an exec.)
    *shared.link.lock().unwrap_or_else(PoisonError::into_inner) = Some(spawn_link(input, output));
    prepare(&shared, &image, users).await?;

    if spec.detached {
        send_detach(&shared).await?;
        shared.release_link();
        mark_detached(&shared).await?;
    }
    Ok(Created { shared: Some(shared), guard })
}

/// The owner link's attach: stdin (the link itself) and both outputs, live only.
fn owner_attach() -> bollard::query_parameters::AttachContainerOptions {
    bollard::query_parameters::AttachContainerOptions {
        stdin: true,
        stdout: true,
        stderr: true,
        stream: true,
        logs: false,
        detach_keys: None,
    }
}

/// Operations on the owner link.
enum LinkOp {
    /// Tell PID 1 to wait for the TTL instead of the owner.
    Detach(tokio::sync::oneshot::Sender<Result<()>>),
}

type AttachOutput = std::pin::Pin<
    Box<
        dyn futures_core::Stream<
                Item = std::result::Result<bollard::container::LogOutput, bollard::errors::Error>,
            > + Send,
    >,
>;

/// Reads PID 1's output up to the end of a line (at most 4 KiB): what it said, the newline
/// included, or less when it ended first.
async fn read_line(output: &mut AttachOutput) -> std::result::Result<Vec<u8>, bollard::errors::Error> {
    use futures_lite::StreamExt as _;
    let mut said = Vec::new();
    while !said.ends_with(b"\n") && said.len() < 4096 {
        match output.next().await {
            Some(Ok(
                bollard::container::LogOutput::StdOut { message }
                | bollard::container::LogOutput::StdErr { message }
                | bollard::container::LogOutput::Console { message },
            )) => said.extend_from_slice(&message),
            Some(Ok(bollard::container::LogOutput::StdIn { .. })) => {}
            Some(Err(e)) => return Err(e),
            None => break,
        }
    }
    Ok(said)
}

/// Writes `detach` to PID 1 and waits (10 s at most) for it to say `detached`.
async fn detach_over(
    input: &mut std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    output: &mut AttachOutput,
) -> Result<()> {
    use tokio::io::AsyncWriteExt as _;
    let failed = |why: String| Error::provider_message(SCHEME, format!("detaching the sandbox: {why}"));
    input.write_all(b"detach\n").await.map_err(|e| Error::provider(SCHEME, "detaching the sandbox", e))?;
    input.flush().await.map_err(|e| Error::provider(SCHEME, "detaching the sandbox", e))?;
    match tokio::time::timeout(std::time::Duration::from_secs(10), read_line(output)).await {
        Ok(Ok(said)) if said.starts_with(b"detached") => Ok(()),
        Ok(Ok(said)) => Err(failed(format!("PID 1 said {:?}", String::from_utf8_lossy(&said)))),
        Ok(Err(e)) => Err(Error::provider(SCHEME, "detaching the sandbox", e)),
        Err(_) => Err(failed("PID 1 did not answer within 10 s".into())),
    }
}

/// Holds the owner link on the Docker runtime until it is released (every sender dropped:
/// `kill`, `close`, the last handle gone) or PID 1 ends; serves detach requests meanwhile.
fn spawn_link(
    mut input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    mut output: AttachOutput,
) -> tokio::sync::mpsc::Sender<LinkOp> {
    use futures_lite::StreamExt as _;
    let (ops, mut requests) = tokio::sync::mpsc::channel::<LinkOp>(1);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                op = requests.recv() => match op {
                    None => break,
                    Some(LinkOp::Detach(ack)) => {
                        let _ = ack.send(detach_over(&mut input, &mut output).await);
                    }
                },
                frame = output.next() => if frame.is_none() { break },
            }
        }
        // Dropping `input` closes PID 1's stdin (the container is `StdinOnce`).
    });
    ops
}

/// Detaches PID 1 from its owner, over this handle's link or (a `connect`ed handle) a new
/// attach connection.
async fn send_detach(shared: &Shared) -> Result<()> {
    let link = shared.link.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if let Some(link) = link {
        let (ack, acked) = tokio::sync::oneshot::channel();
        if link.send(LinkOp::Detach(ack)).await.is_ok()
            && let Ok(result) = acked.await
        {
            return result;
        }
        return Err(Error::SandboxGone { id: shared.id.clone(), message: "its PID 1 has ended".into() });
    }
    let attach = bollard::query_parameters::AttachContainerOptions {
        stdin: true,
        stdout: true,
        stderr: false,
        stream: true,
        logs: false,
        detach_keys: None,
    };
    let bollard::container::AttachContainerResults { mut output, mut input } = shared
        .docker
        .attach_container(&shared.id, Some(attach))
        .await
        .map_err(|e| sandbox_error(&shared.id, "attaching to the container", e))?;
    detach_over(&mut input, &mut output).await
}

/// Whether the engine runs containers in remapped user namespaces (`userns-remap`), where
/// the gids its host sees are shifted: asked once per engine in the process.
async fn userns_remapped(inner: &Inner, docker: &Docker) -> Result<bool> {
    inner
        .engine
        .remapped
        .get_or_try_init(|| async {
            let info =
                docker.info().await.map_err(|e| provider("reading the engine's security options", e))?;
            Ok(info.security_options.unwrap_or_default().iter().any(|o| o.contains("name=userns")))
        })
        .await
        .copied()
}

/// What a new container is made of besides the caller's spec.
struct Setup<'a> {
    image: &'a str,
    /// The sandbox user, as the caller or the image names it.
    user: Option<&'a str>,
    /// The files that user is resolved against (recorded for `connect`).
    users: users::Source,
    workdir: &'a str,
    runtime: Option<String>,
    path: ExecPath,
}

/// The container of a new sandbox: hardened, labelled, PID 1 [`INIT`] as
/// [`SUPERVISOR_ID`] (or sandboxd), its stdin open once (the owner link), with `env` as its
/// variables and, under an allowlist, the gate's directory mounted (`egress`).
fn container_body(
    spec: &CreateSpec,
    setup: &Setup<'_>,
    env: &[(String, String)],
    egress: Option<bollard::models::Mount>,
) -> Result<ContainerCreateBody> {
    let Setup { image, user, workdir, path, .. } = *setup;
    let mut labels = labels::for_new(&spec.metadata, spec.ttl, spec.detached)?;
    labels.insert(labels::EXEC_PATH.into(), path.as_str().into());
    labels.insert(labels::NETWORK.into(), crate::sandboxd::session::egress::policy_label(&spec.network));
    // Commands run as this user (exec `user`); PID 1 runs as the supervisor id. `connect`
    // reads it back.
    if user.and_then(|u| u.split(':').next()).and_then(|u| u.parse::<u32>().ok()) == Some(SUPERVISOR_ID) {
        return Err(Error::configuration(format!(
            "uid {SUPERVISOR_ID} is sandboxio's own supervisor id in docker:// containers; choose another sandbox user"
        )));
    }
    labels.insert(labels::USER.into(), user.unwrap_or_default().to_owned());
    labels.insert(labels::USERS.into(), setup.users.label().to_owned());
    let network_mode = match &spec.network {
        NetworkPolicy::AllowAll => "bridge",
        NetworkPolicy::Allowlist(_) if egress.is_none() || path == ExecPath::ExecApi => {
            return Err(Error::missing_capability(SCHEME, Capabilities::NETWORK_ALLOWLIST));
        }
        // An allowlisted sandbox's only way out is the gate's socket.
        _ => "none",
    };
    let host_config = HostConfig {
        init: Some(true),
        auto_remove: Some(true),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        network_mode: Some(network_mode.into()),
        mounts: egress.map(|mount| vec![mount]),
        runtime: setup.runtime.clone(),
        ..limited(&spec.limits)
    };
    let ttl_secs = spec.ttl.as_secs().max(1).to_string();
    let (cmd, pid1_user, host_config) = match path {
        ExecPath::ExecApi => (
            vec!["sh".into(), "-c".into(), INIT.into(), "sandboxio-init".into(), ttl_secs],
            format!("{SUPERVISOR_ID}:{SUPERVISOR_ID}"),
            host_config,
        ),
        ExecPath::Sandboxd => sandboxd_path::pid1(spec.ttl, host_config),
    };
    Ok(ContainerCreateBody {
        image: Some(image.to_owned()),
        cmd: Some(cmd),
        entrypoint: Some(Vec::new()),
        env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        user: Some(pid1_user),
        working_dir: Some(workdir.to_owned()),
        labels: Some(labels),
        host_config: Some(host_config),
        ..owner_linked()
    })
}

/// A container whose PID 1's stdin is the owner's attach connection, closed by the engine
/// when that connection ends (`StdinOnce`); the rest defaults.
fn owner_linked() -> ContainerCreateBody {
    ContainerCreateBody {
        open_stdin: Some(true),
        stdin_once: Some(true),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        ..Default::default()
    }
}

/// The engine's fields for `limits` (the rest default): memory, the same as memory plus
/// swap (so no swap), CPU in nano-CPUs, and the pids limit ([`DEFAULT_PIDS_LIMIT`] unless
/// set). Sandboxes and template setups share them.
fn limited(limits: &crate::ResourceLimits) -> HostConfig {
    let memory =
        limits.memory_mib.map(|mib| i64::try_from(mib.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX));
    HostConfig {
        pids_limit: Some(i64::from(limits.pids.unwrap_or(DEFAULT_PIDS_LIMIT))),
        memory,
        memory_swap: memory,
        nano_cpus: limits.cpu_millicores.map(|m| i64::from(m) * 1_000_000),
        ..Default::default()
    }
}

fn setup_failed(image: &str, stderr: &[u8]) -> Error {
    Error::configuration(format!(
        "image {image:?} cannot host a sandbox: it needs sh, sleep, mkdir, chmod and a writable /tmp ({})",
        String::from_utf8_lossy(stderr).trim()
    ))
}

/// Checks that the image runs a sandbox user's `sh` as a uid the user may have (root only
/// when asked for, [`users::refuse_unasked_root`]; `users` names the files it was resolved
/// against) and finds out whether it has `python3`.
async fn prepare(shared: &Shared, image: &str, users: users::Source) -> Result<()> {
    let (code, stdout, stderr) = exec::run_raw(shared, &["sh", "-c", PREPARE]).await?;
    if code != 0 {
        return Err(setup_failed(image, &stderr));
    }
    let said = String::from_utf8_lossy(&stdout);
    shared.python.store(said.lines().any(|l| l == "python"), Ordering::Release);
    // Without `id`, assume root: the cautious side (see `Shared::root_user`).
    let number =
        |key: &str| said.lines().find_map(|l| l.strip_prefix(key)).and_then(|u| u.trim().parse::<u32>().ok());
    let (uid, gid) = (number("uid="), number("gid="));
    if uid == Some(SUPERVISOR_ID) || gid == Some(SUPERVISOR_ID) {
        return Err(Error::configuration(format!(
            "the sandbox user of image {image:?} has uid {SUPERVISOR_ID}, sandboxio's own supervisor id in docker:// containers; choose another user"
        )));
    }
    if let Some(uid) = uid {
        users::refuse_unasked_root(users::user_spec(shared.user.as_deref()), uid, users)?;
    }
    shared.root_user.store(uid.is_none_or(|u| u == 0), Ordering::Release);
    // From here on every exec runs as the numbers: a root user that maps its name to the
    // supervisor's uid in /etc/passwd would otherwise become it at the next exec.
    // (An image without `id` keeps the name, and its user counts as root.)
    if let (Some(uid), Some(gid)) = (uid, gid) {
        let _ = shared.resolved.set((uid, gid));
    }
    Ok(())
}

/// Waits (5 s at most) for PID 1 to have prepared `/tmp/.sandboxio`, then prints the sandbox
/// user's uid and whether the image has `python3`.
const PREPARE: &str = r"i=0; while [ ! -d /tmp/.sandboxio ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
echo uid=$(id -u); echo gid=$(id -g); command -v python3 >/dev/null 2>&1 && echo python; exit 0";

async fn connect(inner: Arc<Inner>, id: String) -> Result<Arc<Shared>> {
    let docker = DockerBackend::client(&inner).await?;
    let inspected = docker.inspect_container(&id, None).await.map_err(|e| match client::status(&e) {
        Some(404) => Error::Connect {
            backend: SCHEME.into(),
            message: format!("no sandbox {id}"),
            source: Some(Box::new(e)),
        },
        _ => provider("inspecting the container", e),
    })?;
    let config = inspected.config.unwrap_or_default();
    let labels = config.labels.unwrap_or_default();
    if labels.get(labels::MANAGED).map(String::as_str) != Some("true") {
        return Err(Error::connect(SCHEME, format!("container {id} is not a sandboxio sandbox")));
    }
    if labels.get(TEMPLATE_SETUP_LABEL).is_some_and(|t| !t.is_empty()) {
        // Listed and reaped as a sandbox, but its commands run as root with capabilities:
        // no handle to it is given out.
        return Err(Error::connect(SCHEME, format!("container {id} is a template's setup, not a sandbox")));
    }
    if inspected.state.and_then(|s| s.running) != Some(true) {
        return Err(Error::SandboxGone { id, message: "its container is not running".into() });
    }
    let runsc = inspected.host_config.as_ref().and_then(|h| h.runtime.as_deref()) == Some("runsc");
    // Recorded at create; containers from before the label: judged by their network mode.
    let network = labels
        .get(labels::NETWORK)
        .and_then(|l| crate::sandboxd::session::egress::policy_of_label(l))
        .or_else(|| {
            inspected
                .host_config
                .and_then(|h| h.network_mode)
                .map(|mode| if mode == "none" { NetworkPolicy::DenyAll } else { NetworkPolicy::AllowAll })
        });
    let host_view = !runsc && !userns_remapped(&inner, &docker).await?;
    let shared = Shared::new(
        docker,
        inspected.id.unwrap_or(id),
        labels.get(labels::USER).filter(|u| !u.is_empty()).cloned(),
        config.working_dir.filter(|w| w.starts_with('/')).unwrap_or_else(|| "/".to_owned()),
        Vec::new(),
        network,
        labels::metadata_of(&labels),
    );
    shared.host_view.store(host_view, Ordering::Release);
    let users = users::Source::of_label(labels.get(labels::USERS).map(String::as_str));
    if labels.get(labels::EXEC_PATH).map(String::as_str) == Some(ExecPath::Sandboxd.as_str()) {
        sandboxd_path::join_running(&shared, config.env.unwrap_or_default(), users).await?;
        return Ok(shared);
    }
    if users == users::Source::TemplateBase {
        let resolved = users::resolve_user(&shared.docker, &shared.id, shared.user.as_deref(), users).await?;
        let _ = shared.resolved.set((resolved.uid, resolved.gid));
    }
    let image = config.image.clone().unwrap_or_default();
    prepare(&shared, &image, users).await?;
    Ok(shared)
}

/// 16 hex digits, different per call and per process.
fn unique_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// One Docker sandbox handle.
#[derive(Debug)]
struct DockerSandbox {
    shared: Arc<Shared>,
}

impl DockerSandbox {
    fn on_rt<T, F>(&self, work: impl FnOnce(Arc<Shared>) -> F) -> BoxFuture<'_, Result<T>>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        let task = rt::spawn(work(Arc::clone(&self.shared)));
        Box::pin(task)
    }

    /// A file operation: on the sandboxd path it needs no runtime (the session's requests
    /// are runtime-free) and runs in the caller's future; on the exec-API path it runs on
    /// the runtime, as bollard needs.
    fn on_fs<T, F>(&self, work: impl FnOnce(Arc<Shared>) -> F) -> BoxFuture<'_, Result<T>>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        if self.shared.session().is_some() {
            return Box::pin(work(Arc::clone(&self.shared)));
        }
        self.on_rt(work)
    }
}

impl BackendSandbox for DockerSandbox {
    fn id(&self) -> &str {
        &self.shared.id
    }

    fn capabilities(&self) -> Capabilities {
        let mut capabilities = CAPABILITIES;
        // Code contexts and rich results need sandboxd's runner.
        if self.shared.session().is_none() {
            capabilities = capabilities.difference(Capabilities::STATEFUL_CODE | Capabilities::RICH_OUTPUTS);
        }
        if !self.shared.python.load(Ordering::Acquire) {
            capabilities = capabilities.difference(
                Capabilities::RUN_CODE | Capabilities::STATEFUL_CODE | Capabilities::RICH_OUTPUTS,
            );
        }
        // A root user can rewrite the `sh` that decodes a later command's secrets.
        if self.shared.root_user.load(Ordering::Acquire) {
            capabilities = capabilities.difference(Capabilities::COMMAND_SECRETS);
        }
        capabilities
    }

    fn network_policy(&self) -> Option<NetworkPolicy> {
        self.shared.network.clone()
    }

    fn network_enforcement(&self) -> Option<crate::NetworkEnforcement> {
        // `network_mode: none` under deny-all and an allowlist, whose one way out is the gate.
        Some(match self.shared.network.as_ref()? {
            NetworkPolicy::AllowAll => crate::NetworkEnforcement::unrestricted(),
            NetworkPolicy::Allowlist(_) => crate::NetworkEnforcement::egress_gate(),
            // A provider allowlist is refused at `create()` (no `PROVIDER_ALLOWLIST`).
            NetworkPolicy::DenyAll | NetworkPolicy::ProviderAllowlist(_) => {
                crate::NetworkEnforcement::no_route()
            }
        })
    }

    fn metadata(&self) -> BTreeMap<String, String> {
        self.shared.metadata.clone()
    }

    fn run(&self, command: Command) -> BoxFuture<'_, Result<ExecResult>> {
        if let Some(session) = self.shared.session() {
            // No hop to the Docker runtime: the session's own thread does the I/O.
            let session = Arc::clone(session);
            return Box::pin(async move { session.run(&command, true).await });
        }
        self.on_rt(move |shared| exec::run(shared, command))
    }

    fn run_code(&self, code: Code) -> BoxFuture<'_, Result<CodeResult>> {
        let stream = self.run_code_stream(code);
        Box::pin(async move { collect_cell(stream?).await })
    }

    fn run_code_stream(&self, code: Code) -> Result<Box<dyn BackendCodeStream>> {
        self.shared.check_alive()?;
        if let Some(session) = self.shared.session() {
            return Ok(Box::new(session.run_code_stream(code)?));
        }
        Ok(Box::new(code::run_code_stream(&self.shared, &code)?))
    }

    fn create_context(&self, language: &str) -> BoxFuture<'_, Result<crate::exec::CodeContext>> {
        let language = language.to_owned();
        match self.shared.session() {
            Some(session) => {
                let session = Arc::clone(session);
                Box::pin(async move { session.create_context(&language).await })
            }
            None => Box::pin(async { Err(Error::missing_capability(SCHEME, Capabilities::STATEFUL_CODE)) }),
        }
    }

    fn interrupt(&self, context_id: &str) -> BoxFuture<'_, Result<()>> {
        let result = match self.shared.session() {
            Some(session) => session.interrupt(context_id),
            None => Err(Error::missing_capability(SCHEME, Capabilities::STATEFUL_CODE)),
        };
        Box::pin(async move { result })
    }

    fn stream(&self, command: Command) -> Result<Box<dyn BackendExecStream>> {
        self.shared.check_alive()?;
        if let Some(session) = self.shared.session() {
            return Ok(Box::new(session.stream_piped(&command, true)?));
        }
        Ok(Box::new(stream::DockerExecStream::start(&self.shared, command)))
    }

    fn read(&self, path: &str, limit: u64) -> BoxFuture<'_, Result<Vec<u8>>> {
        let path = path.to_owned();
        self.on_fs(move |shared| async move { fs::read(&shared, &path, limit).await })
    }

    fn write(&self, path: &str, data: Vec<u8>, mode: Option<u32>) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        self.on_fs(move |shared| async move { fs::write(&shared, &path, data, mode).await })
    }

    fn list(&self, path: &str) -> BoxFuture<'_, Result<Vec<DirEntry>>> {
        let path = path.to_owned();
        self.on_fs(move |shared| async move { fs::list(&shared, &path).await })
    }

    fn mkdir(&self, path: &str) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        self.on_fs(move |shared| async move { fs::mkdir(&shared, &path).await })
    }

    fn remove(&self, path: &str, recursive: bool) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        self.on_fs(move |shared| async move { fs::remove(&shared, &path, recursive).await })
    }

    fn upload<'a>(
        &'a self,
        host_path: &'a std::path::Path,
        path: &'a str,
        meter: crate::backend::TransferMeter,
    ) -> BoxFuture<'a, Result<()>> {
        let (host_path, path) = (host_path.to_path_buf(), path.to_owned());
        if let Some(session) = self.shared.session() {
            return Box::pin(sandboxd_path::upload(Arc::clone(session), host_path, path, meter));
        }
        self.on_rt(move |shared| async move { fs::upload(&shared, host_path, &path, &meter).await })
    }

    fn download<'a>(
        &'a self,
        path: &'a str,
        host_path: &'a std::path::Path,
        budget: u64,
        meter: crate::backend::TransferMeter,
    ) -> BoxFuture<'a, Result<()>> {
        let (host_path, path) = (host_path.to_path_buf(), path.to_owned());
        if let Some(session) = self.shared.session() {
            return Box::pin(sandboxd_path::download(Arc::clone(session), path, (host_path, budget), meter));
        }
        self.on_rt(move |shared| async move { fs::download(&shared, &path, host_path, budget, meter).await })
    }

    fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
        // A kill must finish even if its caller goes away: detach it from the future.
        let shared = Arc::clone(&self.shared);
        let (done, outcome) = tokio::sync::oneshot::channel();
        rt::detach(async move {
            let result = kill(&shared).await;
            let _ = done.send(result);
        });
        Box::pin(async move {
            outcome.await.unwrap_or_else(|_| {
                Err(Error::provider_message(SCHEME, "the kill task ended early, before it reported"))
            })
        })
    }

    fn detach(&self) -> BoxFuture<'_, Result<()>> {
        self.on_rt(move |shared| async move {
            shared.check_alive()?;
            if let Some(session) = shared.session() {
                // The session stays: this handle keeps working, and sandboxd now outlives it
                // (its end ends only this handle's commands).
                sandboxd_path::detach(session).await?;
                mark_detached(&shared).await?;
                sandboxd_path::egress::keep_while_running(&shared);
                return Ok(());
            }
            // Tell PID 1 first: releasing the link while it waits for the owner would end it.
            send_detach(&shared).await?;
            shared.release_link();
            mark_detached(&shared).await
        })
    }
}

/// Renames the container `sandboxio-detached-…`: labels cannot change after creation, and
/// `reap` must never take a detached sandbox for an orphan.
async fn mark_detached(shared: &Shared) -> Result<()> {
    let name = format!("{DETACHED_NAME_PREFIX}{}", unique_suffix());
    shared
        .docker
        .rename_container(&shared.id, bollard::query_parameters::RenameContainerOptions { name })
        .await
        .map_err(|e| sandbox_error(&shared.id, "marking the container detached", e))
}

async fn kill(shared: &Shared) -> Result<KillOutcome> {
    if let Some(session) = shared.session() {
        session.set_gone("it was killed");
    }
    let was = !shared.killed.swap(true, Ordering::AcqRel);
    let removed = shared.docker.remove_container(&shared.id, Some(force_remove())).await;
    // The container is gone either way; the owner link is no longer needed.
    shared.release_link();
    match removed {
        Ok(()) if was => Ok(KillOutcome::Killed),
        Ok(()) => Ok(KillOutcome::AlreadyGone),
        // Gone already, or being removed by auto-remove at its TTL.
        Err(e) if matches!(client::status(&e), Some(404 | 409)) => Ok(KillOutcome::AlreadyGone),
        Err(e) => {
            shared.killed.store(!was, Ordering::Release);
            Err(provider("removing the container", e))
        }
    }
}

/// The labels of a container (sandboxio's `io.sandboxio.*` ones and the user's metadata),
/// as the engine reports them, for tests and operators.
///
/// # Errors
///
/// As [`DockerBackend::reap`], and [`Error::SandboxGone`]
/// for a container that no longer exists.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
pub async fn container_labels(backend: &DockerBackend, id: &str) -> Result<HashMap<String, String>> {
    let (inner, id) = (Arc::clone(&backend.inner), id.to_owned());
    rt::spawn(async move {
        let docker = DockerBackend::client(&inner).await?;
        let inspected =
            docker.inspect_container(&id, None).await.map_err(|e| sandbox_error(&id, "inspecting", e))?;
        Ok(inspected.config.and_then(|c| c.labels).unwrap_or_default())
    })
    .await
}
