//! A protocol-faithful Modal stub on loopback, for tests (not product: it is not in the
//! library). Two tonic servers over TLS, with a certificate for [`DOMAIN`] from a
//! certificate authority made at start-up:
//!
//! - the control plane (`modal.client.ModalClient`, the trimmed `proto/modal/api.proto`):
//!   apps, the environment's image builder version, images (`FROM <ref>`, built at once),
//!   `SandboxCreate` deduplicated by `x-idempotency-key`, the task id, the router's address
//!   and token, wait, terminate (idempotent), list by tags, pages backwards by creation
//!   time; `x-modal-token-id` and `x-modal-token-secret` checked on every call;
//! - the command router (`modal.task_command_router.TaskCommandRouter`) at a loopback
//!   address of its own, handed out by `TaskGetCommandRouterAccess`: exec ids chosen by the
//!   client (a repeated start is the same command), stdout and stderr read from a byte
//!   offset, stdin written at a byte offset with an end-of-file, the exit as a code or a
//!   signal; `authorization: Bearer <token>` checked.
//!
//! Commands run for real in a `local://` sandbox per Modal sandbox. As upstream, a command
//! is never killed when its client goes away, and there is no per-command kill at all.
//! Sandboxes end at their `timeout_secs`, after `idle_timeout_secs` with no command running
//! and no stdin written, or when terminated; after that the router answers `NOT_FOUND` and a
//! read cut mid-stream ends in `NOT_FOUND`. [`Faults`] injects throttling
//! (`RESOURCE_EXHAUSTED` with an `RPCRetryPolicy`), a lost reply after a create, a cut output
//! stream and malformed replies.

#![allow(dead_code, reason = "each test crate uses part of the stub")]

mod control;
#[path = "../e2b_stub/proxy.rs"]
mod proxy;
mod router;
#[path = "../stub_runtime.rs"]
mod stub_runtime;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandboxio::backends::local::LocalBackend;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Identity, Server, ServerTlsConfig};

#[allow(clippy::pedantic, missing_docs, dead_code, reason = "generated code")]
pub mod proto {
    pub mod client {
        include!(concat!(env!("OUT_DIR"), "/modal-stub/modal.client.rs"));
    }
    pub mod router {
        include!(concat!(env!("OUT_DIR"), "/modal-stub/modal.task_command_router.rs"));
    }
}

use proto::client::GenericResult;
use proto::client::generic_result::GenericStatus;

/// The name the stub's certificate carries.
pub const DOMAIN: &str = "modal.test";
/// The token the stub accepts.
pub const TOKEN_ID: &str = "ak-sandboxio-stub";
/// The token secret the stub accepts.
pub const TOKEN_SECRET: &str = "as-0123456789abcdef-stub-secret";

/// One command of a sandbox.
pub struct Exec {
    pub argv: Vec<String>,
    pub stdout: Mutex<Vec<u8>>,
    pub stderr: Mutex<Vec<u8>>,
    /// The exit: `Ok(code)` or `Err(signal)`.
    pub exit: Mutex<Option<Result<i32, i32>>>,
    /// Bumped on every change (output, exit).
    pub changed: tokio::sync::watch::Sender<u64>,
    pub stdin: tokio::sync::mpsc::Sender<router::StdinOp>,
    /// Bytes of stdin accepted, and whether it is closed.
    pub stdin_at: Mutex<(u64, bool)>,
}

impl Exec {
    pub fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

/// One Modal sandbox of the stub.
pub struct StubSandbox {
    pub id: String,
    pub app_id: String,
    pub task_id: String,
    /// The router tokens issued for this sandbox's task, each with its end (Unix seconds):
    /// the router takes any of them until its end.
    pub router_tokens: Mutex<Vec<(String, u64)>>,
    pub local: sandboxio::Sandbox,
    pub tags: BTreeMap<String, String>,
    /// The definition as Modal stores it (what its dashboard would show).
    pub config: String,
    pub created_at: f64,
    pub end_at: Mutex<Instant>,
    pub idle_timeout: Option<Duration>,
    pub last_active: Mutex<Instant>,
    pub running: AtomicUsize,
    /// Set when the sandbox ended, with how.
    pub result: Mutex<Option<GenericResult>>,
    pub execs: Mutex<HashMap<String, Arc<Exec>>>,
}

impl StubSandbox {
    /// The newest router token issued.
    pub fn router_token(&self) -> String {
        self.router_tokens.lock().unwrap().last().map(|(t, _)| t.clone()).unwrap_or_default()
    }

    /// Issues a router token that ends at least `lifetime` from now (at most a second more:
    /// `exp` is in whole seconds): a JWT, as Modal's are (its clients read `exp` from the
    /// payload; the signature is not checked by them). Rounding `exp` down gave a 1-s token
    /// issued late in a second a few milliseconds of life, so that a call retried with it
    /// met an ended token again (a flaky `an_expired_router_token_...` in CI).
    pub fn issue_router_token(&self, lifetime: Duration) -> String {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let mut tokens = self.router_tokens.lock().unwrap();
        let exp = unix_secs() + 1 + lifetime.as_secs();
        let claims = format!(r#"{{"task_id":"{}","n":{},"exp":{exp}}}"#, self.task_id, tokens.len());
        let token = format!("{}.{}.c3R1Yg", b64(r#"{"alg":"HS256","typ":"JWT"}"#), b64(&claims));
        tokens.push((token.clone(), exp));
        token
    }

    /// Whether `bearer` is `Bearer <a token issued here that has not ended>`.
    pub fn takes(&self, bearer: &str, refuse_all: bool) -> bool {
        let now = unix_secs();
        if refuse_all {
            return false;
        }
        bearer
            .strip_prefix("Bearer ")
            .is_some_and(|b| self.router_tokens.lock().unwrap().iter().any(|(t, exp)| t == b && *exp > now))
    }

    pub fn finished(&self) -> Option<GenericResult> {
        self.result.lock().unwrap().clone()
    }

    pub fn touch(&self) {
        *self.last_active.lock().unwrap() = Instant::now();
    }

    /// Ends the sandbox with `status` (once) and everything in it; every exec's readers wake.
    pub async fn end(&self, status: GenericStatus) {
        {
            let mut result = self.result.lock().unwrap();
            if result.is_some() {
                return;
            }
            *result = Some(GenericResult { status: status as i32, ..Default::default() });
        }
        let _ = self.local.kill().await;
        for exec in self.execs.lock().unwrap().values() {
            exec.bump();
        }
    }
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// Switches a test flips to provoke faults.
#[derive(Default)]
pub struct Faults {
    /// This many `SandboxCreate` calls answer `RESOURCE_EXHAUSTED` with a retry policy.
    pub throttle_creates: AtomicUsize,
    /// The retry-after the throttling asks for, in milliseconds.
    pub throttle_after_ms: AtomicUsize,
    /// The next `SandboxCreate` creates the sandbox, then answers `UNAVAILABLE` as a reply
    /// lost on the way would look.
    pub lose_next_create_reply: AtomicBool,
    /// The next output read that delivers a piece ends in `UNAVAILABLE` right after it.
    pub cut_next_read: AtomicBool,
    /// Every `TaskExecWait` answers with no exit status while set.
    pub malformed_wait: AtomicBool,
    /// Every `SandboxCreate` answers with an empty sandbox id while set (after creating).
    pub malformed_create: AtomicBool,
    /// The next `TaskExecStart` is taken, but its command starts (and its reply goes out)
    /// only this many milliseconds later, whatever its client does meanwhile: a start slow
    /// on its way, which a second exec sent meanwhile overtakes.
    pub delay_next_exec_start_ms: AtomicU64,
    /// The next `SandboxCreate` makes its sandbox, then answers only this many milliseconds
    /// later.
    pub delay_next_create_reply_ms: AtomicU64,
    /// How long the router tokens issued from now on last, in seconds (0: an hour). Modal's
    /// expire; its clients fetch a new one when the router answers `UNAUTHENTICATED`.
    pub router_token_secs: AtomicU64,
    /// The router refuses every token while set (`UNAUTHENTICATED`).
    pub refuse_router_tokens: AtomicBool,
    /// The next this many output reads each end in `UNAVAILABLE` right after one piece.
    pub cut_reads_after_a_piece: AtomicUsize,
    /// The next this many stdin writes answer `UNAVAILABLE` without taking anything.
    pub refuse_stdin_writes: AtomicUsize,
}

pub struct State {
    pub local: LocalBackend,
    pub sandboxes: Mutex<HashMap<String, Arc<StubSandbox>>>,
    /// `x-idempotency-key` of every create that made a sandbox, and the sandbox.
    pub created_by_key: Mutex<HashMap<String, String>>,
    pub faults: Faults,
    pub next_id: AtomicUsize,
    /// `SandboxCreate` requests seen, with their idempotency key.
    pub creates: Mutex<Vec<(String, proto::client::SandboxCreateRequest)>>,
    /// The router's URL.
    pub router_url: Mutex<String>,
    /// The byte offset of every output read.
    pub read_offsets: Mutex<Vec<u64>>,
    /// The client identities seen (`x-modal-client-type`, `x-modal-client-version`).
    pub identities: Mutex<std::collections::BTreeSet<String>>,
    /// `TaskExecStart` requests taken.
    pub exec_starts: AtomicUsize,
    /// `TaskGetCommandRouterAccess` requests answered.
    pub router_accesses: AtomicUsize,
}

impl State {
    pub fn sandbox(&self, id: &str) -> Option<Arc<StubSandbox>> {
        self.sandboxes.lock().unwrap().get(id).cloned()
    }

    /// The live sandbox running task `task_id`.
    pub fn by_task(&self, task_id: &str) -> Option<Arc<StubSandbox>> {
        self.sandboxes
            .lock()
            .unwrap()
            .values()
            .find(|s| s.task_id == task_id && s.finished().is_none())
            .cloned()
    }
}

/// A running stub.
pub struct Stub {
    pub url: String,
    pub ca_pem: Vec<u8>,
    pub state: Arc<State>,
    runtime: stub_runtime::StubRuntime,
}

/// A certificate for [`DOMAIN`] signed by a CA made here: (the CA's PEM, the identity).
fn certificates() -> (Vec<u8>, Identity) {
    let ca_key = rcgen::KeyPair::generate().expect("a CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "sandboxio modal stub CA");
    let ca = ca_params.self_signed(&ca_key).expect("the CA certificate");
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let key = rcgen::KeyPair::generate().expect("a server key");
    let cert = rcgen::CertificateParams::new(vec![DOMAIN.to_owned(), "localhost".to_owned()])
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("the server certificate");
    (ca.pem().into_bytes(), Identity::from_pem(cert.pem(), key.serialize_pem()))
}

impl Stub {
    /// Starts the stub on its own runtime, on two loopback ports.
    pub fn start() -> Stub {
        let runtime = stub_runtime::StubRuntime::start("modal-stub");
        let (ca_pem, identity) = certificates();
        let state = Arc::new(State {
            local: LocalBackend::new(),
            sandboxes: Mutex::new(HashMap::new()),
            created_by_key: Mutex::new(HashMap::new()),
            faults: Faults::default(),
            next_id: AtomicUsize::new(0),
            creates: Mutex::new(Vec::new()),
            router_url: Mutex::new(String::new()),
            read_offsets: Mutex::new(Vec::new()),
            identities: Mutex::new(std::collections::BTreeSet::new()),
            exec_starts: AtomicUsize::new(0),
            router_accesses: AtomicUsize::new(0),
        });
        let bind = || {
            let listener =
                runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("a loopback port");
            let addr: SocketAddr = listener.local_addr().expect("its address");
            (TcpListenerStream::new(listener), addr)
        };
        let (control_listener, control_addr) = bind();
        let (router_listener, router_addr) = bind();
        *state.router_url.lock().unwrap() = format!("https://127.0.0.1:{}", router_addr.port());
        let tls = || ServerTlsConfig::new().identity(identity.clone());
        let control =
            proto::client::modal_client_server::ModalClientServer::new(control::Control(Arc::clone(&state)));
        let router = proto::router::task_command_router_server::TaskCommandRouterServer::new(router::Router(
            Arc::clone(&state),
        ));
        let control_server = Server::builder().tls_config(tls()).expect("TLS").add_service(control);
        let router_server = Server::builder().tls_config(tls()).expect("TLS").add_service(router);
        runtime.spawn(control_server.serve_with_incoming(control_listener));
        runtime.spawn(router_server.serve_with_incoming(router_listener));
        runtime.spawn(expire_loop(Arc::clone(&state)));
        Stub { url: format!("https://127.0.0.1:{}", control_addr.port()), ca_pem, state, runtime }
    }

    /// A `modal://` backend (with the DSN's options) pointed at this stub.
    pub fn backend_for(&self, dsn: &str) -> sandboxio::backends::modal::ModalBackend {
        sandboxio::backends::modal::ModalBackend::for_stub(
            dsn,
            &self.url,
            &self.ca_pem,
            DOMAIN,
            TOKEN_ID,
            TOKEN_SECRET,
        )
        .expect("the stub's backend")
    }

    /// A `modal://` backend pointed at this stub.
    pub fn backend(&self) -> sandboxio::backends::modal::ModalBackend {
        self.backend_for("modal://")
    }

    /// An HTTP `CONNECT` proxy on loopback that tunnels [`DOMAIN`]`:<port>` to the stub's
    /// port of that number, for a client that names the stub as a server on the network
    /// (Modal's official client, whose router channel skips certificate checks for a
    /// `localhost` server). It also makes `TaskGetCommandRouterAccess` name the router as
    /// `https://`[`DOMAIN`]`:<port>`, which only a client going through the proxy reaches.
    pub fn connect_proxy(&self) -> SocketAddr {
        let mut url = self.state.router_url.lock().unwrap();
        *url = url.replace("127.0.0.1", DOMAIN);
        self.runtime.block_on(proxy::start_same_port(DOMAIN, std::net::Ipv4Addr::LOCALHOST.into()))
    }

    /// The `local://` sandbox id behind Modal sandbox `id`, while it runs.
    pub fn local_id(&self, id: &str) -> Option<String> {
        self.state.sandbox(id).filter(|s| s.finished().is_none()).map(|s| s.local.id().to_owned())
    }

    /// Ends sandbox `id` as its timeout would.
    pub fn expire(&self, id: &str) -> bool {
        match self.state.sandbox(id) {
            Some(s) if s.finished().is_none() => {
                *s.end_at.lock().unwrap() = Instant::now();
                true
            }
            _ => false,
        }
    }

    /// How many `local://` sandboxes the stub has made.
    pub fn made(&self) -> usize {
        self.state.sandboxes.lock().unwrap().len()
    }
}

/// Ends sandboxes whose timeout passed or that stayed idle past their idle timeout, as
/// Modal does.
async fn expire_loop(state: Arc<State>) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = Instant::now();
        let live: Vec<Arc<StubSandbox>> =
            state.sandboxes.lock().unwrap().values().filter(|s| s.finished().is_none()).cloned().collect();
        for s in live {
            if *s.end_at.lock().unwrap() <= now {
                s.end(GenericStatus::Timeout).await;
            } else if let Some(idle) = s.idle_timeout
                && s.running.load(Ordering::SeqCst) == 0
                && now.duration_since(*s.last_active.lock().unwrap()) >= idle
            {
                s.end(GenericStatus::IdleTimeout).await;
            }
        }
    }
}
