//! Sync parity: the blocking facade (`sandboxio::sync`) drives this backend with the same
//! results and errors, and its handles clean up when dropped. (That every async method has
//! a blocking twin with the same signature is a property of sandboxio itself, checked by
//! its `tests/api/parity.rs`.)

use std::sync::Arc;
use std::time::Duration;

use crate::policy::Capabilities as C;
use crate::{ErrorCode, sync};

use super::super::ProbeKind as P;
use super::super::Row;
use super::super::ctx::{Ctx, Verdict, expect, expect_code, expect_eq};
use super::Case;

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(Row::SyncParity, "sync_parity__the_blocking_facade_drives_this_backend", |cx| {
            Box::pin(facade_lifecycle(cx))
        }),
        Case::new(Row::SyncParity, "sync_parity__errors_through_the_facade_keep_code_and_source", |cx| {
            Box::pin(facade_errors(cx))
        }),
        Case::new(Row::SyncParity, "sync_parity__dropped_blocking_handles_leave_no_orphan", |cx| {
            Box::pin(facade_drops(cx))
        })
        .requires(C::STREAM)
        .probes(&[P::LiveSandboxes, P::RunningProcesses]),
    ]
}

fn blocking_sandbox(cx: &Ctx) -> std::result::Result<sync::Sandbox, String> {
    cx.sync_builder().network(cx.default_policy()).create().map_err(|e| cx.unexpected("sync create()", &e))
}

// The bodies call the blocking API on purpose: it drives its futures on the calling
// thread, whatever executor runs the suite.
#[expect(
    clippy::unused_async,
    reason = "every case has the same async signature; this one drives the blocking facade"
)]
async fn facade_lifecycle(cx: Arc<Ctx>) -> Verdict {
    let sandbox = blocking_sandbox(&cx)?;
    if cx.caps.contains(C::RUN) {
        let out = sandbox.run(cx.probes.echo("blocking")).map_err(|e| cx.unexpected("sync run()", &e))?;
        expect_eq(out.stdout_lossy().as_ref(), "blocking\n", "stdout through the facade")?;
    }
    if cx.caps.contains(C::STREAM) {
        let stream =
            sandbox.stream(cx.probes.paced_output()).map_err(|e| cx.unexpected("sync stream()", &e))?;
        let mut stdout = Vec::new();
        for chunk in stream {
            let chunk = chunk.map_err(|e| cx.unexpected("iterating the blocking stream", &e))?;
            if chunk.stream == crate::exec::StreamKind::Stdout {
                stdout.extend(chunk.data);
            }
        }
        expect_eq(String::from_utf8_lossy(&stdout).as_ref(), "1\n2\n3\n", "the blocking stream's stdout")?;
    }
    if cx.caps.contains(C::FILESYSTEM) {
        sandbox.fs().write("sync.txt", "x").map_err(|e| cx.unexpected("sync fs().write", &e))?;
        let back = sandbox.fs().read("sync.txt").map_err(|e| cx.unexpected("sync fs().read", &e))?;
        expect_eq(back, b"x".to_vec(), "a file through the facade")?;
    }
    sandbox.kill().map_err(|e| cx.unexpected("sync kill()", &e))?;
    sandbox.kill().map_err(|e| cx.unexpected("second sync kill()", &e))?;
    sandbox.close().map_err(|e| cx.unexpected("sync close()", &e))
}

#[expect(
    clippy::unused_async,
    reason = "every case has the same async signature; this one drives the blocking facade"
)]
async fn facade_errors(cx: Arc<Ctx>) -> Verdict {
    let result = cx
        .sync_builder()
        .network(cx.default_policy())
        .require_isolation(crate::policy::IsolationTier::Unknown)
        .create();
    expect_code(&result, ErrorCode::IsolationUnsatisfied, "sync create() requiring an Unknown tier")?;
    let sandbox = blocking_sandbox(&cx)?;
    if cx.caps.contains(C::RUN) {
        let bad = sandbox.run(cx.probes.echo("a\0b"));
        expect_code(&bad, ErrorCode::InvalidInput, "sync run() with a NUL byte")?;
        let timeout = sandbox.run(cx.probes.hang().timeout(Duration::from_millis(500)));
        expect_code(&timeout, ErrorCode::ExecutionTimeout, "sync run() past its timeout")?;
    } else {
        let unsupported = sandbox.run(cx.probes.echo("x"));
        expect_code(&unsupported, ErrorCode::CapabilityNotSupported, "sync run() without RUN")?;
    }
    let _ = sandbox.kill();
    if cx.caps.contains(C::RUN) {
        let gone = sandbox.run(cx.probes.echo("x"));
        expect_code(&gone, ErrorCode::SandboxGone, "sync run() after kill()")?;
        if let Err(e) = gone {
            // The very same type: a `sandboxio::Error` whose code and source survive.
            let _: &crate::Error = &e;
            expect(e.to_string().starts_with("[SBX-007]"), || {
                format!("expected the SBX-007 display, observed {e}")
            })?;
        }
    }
    Ok(())
}

async fn facade_drops(cx: Arc<Ctx>) -> Verdict {
    let sandbox = blocking_sandbox(&cx)?;
    cx.sandbox_visible(sandbox.id()).await?;
    let stream = sandbox.stream(cx.probes.hang()).map_err(|e| cx.unexpected("sync stream()", &e))?;
    cx.running_control(sandbox.id()).await?;
    drop(stream);
    cx.no_processes(sandbox.id(), "after a blocking stream was dropped").await?;
    drop(sandbox);
    cx.no_sandboxes("after a blocking sandbox was dropped", Duration::from_mins(1)).await
}
