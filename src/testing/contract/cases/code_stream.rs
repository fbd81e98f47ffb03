//! `run_code_stream`: a cell's output as it prints it, then its result.

use std::sync::Arc;
use std::time::Duration;

use crate::policy::Capabilities as C;
use crate::{ErrorCode, exec::StreamKind};

use super::super::ProbeKind as P;
use super::super::Row;
use super::super::ctx::{Ctx, Verdict, expect, expect_code, expect_eq};
use super::super::facade::AnyCodeStream;
use super::Case;

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(Row::RunCode, "run_code__stream_delivers_a_chunk_before_the_cell_ends", |cx| {
            Box::pin(before_the_end(cx))
        })
        .requires(C::RUN_CODE | C::FILESYSTEM)
        .probes(&[P::CodeGated]),
        Case::new(Row::RunCode, "run_code__stream_chunks_add_up_to_what_the_cell_printed", |cx| {
            Box::pin(add_up(cx))
        })
        .requires(C::RUN_CODE),
        Case::new(Row::RunCode, "run_code__stream_of_a_raising_cell_gives_its_output_then_the_error", |cx| {
            Box::pin(raising(cx))
        })
        .requires(C::RUN_CODE),
        Case::new(
            Row::RunCode,
            "run_code__stream_of_a_cell_past_its_timeout_ends_with_execution_timeout",
            |cx| Box::pin(timed_out(cx)),
        )
        .requires(C::RUN_CODE),
        Case::new(Row::RunCode, "run_code__dropping_a_context_stream_mid_cell_loses_the_context", |cx| {
            Box::pin(dropped_in_context(cx))
        })
        .requires(C::RUN_CODE | C::STATEFUL_CODE),
    ]
}

/// Everything a stream yields until it ends: stdout, stderr, and the error item if any.
struct Drained {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    error: Option<crate::Error>,
}

async fn drain(stream: &mut AnyCodeStream) -> Drained {
    let mut drained = Drained { stdout: Vec::new(), stderr: Vec::new(), error: None };
    while let Some(item) = stream.next_chunk().await {
        match item {
            Ok(chunk) if chunk.stream == StreamKind::Stdout => drained.stdout.extend_from_slice(&chunk.data),
            Ok(chunk) => drained.stderr.extend_from_slice(&chunk.data),
            Err(e) => drained.error = Some(e),
        }
    }
    drained
}

async fn before_the_end(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let gate = "sandboxio-contract-gate";
        let cell = cx.probes.code_gated(gate).ok_or("the code_gated probe returned no cell")?;
        let mut stream = sandbox.run_code_stream(cell).map_err(|e| cx.unexpected("run_code_stream", &e))?;
        // The cell prints `a`, then waits for the gate, which only this test opens, and only
        // once it has seen `a`: a backend that delivers output at the cell's end shows `a`
        // after the cell gave up waiting, with the words that say so.
        let mut stdout = Vec::new();
        while !stdout.ends_with(b"a\n") {
            match stream.next_chunk().await {
                Some(Ok(chunk)) if chunk.stream == StreamKind::Stdout => {
                    stdout.extend_from_slice(&chunk.data);
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(cx.unexpected("the stream before the gate", &e)),
                None => break,
            }
        }
        expect_eq(String::from_utf8_lossy(&stdout).as_ref(), "a\n", "stdout before the gate is opened")?;
        sandbox
            .fs()
            .write(gate, b"open".to_vec())
            .await
            .map_err(|e| cx.unexpected("writing the gate", &e))?;
        let rest = drain(&mut stream).await;
        if let Some(e) = rest.error {
            return Err(cx.unexpected("the stream after the gate", &e));
        }
        stdout.extend_from_slice(&rest.stdout);
        expect_eq(String::from_utf8_lossy(&stdout).as_ref(), "a\nb\n", "everything the cell printed")?;
        let result = stream.wait().await.map_err(|e| cx.unexpected("wait", &e))?;
        expect(result.success(), || format!("expected the cell to succeed, observed {:?}", result.error))
    })
}

async fn add_up(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let (cell, stdout, stderr) = cx.probes.code_print_both();
        let mut stream = sandbox.run_code_stream(cell).map_err(|e| cx.unexpected("run_code_stream", &e))?;
        let drained = drain(&mut stream).await;
        if let Some(e) = drained.error {
            return Err(cx.unexpected("the stream", &e));
        }
        expect_eq(String::from_utf8_lossy(&drained.stdout).as_ref(), stdout.as_str(), "stdout chunks")?;
        expect_eq(String::from_utf8_lossy(&drained.stderr).as_ref(), stderr.as_str(), "stderr chunks")?;
        let result = stream.wait().await.map_err(|e| cx.unexpected("wait", &e))?;
        expect(result.success(), || {
            format!("expected success, observed {:?} {:?}", result.status, result.error)
        })?;
        // The output came as chunks: the result does not repeat it.
        expect(result.streamed && result.stdout.is_empty() && result.stderr.is_empty(), || {
            format!(
                "expected a streamed result with empty output, observed streamed={} stdout={:?} stderr={:?}",
                result.streamed,
                result.stdout_lossy(),
                result.stderr_lossy()
            )
        })?;
        let again = stream.wait().await.map_err(|e| cx.unexpected("a second wait", &e))?;
        expect_eq(again, result, "a second wait")
    })
}

async fn raising(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let (cell, name) = cx.probes.code_print_then_raise();
        let mut stream = sandbox.run_code_stream(cell).map_err(|e| cx.unexpected("run_code_stream", &e))?;
        let drained = drain(&mut stream).await;
        if let Some(e) = drained.error {
            return Err(cx.unexpected("the stream (a raising cell is data, not an error)", &e));
        }
        expect_eq(String::from_utf8_lossy(&drained.stdout).as_ref(), "before\n", "stdout chunks")?;
        let result = stream.wait().await.map_err(|e| cx.unexpected("wait", &e))?;
        expect(!result.status.success(), || {
            format!("expected a non-zero status, observed {:?}", result.status)
        })?;
        expect_eq(result.error.map(|e| e.name), Some(name), "the error name")
    })
}

async fn timed_out(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let cell = cx.probes.code_long_cell().timeout(Duration::from_secs(2));
        let mut stream = sandbox.run_code_stream(cell).map_err(|e| cx.unexpected("run_code_stream", &e))?;
        let drained = drain(&mut stream).await;
        expect_eq(String::from_utf8_lossy(&drained.stdout).as_ref(), "started\n", "stdout chunks")?;
        let ended = drained.error.map_or(Ok(()), Err);
        expect_code(&ended, ErrorCode::ExecutionTimeout, "the stream's error item")?;
        let waited = stream.wait().await;
        expect_code(&waited, ErrorCode::ExecutionTimeout, "wait after the error item")?;
        let after = sandbox
            .run_code(cx.probes.code_print("after"))
            .await
            .map_err(|e| cx.unexpected("run_code", &e))?;
        expect_eq(after.stdout_lossy().as_ref(), "after\n", "a cell after the timed-out one")
    })
}

async fn dropped_in_context(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let ctx = sandbox.create_context("python").await.map_err(|e| cx.unexpected("create_context", &e))?;
        sandbox
            .run_code(cx.probes.code_set_state().in_context(&ctx))
            .await
            .map_err(|e| cx.unexpected("set", &e))?;
        let mut stream = sandbox
            .run_code_stream(cx.probes.code_long_cell().in_context(&ctx))
            .map_err(|e| cx.unexpected("run_code_stream", &e))?;
        // The cell has started (it printed): dropping the stream now interrupts it mid-cell.
        match stream.next_chunk().await {
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(cx.unexpected("the long cell's first chunk", &e)),
            None => return Err("the long cell ended before it printed anything".to_owned()),
        }
        drop(stream);
        let after = sandbox.run_code(cx.probes.code_read_state().in_context(&ctx)).await;
        expect_code(
            &after,
            ErrorCode::ContextLost,
            "a cell in the context whose stream was dropped mid-cell",
        )?;
        let fresh = sandbox
            .run_code(cx.probes.code_print("fresh"))
            .await
            .map_err(|e| cx.unexpected("run_code", &e))?;
        expect_eq(fresh.stdout_lossy().as_ref(), "fresh\n", "a cell outside the lost context")
    })
}
