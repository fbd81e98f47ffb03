//! A protocol-faithful E2B stub on loopback, for tests (not product: it is not in the
//! library). It serves, over TLS with a certificate authority made at start-up:
//!
//! - the control plane (`api.<domain>`): create, get, connect, timeout, kill, `GET
//!   /v2/sandboxes` with the metadata filter, `X-API-Key` checked, a concurrency cap (429)
//!   and a one-time 504 on demand;
//! - envd (`49983-<id>.<domain>`): `process.Process/{Start,SendSignal,SendInput,CloseStdin,
//!   List}` with Connect envelopes and end frames, `filesystem.Filesystem/{ListDir,MakeDir,
//!   Remove,Stat}`, `/files` and `/health`, `X-Access-Token` checked;
//! - the code interpreter (`49999-<id>.<domain>`): `/execute` as line-delimited JSON and
//!   `/contexts`.
//!
//! Commands run for real in a `local://` sandbox per E2B sandbox, and code in its real
//! Python contexts. As envd does, a process is killed only by `SendSignal` (never when its
//! client goes away); zero values are omitted (`exitCode` on exit 0), bytes are base64,
//! keepalive events are interleaved. After a kill or expiry every sandbox path answers the
//! edge proxy's 502 "The sandbox was not found".

#![allow(dead_code, reason = "each test crate uses part of the stub")]

mod certs;
mod code;
mod control;
mod envd;
mod multipart;
mod proxy;
#[path = "../stub_runtime.rs"]
mod stub_runtime;

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::{Request, Response, StatusCode};
use sandboxio::backends::local::LocalBackend;

/// The domain every stub host lives under.
pub const DOMAIN: &str = "e2b.test";
/// The API key the stub accepts.
pub const API_KEY: &str = "e2b_0123456789abcdef";

pub type Body = BoxBody<Bytes, Infallible>;

/// One E2B sandbox of the stub.
pub struct StubSandbox {
    pub local: sandboxio::Sandbox,
    pub token: String,
    pub template: String,
    pub metadata: BTreeMap<String, String>,
    /// The create request as E2B stores it (what its API would show).
    pub config: String,
    pub end_at: Mutex<Instant>,
    /// When it was created (E2B's `startedAt`).
    pub started_at: std::time::SystemTime,
    /// Set when the sandbox is killed or expires: its streams then drop without end frames.
    pub killed: AtomicBool,
    pub processes: Mutex<HashMap<u32, envd::Proc>>,
}

/// Switches a test flips to provoke faults.
#[derive(Default)]
pub struct Faults {
    /// The next `Process.Start` stream ends after its start event, with no end frame.
    pub cut_next_stream: AtomicBool,
    /// Process streams started while set send no keepalive on a quiet stream (a
    /// connection that died silently looks so to the client).
    pub silent_streams: AtomicBool,
    /// The next control-plane request answers 504 once.
    pub fail_next_with_504: AtomicBool,
    /// Every control-plane request answers 503 while set (a 5xx storm).
    pub storm_503: AtomicBool,
    /// The most sandboxes alive at once before create answers 429 (0: no cap).
    pub max_sandboxes: AtomicUsize,
    /// The next `Process.Start` is taken (its reply's headers go out) but its process starts
    /// only this many milliseconds later, whatever its client does meanwhile: a start slow
    /// on its way, which the client cannot name yet (no start event, no pid).
    pub delay_next_start_ms: AtomicU64,
    /// The next create makes its sandbox, then answers only this many milliseconds later.
    pub delay_next_create_reply_ms: AtomicU64,
}

pub struct State {
    pub local: LocalBackend,
    pub sandboxes: Mutex<HashMap<String, Arc<StubSandbox>>>,
    pub faults: Faults,
    pub next_id: AtomicUsize,
    /// Create requests seen (their JSON), for tests that check what was sent.
    pub creates: Mutex<Vec<serde_json::Value>>,
    /// `Process.Start` requests taken.
    pub starts: AtomicUsize,
}

impl State {
    pub fn sandbox(&self, id: &str) -> Option<Arc<StubSandbox>> {
        self.sandboxes.lock().unwrap().get(id).cloned()
    }
}

/// A running stub.
pub struct Stub {
    pub addr: SocketAddr,
    pub ca_pem: Vec<u8>,
    pub state: Arc<State>,
    runtime: stub_runtime::StubRuntime,
}

impl Stub {
    /// Starts the stub on its own runtime, on a loopback port.
    pub fn start() -> Stub {
        let runtime = stub_runtime::StubRuntime::start("e2b-stub");
        let (ca_pem, acceptor) = certs::acceptor(DOMAIN);
        let state = Arc::new(State {
            local: LocalBackend::new(),
            sandboxes: Mutex::new(HashMap::new()),
            faults: Faults::default(),
            next_id: AtomicUsize::new(0),
            creates: Mutex::new(Vec::new()),
            starts: AtomicUsize::new(0),
        });
        let listener =
            runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let serving = Arc::clone(&state);
        runtime.spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let (acceptor, state) = (acceptor.clone(), Arc::clone(&serving));
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = hyper::service::service_fn(move |req| route(Arc::clone(&state), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        runtime.spawn(control::expire_loop(Arc::clone(&state)));
        Stub { addr, ca_pem, state, runtime }
    }

    /// Starts an HTTP `CONNECT` proxy on loopback that tunnels every host under [`DOMAIN`]
    /// to this stub (see `proxy.rs`): how a client that resolves names itself reaches it.
    pub fn connect_proxy(&self) -> SocketAddr {
        self.runtime.block_on(proxy::start(DOMAIN, self.addr))
    }

    /// An `e2b://` backend pointed at this stub.
    pub fn backend(&self) -> sandboxio::backends::e2b::E2bBackend {
        sandboxio::backends::e2b::E2bBackend::for_stub(DOMAIN, self.addr, &self.ca_pem, API_KEY)
            .expect("the stub's backend")
    }

    /// The `local://` sandbox id behind E2B sandbox `id`.
    pub fn local_id(&self, id: &str) -> Option<String> {
        self.state.sandbox(id).map(|s| s.local.id().to_owned())
    }

    /// Ends sandbox `id` as its TTL would.
    pub fn expire(&self, id: &str) -> bool {
        match self.state.sandbox(id) {
            Some(s) => {
                *s.end_at.lock().unwrap() = Instant::now();
                true
            }
            None => false,
        }
    }
}

/// A JSON reply.
pub fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(value.to_string())).boxed())
        .unwrap()
}

/// An empty reply.
pub fn empty(status: StatusCode) -> Response<Body> {
    Response::builder().status(status).body(Full::new(Bytes::new()).boxed()).unwrap()
}

/// A plain-text reply (the code interpreter's errors).
pub fn text(status: StatusCode, body: &str) -> Response<Body> {
    Response::builder().status(status).body(Full::new(Bytes::from(body.to_owned())).boxed()).unwrap()
}

/// The edge proxy's reply for a sandbox that no longer exists.
pub fn not_found_502(id: &str) -> Response<Body> {
    json(
        StatusCode::BAD_GATEWAY,
        &serde_json::json!({"sandboxId": id, "message": "The sandbox was not found", "code": 502}),
    )
}

/// Reads a whole request body (the stub trusts its client's sizes).
pub async fn body_bytes(req: Request<hyper::body::Incoming>) -> Bytes {
    req.into_body().collect().await.map(http_body_util::Collected::to_bytes).unwrap_or_default()
}

/// Routes by host, as the edge proxy does: `api.<domain>` to the control plane,
/// `<port>-<id>.<domain>` to a sandbox's port (the left-most label split on `-`); for an IP
/// or `localhost` host, by the `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers.
async fn route(state: Arc<State>, req: Request<hyper::body::Incoming>) -> Result<Response<Body>, Infallible> {
    let host = req.headers().get("host").and_then(|h| h.to_str().ok()).unwrap_or_default().to_owned();
    let host = host.split(':').next().unwrap_or_default().to_owned();
    if host == format!("api.{DOMAIN}") {
        return Ok(control::handle(state, req).await);
    }
    let label = host.strip_suffix(&format!(".{DOMAIN}")).unwrap_or_default();
    let header = |n: &str| req.headers().get(n).and_then(|h| h.to_str().ok()).unwrap_or_default().to_owned();
    let (port, id) = if let Some((port, id)) = label.split_once('-') {
        (port.to_owned(), id.split('-').next().unwrap_or_default().to_owned())
    } else {
        (header("e2b-sandbox-port"), header("e2b-sandbox-id"))
    };
    let Some(sandbox) = state.sandbox(&id) else { return Ok(not_found_502(&id)) };
    Ok(match port.as_str() {
        "49983" => envd::handle(state, sandbox, req).await,
        "49999" => code::handle(sandbox, req).await,
        _ => json(
            StatusCode::BAD_GATEWAY,
            &serde_json::json!({"sandboxId": id, "message": "The sandbox is running but port is not open", "code": 502}),
        ),
    })
}
