//! `sandboxio mcp --transport http`: rmcp's Streamable HTTP service (both the stateless
//! 2026-07-28 revision and the session-based earlier ones rmcp negotiates) behind a plain
//! HTTP/1.1 server. It listens on loopback unless told otherwise, refuses every request
//! without `Authorization: Bearer <token>` with 401 before rmcp sees it, and writes one
//! audit line per request to stderr. The token holder is the one client: its sandboxes are
//! killed when the server stops.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tower_service::Service as _;

use crate::commands::{EXIT_ERROR, EXIT_INTERRUPTED, interrupt};
use crate::mcp::SandboxServer;

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// Whether `req` carries `Authorization: Bearer <token>`, compared in constant time.
fn authorized(req: &Request<Incoming>, token: &str) -> bool {
    let given = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0, |acc, (a, b)| acc | (a ^ b)) == 0
}

fn unauthorized() -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(b"a bearer token is required\n")).boxed());
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    response
        .headers_mut()
        .insert(hyper::header::WWW_AUTHENTICATE, hyper::header::HeaderValue::from_static("Bearer"));
    response
}

/// Serves `server` on `listen` until SIGINT or SIGTERM, then kills the client's sandboxes.
pub async fn serve(server: SandboxServer, listen: SocketAddr, token: String) -> i32 {
    let session = server.clone();
    let mut config = StreamableHttpServerConfig::default();
    // rmcp checks `Host` against loopback names by default; a wider `--listen` is the
    // operator's choice, and the token still guards it.
    if !listen.ip().is_loopback() {
        config.allowed_hosts.clear();
    }
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("sandboxio mcp: cannot listen on {listen}: {e}");
            return EXIT_ERROR;
        }
    };
    let local = listener.local_addr().map_or_else(|_| listen.to_string(), |a| a.to_string());
    // Scripts and tests read the address (the port may be 0 on the command line).
    eprintln!("sandboxio mcp: listening on http://{local}/mcp");
    let token: Arc<str> = Arc::from(token);
    let code = loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                let (service, token) = (service.clone(), Arc::clone(&token));
                tokio::spawn(async move {
                    let handle = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (mut service, token) = (service.clone(), Arc::clone(&token));
                        async move {
                            let (method, path) = (req.method().clone(), req.uri().path().to_owned());
                            let response = if authorized(&req, &token) {
                                service.call(req).await?
                            } else {
                                unauthorized()
                            };
                            eprintln!("sandboxio mcp: audit {peer} {method} {path} {}", response.status().as_u16());
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), handle).await;
                });
            }
            () = interrupt() => break EXIT_INTERRUPTED,
        }
    };
    session.end_session().await;
    code
}
