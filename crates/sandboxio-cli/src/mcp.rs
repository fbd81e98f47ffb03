//! `sandboxio mcp`: one sandbox per MCP session, created on the first tool call with the
//! operator's network policy, and killed when the session ends.
//!
//! A tool is registered only where the backend's capabilities for the configured DSN serve
//! it (an upper bound: a call the particular sandbox cannot serve comes back as the typed
//! refusal). Every failure is an MCP tool error (`isError: true`) carrying the sandboxio
//! code and message, never a protocol error or a crash.

use std::sync::Arc;

use base64::Engine as _;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use sandboxio::{Capabilities, Code, Command, Error, ExecResult, FileKind, MimeBundle, Sandbox};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::Mutex;

use crate::args::{McpArgs, SandboxOpts};
use crate::commands::{Within as _, create_sandbox};

/// Which capability each tool needs; a tool whose capability the backend lacks is not
/// registered.
pub const TOOL_NEEDS: &[(&str, Capabilities)] = &[
    ("run_command", Capabilities::RUN),
    ("run_code", Capabilities::RUN_CODE),
    ("read_file", Capabilities::FILESYSTEM),
    ("write_file", Capabilities::FILESYSTEM),
    ("list_files", Capabilities::FILESYSTEM),
];

/// `run_command`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RunCommandParams {
    /// The command, run by `sh -c` in the sandbox.
    pub command: String,
    /// Kill it after this many seconds.
    pub timeout_seconds: Option<u64>,
}

/// `run_code`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RunCodeParams {
    /// A Python cell; its last expression's value comes back as a rich result.
    pub code: String,
    /// Interrupt it after this many seconds.
    pub timeout_seconds: Option<u64>,
}

/// `read_file`'s and `list_files`' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PathParams {
    /// A path in the sandbox (relative ones are under its working directory).
    pub path: String,
}

/// `write_file`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WriteFileParams {
    /// A path in the sandbox (relative ones are under its working directory).
    pub path: String,
    /// The file's new content, as text.
    pub content: String,
}

/// The server: the configured backend, and the session's sandbox once a tool made it.
#[derive(Clone)]
pub struct SandboxServer {
    dsn: Arc<str>,
    opts: Arc<SandboxOpts>,
    sandbox: Arc<Mutex<Option<Arc<Sandbox>>>>,
    tool_router: ToolRouter<Self>,
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
    /// A server for `dsn`, registering only the tools its capabilities serve. Does no I/O.
    ///
    /// # Errors
    ///
    /// The DSN's configuration error (malformed, unknown scheme, feature off).
    pub fn new(dsn: &str, opts: SandboxOpts) -> sandboxio::Result<Self> {
        let caps = Sandbox::capabilities_of(dsn)?;
        let mut tool_router = Self::tool_router();
        for (name, needs) in TOOL_NEEDS {
            if !caps.contains(*needs) {
                tool_router.remove_route(name);
            }
        }
        Ok(SandboxServer {
            dsn: Arc::from(dsn),
            opts: Arc::new(opts),
            sandbox: Arc::new(Mutex::new(None)),
            tool_router,
        })
    }

    /// The names of the registered tools, in order.
    #[cfg(test)]
    pub fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.tool_router.list_all().into_iter().map(|t| t.name.into_owned()).collect();
        names.sort();
        names
    }

    /// The session's sandbox, created by the first call that needs it.
    async fn sandbox(&self) -> sandboxio::Result<Arc<Sandbox>> {
        let mut slot = self.sandbox.lock().await;
        if let Some(sandbox) = slot.as_ref() {
            return Ok(Arc::clone(sandbox));
        }
        let sandbox = Arc::new(create_sandbox(&self.dsn, &self.opts, false, None).await?);
        *slot = Some(Arc::clone(&sandbox));
        Ok(sandbox)
    }

    /// Kills the session's sandbox, if a tool made one.
    pub async fn end_session(&self) {
        if let Some(sandbox) = self.sandbox.lock().await.take()
            && let Err(e) = sandbox.kill().await
        {
            eprintln!("sandboxio mcp: killing the session's sandbox: {e}");
        }
    }

    #[tool(
        description = "Run a shell command (sh -c) in this session's sandbox. Returns the exit code, stdout and stderr; a non-zero exit is a result, not an error."
    )]
    async fn run_command(&self, Parameters(p): Parameters<RunCommandParams>) -> CallToolResult {
        let run =
            async { self.sandbox().await?.run(Command::shell(p.command).within(p.timeout_seconds)).await };
        match run.await {
            Ok(result) => CallToolResult::success(vec![ContentBlock::text(exec_text(&result))]),
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        description = "Run a Python cell in this session's sandbox. Returns stdout and stderr as text, and rich results: images (PNG plots) as image content, HTML and other text as text. A cell that raised is an error result with its traceback."
    )]
    async fn run_code(&self, Parameters(p): Parameters<RunCodeParams>) -> CallToolResult {
        let run = async { self.sandbox().await?.run_code(Code::new(p.code).within(p.timeout_seconds)).await };
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
        description = "Read a file of this session's sandbox. Text comes back as text; other bytes as base64."
    )]
    async fn read_file(&self, Parameters(p): Parameters<PathParams>) -> CallToolResult {
        let read = async { self.sandbox().await?.fs().read(&p.path).await };
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
        let write = async { self.sandbox().await?.fs().write(&p.path, p.content).await };
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
        let list = async { self.sandbox().await?.fs().list(&p.path).await };
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
    instructions = "Runs commands and Python code in one sandbox for this session (created on the first call, removed when the session ends). The operator chose its backend and network policy."
)]
impl ServerHandler for SandboxServer {}

/// `sandboxio mcp`: serves until the client closes stdin (or Ctrl-C), then kills the
/// session's sandbox.
pub async fn serve(args: McpArgs) -> i32 {
    let server = match SandboxServer::new(&args.dsn, args.sandbox) {
        Ok(server) => server,
        Err(e) => return crate::commands::fail(false, &e),
    };
    let session = server.clone();
    let code = match server.serve(rmcp::transport::stdio()).await {
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
    use sandboxio::{Capabilities, NetworkPolicy};

    use super::SandboxServer;
    use crate::args::SandboxOpts;

    fn deny() -> SandboxOpts {
        SandboxOpts { network: NetworkPolicy::deny_all(), memory: None, label: Vec::new() }
    }

    #[expect(clippy::unnecessary_wraps, reason = "the signature of a scheme factory")]
    fn run_only(_: &sandboxio::dsn::Dsn) -> sandboxio::Result<Arc<dyn Backend>> {
        Ok(Arc::new(FakeBackend::new().with_capabilities(Capabilities::RUN | Capabilities::NETWORK_DENY)))
    }

    #[test]
    fn tools_follow_the_capabilities() {
        let all = SandboxServer::new("fake://", deny()).unwrap();
        assert_eq!(all.tool_names(), ["list_files", "read_file", "run_code", "run_command", "write_file"]);
        sandboxio::dsn::register_scheme("clitestrun", run_only).unwrap();
        let narrow = SandboxServer::new("clitestrun://", deny()).unwrap();
        assert_eq!(narrow.tool_names(), ["run_command"]);
        let err = SandboxServer::new("nosuch://", deny()).err().unwrap();
        assert_eq!(err.code(), sandboxio::ErrorCode::Configuration);
    }

    /// The server behind rmcp's own client over an in-memory pipe, on the fake: the
    /// protocol path without a process (the binary's stdio path is `tests/mcp_stdio.rs`).
    #[tokio::test]
    async fn over_a_pipe_on_the_fake() {
        let (server_io, client_io) = tokio::io::duplex(1 << 16);
        let server = SandboxServer::new("fake://", deny()).unwrap();
        let session = server.clone();
        let serving = tokio::spawn(async move { server.serve(server_io).await.unwrap().waiting().await });
        let client = ().serve(client_io).await.unwrap();
        let tools: Vec<String> =
            client.list_all_tools().await.unwrap().into_iter().map(|t| t.name.into_owned()).collect();
        assert_eq!(tools.len(), 5, "{tools:?}");
        let call = async |tool: &'static str, args: serde_json::Value| {
            let params = CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
            client.call_tool(params).await.unwrap()
        };
        let out = call("run_command", serde_json::json!({ "command": "echo hello; exit 3" })).await;
        assert_eq!(out.is_error, Some(false));
        let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
        assert_eq!(text.text, "exit code 3\n--- stdout ---\nhello\n");
        let out = call("read_file", serde_json::json!({ "path": "/missing.txt" })).await;
        assert_eq!(out.is_error, Some(true));
        assert_eq!(out.structured_content.as_ref().unwrap()["code"], "SBX-010");
        client.cancel().await.unwrap();
        serving.await.unwrap().unwrap();
        assert!(session.sandbox.lock().await.is_some(), "the first call made the session's sandbox");
        session.end_session().await;
        assert!(session.sandbox.lock().await.is_none());
    }
}
