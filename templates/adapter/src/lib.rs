//! A sandboxio adapter for Example Cloud, a made-up provider with an HTTP API: the
//! template a new adapter starts from (see this crate's `README.md`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), sandboxio::Error> {
//! sandboxio_example::register()?;
//! let sandbox = sandboxio::Sandbox::builder("example://?endpoint=https://api.example.com")?
//!     .network(sandboxio::NetworkPolicy::deny_all())
//!     .create()
//!     .await?;
//! let out = sandbox.run(sandboxio::Command::new("echo").arg("hi")).await?;
//! assert_eq!(out.stdout, b"hi\n");
//! sandbox.close().await
//! # }
//! ```
//!
//! The API key comes from `EXAMPLE_API_KEY` ([`API_KEY_ENV`]) or
//! [`ExampleBackend::with_api_key`]; a missing one fails the first `create` or `connect`
//! with `Auth` naming the variable.

pub mod api;
pub mod client;
mod errors;
mod sandbox;

use std::sync::Arc;

use sandboxio::backend::{Backend, BackendSandbox, BoxFuture, CreateSpec, run_blocking};
use sandboxio::dsn::Dsn;
use sandboxio::{
    Error, NetworkPolicy, Result,
    audit::AuditConfig,
    policy::{Capabilities, IsolationTier},
    secret::SecretString,
};

use crate::api::{CreateRequest, Network};
use crate::client::Client;
use crate::errors::Asked;
use crate::sandbox::ExampleSandbox;

/// The DSN scheme: `example://?endpoint=URL`.
pub const SCHEME: &str = "example";

/// The environment variable holding the API key.
pub const API_KEY_ENV: &str = "EXAMPLE_API_KEY";

/// The endpoint when the DSN names none.
pub const DEFAULT_ENDPOINT: &str = "https://api.example.com";

/// What the Example Cloud API offers, and so all this adapter declares: commands run to
/// completion, deny-all egress, attaching by id, sandboxes that outlive their handle.
/// No streaming, stdin stream, files, code cells, allowlists or limits: the API has none.
pub const CAPABILITIES: Capabilities = Capabilities::RUN
    .union(Capabilities::NETWORK_DENY)
    .union(Capabilities::CONNECT)
    .union(Capabilities::DETACH);

/// Registers `example://` with sandboxio, so `Sandbox::builder("example://..")` finds
/// this backend.
///
/// # Errors
///
/// `Configuration` when the scheme is already registered.
pub fn register() -> Result<()> {
    sandboxio::dsn::register_scheme(SCHEME, |dsn| Ok(Arc::new(ExampleBackend::from_dsn(dsn)?)))
}

/// The Example Cloud backend. Cheap to clone; does no I/O until a sandbox is created.
#[derive(Debug, Clone)]
pub struct ExampleBackend {
    endpoint: String,
    api_key: Option<SecretString>,
    audit: AuditConfig,
}

impl ExampleBackend {
    /// A backend for `endpoint`, with the key from `EXAMPLE_API_KEY` if it is set.
    #[must_use]
    pub fn new(endpoint: &str) -> Self {
        let api_key = std::env::var(API_KEY_ENV).ok().filter(|k| !k.is_empty()).map(SecretString::new);
        ExampleBackend { endpoint: endpoint.to_owned(), api_key, audit: AuditConfig::new() }
    }

    /// From `example://[?endpoint=URL]`.
    ///
    /// # Errors
    ///
    /// `Configuration` for an option other than `endpoint`.
    pub fn from_dsn(dsn: &Dsn) -> Result<Self> {
        dsn.reject_unknown_options(&["endpoint"])?;
        Ok(ExampleBackend::new(dsn.option("endpoint").unwrap_or(DEFAULT_ENDPOINT)))
    }

    /// Uses `key` instead of `EXAMPLE_API_KEY`; an empty key counts as none.
    #[must_use]
    pub fn with_api_key(mut self, key: &str) -> Self {
        self.api_key = (!key.is_empty()).then(|| SecretString::new(key));
        self
    }

    /// Audit sinks for every sandbox of this backend.
    #[must_use]
    pub fn with_audit(mut self, audit: AuditConfig) -> Self {
        self.audit = audit;
        self
    }

    /// The provider's API client, for what sandboxio does not wrap (listing by label, the
    /// processes of a sandbox).
    ///
    /// # Errors
    ///
    /// `Auth` naming `EXAMPLE_API_KEY` when there is no key.
    pub fn client(&self) -> Result<Client> {
        let key = self.api_key.clone().ok_or_else(errors::missing_key)?;
        Ok(Client::new(&self.endpoint, key))
    }
}

impl Backend for ExampleBackend {
    fn scheme(&self) -> &str {
        SCHEME
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn isolation(&self) -> IsolationTier {
        // Say what the provider really gives; a micro-VM provider says `MicroVm`.
        IsolationTier::Process
    }

    fn audit(&self) -> AuditConfig {
        self.audit.clone()
    }

    fn create(&self, spec: CreateSpec) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        Box::pin(async move {
            let client = self.client()?;
            let network = match spec.network {
                NetworkPolicy::DenyAll => Network::Deny,
                NetworkPolicy::AllowAll => Network::Allow,
                // The core refuses allowlists before calling: NETWORK_ALLOWLIST is undeclared.
                other => return Err(Error::unsupported(SCHEME, format!("network policy {other:?}"))),
            };
            let request = CreateRequest {
                client_token: sandbox::unique_id("create"),
                labels: spec.metadata,
                env: spec.env,
                secret_env: spec
                    .secret_env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.expose_secret().to_owned()))
                    .collect(),
                network,
                ttl_secs: spec.ttl.as_secs().max(1),
            };
            let token = request.client_token.clone();
            let (timeout, started) = (spec.create_timeout, std::time::Instant::now());
            let creating = run_blocking(SCHEME, move |cancel| {
                // Dropped (by the caller, or by the timeout below) before the reply: make
                // sure the sandbox does not stay behind.
                let (undo, undo_token) = (client.clone(), token.clone());
                cancel.on_cancel(move || {
                    let _ = undo.cancel_create(&undo_token);
                });
                let info = client.create(&request).map_err(|e| errors::map(e, Asked::Create))?;
                // The race below only stops waiting: a provider faster than the timer's
                // first tick can answer after the deadline and still win it. Too late is too
                // late, whoever noticed first.
                if started.elapsed() >= timeout {
                    let _ = client.cancel_create(&token);
                    return Err(Error::create_timeout(timeout));
                }
                Ok(ExampleSandbox::new(info.id, client))
            });
            let expired = async move {
                futures_timer::Delay::new(timeout).await;
                Err(Error::create_timeout(timeout))
            };
            let sandbox = futures_lite::future::or(creating, expired).await?;
            Ok(Box::new(sandbox) as Box<dyn BackendSandbox>)
        })
    }

    fn connect(&self, id: &str) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        let id = id.to_owned();
        Box::pin(async move {
            let client = self.client()?;
            run_blocking(SCHEME, move |_| {
                let info = client.get(&id).map_err(|e| errors::map(e, Asked::Connect(&id)))?;
                Ok(Box::new(ExampleSandbox::new(info.id, client)) as Box<dyn BackendSandbox>)
            })
            .await
        })
    }
}
