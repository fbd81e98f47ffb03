//! The HTTPS client every `e2b://` call goes through: reqwest with rustls (HTTP/1.1 only,
//! HTTPS only), a connect timeout, bounded body reads, and the retry rule (an idempotent
//! call answered 5xx, or that could not connect, is retried with backoff; nothing else is).
//!
//! HTTP/1.1 because the code interpreter learns that a client went away only when its
//! connection closes (over HTTP/2 a cancel resets one stream and the kernel keeps running).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::SCHEME;
use super::errors::{Call, Reply, retry_after, to_error};
use crate::error::{Error, Result};

/// How long a TCP and TLS connection may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a whole unary call may take (E2B's SDKs use 60 s).
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_mins(1);
/// The most bytes of any unary reply or error body the adapter reads.
pub(crate) const MAX_BODY: usize = 4 << 20;
/// Retries of an idempotent call after the first try.
const RETRIES: u32 = 3;
/// The first backoff; each retry doubles it.
const BACKOFF: Duration = Duration::from_millis(250);

/// Where a test stub lives: every host under `domain` resolves to `addr`, and `ca_pem`
/// (a PEM certificate) is trusted besides the built-in roots. TLS stays on.
#[derive(Clone)]
pub(crate) struct StubTrust {
    pub(crate) domain_host: String,
    pub(crate) addr: SocketAddr,
    pub(crate) ca_pem: Vec<u8>,
}

impl std::fmt::Debug for StubTrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StubTrust")
            .field("domain_host", &self.domain_host)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Resolves every name under one domain to one address (the stub's), and nothing else.
struct StubResolver {
    domain_host: String,
    addr: SocketAddr,
}

impl reqwest::dns::Resolve for StubResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().to_ascii_lowercase();
        let under = name == self.domain_host || name.ends_with(&format!(".{}", self.domain_host));
        let addr = self.addr;
        Box::pin(async move {
            if under {
                Ok(Box::new(std::iter::once(addr)) as reqwest::dns::Addrs)
            } else {
                Err(format!("{name} is not under the stub's domain").into())
            }
        })
    }
}

/// Builds the client. Does no I/O.
pub(crate) fn client(stub: Option<&StubTrust>) -> Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .https_only(true)
        .http1_only()
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(concat!("sandboxio/", env!("CARGO_PKG_VERSION")));
    if let Some(stub) = stub {
        let ca = reqwest::Certificate::from_pem(&stub.ca_pem)
            .map_err(|e| Error::configuration("the stub's CA certificate is not PEM").with_source(e))?;
        builder = builder
            .no_proxy()
            .add_root_certificate(ca)
            .dns_resolver(Arc::new(StubResolver { domain_host: stub.domain_host.clone(), addr: stub.addr }));
    }
    builder.build().map_err(|e| Error::configuration("cannot build the HTTPS client").with_source(e))
}

/// A transport failure (no reply at all) as sandboxio's error: unreachable hosts are
/// [`Error::Connect`], anything else [`Error::Provider`]; the reqwest error is the source.
pub(crate) fn transport_error(e: reqwest::Error) -> Error {
    if e.is_connect() {
        let host = e.url().and_then(|u| u.host_str()).unwrap_or("E2B").to_owned();
        return Error::connect(SCHEME, format!("cannot reach {host}")).with_source(e);
    }
    let what = if e.is_timeout() { "no reply in time" } else { "the connection failed" };
    Error::provider(SCHEME, what, e)
}

/// Sends the request `make` builds, retrying an `idempotent` one after a 5xx (but 501) or
/// a connection failure, with doubling backoff. A reply with a status outside 2xx is
/// mapped through [`to_error`] for `call`.
///
/// # Cancel safety
///
/// Dropping the future drops the request (its connection closes); a retried call may have
/// reached E2B already, which is why only idempotent calls are retried.
pub(crate) async fn send(
    make: impl Fn() -> reqwest::RequestBuilder,
    idempotent: bool,
    call: Call<'_>,
) -> Result<reqwest::Response> {
    let mut backoff = BACKOFF;
    let mut attempt = 0;
    loop {
        let last = !idempotent || attempt == RETRIES;
        match make().send().await {
            Ok(response) if response.status().is_success() => return Ok(response),
            Ok(response) => {
                let status = response.status().as_u16();
                if !last && status >= 500 && status != 501 {
                    drop(response);
                } else {
                    return Err(error_of(response, call).await);
                }
            }
            Err(e) if !last && e.is_connect() => drop(e),
            Err(e) => return Err(transport_error(e)),
        }
        tokio::time::sleep(backoff).await;
        backoff *= 2;
        attempt += 1;
    }
}

/// Reads an error reply (at most [`MAX_BODY`] bytes of it) and maps it for `call`.
pub(crate) async fn error_of(response: reqwest::Response, call: Call<'_>) -> Error {
    let status = response.status().as_u16();
    let wait =
        retry_after(response.headers().get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()));
    let body = read_body(response, MAX_BODY).await.unwrap_or_default();
    to_error(call, Reply::from_http(status, &body), wait)
}

/// Reads a whole reply body of at most `max` bytes.
///
/// # Errors
///
/// [`Error::Provider`] for a longer body or a connection that failed mid-body.
pub(crate) async fn read_body(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
        if body.len() + chunk.len() > max {
            return Err(Error::provider_message(SCHEME, format!("a reply of more than {max} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads a JSON reply of at most [`MAX_BODY`] bytes.
///
/// # Errors
///
/// As [`read_body`], and [`Error::Provider`] (the JSON error as source) for a reply that
/// is not the JSON `T` expects.
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(response: reqwest::Response) -> Result<T> {
    let body = read_body(response, MAX_BODY).await?;
    serde_json::from_slice(&body)
        .map_err(|e| Error::provider(SCHEME, "a reply that is not the documented JSON", e))
}
