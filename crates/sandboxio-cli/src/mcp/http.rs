//! `sandboxio mcp --transport http`: rmcp's Streamable HTTP service (both the stateless
//! 2026-07-28 revision and the session-based earlier ones rmcp negotiates) behind a plain
//! HTTP/1.1 server, which listens on loopback unless told otherwise and writes one audit
//! line per request to stderr.
//!
//! Before rmcp sees a request: at most `--max-connections` connections are served at once
//! and accept errors back off ([`super::accept`]); a connection that takes longer than
//! `--header-timeout` to send a request's headers is closed; a request without
//! `Authorization: Bearer <token>` is refused with 401 ([`BearerToken`]), one with two
//! `Authorization` headers with 400 (which one counts would be the server's guess); a body is read
//! whole, within `--body-timeout` and at most [`MAX_BODY_BYTES`] (408 or 413 and the
//! connection closed otherwise, however it is framed), so that a client trickling a body
//! cannot hold a connection, and its place under the cap, for ever. rmcp then refuses a
//! `Host` that is not loopback (for a loopback listener) and an `Origin` that is present and
//! not allowed, both with 403 (DNS rebinding from a browser).
//!
//! The client model: the token names one principal, the client. Its sandboxes belong to it,
//! not to an MCP session: every session (and every stateless request) of the token sees and
//! may use all of them, at most `--max-sandboxes` in all, because whoever holds the token can
//! open another session anyway and the 2026-07-28 revision has no sessions. Sessions are
//! bounded in number and expire when idle ([`BoundedSessions`]): an `initialize` over the
//! bound is answered 503 with `Retry-After` (`--session-idle`, after which an idle session
//! has freed its place); a session's end kills no
//! sandbox. Sandboxes end by `kill_sandbox`, by their TTL, or when the server stops.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tower_service::Service as _;

use super::SandboxServer;
use super::accept::accept_until;
use super::bearer::BearerToken;
use super::sessions::{BoundedSessions, noting_full};
use crate::args::HttpOpts;
use crate::commands::{EXIT_ERROR, EXIT_INTERRUPTED, interrupt};

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// The largest request body read: 4 MiB, rmcp's own bound (a `write_file` of text up to
/// about that size fits).
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// The browser origins a loopback listener serves besides `--allow-origin`'s: pages served
/// from this host, on any port (the MCP Inspector's, an editor's webview).
const LOOPBACK_ORIGINS: &[&str] = &[
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// Whether `origin` is an `--allow-origin` value rmcp understands: `null`, or
/// `SCHEME://HOST[:PORT]` with the port a number or `*`, and nothing after it. rmcp skips
/// what it cannot parse, which would refuse the origin the operator meant without a word.
fn valid_origin(origin: &str) -> bool {
    if origin.eq_ignore_ascii_case("null") {
        return true;
    }
    let base = origin.strip_suffix(":*").unwrap_or(origin);
    base.parse::<hyper::Uri>().is_ok_and(|uri| {
        uri.scheme().is_some()
            && uri.authority().is_some()
            && uri.path_and_query().is_none_or(|p| p.as_str().is_empty() || p.as_str() == "/")
    })
}

/// rmcp's configuration: the `Host` and `Origin` checks for `opts.listen`.
fn config(opts: &HttpOpts) -> StreamableHttpServerConfig {
    let mut origins = opts.allow_origin.clone();
    let mut config = StreamableHttpServerConfig::default();
    if opts.listen.ip().is_loopback() {
        origins.extend(LOOPBACK_ORIGINS.iter().map(|o| (*o).to_owned()));
    } else {
        // rmcp checks `Host` against loopback names by default; a wider `--listen` is the
        // operator's choice, and the token and the `Origin` check still guard it.
        config.allowed_hosts.clear();
    }
    // Enforced even when the list is empty (a wide listener without `--allow-origin`):
    // every request that carries an `Origin` is then refused.
    config.with_allowed_origins(origins).enforce_origin_validation()
}

/// A plain-text refusal that closes the connection.
fn refusal(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    response
}

/// `req` with its body read whole, or the refusal: 408 past `deadline` (hyper's header
/// timeout does not cover a body: a client sending one byte a second held its connection
/// for as long as it liked), 413 past [`MAX_BODY_BYTES`] (whatever the framing: a chunked
/// body has no length to check first), 400 for a body that breaks off.
async fn read_body(
    req: Request<Incoming>,
    deadline: Duration,
) -> Result<(Request<Full<Bytes>>, Bytes), Response<Body>> {
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(deadline, http_body_util::Limited::new(body, MAX_BODY_BYTES).collect()).await {
        Ok(Ok(collected)) => {
            let bytes = collected.to_bytes();
            Ok((Request::from_parts(parts, Full::new(bytes.clone())), bytes))
        }
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(refusal(StatusCode::PAYLOAD_TOO_LARGE, "the request body is over 4 MiB\n"))
        }
        Ok(Err(_)) => Err(refusal(StatusCode::BAD_REQUEST, "the request body broke off\n")),
        Err(_) => Err(refusal(
            StatusCode::REQUEST_TIMEOUT,
            "the request body did not arrive within --body-timeout\n",
        )),
    }
}

/// 401 for a request without a bearer token, or with one that is not the server's: told
/// apart (RFC 6750 section 3.1: `invalid_token` for a wrong one), so that a client that
/// sent a stale token is not told to send one.
fn unauthorized(authorization: Option<&[u8]>) -> Response<Body> {
    // A client without the token gets one answer per connection.
    let bearer = authorization.is_some_and(|v| v.starts_with(b"Bearer "));
    let (text, challenge) = if bearer {
        (
            "the bearer token is not this server's (it reads the token from --token-env at start)\n",
            "Bearer error=\"invalid_token\"",
        )
    } else {
        ("a bearer token is required: Authorization: Bearer <token>\n", "Bearer")
    };
    let mut response = refusal(StatusCode::UNAUTHORIZED, text);
    response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static(challenge));
    response
}

/// What a POST body asks, for the audit line (`tools/call run_code`), or why it cannot be
/// served: a body that is not JSON is answered 400 with JSON-RPC's parse error here (rmcp
/// answered it otherwise).
fn asked(method: &hyper::Method, body: &[u8]) -> Result<String, Box<Response<Body>>> {
    if method != hyper::Method::POST {
        return Ok(String::new());
    }
    let Ok(message) = serde_json::from_slice::<serde_json::Value>(body) else {
        let mut response = refusal(
            StatusCode::BAD_REQUEST,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: the body is not JSON"}}"#,
        );
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
        return Err(Box::new(response));
    };
    let one = |m: &serde_json::Value| {
        let method = m["method"].as_str().unwrap_or("");
        match m["params"]["name"].as_str() {
            Some(tool) if method == "tools/call" => format!("{method} {}", sandboxio::text::escape(tool)),
            _ => sandboxio::text::escape(method).into_owned(),
        }
    };
    Ok(match &message {
        serde_json::Value::Array(batch) => batch.iter().map(one).collect::<Vec<_>>().join(", "),
        single => one(single),
    })
}

/// A session's end (`DELETE`) answered 204: rmcp answers 202, which MCP's own client logs
/// as "Session termination failed: 202" (the spec's clients expect a 2xx with no body; 202
/// says the work is still to be done, and the session is already gone).
fn session_closed(method: &hyper::Method, mut response: Response<Body>) -> Response<Body> {
    if method == hyper::Method::DELETE && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
        *response.body_mut() = Full::new(Bytes::new()).boxed();
    }
    response
}

/// 400 for a request with more than one `Authorization` header: the token check reads one,
/// and a proxy in front may read another.
fn ambiguous_authorization() -> Response<Body> {
    refusal(StatusCode::BAD_REQUEST, "more than one Authorization header\n")
}

/// 503 for an `initialize` over `--max-sessions` (rmcp answers every session manager error
/// with 500): the client may try again after `retry_after` seconds.
fn sessions_full(retry_after: u64) -> Response<Body> {
    let mut response = refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        "--max-sessions MCP sessions are live; close one (HTTP DELETE) or wait for one to expire\n",
    );
    response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(retry_after));
    response
}

/// Serves `server` as `opts` says until SIGINT or SIGTERM, then kills the client's sandboxes.
pub async fn serve(server: SandboxServer, opts: &HttpOpts, token: &str) -> i32 {
    if let Some(bad) = opts.allow_origin.iter().find(|o| !valid_origin(o)) {
        eprintln!(
            "sandboxio mcp: --allow-origin {bad}: expected SCHEME://HOST[:PORT] (PORT a number or *), or null"
        );
        return EXIT_ERROR;
    }
    let server = server.over_http();
    let session = server.clone();
    let session_idle = seconds(opts.session_idle);
    let sessions = BoundedSessions::new(opts.max_sessions, session_idle);
    let service = StreamableHttpService::new(move || Ok(server.clone()), Arc::new(sessions), config(opts));
    let listener = match tokio::net::TcpListener::bind(opts.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("sandboxio mcp: cannot listen on {}: {e}", opts.listen);
            return EXIT_ERROR;
        }
    };
    let local = listener.local_addr().map_or_else(|_| opts.listen.to_string(), |a| a.to_string());
    // Scripts and tests read the address (the port may be 0 on the command line).
    eprintln!("sandboxio mcp: listening on http://{local}/mcp");
    let token = Arc::new(BearerToken::new(token));
    let header_timeout = seconds(opts.header_timeout);
    let body_timeout = seconds(opts.body_timeout);
    let session_idle = session_idle.as_secs();
    let serve_connection = |stream, peer, permit| {
        let (service, token) = (service.clone(), Arc::clone(&token));
        async move {
            let handle = hyper::service::service_fn(move |req: Request<Incoming>| {
                let (mut service, token) = (service.clone(), Arc::clone(&token));
                async move {
                    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
                    let mut authorizations = req.headers().get_all(header::AUTHORIZATION).iter();
                    let authorization = authorizations.next().map(header::HeaderValue::as_bytes);
                    let mut what = String::new();
                    let response = if authorizations.next().is_some() {
                        ambiguous_authorization()
                    } else if token.admits(authorization) {
                        match read_body(req, body_timeout).await {
                            Ok((req, body)) => match asked(&method, &body) {
                                Err(refused) => *refused,
                                Ok(asked) => {
                                    what = asked;
                                    match noting_full(service.call(req)).await {
                                        (Ok(response), true)
                                            if response.status() == StatusCode::INTERNAL_SERVER_ERROR =>
                                        {
                                            sessions_full(session_idle)
                                        }
                                        (response, _) => session_closed(&method, response?),
                                    }
                                }
                            },
                            Err(refused) => refused,
                        }
                    } else {
                        unauthorized(authorization)
                    };
                    let what = if what.is_empty() { String::new() } else { format!(" {what}") };
                    eprintln!(
                        "sandboxio mcp: audit {peer} {method} {path} {}{what}",
                        response.status().as_u16()
                    );
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), handle)
                .await;
            drop(permit);
        }
    };
    accept_until(&listener, opts.max_connections, serve_connection, interrupt()).await;
    session.end_session().await;
    EXIT_INTERRUPTED
}

/// `secs` seconds, at most [`sandboxio::exec::MAX_TIMEOUT`]: hyper adds the header timeout to an
/// `Instant` for every connection, and `--header-timeout 18446744073709551615` made each
/// connection's task panic ("overflow when adding duration to instant"), so no request was
/// ever answered.
fn seconds(secs: u64) -> Duration {
    Duration::from_secs(secs).min(sandboxio::exec::MAX_TIMEOUT)
}

#[cfg(test)]
mod tests {
    #[test]
    fn allow_origin_values() {
        for good in [
            "https://app.example.com",
            "https://app.example.com:443",
            "http://host:*",
            "null",
            "http://[::1]:8080/",
        ] {
            assert!(super::valid_origin(good), "{good}");
        }
        for bad in ["app.example.com", "https://app.example.com/path", "*", "", "https://"] {
            assert!(!super::valid_origin(bad), "{bad}");
        }
    }
}
