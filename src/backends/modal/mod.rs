//! `modal://`: sandboxes on Modal (gVisor), over Modal's gRPC API. Feature `modal`.
//!
//! Modal has no Rust SDK, so the adapter speaks a trimmed copy of its protocol
//! (`proto/modal/api.proto`, `proto/modal/task_command_router.proto`, naming the upstream
//! commit they follow), compiled at build time by protox (no `protoc`) into prost messages
//! and tonic clients (TLS through rustls with ring and the built-in web roots; no plaintext
//! mode). `scripts/check-modal-proto` compares every declaration with upstream files, and
//! `docs/adr/0008-modal-backend.md` records every protocol detail decided here. Every call
//! runs on a private tokio runtime (tonic needs one), so tokio, smol and blocking callers all
//! work.
//!
//! # DSN
//!
//! `modal://[?app=<name>&image=<ref>&idle_timeout=<s>&environment=<name>&profile=<name>]`
//! ([`config`]): the app the sandboxes belong to (default [`config::DEFAULT_APP`]), the
//! registry image (default [`config::DEFAULT_IMAGE`]; the builder's `.image(..)` wins),
//! an idle timeout (at most [`OWNER_IDLE`] for an owned sandbox). The token comes from
//! `MODAL_TOKEN_ID` and `MODAL_TOKEN_SECRET` over the profile file (`~/.modal.toml` or
//! `MODAL_CONFIG_PATH`), read at the first `create`, `connect` or `sweep`, never when a
//! backend is built; a missing half is [`Error::Auth`] naming its variable.
//!
//! # What the adapter adds to the service
//!
//! - **TTL, always sent** as `timeout_secs` (the TTL rounded up to a second, at most 24 h).
//!   Modal cannot extend it once the sandbox runs, so owner death is bounded by the idle
//!   timeout instead: an owned sandbox gets one of at most [`OWNER_IDLE`] and its owner runs
//!   a `true` exec every [`KEEPALIVE_EVERY`], so a sandbox whose owner died ends
//!   [`OWNER_IDLE`] after its last command ended (a command left running keeps it busy until
//!   its TTL). The idle timeout cannot be lifted later: no `DETACH`.
//! - **Commands** go through the task's command router with exec ids made by the client,
//!   output read by byte offset (a cut stream is reopened where it stopped), stdin written by
//!   byte offset and always closed with an end-of-file, the exit as a code or a signal. The
//!   router has no per-command kill, so each command runs under the process-group wrapper
//!   with `SANDBOXIO_EXEC=<exec id>` in its environment, and a timeout (the adapter's own:
//!   no `timeout_secs` is sent with a command), a dropped `run` future or a dropped stream
//!   kills every process carrying the mark, with its group, through a second exec. That
//!   kill first leaves a tombstone for the mark (a directory `/tmp/.sandboxio-cancelled.<id>`),
//!   and the wrapper of a start that arrives after it exits before running anything, so a
//!   command whose start was still on its way when its future was dropped never runs. A
//!   process that clears its environment and moves to a session of its own escapes until
//!   the sandbox ends. A missing working directory is [`Error::NotFound`] (checked by a
//!   first exec). Commands without one run in `/workspace`, made at create time.
//! - **Files** are the shared file scripts (`docker://`'s exec path) run through the
//!   router, bounded on this side.
//! - **Errors**: gRPC statuses mapped with the status kept as the source (unauthenticated
//!   [`Error::Auth`]; resource exhausted [`Error::RateLimited`] with the server's
//!   retry-after; not found or a finished sandbox [`Error::SandboxGone`]; unavailable or
//!   deadline [`Error::Connect`]; a "client too old" refusal or an unimplemented method
//!   [`Error::Configuration`] naming the client identity sent). Only idempotent calls are
//!   retried (3 times, 100 ms doubling), and `SandboxCreate` carries an idempotency key, so
//!   a lost reply does not make a second sandbox. A reply missing what the protocol promises
//!   (an id, an exit status) is [`Error::Provider`].
//! - **Metadata** becomes tags (at most 64 pairs of 256 bytes); [`ModalBackend::sweep`]
//!   terminates the app's running sandboxes that carry given pairs. The builder's
//!   environment and secret environment go to each exec, never to the sandbox's definition.
//!
//! Capabilities ([`crate::backends::capabilities::MODAL`]): `RUN`, `STREAM`, `STDIN`,
//! `FILESYSTEM`, `NETWORK_DENY` (`network_access = BLOCKED`), `PROVIDER_ALLOWLIST`
//! ([`NetworkPolicy::provider_allowlist`](crate::NetworkPolicy::provider_allowlist) as
//! Modal's domain allowlist, `ALLOWLIST` with `allowed_domains`: TLS on port 443 to a
//! listed server name, nothing else), `CONNECT`. Not declared: code contexts (no
//! interpreter service), `NETWORK_ALLOWLIST` (Modal's domain allowlist decides on the TLS
//! server name, which that contract's bypass tests defeat; its CIDR allowlist filters by
//! address, but no policy a `modal://` sandbox takes carries address blocks), resource
//! limits (the router cannot say a command was killed for its memory), `DETACH`,
//! command-scoped secrets. Isolation tier: userspace kernel (gVisor).
//!
//! [`Error::Auth`]: crate::Error::Auth
//! [`Error::NotFound`]: crate::Error::NotFound
//! [`Error::RateLimited`]: crate::Error::RateLimited
//! [`Error::SandboxGone`]: crate::Error::SandboxGone
//! [`Error::Connect`]: crate::Error::Connect
//! [`Error::Configuration`]: crate::Error::Configuration
//! [`Error::Provider`]: crate::Error::Provider

pub mod config;

mod client;
mod errors;
mod exec;
mod files;
#[cfg(feature = "contract")]
mod hooks;
#[cfg(test)]
mod live;
mod proto;
mod request;
mod router;
mod sandbox;
mod stream;
#[cfg(test)]
mod test_tls;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use crate::backend::{Backend, BackendOption, BackendSandbox, BoxFuture, CreateSpec};
use crate::backends::remote::lifetime::Lifetime;
use crate::dsn::Dsn;
use crate::error::{Error, Result};
use crate::policy::{Capabilities, IsolationTier};

use client::Control;
use config::{ModalConfig, Settings};
use exec::SandboxEnv;
use router::Router;
pub use sandbox::{KEEPALIVE_EVERY, OWNER_IDLE};
use sandbox::{ModalSandbox, Shared};

/// The DSN scheme.
const SCHEME: &str = "modal";

/// The runtime every Modal call runs on (tonic needs tokio; callers may not have it).
static PORTAL: crate::backends::common::portal::Portal =
    crate::backends::common::portal::Portal::new(SCHEME, "sandboxio-modal");

/// What `modal://` declares (see [`crate::backends::capabilities::MODAL`]).
const CAPABILITIES: Capabilities = crate::backends::capabilities::MODAL;

/// A test server's certificate authority (PEM) and the name its certificate carries.
#[derive(Clone, Debug)]
struct Trust {
    ca_pem: Vec<u8>,
    domain: String,
}

/// The `modal://` backend. Building it does no I/O and starts no thread; the first
/// `create`, `connect` or `sweep` reads the profile file, builds the control-plane client
/// and starts the runtime thread.
#[derive(Clone)]
pub struct ModalBackend {
    inner: Arc<Inner>,
}

struct Inner {
    config: ModalConfig,
    trust: Option<Trust>,
    audit: crate::audit::AuditConfig,
    /// The settings and the client, made once.
    control: OnceLock<(Settings, Control)>,
}

impl std::fmt::Debug for ModalBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModalBackend")
            .field("config", &self.inner.config)
            .field("trust", &self.inner.trust.as_ref().map(|t| &t.domain))
            .finish_non_exhaustive()
    }
}

impl ModalBackend {
    /// `modal://` with the environment's settings and the profile file's.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for a malformed `MODAL_PROFILE`.
    pub fn from_env() -> Result<Self> {
        Self::parse(&Dsn::parse("modal://")?)
    }

    fn parse(dsn: &Dsn) -> Result<Self> {
        let config = ModalConfig::parse(dsn, |k| std::env::var(k).ok())?;
        Ok(Self::with_config(config, None))
    }

    fn with_config(config: ModalConfig, trust: Option<Trust>) -> Self {
        ModalBackend {
            inner: Arc::new(Inner {
                config,
                trust,
                audit: crate::audit::AuditConfig::new(),
                control: OnceLock::new(),
            }),
        }
    }

    /// The backend of a `modal://` DSN (the [`BackendFactory`](crate::dsn::BackendFactory)).
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`]: a host or path in the DSN, an unknown option, a malformed
    /// app name, image, profile or idle timeout.
    pub fn from_dsn(dsn: &Dsn) -> Result<Arc<dyn Backend>> {
        Ok(Arc::new(Self::parse(dsn)?))
    }

    /// The same backend writing to `audit`'s sinks as well.
    #[must_use]
    pub fn with_audit(self, audit: crate::audit::AuditConfig) -> Self {
        let inner = &self.inner;
        ModalBackend {
            inner: Arc::new(Inner {
                config: inner.config.clone(),
                trust: inner.trust.clone(),
                audit,
                control: OnceLock::new(),
            }),
        }
    }

    fn trust(&self) -> Option<(&[u8], &str)> {
        self.inner.trust.as_ref().map(|t| (t.ca_pem.as_slice(), t.domain.as_str()))
    }

    /// The settings and the control-plane client, made at the first call that succeeds (a
    /// failure, such as a missing token, is not kept: the next call tries again).
    fn control(&self) -> Result<(Settings, Control)> {
        if let Some((s, c)) = self.inner.control.get() {
            return Ok((s.clone(), c.clone()));
        }
        let profile = config::read_profile_file(&self.inner.config)?;
        let settings = self.inner.config.settings(&profile)?;
        let control = Control::new(&settings, self.trust())?;
        let (s, c) = self.inner.control.get_or_init(|| (settings, control));
        Ok((s.clone(), c.clone()))
    }

    /// Terminates every running sandbox of this backend's app whose tags hold all of
    /// `metadata` (the builder's `.metadata(k, v)` pairs): the way to find and end orphans.
    /// Returns the ids terminated. Listing reads at most 1000 pages.
    ///
    /// # Errors
    ///
    /// [`Error::Auth`] without a token or with a refused one, [`Error::RateLimited`], or
    /// [`Error::Provider`] for other failures of the listing or a termination.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the sweep between terminations; one already sent
    /// completes on Modal's side.
    pub async fn sweep(&self, metadata: &BTreeMap<String, String>) -> Result<Vec<String>> {
        let (backend, metadata) = (self.clone(), metadata.clone());
        PORTAL
            .spawn(async move {
                let (settings, control) = backend.control()?;
                let app_id = control.app(&backend.inner.config.app, &settings.environment).await?;
                let tags: Vec<(String, String)> = metadata.into_iter().collect();
                let mut ended = Vec::new();
                for id in control.list(&app_id, &settings.environment, &tags).await? {
                    control.terminate(&id).await?;
                    ended.push(id);
                }
                Ok(ended)
            })
            .await
    }

    /// [`ModalBackend::sweep`] for synchronous callers (blocks the calling thread).
    ///
    /// # Errors
    ///
    /// As [`ModalBackend::sweep`].
    pub fn sweep_blocking(&self, metadata: &BTreeMap<String, String>) -> Result<Vec<String>> {
        futures_lite::future::block_on(self.sweep(metadata))
    }

    /// The router of sandbox `id`: its task (waited for), then the router's address and
    /// token.
    async fn router(&self, control: &Control, id: &str, call: errors::Call<'_>) -> Result<Router> {
        let task = control.task_id(id, call).await?;
        let (url, token) = control.router_access(id, &task).await?;
        Router::new(control.clone(), (&url, &token), id, &task, self.trust())
    }

    async fn create_now(&self, spec: CreateSpec) -> Result<Arc<Shared>> {
        let (settings, control) = self.control()?;
        let config = &self.inner.config;
        let image = spec.image.clone().unwrap_or_else(|| config.image.clone());
        config::check_image(&image)?;
        let app_id = control.app(&config.app, &settings.environment).await?;
        let builder = match &settings.image_builder_version {
            Some(v) => v.clone(),
            None => control.builder_version(&settings.environment).await?,
        };
        let image_id = control.image(&app_id, &image, &builder).await?;
        // An owned sandbox ends once idle for OWNER_IDLE (its keepalive keeps it busy).
        let idle_timeout = Some(config.idle_timeout.map_or(OWNER_IDLE, |d| d.min(OWNER_IDLE)));
        let plan = request::CreatePlan {
            ttl: spec.ttl,
            idle_timeout,
            limits: spec.limits,
            network: &spec.network,
            metadata: &spec.metadata,
        };
        let id = control.create(request::create_request(&app_id, &image_id, &plan)?).await?;
        let ready = async {
            let router = self.router(&control, &id, errors::Call::Sandbox(&id)).await?;
            exec::make_workdir(&router).await?;
            Ok::<_, Error>(router)
        };
        let router = match ready.await {
            Ok(router) => router,
            Err(e) => {
                // Created but unusable: end it rather than leave it to its TTL.
                let _ = control.terminate(&id).await;
                return Err(e);
            }
        };
        let shared = Arc::new(Shared {
            id,
            control,
            router,
            base: Arc::new(SandboxEnv { env: spec.env.clone(), secrets: spec.secret_env.clone() }),
            network: Some(spec.network.clone()),
            metadata: spec.metadata.clone(),
            life: Lifetime::new(true),
        });
        shared.start_keepalive();
        Ok(shared)
    }
}

impl Backend for ModalBackend {
    fn scheme(&self) -> &str {
        SCHEME
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn isolation(&self) -> IsolationTier {
        IsolationTier::UserspaceKernel
    }

    fn supports_option(&self, option: BackendOption) -> bool {
        option == BackendOption::Image
    }

    fn audit(&self) -> crate::audit::AuditConfig {
        self.inner.audit.clone()
    }

    fn create(&self, spec: CreateSpec) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        let backend = self.clone();
        Box::pin(async move {
            let timeout = spec.create_timeout;
            // A sandbox nobody receives (timeout, dropped future) is terminated on drop.
            let shared = PORTAL
                .create_to_end(timeout, async move { backend.create_now(spec).await }, |orphan| {
                    drop(ModalSandbox { shared: orphan });
                })
                .await?;
            Ok(Box::new(ModalSandbox { shared }) as Box<dyn BackendSandbox>)
        })
    }

    fn connect(&self, id: &str) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        let (backend, id) = (self.clone(), id.to_owned());
        Box::pin(async move {
            let shared = PORTAL
                .spawn(async move {
                    let (_, control) = backend.control()?;
                    // A sandbox that already finished cannot be attached to either.
                    let router = backend.router(&control, &id, errors::Call::Connect(&id)).await.map_err(
                        |e| match e {
                            Error::SandboxGone { .. } => {
                                Error::connect(SCHEME, format!("Modal sandbox {id} is no longer running"))
                                    .with_source(e)
                            }
                            other => other,
                        },
                    )?;
                    Ok(Arc::new(Shared {
                        id,
                        control,
                        router,
                        base: Arc::default(),
                        network: None,
                        metadata: BTreeMap::new(),
                        life: Lifetime::new(false),
                    }))
                })
                .await?;
            Ok(Box::new(ModalSandbox { shared }) as Box<dyn BackendSandbox>)
        })
    }
}
