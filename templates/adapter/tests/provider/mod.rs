//! A tiny Example Cloud on loopback for the contract test: the provider's HTTP API
//! (`sandboxio_example::api`), with every sandbox a real `local://` sandbox, so the suite
//! sees real processes, timeouts, signals and network denial.
//!
//! Not part of the adapter: when you copy the template for a real provider, the contract
//! test points at that provider (or at a stub of it like this one) instead.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_lite::future::block_on;
use sandboxio::backends::local::LocalBackend;
use sandboxio::{Command, Error, ErrorCode, NetworkPolicy, Sandbox};
use sandboxio_example::api::{
    CreateRequest, ErrorBody, ExecReply, ExecRequest, Network, ProcessList, SandboxInfo, SandboxList,
};
use serde::Serialize;
use tiny_http::{Header, Method, Request, Response};

/// The running server.
pub struct Provider {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    state: Arc<State>,
}

struct State {
    local: LocalBackend,
    api_key: String,
    next_id: AtomicU64,
    sandboxes: Mutex<HashMap<String, Arc<Entry>>>,
    /// Execs by id, with their kill flags (kept after they end: a late kill is a no-op).
    execs: Mutex<HashMap<String, Arc<AtomicBool>>>,
    creates: Mutex<HashMap<String, Token>>,
    /// Sandboxes whose next `DELETE` never answers (the `simulate_kill_hang` probe).
    hung: Mutex<HashSet<String>>,
}

struct Entry {
    sandbox: Sandbox,
    labels: BTreeMap<String, String>,
    env: Vec<(String, String)>,
}

impl Entry {
    fn info(&self, id: &str) -> SandboxInfo {
        SandboxInfo { id: id.to_owned(), labels: self.labels.clone(), env: self.env.clone() }
    }
}

/// Where the create carrying a client token is.
enum Token {
    Creating,
    /// Cancelled before or while it ran: the create must fail and leave nothing.
    Cancelled,
    Created(String),
}

type Reply = Response<std::io::Cursor<Vec<u8>>>;

impl Provider {
    /// Starts the server on a free loopback port; it serves until the process exits.
    pub fn start(local: LocalBackend, api_key: &str) -> Provider {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("a loopback port");
        let endpoint = format!("http://{}", server.server_addr().to_ip().expect("a TCP address"));
        let state = Arc::new(State {
            local,
            api_key: api_key.to_owned(),
            next_id: AtomicU64::new(1),
            sandboxes: Mutex::default(),
            execs: Mutex::default(),
            creates: Mutex::default(),
            hung: Mutex::default(),
        });
        let serving = Arc::clone(&state);
        std::thread::spawn(move || {
            for request in server.incoming_requests() {
                let state = Arc::clone(&serving);
                // One thread per request: an exec blocks its thread until the command ends.
                std::thread::spawn(move || {
                    let mut request = request;
                    let reply = state.handle_authorized(&mut request);
                    let _ = request.respond(reply);
                });
            }
        });
        Provider { endpoint, state }
    }

    /// Makes the next `DELETE` of sandbox `id` hang, as a provider that stopped answering
    /// would (the `simulate_kill_hang` probe).
    pub fn hang_next_delete(&self, id: &str) {
        self.state.hung.lock().unwrap().insert(id.to_owned());
    }

    /// Ends a sandbox's life as its TTL would (the `expire_sandbox` probe).
    pub fn expire(&self, id: &str) -> bool {
        let entry = self.state.sandboxes.lock().unwrap().get(id).cloned();
        entry.is_some_and(|e| self.state.local.expire(e.sandbox.id()))
    }
}

impl State {
    fn handle_authorized(self: &Arc<Self>, request: &mut Request) -> Reply {
        let expected = format!("Bearer {}", self.api_key);
        let authorized =
            request.headers().iter().any(|h| h.field.equiv("Authorization") && h.value == *expected);
        if authorized { self.handle(request) } else { error(401, "unauthorized", "missing or wrong API key") }
    }

    fn handle(self: &Arc<Self>, request: &mut Request) -> Reply {
        let url = request.url().to_owned();
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let mut body = Vec::new();
        if request.as_reader().take(64 << 20).read_to_end(&mut body).is_err() {
            return error(400, "invalid_request", "unreadable body");
        }
        match (request.method(), parts.as_slice()) {
            (Method::Post, ["v1", "sandboxes"]) => with_json(&body, |r| self.create(r)),
            (Method::Get, ["v1", "sandboxes"]) => self.list(query),
            (Method::Get, ["v1", "sandboxes", id]) => match self.entry(id) {
                Some(e) => json(200, &e.info(id)),
                None => not_found(id),
            },
            (Method::Delete, ["v1", "sandboxes", id]) => self.delete(id),
            (Method::Post, ["v1", "sandboxes", id, "execs"]) => with_json(&body, |r| self.exec(id, r)),
            (Method::Delete, ["v1", "sandboxes", _, "execs", exec]) => {
                // A kill may overtake its exec (two connections): it is remembered, and
                // an exec arriving later with that id does not run.
                self.execs
                    .lock()
                    .unwrap()
                    .entry((*exec).to_owned())
                    .or_default()
                    .store(true, Ordering::SeqCst);
                empty(204)
            }
            (Method::Get, ["v1", "sandboxes", id, "processes"]) => match self.entry(id) {
                Some(e) => {
                    json(200, &ProcessList { processes: self.local.running_processes(e.sandbox.id()) })
                }
                None => not_found(id),
            },
            (Method::Delete, ["v1", "create-tokens", token]) => self.cancel_create(token),
            _ => error(404, "not_found", "no such endpoint"),
        }
    }

    fn entry(&self, id: &str) -> Option<Arc<Entry>> {
        self.sandboxes.lock().unwrap().get(id).cloned()
    }

    fn create(&self, request: CreateRequest) -> Reply {
        {
            let mut creates = self.creates.lock().unwrap();
            if matches!(creates.get(&request.client_token), Some(Token::Cancelled)) {
                return error(409, "cancelled", "this create was cancelled");
            }
            creates.insert(request.client_token.clone(), Token::Creating);
        }
        let policy = match request.network {
            Network::Deny => NetworkPolicy::deny_all(),
            Network::Allow => NetworkPolicy::allow_all(),
        };
        let mut builder = Sandbox::builder_with(self.local.clone())
            .network(policy)
            .ttl(Duration::from_secs(request.ttl_secs));
        for (k, v) in &request.env {
            builder = builder.env(k, v);
        }
        for (k, v) in &request.secret_env {
            builder = builder.secret_env(k, v.as_str());
        }
        let sandbox = match block_on(builder.create()) {
            Ok(s) => s,
            Err(e) => return from_error(&e),
        };
        let id = format!("ex-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let mut creates = self.creates.lock().unwrap();
        if matches!(creates.get(&request.client_token), Some(Token::Cancelled)) {
            drop(creates);
            let _ = block_on(sandbox.close());
            return error(409, "cancelled", "this create was cancelled");
        }
        creates.insert(request.client_token, Token::Created(id.clone()));
        let entry = Arc::new(Entry { sandbox, labels: request.labels, env: request.env });
        self.sandboxes.lock().unwrap().insert(id.clone(), Arc::clone(&entry));
        drop(creates);
        json(201, &entry.info(&id))
    }

    fn cancel_create(&self, token: &str) -> Reply {
        let previous = self.creates.lock().unwrap().insert(token.to_owned(), Token::Cancelled);
        if let Some(Token::Created(id)) = previous {
            return self.delete(&id);
        }
        empty(204)
    }

    fn list(&self, query: &str) -> Reply {
        let label =
            form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "label").map(|(_, v)| v.into_owned());
        let Some((key, value)) = label.as_deref().and_then(|l| l.split_once('=')) else {
            return error(400, "invalid_request", "label=key=value is required");
        };
        let ids = self
            .sandboxes
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, e)| e.labels.get(key).map(String::as_str) == Some(value))
            .map(|(id, _)| id.clone())
            .collect();
        json(200, &SandboxList { ids })
    }

    fn delete(&self, id: &str) -> Reply {
        if self.hung.lock().unwrap().remove(id) {
            // Longer than any test waits; the thread ends with the test process.
            std::thread::sleep(Duration::from_hours(1));
        }
        let Some(entry) = self.sandboxes.lock().unwrap().remove(id) else {
            return not_found(id);
        };
        match block_on(entry.sandbox.kill()) {
            Ok(()) => empty(204),
            Err(e) => from_error(&e),
        }
    }

    fn exec(&self, id: &str, request: ExecRequest) -> Reply {
        let Some(entry) = self.entry(id) else { return not_found(id) };
        let Some((program, args)) = request.argv.split_first() else {
            return error(400, "invalid_request", "argv is empty");
        };
        let mut command = Command::new(program).args(args).output_limit(request.output_limit);
        for (k, v) in &request.env {
            command = command.env(k, v);
        }
        if let Some(cwd) = &request.cwd {
            command = command.cwd(cwd);
        }
        if let Some(stdin) = request.stdin {
            command = command.stdin(stdin);
        }
        if let Some(ms) = request.timeout_ms {
            command = command.timeout(Duration::from_millis(ms));
        }
        let killed = Arc::clone(self.execs.lock().unwrap().entry(request.exec_id.clone()).or_default());
        if killed.load(Ordering::SeqCst) {
            return error(409, "cancelled", "the exec was killed before it started");
        }
        let run = async { Some(entry.sandbox.run(command).await) };
        let kill = async {
            while !killed.load(Ordering::SeqCst) {
                futures_timer::Delay::new(Duration::from_millis(20)).await;
            }
            None // dropping the run kills the command's process tree
        };
        let outcome = block_on(futures_lite::future::or(run, kill));
        match outcome {
            None => error(409, "cancelled", "the exec was killed"),
            Some(Ok(result)) => json(200, &reply(result, false)),
            Some(Err(Error::ExecutionTimeout { partial, .. })) => json(200, &reply(*partial, true)),
            Some(Err(e)) if e.code() == ErrorCode::SandboxGone => {
                error(410, "sandbox_gone", &format!("sandbox {id} ended under the command"))
            }
            Some(Err(e)) => from_error(&e),
        }
    }
}

fn reply(result: sandboxio::ExecResult, timed_out: bool) -> ExecReply {
    ExecReply {
        exit_code: result.status.code(),
        signal: result.status.signal(),
        duration_ms: u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
        stdout: result.stdout,
        stderr: result.stderr,
        truncated: result.truncated,
        timed_out,
    }
}

fn with_json<T: serde::de::DeserializeOwned>(body: &[u8], handle: impl FnOnce(T) -> Reply) -> Reply {
    match serde_json::from_slice(body) {
        Ok(request) => handle(request),
        Err(e) => error(400, "invalid_request", &e.to_string()),
    }
}

fn from_error(e: &Error) -> Reply {
    let with_path = |status: u16, kind: &str, path: &str| {
        let body = ErrorBody { error: kind.to_owned(), message: e.to_string(), path: Some(path.to_owned()) };
        json(status, &body)
    };
    match e {
        Error::NotFound { path, .. } => with_path(404, "path_not_found", path),
        Error::PermissionDenied { path, .. } => with_path(403, "permission_denied", path),
        _ if e.code() == ErrorCode::InvalidInput => error(400, "invalid_request", &e.to_string()),
        _ => error(500, "internal", &e.to_string()),
    }
}

fn not_found(id: &str) -> Reply {
    error(404, "sandbox_not_found", &format!("no sandbox {id}"))
}

fn json<T: Serialize>(status: u16, body: &T) -> Reply {
    let header = Header::from_bytes("Content-Type", "application/json").expect("a valid header");
    Response::from_data(serde_json::to_vec(body).expect("serializable"))
        .with_status_code(status)
        .with_header(header)
}

fn empty(status: u16) -> Reply {
    Response::from_data(Vec::new()).with_status_code(status)
}

fn error(status: u16, kind: &str, message: &str) -> Reply {
    json(status, &ErrorBody { error: kind.to_owned(), message: message.to_owned(), path: None })
}
