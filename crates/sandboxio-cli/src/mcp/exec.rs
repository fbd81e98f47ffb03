//! `run_command` and `run_code`: a command or a cell streamed into each stream's budget,
//! its timeout said with the output so far, and the sandbox's Python session kept (or
//! said lost) across calls.

use rmcp::model::{CallToolResult, ContentBlock};
use sandboxio::{Code, CodeResult, Command, Error, ErrorCode, Sandbox, policy::Capabilities};

use super::content::{Outputs, bundle_content, status_text, tool_error};
use super::params::{RunCodeParams, RunCommandParams};
use super::{SandboxServer, python};

impl SandboxServer {
    /// The `run_command` tool's work.
    pub(super) async fn run_command_call(&self, p: RunCommandParams) -> CallToolResult {
        let run = async {
            let held = self.held(&p.sandbox_id).await?;
            let timeout = self.bounds.exec_timeout(p.timeout_seconds)?;
            let command = Command::shell(p.command).timeout(timeout);
            let mut outputs = Outputs::new(self.output_limit);
            let ended = if held.sandbox.capabilities().contains(Capabilities::STREAM) {
                let mut stream = held.sandbox.stream(command)?;
                // The stream's one error item ends it; `wait` then gives that error again.
                while let Some(Ok(chunk)) = stream.next_chunk().await {
                    outputs.push(&chunk);
                }
                stream.wait().await
            } else {
                // A backend that runs commands but does not stream them: the whole result
                // (or a timeout's partial one), then the same budgets.
                let ran = held.sandbox.run(command).await;
                match &ran {
                    Ok(r) => outputs.push_all(&r.stdout, &r.stderr),
                    Err(Error::ExecutionTimeout { partial, .. }) => {
                        outputs.push_all(&partial.stdout, &partial.stderr);
                    }
                    Err(_) => {}
                }
                ran
            };
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
            let (ended, outputs) = run_cell(&held.sandbox, code, self.output_limit).await?;
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

/// Runs `code` streamed into `limit`-byte budgets, or whole where the adapter cannot stream
/// cells; returns how it ended and its output.
///
/// # Errors
///
/// The refusal to start it.
async fn run_cell(
    sandbox: &Sandbox,
    code: Code,
    limit: usize,
) -> sandboxio::Result<(sandboxio::Result<CodeResult>, Outputs)> {
    let mut outputs = Outputs::new(limit);
    let ended = match sandbox.run_code_stream(code.clone()) {
        Ok(mut stream) => {
            while let Some(Ok(chunk)) = stream.next_chunk().await {
                outputs.push(&chunk);
            }
            stream.wait().await
        }
        // An adapter that runs cells but cannot stream them: the whole result, then the
        // same budgets.
        Err(e) if e.code() == ErrorCode::CapabilityNotSupported => {
            let ran = sandbox.run_code(code).await;
            if let Ok(r) = &ran {
                outputs.push_all(&r.stdout, &r.stderr);
            }
            ran
        }
        Err(e) => return Err(e),
    };
    Ok((ended, outputs))
}
