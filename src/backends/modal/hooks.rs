//! [`ModalBackend`]'s test hooks, behind the `contract` feature: a backend that talks to a
//! protocol stub instead of Modal (`tests/support/`). Code that uses `modal://` as a
//! product needs none of them.

use crate::dsn::Dsn;
use crate::error::Result;

use super::config::{self, ModalConfig};
use super::{ModalBackend, Trust};

#[cfg_attr(docsrs, doc(cfg(feature = "contract")))]
impl ModalBackend {
    /// The backend of a protocol stub serving the control
    /// plane at `server_url` (`https://host:port`) over TLS with a certificate for `domain`
    /// signed by the PEM `ca_pem`, which is then the only authority trusted (for the
    /// routers it hands out too). TLS stays on: there is no plaintext mode. `token_id` and
    /// `token_secret` stand for `MODAL_TOKEN_ID` and `MODAL_TOKEN_SECRET` (an empty one is
    /// missing); no profile file is read. `dsn` carries the usual options.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`](crate::Error::Configuration) for a malformed DSN.
    pub fn for_stub(
        dsn: &str,
        server_url: &str,
        ca_pem: &[u8],
        domain: &str,
        token_id: &str,
        token_secret: &str,
    ) -> Result<Self> {
        let env = |k: &str| match k {
            config::SERVER_URL_ENV => Some(server_url.to_owned()),
            config::TOKEN_ID_ENV => Some(token_id.to_owned()),
            config::TOKEN_SECRET_ENV => Some(token_secret.to_owned()),
            _ => None,
        };
        let config = ModalConfig::parse(&Dsn::parse(dsn)?, env)?;
        Ok(Self::with_config(config, Some(Trust { ca_pem: ca_pem.to_vec(), domain: domain.to_owned() })))
    }
}
