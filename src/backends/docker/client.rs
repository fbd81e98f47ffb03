//! Reaching the engine: where its socket is, connecting with a negotiated API version, and
//! mapping bollard's errors into sandboxio's.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as BollardError;

use crate::error::Error;

use super::SCHEME;

/// How long connecting (and negotiating the API version) may take before the engine is
/// reported unreachable: 10 seconds. A dead socket fails at once; this bounds a hung one.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the engine listens.
#[derive(Clone, PartialEq, Eq)]
pub(super) enum Endpoint {
    /// A unix socket path.
    Socket(String),
    /// `host:port`, plain HTTP (as `DOCKER_HOST=tcp://…`).
    Tcp(String),
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Socket(path) => write!(f, "unix://{path}"),
            Endpoint::Tcp(addr) => write!(f, "tcp://{addr}"),
        }
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The default engine socket.
pub(super) const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

impl Endpoint {
    /// From `DOCKER_HOST` (`unix:///path` or `tcp://host:port`), else the default socket.
    pub(super) fn from_env() -> Result<Endpoint, Error> {
        match std::env::var("DOCKER_HOST") {
            Ok(host) if !host.is_empty() => Endpoint::parse_host(&host),
            _ => Ok(Endpoint::Socket(DEFAULT_SOCKET.to_owned())),
        }
    }

    fn parse_host(host: &str) -> Result<Endpoint, Error> {
        if let Some(path) = host.strip_prefix("unix://") {
            return Ok(Endpoint::Socket(path.to_owned()));
        }
        if let Some(addr) = host.strip_prefix("tcp://").or_else(|| host.strip_prefix("http://")) {
            return Ok(Endpoint::Tcp(addr.trim_end_matches('/').to_owned()));
        }
        Err(Error::configuration(
            "DOCKER_HOST must be unix:///path or tcp://host:port (TLS and ssh are not supported)",
        ))
    }
}

/// What sandboxio learns about one engine, kept for the rest of the process and shared by
/// every backend value naming the same endpoint: a backend built per sandbox (what
/// `Sandbox::builder(dsn)` does) then pays for no version negotiation or `info` request at
/// each `create`.
#[derive(Debug, Default)]
pub(super) struct Engine {
    /// The connected client, once a connect succeeded (a failure is not kept: the next use
    /// tries again).
    pub client: tokio::sync::OnceCell<Docker>,
    /// Whether the engine remaps user namespaces (`userns-remap`).
    pub remapped: tokio::sync::OnceCell<bool>,
    /// One lock per template image tag: one setup at a time per template in the process.
    pub template_builds: super::template::BuildLocks,
}

/// The shared [`Engine`] of `endpoint`. Does no I/O.
pub(super) fn engine(endpoint: &Endpoint) -> Arc<Engine> {
    static ENGINES: Mutex<Vec<(Endpoint, Arc<Engine>)>> = Mutex::new(Vec::new());
    let mut engines = ENGINES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, engine)) = engines.iter().find(|(e, _)| e == endpoint) {
        return Arc::clone(engine);
    }
    let engine = Arc::new(Engine::default());
    engines.push((endpoint.clone(), Arc::clone(&engine)));
    engine
}

/// Connects to the engine and negotiates the API version (Debian's 20.10 engine speaks
/// 1.41), bounded by [`CONNECT_TIMEOUT`].
pub(super) async fn connect(endpoint: &Endpoint) -> Result<Docker, Error> {
    let unreachable = |e: BollardError| Error::Connect {
        backend: SCHEME.into(),
        message: format!("the Docker engine at {endpoint} does not answer; is dockerd running?"),
        source: Some(Box::new(e)),
    };
    let client = match endpoint {
        Endpoint::Socket(path) => {
            if !std::path::Path::new(path).exists() {
                return Err(Error::connect(
                    SCHEME,
                    format!("no Docker engine socket at {path}; start dockerd, or set DOCKER_HOST"),
                ));
            }
            Docker::connect_with_socket(path, 3600, bollard::API_DEFAULT_VERSION).map_err(unreachable)?
        }
        Endpoint::Tcp(addr) => {
            Docker::connect_with_http(&format!("http://{addr}"), 3600, bollard::API_DEFAULT_VERSION)
                .map_err(unreachable)?
        }
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, client.negotiate_version()).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(unreachable(e)),
        Err(_) => Err(Error::connect(
            SCHEME,
            format!("the Docker engine at {endpoint} did not answer within {CONNECT_TIMEOUT:?}"),
        )),
    }
}

/// The HTTP status of an engine error response, if it was one.
pub(super) fn status(e: &BollardError) -> Option<u16> {
    match e {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// Maps an engine error met while working on sandbox `id`: a missing or stopped container is
/// [`Error::SandboxGone`]; anything else is [`Error::Provider`] keeping bollard's error.
pub(super) fn sandbox_error(id: &str, doing: &str, e: BollardError) -> Error {
    match status(&e) {
        Some(404) => {
            Error::SandboxGone { id: id.to_owned(), message: "its container no longer exists".into() }
        }
        Some(409) => Error::SandboxGone { id: id.to_owned(), message: "its container is not running".into() },
        _ => provider(doing, e),
    }
}

/// Any other engine failure.
pub(super) fn provider(doing: &str, e: BollardError) -> Error {
    match &e {
        BollardError::RequestTimeoutError => Error::Connect {
            backend: SCHEME.into(),
            message: format!("the Docker engine did not answer while {doing}"),
            source: Some(Box::new(e)),
        },
        BollardError::IOError { .. } | BollardError::HyperResponseError { .. } => Error::Connect {
            backend: SCHEME.into(),
            message: format!("lost the connection to the Docker engine while {doing}"),
            source: Some(Box::new(e)),
        },
        _ => Error::provider(SCHEME, doing, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_host_forms() {
        assert_eq!(
            Endpoint::parse_host("unix:///run/d.sock").unwrap(),
            Endpoint::Socket("/run/d.sock".into())
        );
        assert_eq!(
            Endpoint::parse_host("tcp://10.0.0.1:2375").unwrap(),
            Endpoint::Tcp("10.0.0.1:2375".into())
        );
        assert_eq!(Endpoint::parse_host("ssh://x").unwrap_err().code(), crate::ErrorCode::Configuration);
    }

    #[test]
    fn backends_naming_one_endpoint_share_what_is_known_of_its_engine() {
        let a = engine(&Endpoint::Socket("/run/shared-test.sock".into()));
        let b = engine(&Endpoint::Socket("/run/shared-test.sock".into()));
        let other = engine(&Endpoint::Tcp("/run/shared-test.sock".into()));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &other));
    }
}
