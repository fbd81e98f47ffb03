//! `run_command` and `run_code`: a command or a cell streamed into each stream's budget,
//! its timeout said with the output so far, and the sandbox's Python session kept (or
//! said lost) across calls.

use rmcp::model::{CallToolResult, ContentBlock};
use sandboxio::{Code, Command, Error, ErrorCode};

use super::content::{Outputs, bundle_content, status_text, tool_error};
use super::params::{RunCodeParams, RunCommandParams};
use super::{SandboxServer, python};

impl SandboxServer {
    /// The `run_command` tool's work.
    pub(super) async fn run_command_call(&self, p: RunCommandParams) -> CallToolResult {
        let run = async {
            let held = self.held(&p.sandbox_id).await?;
            let timeout = self.bounds.exec_timeout(p.timeout_seconds)?;
            let mut stream = held.sandbox.stream(Command::shell(p.command).timeout(timeout))?;
            let mut outputs = Outputs::new(self.output_limit);
            // The stream's one error item ends it; `wait` then gives that error again.
            while let Some(Ok(chunk)) = stream.next_chunk().await {
                outputs.push(&chunk);
            }
            let ended = stream.wait().await;
            Ok::<_, Error>((held, ended, outputs))
        };
        let (held, ended, outputs) = match run.await {
            Ok(ran) => ran,
            Err(e) => return tool_error(&e),
        };
        let first = match &ended {
            Ok(result) => status_text(result.status),
            Err(e) if e.code() == ErrorCode::ExecutionTimeout => {
                format!("timed out: {e}; the command was killed. Its output until then:")
            }
            Err(e) => return tool_error(e),
        };
        let mut text = first;
        for part in outputs.render(&held.sandbox).await {
            text.push('\n');
            text.push_str(&part);
        }
        match ended {
            Ok(_) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(e) => {
                let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
                result.structured_content =
                    Some(serde_json::json!({ "code": e.code().as_str(), "message": e.to_string() }));
                result
            }
        }
    }

    /// The `run_code` tool's work.
    pub(super) async fn run_code_call(&self, p: RunCodeParams) -> CallToolResult {
        let run = async {
            let held = self.held(&p.sandbox_id).await?;
            let timeout = self.bounds.cell_timeout(p.timeout_seconds)?;
            // Rich results keep at most --max-read: the answer holds them two or three times
            // over (content, then its JSON).
            let limit = usize::try_from(self.bounds.max_read).unwrap_or(usize::MAX);
            let cell = held.python.cell(&held.sandbox).await?;
            let mut code = Code::new(p.code).timeout(timeout).output_limit(limit);
            if let python::Cell::InContext(ctx, _) = &cell {
                code = code.in_context(ctx);
            }
            let mut stream = held.sandbox.run_code_stream(code)?;
            let mut outputs = Outputs::new(self.output_limit);
            while let Some(Ok(chunk)) = stream.next_chunk().await {
                outputs.push(&chunk);
            }
            let ended = stream.wait().await;
            // The cell has ended: no longer in flight (a timed-out one's probe may go).
            let ctx = cell.ended();
            Ok::<_, Error>((held, ctx, ended, outputs))
        };
        let (held, ctx, ended, outputs) = match run.await {
            Ok(ran) => ran,
            Err(e) => return tool_error(&e),
        };
        let mut content = Vec::new();
        if ctx.is_none() {
            content.push(ContentBlock::text(
                "(this backend keeps no Python state between cells: this cell ran on its own)",
            ));
        }
        let timed_out = match (&ended, &ctx) {
            (Err(e), Some(ctx)) if e.code() == ErrorCode::ExecutionTimeout => {
                let kept = held.python.survived(&held.sandbox, ctx).await;
                Some(if kept {
                    format!(
                        "timed out: {e}; the cell was interrupted and the Python session keeps its state. Its output until then:"
                    )
                } else {
                    format!(
                        "timed out: {e}; the interpreter did not stop on the interrupt and was killed, so the Python session's state is lost: call restart_python for a fresh one. Its output until then:"
                    )
                })
            }
            (Err(e), None) if e.code() == ErrorCode::ExecutionTimeout => {
                Some(format!("timed out: {e}. Its output until then:"))
            }
            (Err(e), Some(ctx)) => {
                if held.python.after(ctx, Some(e)).await {
                    return tool_error(&python::lost_error(&e.to_string()));
                }
                return tool_error(e);
            }
            (Err(e), None) => return tool_error(e),
            (Ok(_), _) => None,
        };
        if let Some(said) = &timed_out {
            content.push(ContentBlock::text(said.clone()));
        }
        for part in outputs.render(&held.sandbox).await {
            content.push(ContentBlock::text(part));
        }
        let result = match ended {
            Ok(result) => result,
            Err(e) => {
                let mut result = CallToolResult::error(content);
                result.structured_content =
                    Some(serde_json::json!({ "code": e.code().as_str(), "message": e.to_string() }));
                return result;
            }
        };
        for bundle in &result.results {
            content.extend(bundle_content(bundle));
        }
        if result.truncated {
            content.push(ContentBlock::text(format!(
                "[truncated: the cell's rich results past the server's {} bytes (--max-read) were dropped]",
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
}
