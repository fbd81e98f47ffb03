//! `e2b://`: sandboxes as E2B micro-VMs. Feature `e2b`.
//!
//! The adapter speaks E2B's public protocols directly (no SDK), each in a module with its
//! own tests and naming the specification file it follows: the DSN and environment
//! ([`config`]), the HTTPS client and retry rule (`http`), the control plane (`client`,
//! `spec/openapi.yml`), envd's Connect transport (`envelope`, `process`, `envd`;
//! `spec/envd/**/*.proto`, the Connect protocol's JSON codec), the code interpreter's
//! stream (`code`, `interpreter`; the `code-interpreter` repository's server) and the
//! error mapping (`errors`). Every request runs on a private tokio runtime (reqwest needs
//! one), so tokio, smol and blocking callers all work.
//!
//! # DSN
//!
//! `e2b://[?domain=<domain>&template=<template>]`: the control plane at
//! `https://api.<domain>` (default [`config::DEFAULT_DOMAIN`], or the environment variable
//! `E2B_DOMAIN`), new sandboxes from `template` (default [`config::DEFAULT_TEMPLATE`], the
//! code interpreter; the builder's `.template(..)` wins). The API key comes from
//! `E2B_API_KEY` only (a DSN never holds a secret); building a backend without it works
//! (so does `Sandbox::capabilities_of`), and the first `create` or `connect` fails with
//! [`Error::Auth`] naming the variable. Every connection is HTTPS (rustls with the
//! built-in web roots, HTTP/1.1); there is no plaintext mode.
//!
//! # What the adapter adds to the service
//!
//! - **TTL, always sent** (E2B's default is 15 s). An owned sandbox's TTL is at most
//!   [`OWNER_TTL`] ahead, renewed every [`KEEPALIVE_EVERY`] while a handle lives (never past
//!   the caller's TTL), so a sandbox whose owner died ends within [`OWNER_TTL`]. A detached
//!   sandbox gets its whole TTL; `detach` sets what is left of it and stops renewing.
//! - **Process groups.** envd kills only the process it started (on `Connect-Timeout-Ms`)
//!   and nothing when its client goes away. Each command runs under a `sh` wrapper that
//!   makes it a session leader in place (`setsid` without a fork: same pid, exact status,
//!   so a signal death is [`ExitStatus::Signal`](crate::ExitStatus)); a timeout (the
//!   adapter's own, no `Connect-Timeout-Ms` is sent), a dropped `run` future or a dropped
//!   stream kills the command's process group, and the groups its direct children lead,
//!   from a second process. A command dropped before envd said its pid (its start still on
//!   the way) is found by its mark, `SANDBOXIO_EXEC=<tag>` in its environment, and the kill
//!   first leaves a tombstone for the mark (a directory `/tmp/.sandboxio-cancelled.<tag>`)
//!   that makes a start arriving after it exit before running anything. A process that
//!   starts a session of its own escapes the group kill (it ends with the sandbox). A
//!   missing program exits 127 naming it.
//! - **Bytes**: output and files are bytes (`/files` both ways); `stdin` through
//!   `SendInput`/`CloseStdin`.
//! - **Errors**: the API's 404 and the edge proxy's 502 "The sandbox was not found" are
//!   [`Error::SandboxGone`], and so is a stream cut without its end frame when envd no
//!   longer answers (a cut with envd alive is [`Error::Provider`]); 401/403
//!   [`Error::Auth`]; 429 [`Error::RateLimited`] with `Retry-After`; 400 on create
//!   [`Error::Configuration`]; a missing working directory [`Error::NotFound`]. 5xx and
//!   refused connections are retried with backoff (250 ms, doubling, 3 retries) only for
//!   idempotent calls, never `create`. Every reply is kept as `source()`.
//! - **Bounds**: an envelope over 4 MiB, a line over 64 MiB, a
//!   malformed frame, or a stream silent for twice the keepalive period (60 s) ends in a
//!   typed error, never a panic, a hang or unbounded memory.
//! - **Metadata** goes to E2B metadata; [`E2bBackend::sweep`] kills the sandboxes that
//!   carry given pairs. Secret environment variables are passed to each process's start
//!   request, never to the sandbox's configuration (`envVars`).
//!
//! Capabilities ([`crate::backends::capabilities::E2B`]): `RUN`, `RUN_CODE`,
//! `STATEFUL_CODE`, `RICH_OUTPUTS`, `STREAM`, `STDIN`, `FILESYSTEM`, `NETWORK_DENY`
//! (`allow_internet_access: false`), `PROVIDER_ALLOWLIST`, `CONNECT`, `DETACH`. Not declared:
//! `NETWORK_ALLOWLIST` (E2B's domain filter decides on SNI and the Host header, which the
//! allowlist contract's bypass tests defeat; it is offered as
//! [`NetworkPolicy::provider_allowlist`](crate::NetworkPolicy::provider_allowlist) instead,
//! sent as `network.allowOut` over a `denyOut` of `0.0.0.0/0`, and reported as
//! [`EgressMechanism::ProviderNameFilter`](crate::policy::EgressMechanism::ProviderNameFilter)),
//! resource limits (they come from the template: `limits(..)` is a
//! configuration error), command-scoped secrets. Isolation tier: micro-VM.
//!
//! `Sandbox::interrupt` closes the running cell's connection, on which E2B's code
//! interpreter interrupts the kernel; the context keeps its state (so does a dropped code
//! stream: the contract's expectation that the context is then lost is not met, and its
//! contract runs list that as a known failure).

pub mod config;

mod client;
mod code;
mod envd;
mod envelope;
mod errors;
mod http;
mod interpreter;
mod process;
mod wire;

/// The DSN scheme.
const SCHEME: &str = "e2b";

/// The runtime every E2B request runs on (reqwest needs tokio; callers may not have it).
static PORTAL: crate::backends::common::portal::Portal =
    crate::backends::common::portal::Portal::new(SCHEME, "sandboxio-e2b");

mod cell;
mod exec;
#[cfg(feature = "contract")]
mod hooks;
mod sandbox;
mod stream;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::backend::{Backend, BackendOption, BackendSandbox, BoxFuture, CreateSpec};
use crate::backends::remote::lifetime::Lifetime;
use crate::dsn::Dsn;
use crate::error::{Error, Result};
use crate::policy::{Capabilities, IsolationTier, NetworkPolicy};

use client::Api;
use config::{CODE_PORT, E2bConfig, ENVD_PORT};
use envd::Envd;
use interpreter::Interpreter;
use sandbox::{E2bSandbox, Lease, Shared};
pub use sandbox::{KEEPALIVE_EVERY, OWNER_TTL};

/// What `e2b://` declares (see [`crate::backends::capabilities::E2B`]).
const CAPABILITIES: Capabilities = crate::backends::capabilities::E2B;

/// The `e2b://` backend. Building it does no I/O and starts no thread; the first
/// `create` or `connect` builds the HTTPS client and starts the runtime thread.
#[derive(Clone)]
pub struct E2bBackend {
    inner: Arc<Inner>,
}

struct Inner {
    config: E2bConfig,
    stub: Option<http::StubTrust>,
    audit: crate::audit::AuditConfig,
    lease: Lease,
    /// How often envd is asked for a keepalive on a quiet stream ([`envd::KEEPALIVE`]).
    stream_keepalive: std::time::Duration,
    http: OnceLock<std::result::Result<reqwest::Client, String>>,
}

impl std::fmt::Debug for E2bBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bBackend")
            .field("config", &self.inner.config)
            .field("stub", &self.inner.stub)
            .finish_non_exhaustive()
    }
}

impl E2bBackend {
    /// `e2b://` with the environment's settings (`E2B_API_KEY`, `E2B_DOMAIN`).
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for a malformed `E2B_DOMAIN`.
    pub fn from_env() -> Result<Self> {
        Self::parse(&Dsn::parse("e2b://")?)
    }

    fn parse(dsn: &Dsn) -> Result<Self> {
        let config = E2bConfig::parse(dsn, |k| std::env::var(k).ok())?;
        Ok(Self::with_config(config, None))
    }

    fn with_config(config: E2bConfig, stub: Option<http::StubTrust>) -> Self {
        E2bBackend {
            inner: Arc::new(Inner {
                config,
                stub,
                audit: crate::audit::AuditConfig::new(),
                lease: Lease::DEFAULT,
                stream_keepalive: envd::KEEPALIVE,
                http: OnceLock::new(),
            }),
        }
    }

    /// The backend of an `e2b://` DSN (the [`BackendFactory`](crate::dsn::BackendFactory)).
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`]: a host or path in the DSN, an unknown option, a malformed
    /// domain or template.
    pub fn from_dsn(dsn: &Dsn) -> Result<Arc<dyn Backend>> {
        Ok(Arc::new(Self::parse(dsn)?))
    }

    /// The same backend writing to `audit`'s sinks as well.
    #[must_use]
    pub fn with_audit(self, audit: crate::audit::AuditConfig) -> Self {
        self.rebuilt(audit, self.inner.lease, self.inner.stream_keepalive)
    }

    /// This backend's configuration with other audit sinks, lease and stream keepalive
    /// (a new HTTP client).
    fn rebuilt(
        &self,
        audit: crate::audit::AuditConfig,
        lease: Lease,
        stream_keepalive: std::time::Duration,
    ) -> Self {
        let inner = &self.inner;
        E2bBackend {
            inner: Arc::new(Inner {
                config: inner.config.clone(),
                stub: inner.stub.clone(),
                audit,
                lease,
                stream_keepalive,
                http: OnceLock::new(),
            }),
        }
    }

    /// Kills every running or paused sandbox of this account whose metadata holds all of
    /// `metadata` (the builder's `.metadata(k, v)` pairs): the way to find and end
    /// orphans, since E2B keeps a sandbox until its TTL whatever happened to its owner.
    /// Returns the ids killed. At most 100 pages of 100 sandboxes are read.
    ///
    /// # Errors
    ///
    /// [`Error::Auth`] without a key or with a refused one, [`Error::RateLimited`], or
    /// [`Error::Provider`] for other failures of the listing or a kill.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the sweep between kills; a kill already sent completes.
    pub async fn sweep(&self, metadata: &BTreeMap<String, String>) -> Result<Vec<String>> {
        let (backend, metadata) = (self.clone(), metadata.clone());
        PORTAL
            .spawn(async move {
                let api = backend.api()?;
                let mut killed = Vec::new();
                for listed in api.list(&metadata, 100).await? {
                    // The server filters; checking again keeps a misread filter from killing
                    // someone else's sandbox.
                    if metadata.iter().all(|(k, v)| listed.metadata.get(k) == Some(v))
                        && api.kill(&listed.sandbox_id).await?
                    {
                        killed.push(listed.sandbox_id);
                    }
                }
                Ok(killed)
            })
            .await
    }

    /// [`E2bBackend::sweep`] for synchronous callers (blocks the calling thread).
    ///
    /// # Errors
    ///
    /// As [`E2bBackend::sweep`].
    pub fn sweep_blocking(&self, metadata: &BTreeMap<String, String>) -> Result<Vec<String>> {
        futures_lite::future::block_on(self.sweep(metadata))
    }

    fn http(&self) -> Result<reqwest::Client> {
        self.inner
            .http
            .get_or_init(|| http::client(self.inner.stub.as_ref()).map_err(|e| e.to_string()))
            .clone()
            .map_err(Error::configuration)
    }

    fn api(&self) -> Result<Api> {
        let key = self.inner.config.api_key()?.clone();
        Ok(Api::new(self.http()?, self.inner.config.api_url(), key))
    }

    /// The clients of sandbox `info` and its shared state.
    fn shared(
        &self,
        api: Api,
        info: &client::SandboxInfo,
        network: Option<NetworkPolicy>,
        spec: Option<&CreateSpec>,
    ) -> Result<Arc<Shared>> {
        let http = self.http()?;
        let config = &self.inner.config;
        let token = info.envd_access_token.clone().map(crate::secret::SecretString::new);
        let domain = info.domain.as_deref();
        let id = info.sandbox_id.clone();
        let envd =
            Envd::new(http.clone(), config.sandbox_url(&id, ENVD_PORT, domain), id.clone(), token.clone())
                .with_keepalive(self.inner.stream_keepalive);
        let interpreter =
            Interpreter::new(http, config.sandbox_url(&id, CODE_PORT, domain), id.clone(), token);
        let ttl = spec.map_or(OWNER_TTL, |s| s.ttl);
        Ok(Arc::new(Shared {
            id,
            api,
            envd,
            interpreter,
            caps: CAPABILITIES,
            network,
            metadata: spec.map(|s| s.metadata.clone()).unwrap_or_default(),
            secrets: Arc::new(spec.map(|s| s.secret_env.clone()).unwrap_or_default()),
            deadline: Mutex::new(crate::duration::after(Instant::now(), ttl)),
            life: Lifetime::new(spec.is_some_and(|s| !s.detached)),
            lease: self.inner.lease,
            running: Arc::default(),
        }))
    }

    async fn create_now(&self, spec: CreateSpec) -> Result<Arc<Shared>> {
        let api = self.api()?;
        let template = spec.template.clone().unwrap_or_else(|| self.inner.config.template.clone());
        config::check_template(&template)?;
        let egress = match &spec.network {
            NetworkPolicy::DenyAll => client::Egress::Deny,
            NetworkPolicy::AllowAll => client::Egress::Allow,
            NetworkPolicy::ProviderAllowlist(list) => client::Egress::Domains(list),
            other => return Err(Error::unsupported(SCHEME, format!("the network policy {other:?}"))),
        };
        let ttl = if spec.detached { spec.ttl } else { spec.ttl.min(self.inner.lease.ttl) };
        let env: BTreeMap<String, String> = spec.env.iter().cloned().collect();
        let body = client::create_body(&template, ttl, &spec.metadata, &env, egress);
        let info = api.create(&body).await?;
        let shared = self.shared(api, &info, Some(spec.network.clone()), Some(&spec))?;
        if !spec.detached {
            shared.start_keepalive();
        }
        Ok(shared)
    }
}

/// Unix seconds now.
fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Backend for E2bBackend {
    fn scheme(&self) -> &str {
        SCHEME
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn isolation(&self) -> IsolationTier {
        IsolationTier::MicroVm
    }

    fn supports_option(&self, option: BackendOption) -> bool {
        option == BackendOption::Template
    }

    fn audit(&self) -> crate::audit::AuditConfig {
        self.inner.audit.clone()
    }

    fn create(&self, spec: CreateSpec) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        let backend = self.clone();
        Box::pin(async move {
            let timeout = spec.create_timeout;
            // A sandbox nobody receives (timeout, dropped future) is killed on drop.
            let shared = PORTAL
                .create_to_end(timeout, async move { backend.create_now(spec).await }, |orphan| {
                    drop(E2bSandbox { shared: orphan });
                })
                .await?;
            Ok(Box::new(E2bSandbox { shared }) as Box<dyn BackendSandbox>)
        })
    }

    fn connect(&self, id: &str) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        let (backend, id) = (self.clone(), id.to_owned());
        Box::pin(async move {
            let shared = PORTAL
                .spawn(async move {
                    let api = backend.api()?;
                    // `connect` only extends a TTL: asking for the shortest keeps the owner's.
                    let info = api.connect(&id, std::time::Duration::from_secs(1)).await?;
                    backend.shared(api, &info, None, None)
                })
                .await?;
            Ok(Box::new(E2bSandbox { shared }) as Box<dyn BackendSandbox>)
        })
    }

    /// The account's running and paused sandboxes (at most 100 pages of 100), with ages and
    /// TTLs from E2B's `startedAt` and `endAt`. E2B records no owner process and no
    /// detachment: `owner_alive` and `detached` are `None`.
    fn list(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> BoxFuture<'_, Result<Vec<crate::inventory::SandboxInfo>>> {
        let (backend, labels) = (self.clone(), labels.clone());
        Box::pin(PORTAL.spawn(async move {
            let now = unix_now();
            let listed = backend.api()?.list(&labels, 100).await?;
            Ok(listed
                .into_iter()
                .map(|l| {
                    let mut info = crate::inventory::SandboxInfo::new(l.sandbox_id, SCHEME);
                    let at = |stamp: &str| client::unix_seconds(stamp);
                    info.age = at(&l.started_at).map(|t| Duration::from_secs(now.saturating_sub(t)));
                    info.ttl_left = at(&l.end_at).map(|t| Duration::from_secs(t.saturating_sub(now)));
                    info.labels = l.metadata;
                    info
                })
                .filter(|info| info.has_labels(&labels))
                .collect())
        }))
    }

    /// Nothing to remove: E2B ends a sandbox at its TTL itself, and an owned sandbox's TTL
    /// is never set more than [`OWNER_TTL`] ahead, so it ends soon after its owner stops
    /// renewing it. Every listed sandbox is kept; [`E2bBackend::sweep`] kills by metadata.
    fn reap(
        &self,
        options: crate::inventory::ReapOptions,
    ) -> BoxFuture<'_, Result<crate::inventory::ReapReport>> {
        let _ = options;
        Box::pin(async move {
            let kept = Backend::list(self, &BTreeMap::new()).await?.len();
            Ok(crate::inventory::ReapReport { kept, ..Default::default() })
        })
    }
}
