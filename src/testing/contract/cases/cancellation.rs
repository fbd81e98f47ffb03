//! Cancellation and cancellation identity: a dropped future is cancellation, leaves no
//! orphan, is never an error; teardown is shielded and bounded; kill works from sync code.

use std::sync::Arc;
use std::time::Duration;

use crate::audit::{OperationKind, Outcome};
use crate::policy::Capabilities as C;

use super::super::ProbeKind as P;
use super::super::Row;
use super::super::ctx::{Ctx, Verdict, expect};
use super::super::facade::AnySandbox;
use super::{CANCELLATION_IS_ASYNC, Case, each_cancellation_point, no_process_outlives, poll_k};

/// How long background teardown may take in these tests before it counts as an orphan.
const GRACE: Duration = Duration::from_mins(1);

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(Row::Cancellation, "cancellation__mid_create_leaves_no_orphan", |cx| {
            Box::pin(mid_create(cx))
        })
        .probes(&[P::LiveSandboxes])
        .async_only(CANCELLATION_IS_ASYNC),
        Case::new(Row::Cancellation, "cancellation__mid_run_leaves_no_orphan", |cx| Box::pin(mid_run(cx)))
            .requires(C::RUN)
            .probes(&[P::RunningProcesses])
            .async_only(CANCELLATION_IS_ASYNC),
        Case::new(Row::Cancellation, "cancellation__mid_run_code_leaves_no_orphan", |cx| {
            Box::pin(mid_run_code(cx))
        })
        .requires(C::RUN_CODE)
        .probes(&[P::RunningProcesses])
        .async_only(CANCELLATION_IS_ASYNC),
        Case::new(Row::Cancellation, "cancellation__mid_stream_leaves_no_orphan", |cx| {
            Box::pin(mid_stream(cx))
        })
        .requires(C::STREAM)
        .probes(&[P::RunningProcesses])
        .async_only(CANCELLATION_IS_ASYNC),
        Case::new(Row::Cancellation, "cancellation__mid_fs_operation_leaves_no_orphan", |cx| {
            Box::pin(mid_fs(cx))
        })
        .requires(C::FILESYSTEM)
        .probes(&[P::RunningProcesses])
        .async_only(CANCELLATION_IS_ASYNC),
        Case::new(
            Row::Cancellation,
            "cancellation__dropped_sandbox_teardown_is_shielded_and_bounded",
            |cx| Box::pin(teardown_bounded(cx)),
        )
        .probes(&[P::LiveSandboxes]),
        Case::new(
            Row::CancellationIdentity,
            "cancellation_identity__dropping_never_produces_an_error",
            |cx| Box::pin(drop_is_not_error(cx)),
        )
        .requires(C::RUN)
        .audited()
        .async_only(CANCELLATION_IS_ASYNC),
        Case::new(
            Row::CancellationIdentity,
            "cancellation_identity__kill_works_from_a_synchronous_drop",
            |cx| Box::pin(kill_from_drop(cx)),
        )
        .probes(&[P::LiveSandboxes]),
        Case::new(
            Row::CancellationIdentity,
            "cancellation_identity__kill_works_while_the_runtime_shuts_down",
            |cx| Box::pin(kill_during_shutdown(cx)),
        )
        .probes(&[P::LiveSandboxes]),
        Case::new(
            Row::CancellationIdentity,
            "cancellation_identity__grace_expiry_emits_the_orphan_warning",
            |cx| Box::pin(grace_expiry(cx)),
        )
        .probes(&[P::SimulateKillHang])
        .audited(),
    ]
}

async fn mid_create(cx: Arc<Ctx>) -> Verdict {
    cx.ensure_async()?;
    cx.sandboxes_control().await?;
    each_cancellation_point(
        &cx,
        |k| {
            let cx = Arc::clone(&cx);
            async move {
                let builder = cx.async_builder().ok()?;
                let created = poll_k(builder.network(cx.default_policy()).create(), k).await;
                match created {
                    Some(Ok(sandbox)) => sandbox.close().await.ok(),
                    Some(Err(_)) | None => None,
                }
            }
        },
        |k| {
            let cx = Arc::clone(&cx);
            async move { cx.no_sandboxes(&format!("after create() was dropped at poll {k}"), GRACE).await }
        },
    )
    .await
}

async fn mid_run(cx: Arc<Ctx>) -> Verdict {
    no_process_outlives(&cx, "run() was dropped", |sandbox| {
        Box::pin(sandbox.run(cx.probes.lingering_output()))
    })
    .await
}

async fn mid_run_code(cx: Arc<Ctx>) -> Verdict {
    let cell = || cx.probes.code_long_cell().timeout(Duration::from_hours(2));
    no_process_outlives(&cx, "run_code() was dropped", |sandbox| Box::pin(sandbox.run_code(cell()))).await
}

async fn mid_stream(cx: Arc<Ctx>) -> Verdict {
    no_process_outlives(&cx, "a stream was dropped", |sandbox| {
        let command = cx.probes.lingering_output();
        Box::pin(async move {
            let mut stream = sandbox.stream(command).ok()?;
            stream.wait().await.ok()
        })
    })
    .await
}

async fn mid_fs(cx: Arc<Ctx>) -> Verdict {
    no_process_outlives(&cx, "a file operation was dropped", |sandbox| {
        Box::pin(async move {
            let fs = sandbox.fs();
            let host = std::env::temp_dir().join(format!("sandboxio-cancel-fs-{}", std::process::id()));
            std::fs::create_dir_all(&host).ok()?;
            std::fs::write(host.join("up.bin"), [1u8; 1024]).ok()?;
            fs.upload(host.join("up.bin"), "cancel-up.bin").await.ok()?;
            fs.download("cancel-up.bin", host.join("down.bin")).await.ok()?;
            fs.mkdir("cancel-dir").await.ok()?;
            fs.write("cancel-dir/file.bin", vec![7u8; 4096]).await.ok()?;
            fs.list("cancel-dir").await.ok()?;
            fs.read("cancel-dir/file.bin").await.ok()?;
            fs.remove("cancel-dir", true).await.ok()
        })
    })
    .await
}

async fn teardown_bounded(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx
        .builder()
        .network(cx.default_policy())
        .teardown_grace(GRACE)
        .create()
        .await
        .map_err(|e| cx.unexpected("create()", &e))?;
    cx.sandbox_visible(sandbox.id()).await?;
    drop(sandbox);
    cx.no_sandboxes("within the grace bound after its handle was dropped", GRACE).await
}

async fn drop_is_not_error(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.async_sandbox().await?;
    let finished = poll_k(sandbox.run(cx.probes.hang()), 1).await;
    expect(finished.is_none(), || {
        "expected a hanging command to still be running after one poll".to_owned()
    })?;
    let _ = sandbox.close().await;
    let runs: Vec<Outcome> =
        cx.records().into_iter().filter(|r| r.kind == OperationKind::Run).map(|r| r.outcome).collect();
    expect(runs == [Outcome::Cancelled], || {
        format!("expected the dropped run() recorded as Cancelled (not an error), observed {runs:?}")
    })
}

async fn kill_from_drop(cx: Arc<Ctx>) -> Verdict {
    struct Owner(Option<AnySandbox>);
    impl Drop for Owner {
        fn drop(&mut self) {
            match self.0.take() {
                // A destructor has no executor: the async `kill()` is a plain future any
                // executor (here the simplest one) can drive.
                Some(AnySandbox::Async(sandbox)) => {
                    let _ = futures_lite::future::block_on(sandbox.kill());
                }
                // The blocking facade needs none at all.
                Some(AnySandbox::Blocking(sandbox)) => {
                    let _ = sandbox.kill();
                }
                None => {}
            }
        }
    }
    let sandbox = cx.sandbox().await?;
    cx.sandbox_visible(sandbox.id()).await?;
    let cx2 = Arc::clone(&cx);
    // Drop on a plain thread: no runtime at all.
    std::thread::spawn(move || drop(Owner(Some(sandbox))))
        .join()
        .map_err(|_| "the dropping thread panicked".to_owned())?;
    cx2.no_sandboxes("after kill() from a Drop impl", Duration::ZERO).await
}

async fn kill_during_shutdown(cx: Arc<Ctx>) -> Verdict {
    // A tiny "runtime" on its own thread owns a task that owns a sandbox; the runtime
    // shuts down mid-task, dropping the task, as tokio does on runtime drop.
    let sandbox = cx.sandbox().await?;
    cx.sandbox_visible(sandbox.id()).await?;
    std::thread::spawn(move || {
        let task = async move {
            let _owned = sandbox;
            std::future::pending::<()>().await;
        };
        let finished = futures_lite::future::block_on(poll_k(task, 1));
        debug_assert!(finished.is_none());
        // The runtime shuts down here: the pending task (and its sandbox) is dropped.
    })
    .join()
    .map_err(|_| "the runtime thread panicked".to_owned())?;
    cx.no_sandboxes("after its runtime shut down mid-task", GRACE).await
}

async fn grace_expiry(cx: Arc<Ctx>) -> Verdict {
    let grace = Duration::from_millis(300);
    let sandbox = cx
        .builder()
        .network(cx.default_policy())
        .teardown_grace(grace)
        .ttl(Duration::from_mins(2))
        .create()
        .await
        .map_err(|e| cx.unexpected("create()", &e))?;
    let id = sandbox.id().to_owned();
    cx.probe("simulate_kill_hang", cx.probes.simulate_kill_hang(&id)).await?;
    drop(sandbox);
    cx.facade.shutdown(grace + Duration::from_secs(30)).await;
    let orphans: Vec<_> = cx
        .records()
        .into_iter()
        .filter(|r| r.kind == OperationKind::OrphanedSandbox && r.sandbox_id.as_deref() == Some(id.as_str()))
        .collect();
    expect(orphans.len() == 1, || {
        format!(
            "expected one OrphanedSandbox record for {id} once the {grace:?} grace expired, observed {orphans:?}"
        )
    })
}
