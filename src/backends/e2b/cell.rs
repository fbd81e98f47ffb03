//! A code cell on the code interpreter, as a [`CellStream`]: a pump task on the portal
//! reads the execution's lines and hands them over a channel; the cell future (polled by
//! the caller) forwards output to the sink and gathers results. Dropping the stream aborts
//! the pump, whose connection then closes, and the interpreter interrupts the kernel on
//! disconnect (E2B's `code-interpreter` server, `messaging.py`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::mpsc;

use super::PORTAL;
use super::code::CellLine;
use super::interpreter::Interpreter;
use crate::backend::cell_stream::bundle_cost;
use crate::backend::{CellStream, ChunkSink};
use crate::error::{Error, Result};
use crate::exec::{Code, CodeError, CodeResult, OutputChunk, StreamKind};

/// The cells running now, by context id (`""` for a default context): `interrupt` aborts
/// the one in its context.
pub(super) type Running = Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>>;

/// The stream of one cell.
pub(super) fn stream(interpreter: &Interpreter, running: &Running, code: Code) -> CellStream {
    let (interpreter, running) = (interpreter.clone(), Arc::clone(running));
    CellStream::with_output_limit(code.output_limit_bytes(), move |sink| {
        run(interpreter, running, code, sink)
    })
}

async fn run(interpreter: Interpreter, running: Running, code: Code, sink: ChunkSink) -> Result<CodeResult> {
    let started = Instant::now();
    let (tx, mut rx) = mpsc::channel::<Result<CellLine>>(32);
    let context = code.context_id().map(str::to_owned);
    let language = code.language_name().to_owned();
    let source = code.source().to_owned();
    let pump = PORTAL.spawn(async move {
        let mut lines = match interpreter.execute(&source, context.as_deref(), &language).await {
            Ok(lines) => lines,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return Ok(());
            }
        };
        loop {
            let line = lines.next().await;
            let last = matches!(line, Ok(CellLine::End) | Err(_));
            if tx.send(line).await.is_err() || last {
                return Ok(());
            }
        }
    });
    let key = code.context_id().unwrap_or_default().to_owned();
    if let Some(abort) = pump.abort_handle() {
        running.lock().unwrap_or_else(PoisonError::into_inner).insert(key.clone(), abort);
    }
    let _unregister = Unregister { running: Arc::clone(&running), key };
    let mut result = CodeResult::new(0, "", "");
    // Once a result is dropped, no later one is kept: the results are a prefix.
    let mut stopped = false;
    let gather = async {
        loop {
            match rx.recv().await {
                Some(Ok(CellLine::Stdout(text))) => {
                    sink.send(OutputChunk { stream: StreamKind::Stdout, data: text.into_bytes() }).await;
                }
                Some(Ok(CellLine::Stderr(text))) => {
                    sink.send(OutputChunk { stream: StreamKind::Stderr, data: text.into_bytes() }).await;
                }
                // Kept within the cell's budget (each line is already at most MAX_LINE): a
                // result that does not fit is dropped, and every one after it.
                Some(Ok(CellLine::Result(bundle))) => {
                    stopped = stopped || !sink.budget().keep(bundle_cost(&bundle));
                    if stopped {
                        sink.budget().truncate();
                    } else {
                        result.results.push(bundle);
                    }
                }
                Some(Ok(CellLine::Error(error))) => result.error = Some(error),
                Some(Ok(CellLine::End)) => return Ok(()),
                Some(Err(e)) => return Err(e),
                // `interrupt` aborted the pump: its connection closed, so the interpreter
                // interrupted the kernel (the context keeps its state).
                None => {
                    result.error = Some(CodeError::new(
                        "KeyboardInterrupt",
                        "the cell was interrupted (Sandbox::interrupt)",
                    ));
                    return Ok(());
                }
            }
        }
    };
    match code.timeout_duration() {
        Some(limit) => {
            let timer = futures_timer::Delay::new(limit);
            futures_lite::future::or(gather, async {
                timer.await;
                Err(Error::execution_timeout(limit, crate::ExecResult::new(137, "", "")))
            })
            .await?;
        }
        None => gather.await?,
    }
    drop(pump);
    let code_status = i32::from(result.error.is_some());
    Ok(result.with_status(crate::ExitStatus::Code(code_status)).with_duration(started.elapsed()))
}

struct Unregister {
    running: Running,
    key: String,
}

impl Drop for Unregister {
    fn drop(&mut self) {
        self.running.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.key);
    }
}
