//! What the tools answer: errors with their SBX code, a command's end, each stream within
//! its budget (the whole of a cut one copied into the sandbox), rich results as MCP content,
//! rmcp's argument errors in the same shape, and the instructions `initialize` gives.

use base64::Engine as _;
use rmcp::model::{CallToolResult, ContentBlock};
use sandboxio::exec::{MimeBundle, OutputChunk, StreamKind};
use sandboxio::{Error, ExitStatus, Sandbox};

use super::output::{self, Capture, Saved};

/// A tool error carrying the sandboxio code and message (`[SBX-008] ...`), and the code as
/// structured content.
pub(super) fn tool_error(e: &Error) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(e.to_string())]);
    result.structured_content =
        Some(serde_json::json!({ "code": e.code().as_str(), "message": e.to_string() }));
    result
}

/// A command's end as the first line of its answer.
pub(super) fn status_text(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "ended".to_owned(),
    }
}

/// stdout and stderr of a command or a cell, each within its budget.
pub(super) struct Outputs {
    stdout: Capture,
    stderr: Capture,
}

impl Outputs {
    pub(super) fn new(limit: usize) -> Self {
        Outputs { stdout: Capture::new(limit), stderr: Capture::new(limit) }
    }

    /// Adds a whole result's output (a backend that does not stream).
    pub(super) fn push_all(&mut self, stdout: &[u8], stderr: &[u8]) {
        self.stdout.push(stdout);
        self.stderr.push(stderr);
    }

    pub(super) fn push(&mut self, chunk: &OutputChunk) {
        match chunk.stream {
            StreamKind::Stdout => self.stdout.push(&chunk.data),
            StreamKind::Stderr => self.stderr.push(&chunk.data),
        }
    }

    /// Each non-empty stream under its header; the whole of a cut one is first copied into
    /// the sandbox, and its marker says where.
    pub(super) async fn render(&self, sandbox: &Sandbox) -> Vec<String> {
        let mut texts = Vec::new();
        for (name, capture) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            if capture.total() == 0 {
                continue;
            }
            let saved = match capture.spool() {
                Some(spool) => Some(save(sandbox, name, spool).await),
                None => None,
            };
            texts.push(output::render(name, capture, saved.as_ref()));
        }
        texts
    }
}

/// Copies a spooled stream into the sandbox, under [`output::SAVED_DIR`].
pub(super) async fn save(sandbox: &Sandbox, stream: &str, spool: &output::Spool) -> Saved {
    let path = output::saved_path(stream);
    let copied = async {
        sandbox.fs().mkdir(output::SAVED_DIR).await?;
        sandbox.fs().upload(spool.path(), &path).await
    };
    match (copied.await, spool.stopped()) {
        (Ok(()), None) => Saved::Whole(path),
        (Ok(()), Some(why)) => Saved::Part { path, bytes: spool.written(), why: why.to_owned() },
        (Err(e), _) => Saved::Nowhere(format!("copying it into the sandbox failed: {e}")),
    }
}

/// A rich result as MCP content: images as image content, HTML and other text as text.
pub(super) fn bundle_content(bundle: &MimeBundle) -> Vec<ContentBlock> {
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
    // A plain form beside HTML (a DataFrame's text table), or alone when nothing richer came.
    if (content.is_empty() || bundle.contains_key("text/html"))
        && let Some(text) = bundle.get("text/plain")
    {
        content.push(ContentBlock::text(String::from_utf8_lossy(text)));
    }
    content
}

/// What `initialize` tells the agent (see [`SandboxServer::get_info`]).
pub(super) fn instructions(over_http: bool) -> String {
    let lifetime = if over_http {
        "Sandboxes belong to this server's token, not to an MCP session: every session of the token sees and may use them, and they outlive the session; they end by kill_sandbox, by their TTL, or when the server stops."
    } else {
        "The sandboxes of this session are removed when it ends."
    };
    format!(
        "Runs commands and Python code in sandboxes: create_sandbox returns an id that every other tool takes. {lifetime} \
         Each sandbox keeps one Python session: run_code cells share variables and imports until restart_python. \
         Long output comes back as its head and tail, with a line naming the file in the sandbox that holds all of it. \
         Commands and cells end at the operator's timeout unless the call asks for less. \
         The operator chose the backend and the widest network policy, TTL and number of sandboxes."
    )
}

/// rmcp answers arguments that do not deserialize with a bare text error; this gives it the
/// SBX code (`InvalidInput`) and structured content of the others.
pub(super) fn argument_error(result: CallToolResult) -> CallToolResult {
    if result.is_error != Some(true) || result.structured_content.is_some() {
        return result;
    }
    let said = match result.content.as_slice() {
        [ContentBlock::Text(text)] if text.text.starts_with("failed to deserialize parameters:") => {
            &text.text
        }
        _ => return result,
    };
    tool_error(&Error::invalid_input(format!(
        "the tool's arguments: {}; its input schema (tools/list) names the fields it takes",
        said.trim_start_matches("failed to deserialize parameters:").trim()
    )))
}
