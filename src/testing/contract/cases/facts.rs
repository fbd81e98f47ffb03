//! One representation per fact, on every backend: a signal death, an out-of-memory kill,
//! an argument list the kernel would refuse, a sandbox that dies under a running
//! operation; and command-scoped secrets.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::exec::{MAX_ARG_STRLEN, MAX_ARG_TOTAL};
use crate::policy::Capabilities as C;
use crate::{ErrorCode, ExitStatus, ResourceLimits};

use super::super::ProbeKind as P;
use super::super::Row;
use super::super::ctx::{Ctx, SETTLE, Verdict, expect, expect_code, expect_eq};
use super::super::facade::{AnySandbox, AnyStream};
use super::Case;

/// The memory limit of the out-of-memory test, in MiB.
const OOM_LIMIT_MIB: u64 = 64;

/// What the out-of-memory test allocates: eight times the limit, past any swap allowance
/// a provider grants on top of it (Docker allows as much swap again by default).
const OOM_ALLOCATION: u64 = 8 * OOM_LIMIT_MIB * 1024 * 1024;

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(Row::Run, "run__a_signal_death_is_the_signal_never_an_exit_code", |cx| {
            Box::pin(signal_run(cx))
        })
        .requires(C::RUN),
        Case::new(Row::Run, "run__an_out_of_memory_kill_is_marked_on_the_result", |cx| Box::pin(oom(cx)))
            .requires(C::RUN | C::LIMIT_MEMORY),
        Case::new(Row::Run, "run__an_argument_list_the_kernel_would_refuse_is_invalid_input", |cx| {
            Box::pin(arg_limits(cx))
        })
        .requires(C::RUN),
        Case::new(Row::Run, "run__a_sandbox_killed_under_a_running_command_gives_sandbox_gone", |cx| {
            Box::pin(killed_under_run(cx))
        })
        .requires(C::RUN)
        .probes(&[P::RunningProcesses])
        .async_only(KILL_DURING_RUN_IS_ASYNC),
        Case::new(Row::Streaming, "streaming__a_signal_death_is_the_signal_never_an_exit_code", |cx| {
            Box::pin(signal_stream(cx))
        })
        .requires(C::STREAM),
        Case::new(
            Row::Streaming,
            "streaming__a_sandbox_killed_under_a_stream_ends_it_with_sandbox_gone",
            |cx| Box::pin(killed_under_stream(cx)),
        )
        .requires(C::STREAM),
        Case::new(
            Row::Observability,
            "observability__a_command_secret_is_invisible_to_other_commands",
            |cx| Box::pin(command_secret_isolated(cx)),
        )
        .requires(C::RUN | C::STREAM | C::COMMAND_SECRETS),
    ]
}

/// Why the test of a kill under a running `run` is n/a under the blocking facade.
const KILL_DURING_RUN_IS_ASYNC: &str = "the kill must land while run() is in flight, between two of its polls; \
     a blocking run() holds its thread until it returns (the stream test covers the blocking facade)";

/// The signals the signal tests send: `SIGKILL` (what a kill and the out-of-memory killer
/// send) and `SIGTERM` (so that no backend passes by reporting 9 for every death).
const SIGNALS: [i32; 2] = [9, 15];

async fn signal_run(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        for signal in SIGNALS {
            let out = sandbox
                .run(cx.probes.die_by_signal(signal).timeout(Duration::from_mins(1)))
                .await
                .map_err(|e| cx.unexpected(&format!("run(die by signal {signal})"), &e))?;
            expect_eq(out.status, ExitStatus::Signal(signal), "the status of a command killed by a signal")?;
            expect(!out.oom_killed, || {
                format!("expected a plain signal {signal} death not marked oom_killed, observed {out:?}")
            })?;
        }
        // The other half of "never guessed from 128 + n": an exit with 137 is an exit.
        let out =
            sandbox.run(cx.probes.exit_with(137)).await.map_err(|e| cx.unexpected("run(exit 137)", &e))?;
        expect_eq(out.status, ExitStatus::Code(137), "the status of `exit 137` (an exit code, not a signal)")
    })
}

async fn signal_stream(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        for signal in SIGNALS {
            let mut stream = sandbox
                .stream(cx.probes.die_by_signal(signal).timeout(Duration::from_mins(1)))
                .map_err(|e| cx.unexpected("stream", &e))?;
            drain(&cx, &mut stream).await?;
            let done = stream.wait().await.map_err(|e| cx.unexpected("wait()", &e))?;
            expect_eq(
                done.status,
                ExitStatus::Signal(signal),
                "wait()'s status of a command killed by a signal",
            )?;
        }
        let mut stream = sandbox.stream(cx.probes.exit_with(137)).map_err(|e| cx.unexpected("stream", &e))?;
        let done = stream.wait().await.map_err(|e| cx.unexpected("wait()", &e))?;
        expect_eq(done.status, ExitStatus::Code(137), "wait()'s status of `exit 137`")
    })
}

/// Reads a stream to its end, failing on an error item.
async fn drain(cx: &Ctx, stream: &mut AnyStream) -> Verdict {
    while let Some(chunk) = stream.next_chunk().await {
        chunk.map_err(|e| cx.unexpected("iterating", &e))?;
    }
    Ok(())
}

async fn oom(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx
        .builder()
        .network(cx.default_policy())
        .limits(ResourceLimits::new().memory_mib(OOM_LIMIT_MIB))
        .create()
        .await
        .map_err(|e| cx.unexpected(&format!("create() with a {OOM_LIMIT_MIB} MiB memory limit"), &e))?;
    let verdict = async {
        // Positive control: the same program, well under the limit, runs and is not
        // marked; else its failure above the limit would prove nothing.
        let small = sandbox
            .run(cx.probes.exhaust_memory(1024 * 1024).timeout(Duration::from_mins(1)))
            .await
            .map_err(|e| cx.unexpected("run(allocate 1 MiB)", &e))?;
        if !small.success() || !small.stdout_lossy().contains("survived") {
            return Err(cx.control_unavailable(format!(
                "the exhaust_memory probe {:?} does not run here even for 1 MiB ({}, stderr {:?}): \
                 override Probes::exhaust_memory for this image",
                cx.probes.exhaust_memory(1024 * 1024).argv(),
                small.status,
                small.stderr_lossy().trim()
            )));
        }
        expect(!small.oom_killed, || format!("expected a normal exit not marked oom_killed, observed {small:?}"))?;
        let out = sandbox
            .run(cx.probes.exhaust_memory(OOM_ALLOCATION).timeout(Duration::from_mins(2)))
            .await
            .map_err(|e| cx.unexpected(&format!("run(allocate {OOM_ALLOCATION} bytes)"), &e))?;
        expect(out.oom_killed, || {
            format!(
                "expected a command allocating {OOM_ALLOCATION} bytes under a {OOM_LIMIT_MIB} MiB limit marked \
                 oom_killed, observed status {}, oom_killed false, stdout {:?}, stderr {:?}",
                out.status,
                out.stdout_lossy(),
                out.stderr_lossy()
            )
        })?;
        expect(!out.success() && !out.stdout_lossy().contains("survived"), || {
            format!("expected the out-of-memory kill to end the command, observed {out:?}")
        })?;
        if cx.caps.contains(C::STREAM) {
            let mut stream = sandbox
                .stream(cx.probes.exhaust_memory(OOM_ALLOCATION).timeout(Duration::from_mins(2)))
                .map_err(|e| cx.unexpected("stream", &e))?;
            let done = stream.wait().await.map_err(|e| cx.unexpected("wait()", &e))?;
            expect(done.oom_killed, || {
                format!("expected wait()'s result of a streamed out-of-memory kill marked oom_killed, observed {done:?}")
            })?;
        }
        Ok(())
    }
    .await;
    let _ = sandbox.close().await;
    verdict
}

async fn arg_limits(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        // Positive control: the longest argument and environment string the kernel takes
        // (MAX_ARG_STRLEN with its NUL) reach the process intact; else the refusals below
        // could be a limit stricter than the kernel's.
        let longest = "a".repeat(MAX_ARG_STRLEN - 1);
        let out = sandbox
            .run(cx.probes.echo(&longest).timeout(Duration::from_mins(1)))
            .await
            .map_err(|e| cx.unexpected(&format!("run(echo an argument of {} bytes)", longest.len()), &e))?;
        expect(out.stdout.len() == longest.len() + 1 && out.stdout.starts_with(longest.as_bytes()), || {
            format!(
                "expected a {}-byte argument echoed intact, observed {} bytes of stdout, status {}, stderr {:?}",
                longest.len(),
                out.stdout.len(),
                out.status,
                out.stderr_lossy()
            )
        })?;
        let name = "SBX_LONGEST";
        let value = "v".repeat(MAX_ARG_STRLEN - name.len() - 2);
        let out = sandbox
            .run(cx.probes.print_env(name).env(name, value.clone()).timeout(Duration::from_mins(1)))
            .await
            .map_err(|e| cx.unexpected("run(print an env var of MAX_ARG_STRLEN bytes)", &e))?;
        expect(out.stdout_lossy().trim_end() == value, || {
            format!(
                "expected an env string of {MAX_ARG_STRLEN} bytes (NAME=value and NUL) delivered intact, observed \
                 {} bytes of stdout, status {}, stderr {:?}",
                out.stdout.len(),
                out.status,
                out.stderr_lossy()
            )
        })?;
        // One string over MAX_ARG_STRLEN, as argv and as env; many strings over the total.
        let too_long = "a".repeat(200 * 1024);
        let refused = [
            (cx.probes.echo(&too_long), "a 200 KiB argument"),
            (cx.probes.echo("x").env("SBX_TOO_LONG", too_long.clone()), "a 200 KiB env value"),
            (cx.probes.echo("x").secret_env("SBX_TOO_LONG", too_long.clone()), "a 200 KiB secret env value"),
            (
                cx.probes
                    .echo("x")
                    .args(std::iter::repeat_n("b".repeat(120_000), MAX_ARG_TOTAL / 120_000 + 1)),
                "arguments over MAX_ARG_TOTAL together",
            ),
        ];
        for (command, what) in refused {
            // Only the status on success: the output would be the whole argument again.
            let result = sandbox.run(command.clone()).await.map(|out| out.status);
            expect_code(&result, ErrorCode::InvalidInput, &format!("run() with {what}"))?;
            if cx.caps.contains(C::STREAM) {
                let result = sandbox.stream(command).map(drop);
                expect_code(&result, ErrorCode::InvalidInput, &format!("stream() with {what}"))?;
            }
        }
        Ok(())
    })
}

/// The handle that kills the sandbox in the tests of a death under a running operation: a
/// second handle from `connect` where the backend declares it, else the same one.
async fn second_handle(cx: &Ctx, sandbox: &AnySandbox) -> std::result::Result<Option<AnySandbox>, String> {
    if cx.caps.contains(C::CONNECT) {
        cx.connect(sandbox.id()).await.map(Some).map_err(|e| cx.unexpected("connect()", &e))
    } else {
        Ok(None)
    }
}

/// Asks the `running_processes` probe until it reports a process in `sandbox_id`: at
/// first between single yields (a fake's command advances one step per poll), then every
/// 20 ms, for at most [`SETTLE`].
async fn watch_running(cx: &Ctx, sandbox_id: &str) -> std::result::Result<bool, String> {
    let started = Instant::now();
    loop {
        let running = cx.probe("running_processes", cx.probes.running_processes(sandbox_id)).await?;
        if !running.is_empty() {
            return Ok(true);
        }
        if started.elapsed() > SETTLE {
            return Ok(false);
        }
        if started.elapsed() < Duration::from_millis(200) {
            futures_lite::future::yield_now().await;
        } else {
            futures_timer::Delay::new(Duration::from_millis(20)).await;
        }
    }
}

async fn killed_under_run(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let second = second_handle(&cx, &sandbox).await?;
        let via = second.as_ref().unwrap_or(&sandbox);
        let kill = async {
            let seen = watch_running(&cx, sandbox.id()).await;
            // Kill in any case, so that the command does not run on for its timeout.
            let outcome = via.kill().await.map_err(|e| cx.unexpected("kill() through a second handle", &e));
            if seen? {
                outcome
            } else {
                Err(cx.control_unavailable(format!(
                    "the running_processes probe never saw the command running in {} within {SETTLE:?}, so \
                     the kill may have come before it started",
                    sandbox.id()
                )))
            }
        };
        let run = sandbox.run(cx.probes.lingering_output().timeout(Duration::from_mins(1)));
        let started = Instant::now();
        let (kill_verdict, ran) = futures_lite::future::zip(kill, run).await;
        kill_verdict?;
        expect_code(
            &ran,
            ErrorCode::SandboxGone,
            "run() of a command whose sandbox was killed while it ran",
        )?;
        expect(started.elapsed() < Duration::from_secs(30), || {
            format!("expected run() to return soon after the kill, observed {:?}", started.elapsed())
        })
    })
}

/// Reads a stream's items after its sandbox died: any number of `Ok` chunks (output
/// written before the death), then exactly one `Err(SandboxGone)`, then `None`.
async fn after_death(stream: &mut AnyStream, which: &str) -> Verdict {
    let started = Instant::now();
    let mut items = Vec::new();
    loop {
        let item = futures_lite::future::or(async { Some(stream.next_chunk().await) }, async {
            futures_timer::Delay::new(Duration::from_mins(1)).await;
            None
        })
        .await;
        let Some(item) = item else {
            return Err(format!(
                "expected {which} to end within 60 s of its sandbox's death, observed it still open after {items:?}"
            ));
        };
        match item {
            Some(Ok(chunk)) if items.len() < 1000 => items.push(format!("Ok({:?})", chunk.data.len())),
            Some(Ok(_)) => {
                return Err(format!(
                    "expected {which} to end after its sandbox died, observed 1000 more chunks"
                ));
            }
            Some(Err(e)) => {
                expect_eq(e.code(), ErrorCode::SandboxGone, &format!("the error item ending {which}"))?;
                break;
            }
            None => {
                return Err(format!(
                    "expected {which} to end with an Err(SandboxGone) item after its sandbox was killed, observed a \
                     normal end (None) after {items:?}, as if the command had exited ({:?})",
                    started.elapsed()
                ));
            }
        }
    }
    let next = stream.next_chunk().await;
    expect(next.is_none(), || {
        format!("expected None after the Err(SandboxGone) item of {which}, observed {next:?}")
    })
}

async fn killed_under_stream(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let second = second_handle(&cx, &sandbox).await?;
        let killer = second.as_ref().unwrap_or(&sandbox);
        // Two streams, each seen running (it printed its first line): one iterated after
        // the death, one only waited on.
        let mut iterated =
            sandbox.stream(cx.probes.lingering_output()).map_err(|e| cx.unexpected("stream", &e))?;
        let mut waited =
            sandbox.stream(cx.probes.lingering_output()).map_err(|e| cx.unexpected("stream", &e))?;
        for stream in [&mut iterated, &mut waited] {
            match stream.next_chunk().await {
                Some(Ok(_)) => {}
                other => {
                    return Err(format!("expected the first line of a running command, observed {other:?}"));
                }
            }
        }
        killer.kill().await.map_err(|e| cx.unexpected("kill() through a second handle", &e))?;
        after_death(&mut iterated, "the iterated stream").await?;
        for n in ["first", "second"] {
            let done = iterated.wait().await;
            expect_code(&done, ErrorCode::SandboxGone, &format!("the {n} wait() of the iterated stream"))?;
        }
        let done = waited.wait().await;
        expect_code(&done, ErrorCode::SandboxGone, "wait() on a stream whose sandbox was killed")?;
        let again = waited.wait().await;
        expect_code(&again, ErrorCode::SandboxGone, "a second wait() on that stream")
    })
}

async fn command_secret_isolated(cx: Arc<Ctx>) -> Verdict {
    let salt = cx.token.bytes().fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let secret = format!("sbx-command-secret-{salt:x}");
    let marker = format!("sbx-scan-marker-{salt:x}");
    let name = "SBX_COMMAND_SECRET";
    with_sandbox!(cx, |sandbox| {
        let mut holder = sandbox
            .stream(cx.probes.print_env_then_hang(name).secret_env(name, secret.clone()))
            .map_err(|e| cx.unexpected("stream() with a command secret", &e))?;
        let mut seen = Vec::new();
        while !seen.contains(&b'\n') && seen.len() < 4096 {
            match holder.next_chunk().await {
                Some(Ok(chunk)) => seen.extend_from_slice(&chunk.data),
                other => return Err(format!("expected the holder to print its secret, observed {other:?}")),
            }
        }
        expect_eq(
            String::from_utf8_lossy(&seen).trim_end(),
            secret.as_str(),
            "the secret as its own command sees it",
        )?;
        scan_for(&cx, &sandbox, &secret, &marker, "while the holder runs").await?;
        drop(holder);
        scan_for(&cx, &sandbox, &secret, &marker, "after the holder ended").await
    })
}

/// Runs the environment scan in `sandbox`: it must show its own marker (the positive
/// control) and not `secret`.
async fn scan_for(cx: &Ctx, sandbox: &AnySandbox, secret: &str, marker: &str, when: &str) -> Verdict {
    let scan = sandbox
        .run(cx.probes.scan_environments().env("SBX_SCAN_MARKER", marker).timeout(Duration::from_mins(1)))
        .await
        .map_err(|e| cx.unexpected("run(scan environments)", &e))?;
    let text = String::from_utf8_lossy(&scan.stdout).into_owned() + &scan.stderr_lossy();
    if !text.contains(&format!("SBX_SCAN_MARKER={marker}")) {
        return Err(cx.control_unavailable(format!(
            "the scan_environments probe {:?} did not show its own environment marker ({}, {} bytes of stdout): it \
             reads no environment here (override Probes::scan_environments)",
            cx.probes.scan_environments().argv(),
            scan.status,
            scan.stdout.len()
        )));
    }
    expect(!text.contains(secret), || {
        format!("expected another command of the sandbox not to see a command's secret {when}, observed it")
    })
}

/// `Command::secret_env` refused where `COMMAND_SECRETS` is undeclared; a sandbox-wide
/// secret still works.
pub(super) async fn undeclared_command_secrets(cx: Arc<Ctx>) -> Verdict {
    let wide = "sbx-sandbox-wide-secret";
    let sandbox = cx
        .builder()
        .network(cx.default_policy())
        .secret_env("SBX_WIDE_SECRET", wide)
        .create()
        .await
        .map_err(|e| cx.unexpected("create() with a sandbox-wide secret", &e))?;
    let verdict = async {
        let out = sandbox
            .run(cx.probes.print_env("SBX_WIDE_SECRET"))
            .await
            .map_err(|e| cx.unexpected("run() under a sandbox-wide secret", &e))?;
        expect_eq(out.stdout_lossy().trim_end(), wide, "a sandbox-wide secret, allowed on every backend")?;
        let command = || cx.probes.echo("x").secret_env("SBX_COMMAND_SECRET", "v");
        let result = sandbox.run(command()).await;
        expect_code(
            &result,
            ErrorCode::CapabilityNotSupported,
            "run() with Command::secret_env without COMMAND_SECRETS",
        )?;
        if cx.caps.contains(C::STREAM) {
            let result = sandbox.stream(command()).map(drop);
            expect_code(
                &result,
                ErrorCode::CapabilityNotSupported,
                "stream() with Command::secret_env without COMMAND_SECRETS",
            )?;
        }
        Ok(())
    }
    .await;
    let _ = sandbox.close().await;
    verdict
}
