//! Lifecycle: create → run → kill; teardown on success and on error; idempotent kill;
//! connect.

use std::sync::Arc;
use std::time::Duration;

use crate::ErrorCode;
use crate::policy::Capabilities as C;

use super::super::ProbeKind as P;
use super::super::Row;
use super::super::ctx::{Ctx, Verdict, expect, expect_code, expect_eq};
use super::super::facade::AnySandbox;
use super::Case;

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(Row::Lifecycle, "lifecycle__create_run_kill", |cx| Box::pin(create_run_kill(cx)))
            .requires(C::RUN),
        Case::new(Row::Lifecycle, "lifecycle__close_tears_down_on_normal_exit", |cx| {
            Box::pin(close_tears_down(cx))
        })
        .probes(&[P::LiveSandboxes]),
        Case::new(Row::Lifecycle, "lifecycle__drop_tears_down_when_an_error_unwinds", |cx| {
            Box::pin(drop_on_error(cx))
        })
        .probes(&[P::LiveSandboxes]),
        Case::new(Row::Lifecycle, "lifecycle__double_kill_is_idempotent", |cx| Box::pin(double_kill(cx))),
        Case::new(Row::Lifecycle, "lifecycle__connect_to_unknown_id_raises_connect_error", |cx| {
            Box::pin(connect_unknown(cx))
        })
        .requires(C::CONNECT),
        Case::new(Row::Lifecycle, "lifecycle__connect_attaches_without_owning", |cx| {
            Box::pin(connect_attaches(cx))
        })
        .requires(C::CONNECT | C::RUN),
        Case::new(Row::Lifecycle, "lifecycle__detached_sandbox_outlives_its_handle", |cx| {
            Box::pin(detached(cx))
        })
        .requires(C::DETACH | C::CONNECT)
        .probes(&[P::LiveSandboxes]),
        Case::new(Row::Lifecycle, "lifecycle__a_listed_sandbox_carries_its_labels_and_ttl", |cx| {
            Box::pin(listed(cx))
        }),
        Case::new(Row::Lifecycle, "lifecycle__extend_ttl_moves_the_end_of_a_live_sandbox", |cx| {
            Box::pin(extend_ttl(cx))
        })
        .requires(C::EXTEND_TTL),
    ]
}

/// This run's sandboxes as the backend lists them, or `None` where it cannot list.
async fn list_mine(cx: &Ctx) -> std::result::Result<Option<Vec<crate::inventory::SandboxInfo>>, String> {
    let mine = std::collections::BTreeMap::from([(super::super::LABEL_KEY.to_owned(), cx.token.clone())]);
    match cx.facade.list(Arc::clone(&cx.backend), &mine).await {
        Ok(listed) => Ok(Some(listed)),
        Err(e) if e.code() == ErrorCode::CapabilityNotSupported => Ok(None),
        Err(e) => Err(cx.unexpected("list()", &e)),
    }
}

/// The TTL the backend reports for sandbox `id`, if it lists and reports one.
async fn listed_ttl(cx: &Ctx, id: &str) -> std::result::Result<Option<Duration>, String> {
    let Some(listed) = list_mine(cx).await? else { return Ok(None) };
    let info = listed.iter().find(|i| i.id == id);
    let info = info
        .ok_or_else(|| format!("expected sandbox {id} in the listing by its label, observed {listed:?}"))?;
    Ok(info.ttl_left)
}

/// A sandbox with `ttl`, detached where the backend can detach: a provider may keep an
/// owned sandbox on a shorter lease than its TTL (renewed while its owner lives), and the
/// listing shows the lease. The caller kills it. Also says whether it is detached.
async fn with_ttl(cx: &Ctx, ttl: Duration) -> std::result::Result<(AnySandbox, bool), String> {
    let detached = cx.caps.contains(C::DETACH);
    let sandbox = cx
        .builder()
        .network(cx.default_policy())
        .ttl(ttl)
        .detached(detached)
        .create()
        .await
        .map_err(|e| cx.unexpected("create()", &e))?;
    Ok((sandbox, detached))
}

/// `left`, when known, is at most `ttl`, and (when `exact`) within a minute of it.
fn about(left: Option<Duration>, ttl: Duration, exact: bool, what: &str) -> Verdict {
    expect(left.is_none_or(|left| left <= ttl && (!exact || left + Duration::from_mins(1) >= ttl)), || {
        format!("expected {what} ({ttl:?} or a little less), observed {left:?}")
    })
}

async fn listed(cx: Arc<Ctx>) -> Verdict {
    let (sandbox, detached) = with_ttl(&cx, Duration::from_mins(20)).await?;
    let id = sandbox.id().to_owned();
    let listed = list_mine(&cx).await;
    let _ = sandbox.kill().await;
    // A backend that cannot enumerate its sandboxes refuses; there is nothing more to check.
    let Some(listed) = listed? else { return Ok(()) };
    let Some(info) = listed.iter().find(|i| i.id == id) else {
        return Err(format!("expected sandbox {id} in the listing by its label, observed {listed:?}"));
    };
    expect_eq(info.backend.as_str(), cx.backend.scheme(), "the listed backend")?;
    expect(info.labels.get(super::super::LABEL_KEY) == Some(&cx.token), || {
        format!("expected the run's label on the listed sandbox, observed {:?}", info.labels)
    })?;
    expect(info.detached.is_none_or(|d| d == detached), || {
        format!("expected detached = {detached} where listed, observed {:?}", info.detached)
    })?;
    about(info.ttl_left, Duration::from_mins(20), detached, "the listed TTL left")
}

async fn extend_ttl(cx: Arc<Ctx>) -> Verdict {
    let (sandbox, detached) = with_ttl(&cx, Duration::from_mins(5)).await?;
    let verdict = async {
        let zero = sandbox.extend_ttl(Duration::ZERO).await;
        expect_code(&zero, ErrorCode::InvalidInput, "extend_ttl(0)")?;
        let huge = sandbox.extend_ttl(crate::builder::MAX_TTL + Duration::from_secs(1)).await;
        expect_code(&huge, ErrorCode::InvalidInput, "extend_ttl(above MAX_TTL)")?;
        sandbox
            .extend_ttl(Duration::from_hours(2))
            .await
            .map_err(|e| cx.unexpected("extend_ttl(2 h)", &e))?;
        if detached {
            about(
                listed_ttl(&cx, sandbox.id()).await?,
                Duration::from_hours(2),
                true,
                "the TTL left after extend_ttl(2 h)",
            )?;
        }
        sandbox
            .extend_ttl(Duration::from_mins(3))
            .await
            .map_err(|e| cx.unexpected("extend_ttl(3 min)", &e))?;
        about(
            listed_ttl(&cx, sandbox.id()).await?,
            Duration::from_mins(3),
            detached,
            "the TTL left after shortening it to 3 min",
        )?;
        if cx.caps.contains(C::RUN) {
            let out = sandbox.run(cx.probes.echo("extended")).await;
            expect(out.is_ok(), || format!("expected the extended sandbox to run, observed {out:?}"))?;
        }
        Ok::<(), String>(())
    }
    .await;
    sandbox.kill().await.map_err(|e| cx.unexpected("kill()", &e))?;
    verdict?;
    let after = sandbox.extend_ttl(Duration::from_hours(1)).await;
    expect_code(&after, ErrorCode::SandboxGone, "extend_ttl() after kill()")
}

async fn create_run_kill(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    let out = sandbox.run(cx.probes.echo("hello")).await.map_err(|e| cx.unexpected("run(echo)", &e))?;
    expect_eq(out.stdout_lossy().as_ref(), "hello\n", "stdout of echo")?;
    sandbox.kill().await.map_err(|e| cx.unexpected("kill()", &e))?;
    let after = sandbox.run(cx.probes.echo("again")).await;
    expect_code(&after, ErrorCode::SandboxGone, "run() after kill()")
}

async fn close_tears_down(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    cx.sandbox_visible(sandbox.id()).await?;
    sandbox.close().await.map_err(|e| cx.unexpected("close()", &e))?;
    cx.no_sandboxes("after close()", Duration::ZERO).await
}

async fn drop_on_error(cx: Arc<Ctx>) -> Verdict {
    // The Rust reading of "context-manager teardown on exception": a `?` unwinds out of
    // the function that owns the sandbox, which is dropped without `close()`.
    async fn user_code(cx: &Ctx) -> std::result::Result<(), String> {
        let sandbox = cx.sandbox().await?;
        cx.sandbox_visible(sandbox.id()).await?;
        Err("the caller's own error".to_owned())
    }
    let result = user_code(&cx).await;
    if cx.control_skip().is_some() {
        return result;
    }
    expect(result.is_err(), || "the caller's error was lost".to_owned())?;
    cx.no_sandboxes("after the owning scope failed", Duration::from_mins(1)).await
}

async fn double_kill(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    sandbox.kill().await.map_err(|e| cx.unexpected("first kill()", &e))?;
    sandbox.kill().await.map_err(|e| cx.unexpected("second kill()", &e))?;
    sandbox.close().await.map_err(|e| cx.unexpected("close() after kill()", &e))
}

async fn connect_unknown(cx: Arc<Ctx>) -> Verdict {
    let result = cx.connect("sandboxio-contract-no-such-sandbox").await;
    expect_code(&result, ErrorCode::Connect, "connect() to an unknown id")
}

async fn connect_attaches(cx: Arc<Ctx>) -> Verdict {
    let owner = cx.sandbox().await?;
    let attached = cx.connect(owner.id()).await.map_err(|e| cx.unexpected("connect() to a live id", &e))?;
    expect(!attached.is_owner(), || "expected a connected handle not to own the sandbox".to_owned())?;
    let out =
        attached.run(cx.probes.echo("attached")).await.map_err(|e| cx.unexpected("run() on attached", &e))?;
    expect_eq(out.stdout_lossy().as_ref(), "attached\n", "stdout through the connected handle")?;
    attached.close().await.map_err(|e| cx.unexpected("close() of the connected handle", &e))?;
    let out = owner.run(cx.probes.echo("still here")).await;
    expect(out.is_ok(), || {
        format!("expected the sandbox to outlive a connected handle's close(), observed {out:?}")
    })?;
    owner.close().await.map_err(|e| cx.unexpected("close()", &e))
}

async fn detached(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx
        .builder()
        .network(cx.default_policy())
        .detached(true)
        // Long enough that no other test advancing a shared virtual clock expires it.
        .ttl(Duration::from_hours(24))
        .create()
        .await
        .map_err(|e| cx.unexpected("create() detached", &e))?;
    let id = sandbox.id().to_owned();
    drop(sandbox);
    cx.facade.shutdown(Duration::from_secs(30)).await;
    let live =
        cx.probe("live_sandboxes", cx.probes.live_sandboxes(super::super::LABEL_KEY, &cx.token)).await?;
    let verdict = expect(live.contains(&id), || {
        format!("expected detached sandbox {id} alive after its handle dropped, observed live {live:?}")
    });
    // Clean up now rather than at the TTL.
    if let Ok(again) = cx.connect(&id).await {
        let _ = again.kill().await;
    }
    verdict
}
