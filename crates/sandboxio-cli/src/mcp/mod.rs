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
//! The HTTP transport is in [`http`] (its accept loop in [`accept`], its bearer token in
//! [`bearer`], its sessions in [`sessions`]).

mod accept;
mod bearer;
mod http;
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
use sandboxio::{
    Code, Command, Error, ExecResult, Sandbox, exec::MimeBundle, fs::FileKind, policy::Capabilities,
};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::Mutex;

use crate::args::{McpArgs, SandboxOpts, Transport, parse_network};
use crate::bounds::Bounds;
use crate::commands::{Within as _, create_sandbox};

/// Which capability each tool needs; a tool whose capability the backend lacks is not
/// registered.
pub const TOOL_NEEDS: &[(&str, Capabilities)] = &[
    ("create_sandbox", Capabilities::empty()),
    ("kill_sandbox", Capabilities::empty()),
    ("list_sandboxes", Capabilities::empty()),
    ("extend_sandbox", Capabilities::EXTEND_TTL),
    ("run_command", Capabilities::RUN),
    ("run_code", Capabilities::RUN_CODE),
    ("read_file", Capabilities::FILESYSTEM),
    ("write_file", Capabilities::FILESYSTEM),
    ("list_files", Capabilities::FILESYSTEM),
];

/// `create_sandbox`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateParams {
    /// Network policy: `deny`, `allow`, or `allow=HOST,..`; within the operator's (the
    /// operator's own when absent).
    pub network: Option<String>,
    /// How long the sandbox may live, in seconds, within the operator's bound (10 minutes,
    /// or the bound if shorter, when absent).
    pub ttl_seconds: Option<u64>,
}

/// The arguments of the tools that take only a sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct IdParams {
    /// The id `create_sandbox` returned.
    pub sandbox_id: String,
}

/// `extend_sandbox`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ExtendParams {
    /// The id `create_sandbox` returned.
    pub sandbox_id: String,
    /// The sandbox then lives this many seconds from now (within the operator's bound).
    pub ttl_seconds: u64,
}

/// `run_command`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RunCommandParams {
    /// The id `create_sandbox` returned.
    pub sandbox_id: String,
    /// The command, run by `sh -c` in the sandbox.
    pub command: String,
    /// Kill it after this many seconds (0: at once; over 30 days counts as 30 days).
    pub timeout_seconds: Option<u64>,
}

/// `run_code`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RunCodeParams {
    /// The id `create_sandbox` returned.
    pub sandbox_id: String,
    /// A Python cell; its last expression's value comes back as a rich result.
    pub code: String,
    /// Interrupt it after this many seconds (0: at once; over 30 days counts as 30 days).
    pub timeout_seconds: Option<u64>,
}

/// `read_file`'s and `list_files`' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PathParams {
    /// The id `create_sandbox` returned.
    pub sandbox_id: String,
    /// A path in the sandbox (relative ones are under its working directory).
    pub path: String,
}

/// `write_file`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WriteFileParams {
    /// The id `create_sandbox` returned.
    pub sandbox_id: String,
    /// A path in the sandbox (relative ones are under its working directory).
    pub path: String,
    /// The file's new content, as text.
    pub content: String,
}

/// The server: the configured backend and bounds, and the client's sandboxes by id.
#[derive(Clone)]
pub struct SandboxServer {
    dsn: Arc<str>,
    opts: Arc<SandboxOpts>,
    bounds: Arc<Bounds>,
    sandboxes: Arc<Mutex<BTreeMap<String, Arc<Sandbox>>>>,
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

/// A tool error carrying the sandboxio code and message (`[SBX-008] ...`), and the code as
/// structured content.
fn tool_error(e: &Error) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(e.to_string())]);
    result.structured_content =
        Some(serde_json::json!({ "code": e.code().as_str(), "message": e.to_string() }));
    result
}

/// Output under a header naming its stream: `--- stdout ---\nhi\n`.
fn labelled(stream: &str, bytes: &[u8]) -> String {
    format!("--- {stream} ---\n{}", String::from_utf8_lossy(bytes))
}

fn exec_text(result: &ExecResult) -> String {
    let status = match (result.status.code(), result.status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "ended".to_owned(),
    };
    let mut text = status;
    for (name, bytes) in [("stdout", &result.stdout), ("stderr", &result.stderr)] {
        if !bytes.is_empty() {
            text.push('\n');
            text.push_str(&labelled(name, bytes));
        }
    }
    text
}

/// A rich result as MCP content: images as image content, HTML and other text as text.
fn bundle_content(bundle: &MimeBundle) -> Vec<ContentBlock> {
    let mut content = Vec::new();
    for (mime, data) in bundle {
        if mime.starts_with("image/") && mime != "image/svg+xml" {
            content.push(ContentBlock::image(base64::engine::general_purpose::STANDARD.encode(data), mime));
        }
    }
    for mime in ["text/html", "image/svg+xml", "text/markdown", "application/json"] {
        if let Some(data) = bundle.get(mime) {
            content.push(ContentBlock::text(String::from_utf8_lossy(data)));
        }
    }
    if content.is_empty()
        && let Some(text) = bundle.get("text/plain")
    {
        content.push(ContentBlock::text(String::from_utf8_lossy(text)));
    }
    content
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
        };
        Ok(SandboxServer {
            dsn: Arc::from(dsn),
            opts: Arc::new(opts),
            bounds: Arc::new(bounds),
            sandboxes: Arc::new(Mutex::new(BTreeMap::new())),
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

    /// The names of the registered tools, in order.
    #[cfg(test)]
    pub fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.tool_router.list_all().into_iter().map(|t| t.name.into_owned()).collect();
        names.sort();
        names
    }

    /// The client's sandbox `id`.
    async fn sandbox(&self, id: &str) -> sandboxio::Result<Arc<Sandbox>> {
        self.sandboxes.lock().await.get(id).cloned().ok_or_else(|| {
            Error::sandbox_gone(id, "it is not one of this session's sandboxes (list_sandboxes names them)")
        })
    }

    /// Kills every sandbox of the client.
    pub async fn end_session(&self) {
        let sandboxes = std::mem::take(&mut *self.sandboxes.lock().await);
        for (id, sandbox) in sandboxes {
            if let Err(e) = sandbox.kill().await {
                eprintln!("sandboxio mcp: killing sandbox {}: {e}", sandboxio::text::escape(&id));
            }
        }
    }

    #[tool(
        description = "Create a sandbox for this session and return its id, which every other tool takes. Optional: network (deny, allow, or allow=HOST,..; within what the operator allows) and ttl_seconds."
    )]
    async fn create_sandbox(&self, Parameters(p): Parameters<CreateParams>) -> CallToolResult {
        let create = async {
            let asked = p.network.as_deref().map(parse_network).transpose().map_err(Error::invalid_input)?;
            let network = self.bounds.network(asked)?;
            let ttl = self.bounds.ttl(p.ttl_seconds)?;
            // A place is taken under the map's lock (live and under way together), so that
            // concurrent calls cannot pass the bound together; the create runs without it.
            let slot = {
                let sandboxes = self.sandboxes.lock().await;
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
            sandboxes.insert(id.clone(), Arc::new(sandbox));
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

    #[tool(description = "Kill one of this session's sandboxes by id.")]
    async fn kill_sandbox(&self, Parameters(p): Parameters<IdParams>) -> CallToolResult {
        let kill = async {
            let sandbox = self.sandbox(&p.sandbox_id).await?;
            sandbox.kill().await?;
            self.sandboxes.lock().await.remove(&p.sandbox_id);
            Ok::<_, Error>(())
        };
        match kill.await {
            Ok(()) => CallToolResult::success(vec![ContentBlock::text(format!("killed {}", p.sandbox_id))]),
            Err(e) => tool_error(&e),
        }
    }

    #[tool(description = "List this session's sandboxes: one id a line.")]
    async fn list_sandboxes(&self) -> CallToolResult {
        let ids: Vec<String> = self.sandboxes.lock().await.keys().cloned().collect();
        let mut result = CallToolResult::success(vec![ContentBlock::text(ids.join("\n"))]);
        result.structured_content = Some(serde_json::json!({ "sandbox_ids": ids }));
        result
    }

    #[tool(
        description = "Make one of this session's sandboxes live ttl_seconds from now (within the operator's bound)."
    )]
    async fn extend_sandbox(&self, Parameters(p): Parameters<ExtendParams>) -> CallToolResult {
        let extend = async {
            let ttl = self.bounds.ttl(Some(p.ttl_seconds))?;
            self.sandbox(&p.sandbox_id).await?.extend_ttl(ttl).await
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
        description = "Run a shell command (sh -c) in one of this session's sandboxes. Returns the exit code, stdout and stderr; a non-zero exit is a result, not an error."
    )]
    async fn run_command(&self, Parameters(p): Parameters<RunCommandParams>) -> CallToolResult {
        let run = async {
            self.sandbox(&p.sandbox_id).await?.run(Command::shell(p.command).within(p.timeout_seconds)).await
        };
        match run.await {
            Ok(result) => CallToolResult::success(vec![ContentBlock::text(exec_text(&result))]),
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        description = "Run a Python cell in one of this session's sandboxes. Returns stdout and stderr as text, and rich results: images (PNG plots) as image content, HTML and other text as text. A cell that raised is an error result with its traceback."
    )]
    async fn run_code(&self, Parameters(p): Parameters<RunCodeParams>) -> CallToolResult {
        let run = async {
            // The cell keeps at most --max-read of output and rich results: the answer holds
            // them two or three times over (content, then its JSON).
            let limit = usize::try_from(self.bounds.max_read).unwrap_or(usize::MAX);
            let code = Code::new(p.code).within(p.timeout_seconds).output_limit(limit);
            self.sandbox(&p.sandbox_id).await?.run_code(code).await
        };
        let result = match run.await {
            Ok(result) => result,
            Err(e) => return tool_error(&e),
        };
        let mut content = Vec::new();
        for (name, bytes) in [("stdout", &result.stdout), ("stderr", &result.stderr)] {
            if !bytes.is_empty() {
                content.push(ContentBlock::text(labelled(name, bytes)));
            }
        }
        for bundle in &result.results {
            content.extend(bundle_content(bundle));
        }
        if result.truncated {
            content.push(ContentBlock::text(format!(
                "[truncated: the cell's output and rich results past the server's {} bytes (--max-read) were dropped]",
                self.bounds.max_read
            )));
        }
        match &result.error {
            Some(e) => {
                let text = if e.traceback.is_empty() {
                    format!("{}: {}", e.name, e.value)
                } else {
                    e.traceback.join("\n")
                };
                content.push(ContentBlock::text(text));
                CallToolResult::error(content)
            }
            None => CallToolResult::success(content),
        }
    }

    #[tool(
        description = "Read a file of one of this session's sandboxes. Text comes back as text; other bytes as base64."
    )]
    async fn read_file(&self, Parameters(p): Parameters<PathParams>) -> CallToolResult {
        let read = async {
            self.sandbox(&p.sandbox_id).await?.fs().read_limit(self.bounds.max_read).read(&p.path).await
        };
        match read.await {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
                Err(e) => {
                    let bytes = e.into_bytes();
                    let encoded = base64::engine::general_purpose::STANDARD.encode(&bytes);
                    CallToolResult::success(vec![ContentBlock::text(format!(
                        "(not UTF-8: {} bytes, base64)\n{encoded}",
                        bytes.len()
                    ))])
                }
            },
            Err(e) => tool_error(&e),
        }
    }

    #[tool(description = "Write a text file in this session's sandbox, creating or replacing it.")]
    async fn write_file(&self, Parameters(p): Parameters<WriteFileParams>) -> CallToolResult {
        let len = p.content.len();
        let write = async { self.sandbox(&p.sandbox_id).await?.fs().write(&p.path, p.content).await };
        match write.await {
            Ok(()) => {
                CallToolResult::success(vec![ContentBlock::text(format!("wrote {len} bytes to {}", p.path))])
            }
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        description = "List a directory of this session's sandbox: one entry a line, directories with a trailing slash, files with their size."
    )]
    async fn list_files(&self, Parameters(p): Parameters<PathParams>) -> CallToolResult {
        let list = async { self.sandbox(&p.sandbox_id).await?.fs().list(&p.path).await };
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

#[tool_handler(
    router = self.tool_router,
    name = "sandboxio",
    instructions = "Runs commands and Python code in sandboxes: create_sandbox returns an id that every other tool takes; the session's sandboxes are removed when it ends. The operator chose the backend and the widest network policy, TTL and number of sandboxes."
)]
impl ServerHandler for SandboxServer {}

/// `sandboxio mcp`: over stdio, serves until the client closes stdin (or Ctrl-C); over
/// HTTP, until SIGINT or SIGTERM. Then kills the client's sandboxes.
pub async fn serve(args: McpArgs) -> i32 {
    let max_ttl = Duration::from_secs(args.max_ttl);
    let server = match SandboxServer::new(&args.dsn, args.sandbox, max_ttl, args.max_sandboxes) {
        Ok(server) => server.with_max_read(args.max_read.saturating_mul(1024 * 1024)),
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
mod tests {
    use std::sync::Arc;

    use rmcp::ServiceExt;
    use rmcp::model::{CallToolRequestParams, ContentBlock};
    use sandboxio::backend::Backend;
    use sandboxio::testing::FakeBackend;
    use sandboxio::{NetworkPolicy, policy::Capabilities};

    use super::SandboxServer;
    use crate::args::SandboxOpts;

    fn deny() -> SandboxOpts {
        SandboxOpts { network: NetworkPolicy::deny_all(), memory: None, label: Vec::new() }
    }

    #[expect(clippy::unnecessary_wraps, reason = "the signature of a scheme factory")]
    fn run_only(_: &sandboxio::dsn::Dsn) -> sandboxio::Result<Arc<dyn Backend>> {
        Ok(Arc::new(FakeBackend::new().with_capabilities(Capabilities::RUN | Capabilities::NETWORK_DENY)))
    }

    fn server(dsn: &str) -> sandboxio::Result<SandboxServer> {
        SandboxServer::new(dsn, deny(), std::time::Duration::from_mins(10), 2)
    }

    #[test]
    fn tools_follow_the_capabilities() {
        let all = server("fake://").unwrap();
        let mut every: Vec<&str> = super::TOOL_NEEDS.iter().map(|(name, _)| *name).collect();
        every.sort_unstable();
        assert_eq!(all.tool_names(), every, "the fake serves every tool");
        assert_eq!(every.len(), 9);
        sandboxio::dsn::register_scheme("clitestrun", run_only).unwrap();
        let narrow = server("clitestrun://").unwrap();
        assert_eq!(narrow.tool_names(), ["create_sandbox", "kill_sandbox", "list_sandboxes", "run_command"]);
        let err = server("nosuch://").err().unwrap();
        assert_eq!(err.code(), sandboxio::ErrorCode::Configuration);
    }

    /// `read_file` returns at most the operator's `--max-read` bytes; a larger file is
    /// `TooLarge`, the file of exactly that size the control.
    #[tokio::test]
    async fn read_file_is_bounded_by_the_operators_max_read() {
        let (server_io, client_io) = tokio::io::duplex(1 << 16);
        let server = server("fake://").unwrap().with_max_read(16);
        let serving = tokio::spawn(async move { server.serve(server_io).await.unwrap().waiting().await });
        let client = ().serve(client_io).await.unwrap();
        let call = async |tool: &'static str, args: serde_json::Value| {
            let params = CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
            client.call_tool(params).await.unwrap()
        };
        let out = call("create_sandbox", serde_json::json!({})).await;
        let id = out.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned();
        for (path, size) in [("/at.txt", 16), ("/over.txt", 17)] {
            let content = "x".repeat(size);
            let out =
                call("write_file", serde_json::json!({ "sandbox_id": id, "path": path, "content": content }))
                    .await;
            assert_eq!(out.is_error, Some(false), "{out:?}");
        }
        let out = call("read_file", serde_json::json!({ "sandbox_id": id, "path": "/at.txt" })).await;
        let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
        assert_eq!((out.is_error, text.text.as_str()), (Some(false), "x".repeat(16).as_str()));
        let out = call("read_file", serde_json::json!({ "sandbox_id": id, "path": "/over.txt" })).await;
        let code = out.structured_content.as_ref().unwrap()["code"].clone();
        assert_eq!((out.is_error, code), (Some(true), "SBX-016".into()), "{out:?}");
        client.cancel().await.unwrap();
        serving.await.unwrap().unwrap();
    }

    /// The server behind rmcp's own client over an in-memory pipe, on the fake: the
    /// protocol path without a process (the binary's stdio path is `tests/mcp_stdio.rs`).
    #[tokio::test]
    async fn over_a_pipe_on_the_fake() {
        let (server_io, client_io) = tokio::io::duplex(1 << 16);
        let server = server("fake://").unwrap();
        let session = server.clone();
        let serving = tokio::spawn(async move { server.serve(server_io).await.unwrap().waiting().await });
        let client = ().serve(client_io).await.unwrap();
        let tools: Vec<String> =
            client.list_all_tools().await.unwrap().into_iter().map(|t| t.name.into_owned()).collect();
        assert_eq!(tools.len(), 9, "{tools:?}");
        let call = async |tool: &'static str, args: serde_json::Value| {
            let params = CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
            client.call_tool(params).await.unwrap()
        };
        let code =
            |out: &rmcp::model::CallToolResult| out.structured_content.as_ref().unwrap()["code"].clone();

        let out = call("run_command", serde_json::json!({ "sandbox_id": "fake-1", "command": "true" })).await;
        assert_eq!((out.is_error, code(&out)), (Some(true), "SBX-007".into()), "no such sandbox: {out:?}");
        let out = call("create_sandbox", serde_json::json!({ "network": "allow" })).await;
        assert_eq!((out.is_error, code(&out)), (Some(true), "SBX-013".into()), "wider than deny: {out:?}");
        let out = call("create_sandbox", serde_json::json!({ "ttl_seconds": 601 })).await;
        assert_eq!(
            (out.is_error, code(&out)),
            (Some(true), "SBX-013".into()),
            "above the TTL bound: {out:?}"
        );

        let out = call("create_sandbox", serde_json::json!({ "ttl_seconds": 60 })).await;
        assert_eq!(out.is_error, Some(false), "{out:?}");
        let id = out.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned();
        let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
        assert_eq!(text.text, id);
        let out =
            call("run_command", serde_json::json!({ "sandbox_id": id, "command": "echo hello; exit 3" }))
                .await;
        assert_eq!(out.is_error, Some(false));
        let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
        assert_eq!(text.text, "exit code 3\n--- stdout ---\nhello\n");
        let out = call("read_file", serde_json::json!({ "sandbox_id": id, "path": "/missing.txt" })).await;
        assert_eq!((out.is_error, code(&out)), (Some(true), "SBX-010".into()));
        let out = call("extend_sandbox", serde_json::json!({ "sandbox_id": id, "ttl_seconds": 600 })).await;
        assert_eq!(out.is_error, Some(false), "{out:?}");

        let second = call("create_sandbox", serde_json::json!({})).await;
        assert_eq!(second.is_error, Some(false));
        let out = call("create_sandbox", serde_json::json!({})).await;
        assert_eq!((out.is_error, code(&out)), (Some(true), "SBX-013".into()), "a third is over the bound");
        let out = call("list_sandboxes", serde_json::json!({})).await;
        assert_eq!(out.structured_content.as_ref().unwrap()["sandbox_ids"].as_array().unwrap().len(), 2);
        let out = call("kill_sandbox", serde_json::json!({ "sandbox_id": id })).await;
        assert_eq!(out.is_error, Some(false), "{out:?}");
        let out = call("run_command", serde_json::json!({ "sandbox_id": id, "command": "true" })).await;
        assert_eq!(code(&out), "SBX-007", "killed: {out:?}");

        client.cancel().await.unwrap();
        serving.await.unwrap().unwrap();
        assert_eq!(session.sandboxes.lock().await.len(), 1, "the second is still there");
        session.end_session().await;
        assert!(session.sandboxes.lock().await.is_empty());
    }
}
