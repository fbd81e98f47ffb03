//! `run`, `run_code`, Streaming and Streaming cleanup.

use std::sync::Arc;
use std::time::Duration;

use futures_core::Stream;

use crate::policy::Capabilities as C;
use crate::{
    Command, Error, ErrorCode, ExitStatus,
    exec::{ExecStream, StreamKind},
    sync,
};

use super::super::ProbeKind as P;
use super::super::Row;
use super::super::ctx::{Ctx, Verdict, expect, expect_code, expect_eq};
use super::super::facade::{AnyStream, Facade};
use super::{CANCELLATION_IS_ASYNC, Case, no_process_outlives};

#[expect(clippy::too_many_lines, reason = "one line per contract clause")]
pub(super) fn cases() -> Vec<Case> {
    vec![
        // ---- run
        Case::new(Row::Run, "run__exit_codes_are_data_not_errors", |cx| Box::pin(exit_codes(cx)))
            .requires(C::RUN),
        Case::new(Row::Run, "run__stdout_and_stderr_are_separated", |cx| Box::pin(separated(cx)))
            .requires(C::RUN),
        Case::new(Row::Run, "run__env_is_injected", |cx| Box::pin(env_injected(cx))).requires(C::RUN),
        Case::new(Row::Run, "run__argv_does_not_go_through_a_shell", |cx| Box::pin(no_shell(cx)))
            .requires(C::RUN),
        Case::new(Row::Run, "run__timeout_raises_execution_timeout_and_does_not_hang", |cx| {
            Box::pin(timeout(cx))
        })
        .requires(C::RUN),
        Case::new(Row::Run, "run__timeout_keeps_the_partial_output", |cx| Box::pin(timeout_partial(cx)))
            .requires(C::RUN),
        Case::new(Row::Run, "run__timeout_kills_the_whole_process_tree", |cx| Box::pin(timeout_tree(cx)))
            .requires(C::RUN)
            .probes(&[P::RunningProcesses]),
        Case::new(Row::Run, "run__output_is_byte_exact", |cx| Box::pin(byte_exact(cx))).requires(C::RUN),
        Case::new(Row::Run, "run__stdin_is_delivered_with_end_of_file", |cx| Box::pin(stdin_eof(cx)))
            .requires(C::RUN),
        Case::new(Row::Run, "run__output_past_the_limit_is_dropped_and_flagged", |cx| {
            Box::pin(output_limit(cx))
        })
        .requires(C::RUN),
        Case::new(Row::Run, "run__a_child_outliving_its_parent_neither_blocks_nor_survives", |cx| {
            Box::pin(orphan_child(cx))
        })
        .requires(C::RUN)
        .probes(&[P::RunningProcesses]),
        Case::new(Row::Run, "run__bad_input_is_refused_before_anything_runs", |cx| Box::pin(bad_input(cx)))
            .requires(C::RUN),
        // ---- run_code
        Case::new(Row::RunCode, "run_code__basic_execution", |cx| Box::pin(code_basic(cx)))
            .requires(C::RUN_CODE),
        Case::new(Row::RunCode, "run_code__syntax_error_surfaces_with_non_zero_exit", |cx| {
            Box::pin(code_syntax_error(cx))
        })
        .requires(C::RUN_CODE),
        Case::new(Row::RunCode, "run_code__runtime_error_surfaces_with_non_zero_exit", |cx| {
            Box::pin(code_runtime_error(cx))
        })
        .requires(C::RUN_CODE),
        Case::new(Row::RunCode, "run_code__rich_outputs_are_present_iff_declared", |cx| {
            Box::pin(code_rich(cx))
        })
        .requires(C::RUN_CODE),
        Case::new(Row::RunCode, "run_code__context_keeps_state_with_stateful_code", |cx| {
            Box::pin(code_context(cx))
        })
        .requires(C::RUN_CODE | C::STATEFUL_CODE),
        Case::new(Row::RunCode, "run_code__context_raises_without_stateful_code", |cx| {
            Box::pin(code_no_context(cx))
        })
        .requires(C::RUN_CODE)
        .absent(C::STATEFUL_CODE),
        Case::new(Row::RunCode, "run_code__a_long_cell_is_interrupted_at_its_timeout", |cx| {
            Box::pin(code_interrupt(cx))
        })
        .requires(C::RUN_CODE),
        // ---- Streaming
        Case::new(Row::Streaming, "streaming__stream_is_not_awaitable", |cx| Box::pin(not_awaitable(cx)))
            .requires(C::STREAM),
        Case::new(Row::Streaming, "streaming__per_stream_order_is_preserved", |cx| {
            Box::pin(stream_order(cx))
        })
        .requires(C::STREAM),
        Case::new(Row::Streaming, "streaming__stdout_and_stderr_are_distinguishable", |cx| {
            Box::pin(stream_distinguishable(cx))
        })
        .requires(C::STREAM),
        Case::new(
            Row::Streaming,
            "streaming__wait_returns_streamed_with_empty_output_and_is_idempotent",
            |cx| Box::pin(stream_wait(cx)),
        )
        .requires(C::STREAM),
        Case::new(Row::Streaming, "streaming__wait_reports_how_long_the_command_ran", |cx| {
            Box::pin(stream_duration(cx))
        })
        .requires(C::STREAM),
        Case::new(Row::Streaming, "streaming__stdin_can_be_written_and_closed", |cx| {
            Box::pin(stream_stdin(cx))
        })
        .requires(C::STREAM | C::STDIN),
        Case::new(Row::Streaming, "streaming__capability_not_supported_is_raised_from_stream_itself", |cx| {
            Box::pin(stream_unsupported(cx))
        })
        .absent(C::STREAM),
        // ---- Streaming cleanup
        Case::new(Row::StreamingCleanup, "streaming_cleanup__full_iteration_leaves_no_process", |cx| {
            Box::pin(cleanup_full(cx))
        })
        .requires(C::STREAM)
        .probes(&[P::RunningProcesses]),
        Case::new(Row::StreamingCleanup, "streaming_cleanup__early_break_terminates_the_process", |cx| {
            Box::pin(cleanup_break(cx))
        })
        .requires(C::STREAM)
        .probes(&[P::RunningProcesses]),
        Case::new(
            Row::StreamingCleanup,
            "streaming_cleanup__an_error_inside_the_loop_terminates_the_process",
            |cx| Box::pin(cleanup_error(cx)),
        )
        .requires(C::STREAM)
        .probes(&[P::RunningProcesses]),
        Case::new(
            Row::StreamingCleanup,
            "streaming_cleanup__cancellation_inside_the_loop_terminates_the_process",
            |cx| Box::pin(cleanup_cancel(cx)),
        )
        .requires(C::STREAM)
        .probes(&[P::RunningProcesses])
        .async_only(CANCELLATION_IS_ASYNC),
    ]
}

async fn exit_codes(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        for code in [0, 1, 7, 255] {
            let out =
                sandbox.run(cx.probes.exit_with(code)).await.map_err(|e| cx.unexpected("run(exit N)", &e))?;
            expect_eq(out.status, ExitStatus::Code(code), "exit status")?;
        }
        Ok(())
    })
}

async fn separated(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let out =
            sandbox.run(cx.probes.echo("to-stdout")).await.map_err(|e| cx.unexpected("run(echo)", &e))?;
        expect_eq(
            (out.stdout_lossy().as_ref(), out.stderr.len()),
            ("to-stdout\n", 0),
            "(stdout, stderr length) of echo",
        )?;
        let out =
            sandbox.run(cx.probes.to_stderr("to-stderr")).await.map_err(|e| cx.unexpected("run(>&2)", &e))?;
        expect_eq(
            (out.stdout.len(), out.stderr_lossy().as_ref()),
            (0, "to-stderr\n"),
            "(stdout length, stderr)",
        )
    })
}

async fn env_injected(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx
        .builder()
        .network(cx.default_policy())
        .env("SBX_FROM_BUILDER", "builder-value")
        .create()
        .await
        .map_err(|e| cx.unexpected("create()", &e))?;
    let verdict = async {
        let out = sandbox
            .run(cx.probes.print_env("SBX_FROM_BUILDER"))
            .await
            .map_err(|e| cx.unexpected("run", &e))?;
        expect_eq(out.stdout_lossy().as_ref(), "builder-value\n", "a builder env var seen by a command")?;
        let cmd = cx.probes.print_env("SBX_FROM_COMMAND").env("SBX_FROM_COMMAND", "command value");
        let out = sandbox.run(cmd).await.map_err(|e| cx.unexpected("run", &e))?;
        expect_eq(out.stdout_lossy().as_ref(), "command value\n", "a command env var")
    }
    .await;
    let _ = sandbox.close().await;
    verdict
}

async fn no_shell(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let tricky = "$HOME; exit 3 | `id` 'q' \"dq\" *";
        let out = sandbox.run(cx.probes.echo(tricky)).await.map_err(|e| cx.unexpected("run(echo)", &e))?;
        expect_eq(out.status, ExitStatus::Code(0), "exit status")?;
        expect_eq(out.stdout_lossy().into_owned(), format!("{tricky}\n"), "an argv element printed verbatim")
    })
}

async fn timeout(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let result = sandbox.run(cx.probes.hang().timeout(Duration::from_secs(1))).await;
        expect_code(&result, ErrorCode::ExecutionTimeout, "run(hang) with a 1 s timeout")?;
        if let Err(Error::ExecutionTimeout { timeout, .. }) = result {
            expect_eq(timeout, Duration::from_secs(1), "the timeout reported")?;
        }
        Ok(())
    })
}

async fn timeout_tree(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        cx.processes_control(&sandbox).await?;
        let result = sandbox.run(cx.probes.process_tree().timeout(Duration::from_secs(1))).await;
        expect_code(&result, ErrorCode::ExecutionTimeout, "run(process tree) with a 1 s timeout")?;
        cx.no_processes(sandbox.id(), "after the timeout (parent and background child)").await
    })
}

async fn timeout_partial(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let result = sandbox.run(cx.probes.paced_output().timeout(Duration::from_millis(1500))).await;
        match result {
            Err(Error::ExecutionTimeout { partial, .. }) => {
                expect(partial.stdout.starts_with(b"1\n"), || {
                    format!(
                        "expected the partial stdout to start with \"1\\n\", observed {:?}",
                        partial.stdout_lossy()
                    )
                })
            }
            other => Err(format!("expected ExecutionTimeout with partial output, observed {other:?}")),
        }
    })
}

async fn byte_exact(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let (cmd, expected) = cx.probes.binary();
        let out = sandbox.run(cmd).await.map_err(|e| cx.unexpected("run(binary)", &e))?;
        expect_eq(out.stdout, expected, "binary stdout")
    })
}

/// `Command::output_limit`: the first `limit` bytes of each stream are kept, the rest is
/// dropped and `truncated` set; output that fits is whole, with `truncated` unset.
async fn output_limit(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let (cmd, expected) = cx.probes.binary();
        let limit = expected.len() / 2;
        let cut = sandbox.run(cmd.output_limit(limit)).await.map_err(|e| cx.unexpected("run(binary)", &e))?;
        expect_eq(cut.stdout, expected[..limit].to_vec(), "stdout under an output limit of half of it")?;
        expect(cut.truncated, || {
            format!("expected truncated with {limit} of {} bytes kept", expected.len())
        })?;
        let (cmd, expected) = cx.probes.binary();
        let whole = sandbox
            .run(cmd.output_limit(expected.len()))
            .await
            .map_err(|e| cx.unexpected("run(binary)", &e))?;
        expect_eq(whole.stdout, expected, "stdout under a limit it fits exactly")?;
        expect(!whole.truncated, || "expected truncated unset for output that fits its limit".to_owned())
    })
}

async fn stdin_eof(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let input: Vec<u8> = b"line one\n\x00\xff binary\n".to_vec();
        let out = sandbox
            .run(cx.probes.cat_stdin().stdin(input.clone()).timeout(Duration::from_secs(30)))
            .await
            .map_err(|e| cx.unexpected("run(cat) with stdin", &e))?;
        expect_eq(out.stdout, input, "cat's stdout (stdin echoed, then end-of-file)")
    })
}

async fn orphan_child(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        cx.processes_control(&sandbox).await?;
        let out = sandbox
            .run(cx.probes.orphan_child().timeout(Duration::from_mins(1)))
            .await
            .map_err(|e| cx.unexpected("run(orphan child)", &e))?;
        expect_eq(out.stdout_lossy().as_ref(), "parent done\n", "the parent's stdout")?;
        cx.no_processes(sandbox.id(), "after the parent exited").await
    })
}

async fn bad_input(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let nul = sandbox.run(cx.probes.echo("a\0b")).await;
        expect_code(&nul, ErrorCode::InvalidInput, "an argv with a NUL byte")?;
        let eq = sandbox.run(cx.probes.echo("x").env("A=B", "v")).await;
        expect_code(&eq, ErrorCode::InvalidInput, "an env name with '='")?;
        let empty = sandbox.run(Command::new("")).await;
        expect_code(&empty, ErrorCode::InvalidInput, "an empty program")
    })
}

async fn code_basic(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let out = sandbox
            .run_code(cx.probes.code_print("hello"))
            .await
            .map_err(|e| cx.unexpected("run_code", &e))?;
        expect(out.success(), || format!("expected success, observed {:?} {:?}", out.status, out.error))?;
        expect_eq(out.stdout_lossy().as_ref(), "hello\n", "stdout of the cell")
    })
}

async fn code_syntax_error(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let out = sandbox
            .run_code(cx.probes.code_syntax_error())
            .await
            .map_err(|e| cx.unexpected("run_code", &e))?;
        expect(!out.status.success(), || format!("expected a non-zero status, observed {:?}", out.status))?;
        expect_eq(out.error.map(|e| e.name), Some("SyntaxError".to_owned()), "the error name")
    })
}

async fn code_runtime_error(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let (cell, name) = cx.probes.code_runtime_error();
        let out = sandbox.run_code(cell).await.map_err(|e| cx.unexpected("run_code", &e))?;
        expect(!out.status.success(), || format!("expected a non-zero status, observed {:?}", out.status))?;
        let error = out.error.ok_or("expected a structured error, observed none")?;
        expect_eq(error.name, name, "the error name")?;
        expect(!error.traceback.is_empty(), || "expected a traceback, observed none".to_owned())
    })
}

async fn code_rich(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let (cell, png) = cx.probes.code_rich_display();
        let out = sandbox.run_code(cell).await.map_err(|e| cx.unexpected("run_code", &e))?;
        expect(out.success(), || format!("expected the display cell to succeed, observed {:?}", out.error))?;
        if cx.caps.contains(C::RICH_OUTPUTS) {
            let bundle = out.results.iter().find(|b| b.contains_key("text/html"));
            let bundle =
                bundle.ok_or_else(|| format!("expected a text/html result, observed {:?}", out.results))?;
            expect_eq(bundle.get("image/png"), Some(&png), "the image/png bytes")
        } else {
            expect(out.results.is_empty(), || {
                format!("expected no rich results without RICH_OUTPUTS, observed {:?}", out.results)
            })
        }
    })
}

async fn code_context(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let ctx = sandbox.create_context("python").await.map_err(|e| cx.unexpected("create_context", &e))?;
        sandbox
            .run_code(cx.probes.code_set_state().in_context(&ctx))
            .await
            .map_err(|e| cx.unexpected("set", &e))?;
        let out = sandbox
            .run_code(cx.probes.code_read_state().in_context(&ctx))
            .await
            .map_err(|e| cx.unexpected("read", &e))?;
        expect_eq(out.stdout_lossy().as_ref(), "42\n", "state read back in the same context")?;
        let out =
            sandbox.run_code(cx.probes.code_read_state()).await.map_err(|e| cx.unexpected("read", &e))?;
        expect(!out.success(), || "expected a cell outside the context not to see its state".to_owned())
    })
}

async fn code_no_context(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let result = sandbox.create_context("python").await;
        expect_code(&result, ErrorCode::CapabilityNotSupported, "create_context() without STATEFUL_CODE")
    })
}

async fn code_interrupt(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let result = sandbox.run_code(cx.probes.code_long_cell().timeout(Duration::from_secs(2))).await;
        expect_code(&result, ErrorCode::ExecutionTimeout, "a long cell with a 2 s timeout")?;
        let after = sandbox
            .run_code(cx.probes.code_print("after"))
            .await
            .map_err(|e| cx.unexpected("run_code", &e))?;
        expect_eq(after.stdout_lossy().as_ref(), "after\n", "a cell after the interrupted one")
    })
}

#[expect(clippy::unused_async, reason = "every case has the same async signature")]
async fn not_awaitable(cx: Arc<Ctx>) -> Verdict {
    // Compiles only while neither facade's stream is `IntoFuture` (so `.await` on it cannot
    // compile); trybuild's `crates/sandboxio-ui/tests/ui/await_exec_stream.rs` checks the
    // message. The run names the facade it drives: a `Stream` for the async API, an
    // `Iterator` for `sync`.
    trait AmbiguousIfFuture<A> {
        fn check() {}
    }
    impl<T: ?Sized> AmbiguousIfFuture<()> for T {}
    struct IsFuture;
    impl<T: ?Sized + std::future::IntoFuture> AmbiguousIfFuture<IsFuture> for T {}
    fn is_stream<S: Stream>() {}
    fn is_iterator<I: Iterator<Item = crate::Result<crate::exec::OutputChunk>>>() {}
    match cx.facade {
        Facade::Async => {
            <ExecStream as AmbiguousIfFuture<_>>::check();
            is_stream::<ExecStream>();
        }
        Facade::Blocking => {
            <sync::ExecStream as AmbiguousIfFuture<_>>::check();
            is_iterator::<sync::ExecStream>();
        }
    }
    Ok(())
}

async fn collect(stream: &mut AnyStream) -> std::result::Result<Vec<(StreamKind, Vec<u8>)>, Error> {
    let mut chunks = Vec::new();
    while let Some(chunk) = stream.next_chunk().await {
        let chunk = chunk?;
        chunks.push((chunk.stream, chunk.data));
    }
    Ok(chunks)
}

fn joined(chunks: &[(StreamKind, Vec<u8>)], kind: StreamKind) -> String {
    String::from_utf8_lossy(
        &chunks.iter().filter(|c| c.0 == kind).flat_map(|c| c.1.clone()).collect::<Vec<u8>>(),
    )
    .into_owned()
}

async fn stream_order(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let mut stream = sandbox.stream(cx.probes.paced_output()).map_err(|e| cx.unexpected("stream", &e))?;
        let chunks = collect(&mut stream).await.map_err(|e| cx.unexpected("iterating", &e))?;
        expect_eq(joined(&chunks, StreamKind::Stdout).as_str(), "1\n2\n3\n", "stdout in order")?;
        expect_eq(joined(&chunks, StreamKind::Stderr).as_str(), "e\n", "stderr")
    })
}

async fn stream_distinguishable(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let mut stream =
            sandbox.stream(cx.probes.to_stderr("only-err")).map_err(|e| cx.unexpected("stream", &e))?;
        let chunks = collect(&mut stream).await.map_err(|e| cx.unexpected("iterating", &e))?;
        expect_eq(
            (joined(&chunks, StreamKind::Stdout), joined(&chunks, StreamKind::Stderr)),
            (String::new(), "only-err\n".to_owned()),
            "(stdout, stderr) chunks of a stderr-only command",
        )
    })
}

async fn stream_wait(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let mut stream = sandbox.stream(cx.probes.exit_with(3)).map_err(|e| cx.unexpected("stream", &e))?;
        let first = stream.wait().await.map_err(|e| cx.unexpected("wait()", &e))?;
        expect(first.streamed, || "expected streamed = true".to_owned())?;
        expect(first.stdout.is_empty() && first.stderr.is_empty(), || {
            format!("expected empty output, observed {first:?}")
        })?;
        expect_eq(first.status, ExitStatus::Code(3), "status")?;
        let second = stream.wait().await.map_err(|e| cx.unexpected("second wait()", &e))?;
        expect_eq(second, first, "a second wait()")
    })
}

/// `wait().duration` is how long the command ran (`paced_output` sleeps two seconds), not
/// how long `wait` itself took after the stream was read to its end (about 1 µs on
/// `local://` and `docker://` once).
async fn stream_duration(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let mut stream = sandbox.stream(cx.probes.paced_output()).map_err(|e| cx.unexpected("stream", &e))?;
        collect(&mut stream).await.map_err(|e| cx.unexpected("iterating", &e))?;
        let done = stream.wait().await.map_err(|e| cx.unexpected("wait", &e))?;
        expect(done.duration >= Duration::from_millis(1900) && done.duration < Duration::from_mins(5), || {
            format!(
                "expected the duration of a command that sleeps 2 s (at least 1.9 s), observed {:?}",
                done.duration
            )
        })
    })
}

async fn stream_stdin(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let mut stream = sandbox
            .stream(cx.probes.cat_stdin().timeout(Duration::from_secs(30)))
            .map_err(|e| cx.unexpected("stream(cat)", &e))?;
        stream.write_stdin(b"part one, ").await.map_err(|e| cx.unexpected("write_stdin", &e))?;
        stream.write_stdin(b"part two\x00").await.map_err(|e| cx.unexpected("write_stdin", &e))?;
        stream.close_stdin().await.map_err(|e| cx.unexpected("close_stdin", &e))?;
        let chunks = collect(&mut stream).await.map_err(|e| cx.unexpected("iterating", &e))?;
        expect_eq(joined(&chunks, StreamKind::Stdout).as_str(), "part one, part two\0", "cat's stdout")?;
        let done = stream.wait().await.map_err(|e| cx.unexpected("wait", &e))?;
        expect_eq(done.status, ExitStatus::Code(0), "cat's status after end-of-file")
    })
}

async fn stream_unsupported(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let result = sandbox.stream(cx.probes.echo("x")).map(|_| ());
        expect_code(&result, ErrorCode::CapabilityNotSupported, "stream() without STREAM")
    })
}

async fn cleanup_full(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        cx.processes_control(&sandbox).await?;
        let mut stream = sandbox.stream(cx.probes.paced_output()).map_err(|e| cx.unexpected("stream", &e))?;
        collect(&mut stream).await.map_err(|e| cx.unexpected("iterating", &e))?;
        drop(stream);
        cx.no_processes(sandbox.id(), "after full iteration").await
    })
}

async fn cleanup_break(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let mut stream =
            sandbox.stream(cx.probes.lingering_output()).map_err(|e| cx.unexpected("stream", &e))?;
        if let Some(chunk) = stream.next_chunk().await {
            chunk.map_err(|e| cx.unexpected("iterating", &e))?;
        }
        cx.some_processes(sandbox.id(), "while the stream is open").await?;
        drop(stream);
        cx.no_processes(sandbox.id(), "after an early break").await
    })
}

async fn cleanup_error(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        async fn consume(stream: &mut AnyStream) -> std::result::Result<(), &'static str> {
            if stream.next_chunk().await.is_some() {
                return Err("the caller's own error inside the loop");
            }
            Ok(())
        }
        cx.processes_control(&sandbox).await?;
        let outcome = {
            let mut stream =
                sandbox.stream(cx.probes.lingering_output()).map_err(|e| cx.unexpected("stream", &e))?;
            consume(&mut stream).await
        };
        expect(outcome.is_err(), || "the caller's error was lost".to_owned())?;
        cx.no_processes(sandbox.id(), "after an error inside the loop").await
    })
}

async fn cleanup_cancel(cx: Arc<Ctx>) -> Verdict {
    no_process_outlives(&cx, "cancellation inside the loop", |sandbox| {
        let command = cx.probes.lingering_output();
        Box::pin(async move {
            let mut stream = sandbox.stream(command).ok()?;
            while let Some(chunk) = stream.next_chunk().await {
                chunk.ok()?;
            }
            Some(())
        })
    })
    .await
}
