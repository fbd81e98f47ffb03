//! `sandboxio mcp`: sandboxes for one MCP client (the process at the other end of stdio).
//! The client makes them with `create_sandbox`, within the operator's bounds
//! ([`Bounds`]), names one by id in every other tool, and may hold at most
//! `--max-sandboxes` at once; all of them are killed when the session ends.
//!
//! A tool is registered only where the backend's capabilities for the configured DSN serve
//! it (an upper bound: a call the particular sandbox cannot serve comes back as the typed
//! refusal). Every failure is an MCP tool error (`isError: true`) carrying the sandboxio
//! code and message, never a protocol error or a crash.
//!
//! What an agent reads is bounded and says so: each stream's head and tail within the
//! operator's `--output-limit`, with a line saying what was cut and where the whole of it
//! is ([`output`]); every command and cell has a timeout, the operator's
//! (`--exec-timeout`, `--cell-timeout`) unless the call asks for less ([`Bounds`]); and
//! `run_code` keeps its state from call to call in one Python session per sandbox
//! ([`python`]).
//!
//! The HTTP transport is in [`http`] (its accept loop in [`accept`], its bearer token in
//! [`bearer`], its sessions in [`sessions`]).

mod accept;
mod bearer;
mod content;
mod exec;
mod http;
pub mod output;
mod params;
mod python;
mod sessions;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use sandboxio::{Error, ErrorCode, Sandbox, fs::FileKind, policy::Capabilities};
use tokio::sync::Mutex;

use crate::args::{McpArgs, SandboxOpts, Transport, parse_network};
use crate::bounds::Bounds;
use crate::commands::create_sandbox;
use content::{argument_error, instructions, tool_error};
use output::{Capture, Saved};
pub use params::{
    CreateParams, ExtendParams, IdParams, PathParams, RunCodeParams, RunCommandParams, WriteFileParams,
};

/// Which capability each tool needs; a tool whose capability the backend lacks is not
/// registered.
pub const TOOL_NEEDS: &[(&str, Capabilities)] = &[
    ("create_sandbox", Capabilities::empty()),
    ("kill_sandbox", Capabilities::empty()),
    ("list_sandboxes", Capabilities::empty()),
    ("extend_sandbox", Capabilities::EXTEND_TTL),
    ("run_command", Capabilities::RUN),
    ("run_code", Capabilities::RUN_CODE),
    ("interrupt_code", Capabilities::STATEFUL_CODE),
    ("restart_python", Capabilities::STATEFUL_CODE),
    ("read_file", Capabilities::FILESYSTEM),
    ("write_file", Capabilities::FILESYSTEM),
    ("list_files", Capabilities::FILESYSTEM),
];

/// One of the client's sandboxes and its Python session.
struct Held {
    sandbox: Sandbox,
    python: python::Python,
    /// When its TTL ends it (moved by `extend_sandbox`): past it, the sandbox no longer
    /// counts against `--max-sandboxes` and is no longer listed.
    ends_at: std::sync::Mutex<std::time::Instant>,
}

impl Held {
    fn new(sandbox: Sandbox, ttl: Duration) -> Self {
        Held {
            sandbox,
            python: python::Python::default(),
            ends_at: std::sync::Mutex::new(std::time::Instant::now() + ttl),
        }
    }

    fn expired(&self, now: std::time::Instant) -> bool {
        *self.ends_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner) <= now
    }
}

/// Drops the sandboxes whose TTL has ended from `sandboxes`, remembering their ids in
/// `ended` (a later `kill_sandbox` of one succeeds: it is gone, as asked).
fn prune(sandboxes: &mut BTreeMap<String, Arc<Held>>, ended: &mut std::collections::BTreeSet<String>) {
    let now = std::time::Instant::now();
    let gone: Vec<String> =
        sandboxes.iter().filter(|(_, h)| h.expired(now)).map(|(id, _)| id.clone()).collect();
    for id in gone {
        sandboxes.remove(&id);
        ended.insert(id);
    }
}

/// The server: the configured backend and bounds, and the client's sandboxes by id.
#[derive(Clone)]
pub struct SandboxServer {
    dsn: Arc<str>,
    opts: Arc<SandboxOpts>,
    bounds: Arc<Bounds>,
    /// Each stream's budget in what a tool returns, in bytes (`--output-limit`).
    output_limit: usize,
    /// Served over HTTP: the sandboxes belong to the token and outlive sessions.
    over_http: bool,
    sandboxes: Arc<Mutex<BTreeMap<String, Arc<Held>>>>,
    /// Ids of the client's sandboxes that were killed or reached their TTL: killing one
    /// again is the success the library's idempotent `kill` gives.
    ended: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    /// Creates under way: they count against the bound, so the map is not held while the
    /// backend creates (a slow create would stall every other call of the session).
    creating: Arc<AtomicUsize>,
    tool_router: ToolRouter<Self>,
}

/// A create's place under the bound, given back when the create ends, however it ends
/// (a dropped call included).
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tool_router]
impl SandboxServer {
    /// A server for `dsn`, registering only the tools its capabilities serve. `opts` gives
    /// the limits and labels of every sandbox, and its network policy is the widest a client
    /// may ask for (see [`Bounds`]). Does no I/O.
    ///
    /// # Errors
    ///
    /// The DSN's configuration error (malformed, unknown scheme, feature off).
    pub fn new(
        dsn: &str,
        opts: SandboxOpts,
        max_ttl: Duration,
        max_sandboxes: usize,
    ) -> sandboxio::Result<Self> {
        let caps = Sandbox::capabilities_of(dsn)?;
        let mut tool_router = Self::tool_router();
        for (name, needs) in TOOL_NEEDS {
            if !caps.contains(*needs) {
                tool_router.remove_route(name);
            }
        }
        let bounds = Bounds {
            network: opts.network.clone(),
            max_ttl,
            max_sandboxes,
            max_read: crate::bounds::DEFAULT_MAX_READ,
            exec_timeout: Duration::from_secs(crate::bounds::DEFAULT_TIMEOUT_SECS),
            cell_timeout: Duration::from_secs(crate::bounds::DEFAULT_TIMEOUT_SECS),
        };
        Ok(SandboxServer {
            dsn: Arc::from(dsn),
            opts: Arc::new(opts),
            bounds: Arc::new(bounds),
            output_limit: 1024 * usize::try_from(output::DEFAULT_OUTPUT_LIMIT_KIB).unwrap_or(32),
            over_http: false,
            sandboxes: Arc::new(Mutex::new(BTreeMap::new())),
            ended: Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new())),
            creating: Arc::new(AtomicUsize::new(0)),
            tool_router,
        })
    }

    /// The same server returning files of at most `bytes` from `read_file`.
    #[must_use]
    pub fn with_max_read(mut self, bytes: u64) -> Self {
        Arc::make_mut(&mut self.bounds).max_read = bytes;
        self
    }

    /// The same server, telling agents that its sandboxes outlive their MCP sessions (they
    /// belong to the HTTP transport's token).
    #[must_use]
    pub fn over_http(mut self) -> Self {
        self.over_http = true;
        self
    }

    /// The same server giving commands and cells at most these timeouts, and these when a
    /// call gives none.
    #[must_use]
    pub fn with_timeouts(mut self, exec: Duration, cell: Duration) -> Self {
        let bounds = Arc::make_mut(&mut self.bounds);
        (bounds.exec_timeout, bounds.cell_timeout) = (exec, cell);
        self
    }

    /// The same server returning at most `bytes` of each stream of a command or a cell
    /// (head and tail; the rest is copied into the sandbox and the answer says where).
    #[must_use]
    pub fn with_output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes.max(2);
        self
    }

    /// The names of the registered tools, in order.
    #[cfg(test)]
    pub fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.tool_router.list_all().into_iter().map(|t| t.name.into_owned()).collect();
        names.sort();
        names
    }

    /// The ids of the client's sandboxes that ended.
    fn ended(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
        self.ended.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The client's sandbox `id`, with its Python session.
    async fn held(&self, id: &str) -> sandboxio::Result<Arc<Held>> {
        if let Some(held) = self.sandboxes.lock().await.get(id).cloned() {
            return Ok(held);
        }
        let why = if self.ended().contains(id) {
            "it was killed or its TTL ran out: create_sandbox makes a new one"
        } else {
            "it is not one of this session's sandboxes (list_sandboxes names them)"
        };
        Err(Error::sandbox_gone(id, why))
    }

    /// Kills every sandbox of the client.
    pub async fn end_session(&self) {
        let sandboxes = std::mem::take(&mut *self.sandboxes.lock().await);
        for (id, held) in sandboxes {
            if let Err(e) = held.sandbox.kill().await {
                eprintln!("sandboxio mcp: killing sandbox {}: {e}", sandboxio::text::escape(&id));
            }
        }
    }

    #[tool(
        description = "Create a sandbox for this session and return its id, which every other tool takes. Optional: network (deny, allow, or allow=HOST,..; within what the operator allows) and ttl_seconds.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn create_sandbox(&self, Parameters(p): Parameters<CreateParams>) -> CallToolResult {
        let create = async {
            let asked = p.network.as_deref().map(parse_network).transpose().map_err(Error::invalid_input)?;
            let network = self.bounds.network(asked)?;
            let ttl = self.bounds.ttl(p.ttl_seconds)?;
            // A place is taken under the map's lock (live and under way together), so that
            // concurrent calls cannot pass the bound together; the create runs without it.
            let slot = {
                let mut sandboxes = self.sandboxes.lock().await;
                prune(&mut sandboxes, &mut self.ended());
                let held = sandboxes.len() + self.creating.load(Ordering::SeqCst);
                if held >= self.bounds.max_sandboxes {
                    return Err(Error::invalid_input(format!(
                        "this session already holds {held} sandboxes (live or being created), the operator's bound: kill_sandbox one first"
                    )));
                }
                self.creating.fetch_add(1, Ordering::SeqCst);
                Slot(Arc::clone(&self.creating))
            };
            let opts = SandboxOpts { network, ..(*self.opts).clone() };
            let sandbox = create_sandbox(&self.dsn, &opts, false, Some(ttl)).await?;
            let id = sandbox.id().to_owned();
            let mut sandboxes = self.sandboxes.lock().await;
            sandboxes.insert(id.clone(), Arc::new(Held::new(sandbox, ttl)));
            drop(slot);
            Ok::<_, Error>((id, ttl))
        };
        match create.await {
            Ok((id, ttl)) => {
                let mut result = CallToolResult::success(vec![ContentBlock::text(id.clone())]);
                result.structured_content =
                    Some(serde_json::json!({ "sandbox_id": id, "ttl_seconds": ttl.as_secs() }));
                result
            }
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        description = "Kill one of this session's sandboxes by id.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn kill_sandbox(&self, Parameters(p): Parameters<IdParams>) -> CallToolResult {
        let kill = async {
            if self.ended().contains(&p.sandbox_id) {
                return Ok("had ended already (killed, or its TTL ran out)");
            }
            let held = self.held(&p.sandbox_id).await?;
            let said = match held.sandbox.kill().await {
                Ok(()) => "killed",
                // Gone on its own (its TTL, or killed outside this session): what was asked.
                Err(e) if e.code() == ErrorCode::SandboxGone => {
                    "had ended already (its TTL ran out); removed"
                }
                Err(e) => return Err(e),
            };
            self.sandboxes.lock().await.remove(&p.sandbox_id);
            self.ended().insert(p.sandbox_id.clone());
            Ok::<_, Error>(said)
        };
        match kill.await {
            Ok(said) => {
                CallToolResult::success(vec![ContentBlock::text(format!("{}: {said}", p.sandbox_id))])
            }
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        description = "List this session's sandboxes: one id a line.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_sandboxes(&self) -> CallToolResult {
        let ids: Vec<String> = {
            let mut sandboxes = self.sandboxes.lock().await;
            prune(&mut sandboxes, &mut self.ended());
            sandboxes.keys().cloned().collect()
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text(ids.join("\n"))]);
        result.structured_content = Some(serde_json::json!({ "sandbox_ids": ids }));
        result
    }

    #[tool(
        description = "Make one of this session's sandboxes live ttl_seconds from now (within the operator's bound).",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn extend_sandbox(&self, Parameters(p): Parameters<ExtendParams>) -> CallToolResult {
        let extend = async {
            let ttl = self.bounds.ttl(Some(p.ttl_seconds))?;
            let held = self.held(&p.sandbox_id).await?;
            held.sandbox.extend_ttl(ttl).await?;
            *held.ends_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                std::time::Instant::now() + ttl;
            Ok::<_, Error>(())
        };
        match extend.await {
            Ok(()) => CallToolResult::success(vec![ContentBlock::text(format!(
                "{} now ends in {} s",
                p.sandbox_id, p.ttl_seconds
            ))]),
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        description = "Run a shell command (sh -c) in one of this session's sandboxes. Returns the exit code, stdout and stderr; a non-zero exit is a result, not an error. Each stream shows at most its first and last few KiB: a longer one says how much was cut and the file in the sandbox that holds all of it. The command is killed after timeout_seconds (default and most: the operator's, 60 s unless set), and then the answer says so and shows the output so far.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false)
    )]
    async fn run_command(&self, Parameters(p): Parameters<RunCommandParams>) -> CallToolResult {
        self.run_command_call(p).await
    }

    #[tool(
        description = "Run a Python cell in one of this session's sandboxes. The sandbox keeps one Python session: variables, imports and definitions persist from one run_code call to the next, as in a notebook, until restart_python (on backends without stateful code each cell runs alone, and the answer says so). Returns stdout and stderr as text (each at most its first and last few KiB; a longer one says how much was cut and the file in the sandbox that holds all of it), and rich results: images (PNG plots) as image content, HTML and other text as text. A cell that raised is an error result with its traceback. A cell running past timeout_seconds (default and most: the operator's, 60 s unless set) is interrupted (KeyboardInterrupt) and the session keeps its state; if the interpreter had to be killed, the answer says the state is lost.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false)
    )]
    async fn run_code(&self, Parameters(p): Parameters<RunCodeParams>) -> CallToolResult {
        self.run_code_call(p).await
    }

    #[tool(
        description = "Interrupt the Python cell running in one of this session's sandboxes (as Ctrl-C would: the cell gets KeyboardInterrupt, its run_code returns with it, and the session keeps its state). With no cell running, nothing happens.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn interrupt_code(&self, Parameters(p): Parameters<IdParams>) -> CallToolResult {
        let interrupt = async {
            let held = self.held(&p.sandbox_id).await?;
            held.python.interrupt(&held.sandbox).await
        };
        match interrupt.await {
            Ok(said) => CallToolResult::success(vec![ContentBlock::text(said)]),
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        description = "Start a fresh Python session in one of this session's sandboxes: every variable, import and definition of earlier cells is dropped (files stay). Needed after a session was lost; the next run_code runs in the fresh one.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn restart_python(&self, Parameters(p): Parameters<IdParams>) -> CallToolResult {
        let restart = async {
            let held = self.held(&p.sandbox_id).await?;
            held.python.restart(&held.sandbox).await
        };
        match restart.await {
            Ok(()) => CallToolResult::success(vec![ContentBlock::text(
                "a fresh Python session is ready: earlier variables and imports are gone",
            )]),
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        description = "Read a file of one of this session's sandboxes. Text comes back as text, at most its first and last few KiB: a longer file says how much was cut (read parts of it with run_command: sed -n, grep, head -c, tail -c). Bytes that are not UTF-8 come back as base64, said so on the first line.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn read_file(&self, Parameters(p): Parameters<PathParams>) -> CallToolResult {
        let read = async {
            self.held(&p.sandbox_id).await?.sandbox.fs().read_limit(self.bounds.max_read).read(&p.path).await
        };
        match read.await {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) if text.len() <= self.output_limit => {
                    CallToolResult::success(vec![ContentBlock::text(text)])
                }
                Ok(text) => {
                    let mut capture = Capture::unspooled(self.output_limit);
                    capture.push(text.as_bytes());
                    let shown = output::render(&p.path, &capture, Some(&Saved::Whole(p.path.clone())));
                    CallToolResult::success(vec![ContentBlock::text(shown)])
                }
                Err(e) => {
                    let bytes = e.into_bytes();
                    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes);
                    if encoded.len() > self.output_limit {
                        return CallToolResult::success(vec![ContentBlock::text(format!(
                            "(not UTF-8: {} bytes, whose base64 ({} bytes) is over this server's output limit of {} bytes: \
                             look at parts of it with run_command, e.g. od -A d -t x1 -N 256 {path} or base64 {path} | head -c 4000)",
                            bytes.len(),
                            encoded.len(),
                            self.output_limit,
                            path = p.path
                        ))]);
                    }
                    CallToolResult::success(vec![ContentBlock::text(format!(
                        "(not UTF-8: {} bytes, base64)\n{encoded}",
                        bytes.len()
                    ))])
                }
            },
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        description = "Write a file in one of this session's sandboxes, creating or replacing it (and its missing parent directories). content is text, or base64 with encoding \"base64\" for bytes that are not UTF-8.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn write_file(&self, Parameters(p): Parameters<WriteFileParams>) -> CallToolResult {
        let write = async {
            let bytes = match p.encoding.as_deref() {
                None | Some("text") => p.content.into_bytes(),
                Some("base64") => base64::engine::general_purpose::STANDARD
                    .decode(p.content.trim())
                    .map_err(|e| Error::invalid_input(format!("content is not valid base64: {e}")))?,
                Some(other) => {
                    return Err(Error::invalid_input(format!(
                        "encoding {other:?} is neither \"text\" nor \"base64\""
                    )));
                }
            };
            let len = bytes.len();
            self.held(&p.sandbox_id).await?.sandbox.fs().write(&p.path, bytes).await?;
            Ok::<_, Error>(len)
        };
        match write.await {
            Ok(len) => {
                CallToolResult::success(vec![ContentBlock::text(format!("wrote {len} bytes to {}", p.path))])
            }
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        description = "List a directory of this session's sandbox: one entry a line, directories with a trailing slash, files with their size.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_files(&self, Parameters(p): Parameters<PathParams>) -> CallToolResult {
        let list = async { self.held(&p.sandbox_id).await?.sandbox.fs().list(&p.path).await };
        match list.await {
            Ok(entries) => {
                let lines: Vec<String> = entries
                    .iter()
                    .map(|e| match e.kind {
                        FileKind::Dir => format!("{}/", e.name),
                        FileKind::File => format!("{}\t{} bytes", e.name, e.size),
                        _ => format!("{}\t({:?})", e.name, e.kind),
                    })
                    .collect();
                CallToolResult::success(vec![ContentBlock::text(lines.join("\n"))])
            }
            Err(e) => tool_error(&e),
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SandboxServer {
    /// The server's name and what an agent should know before its first call: the lifetime
    /// it states is the transport's (over stdio a client's sandboxes end with its session;
    /// over HTTP they belong to the token and outlive every session).
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(rmcp::model::ServerCapabilities::builder().enable_tools().build())
            .with_server_info(rmcp::model::Implementation::new("sandboxio", env!("CARGO_PKG_VERSION")))
            .with_instructions(instructions(self.over_http))
    }

    /// The router's call, with rmcp's own refusal of malformed arguments (a missing or
    /// unknown field, a wrong type) given the SBX code and shape of every other tool error.
    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let call = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        let response = self.tool_router.call(call).await?;
        Ok(match response {
            rmcp::model::CallToolResponse::Complete(result) => argument_error(result).into(),
            other => other,
        })
    }
}

/// `sandboxio mcp`: over stdio, serves until the client closes stdin (or Ctrl-C); over
/// HTTP, until SIGINT or SIGTERM. Then kills the client's sandboxes.
pub async fn serve(args: McpArgs) -> i32 {
    let max_ttl = Duration::from_secs(args.max_ttl);
    let server = match SandboxServer::new(&args.dsn, args.sandbox, max_ttl, args.max_sandboxes) {
        Ok(server) => server
            .with_max_read(args.max_read.saturating_mul(1024 * 1024))
            .with_timeouts(Duration::from_secs(args.exec_timeout), Duration::from_secs(args.cell_timeout))
            .with_output_limit(usize::try_from(args.output_limit.saturating_mul(1024)).unwrap_or(usize::MAX)),
        Err(e) => return crate::commands::fail(false, &e),
    };
    if args.transport == Transport::Http {
        let token = std::env::var(&args.http.token_env).unwrap_or_default();
        if token.len() < 16 {
            eprintln!(
                "sandboxio mcp: --transport http needs a bearer token of at least 16 characters in ${}",
                args.http.token_env
            );
            return crate::commands::EXIT_ERROR;
        }
        return http::serve(server, &args.http, &token).await;
    }
    let session = server.clone();
    // Where stdin and stdout are pipes (as an MCP client starts a server), rmcp reads and
    // writes them on the reactor: tokio's stdio hands every read and write to the blocking
    // pool, a thread wake-up per message each way, which a loaded machine makes a wait of
    // its own. Anything else (a terminal, a file) falls back to those blocking handles.
    let code = match server.serve(rmcp::transport::stdio_pipes()).await {
        Ok(running) => {
            tokio::select! {
                _ = running.waiting() => 0,
                () = crate::commands::interrupt() => crate::commands::EXIT_INTERRUPTED,
            }
        }
        Err(e) => {
            eprintln!("sandboxio mcp: the session did not start: {e}");
            1
        }
    };
    session.end_session().await;
    code
}

#[cfg(test)]
mod tests;
