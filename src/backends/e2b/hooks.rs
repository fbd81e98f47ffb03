//! [`E2bBackend`]'s test hooks, behind the `contract` feature: a backend that talks to a
//! protocol stub instead of E2B (`tests/support/`), and shorter leases and keepalives so
//! that a test can watch them within seconds. Code that uses `e2b://` as a product needs
//! none of them.

use crate::dsn::Dsn;
use crate::error::Result;

use super::config::{self, E2bConfig};
use super::sandbox::Lease;
use super::{E2bBackend, http};

#[cfg_attr(docsrs, doc(cfg(feature = "contract")))]
impl E2bBackend {
    /// The backend of a protocol stub that serves
    /// every host under `domain_host` at `addr`, over TLS with a certificate signed by the
    /// PEM `ca_pem`, which is trusted besides the built-in roots. TLS stays on: there is no
    /// plaintext mode. `api_key` stands for `E2B_API_KEY`.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`](crate::Error::Configuration) for a malformed domain.
    pub fn for_stub(
        domain_host: &str,
        addr: std::net::SocketAddr,
        ca_pem: &[u8],
        api_key: &str,
    ) -> Result<Self> {
        let dsn = Dsn::parse(&format!("e2b://?domain={domain_host}:{}", addr.port()))?;
        let key = api_key.to_owned();
        let config = E2bConfig::parse(&dsn, |k| (k == config::API_KEY_ENV).then(|| key.clone()))?;
        let stub = http::StubTrust { domain_host: domain_host.to_owned(), addr, ca_pem: ca_pem.to_vec() };
        Ok(Self::with_config(config, Some(stub)))
    }

    /// The same backend keeping owned sandboxes alive
    /// with a TTL of at most `ttl`, renewed every `every`, instead of [`OWNER_TTL`](super::OWNER_TTL) and
    /// [`KEEPALIVE_EVERY`](super::KEEPALIVE_EVERY), so that a test can watch a sandbox outlive several leases while
    /// its owner lives and end within one after the owner dies.
    #[must_use]
    pub fn with_owner_lease(self, ttl: std::time::Duration, every: std::time::Duration) -> Self {
        self.rebuilt(self.inner.audit.clone(), Lease { ttl, every }, self.inner.stream_keepalive)
    }

    /// The same backend asking envd for a keepalive
    /// every `every` (whole seconds, at least one) on a quiet command stream instead of
    /// every 30 s, and taking a stream silent for twice that as dead, so
    /// that a test can watch both within seconds.
    #[must_use]
    pub fn with_stream_keepalive(self, every: std::time::Duration) -> Self {
        let every = std::time::Duration::from_secs(every.as_secs().max(1));
        self.rebuilt(self.inner.audit.clone(), self.inner.lease, every)
    }
}
