//! Observability: one record per operation, secrets in no sink, metadata on labels.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::audit::OperationKind as K;
use crate::policy::Capabilities as C;

use super::super::ProbeKind as P;
use super::super::Row;
use super::super::ctx::{Ctx, Verdict, expect, expect_eq};
use super::Case;

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(Row::Observability, "observability__one_operation_record_per_operation", |cx| {
            Box::pin(one_record(cx))
        })
        .audited(),
        Case::new(Row::Observability, "observability__secrets_are_absent_from_every_sink", |cx| {
            Box::pin(secrets(cx))
        })
        .probes(&[P::ProviderConfigText])
        .audited(),
        Case::new(Row::Observability, "observability__metadata_is_propagated_to_provider_labels", |cx| {
            Box::pin(labels(cx))
        })
        .probes(&[P::ProviderLabels]),
    ]
}

async fn one_record(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    let mut expected = vec![K::Create];
    if cx.caps.contains(C::RUN) {
        let _ = sandbox.run(cx.probes.echo("x")).await;
        let _ = sandbox.run(cx.probes.echo("bad\0input")).await;
        expected.extend([K::Run, K::Run]);
    }
    if cx.caps.contains(C::FILESYSTEM) {
        let _ = sandbox.fs().write("o.txt", "x").await;
        let _ = sandbox.fs().read("missing.txt").await;
        expected.extend([K::FsWrite, K::FsRead]);
    }
    let _ = sandbox.kill().await;
    let _ = sandbox.kill().await;
    let _ = sandbox.close().await;
    expected.extend([K::Kill, K::Kill, K::Close]);
    let records = cx.records();
    let kinds: Vec<K> = records.iter().map(|r| r.kind).collect();
    expect_eq(kinds, expected, "the operation records, in order")?;
    let kills: Vec<_> = records.iter().filter(|r| r.kind == K::Kill).map(|r| r.outcome).collect();
    expect_eq(
        kills,
        vec![crate::audit::Outcome::Ok, crate::audit::Outcome::NoOp],
        "the outcomes of kill() twice",
    )?;
    let policy = Some(cx.default_policy());
    expect(records.iter().all(|r| r.policy == policy && r.backend == cx.backend.scheme()), || {
        format!("expected every record to carry the policy {policy:?} and backend, observed {records:?}")
    })
}

async fn secrets(cx: Arc<Ctx>) -> Verdict {
    let canary = format!("sbx-canary-{}", cx.token.len() * 7919 + 104_729);
    let sandbox = cx
        .builder()
        .network(cx.default_policy())
        .secret_env("SBX_SECRET", canary.clone())
        .create()
        .await
        .map_err(|e| cx.unexpected("create()", &e))?;
    let mut surfaces = format!("{sandbox:?}\n");
    if cx.caps.contains(C::RUN) {
        let out =
            sandbox.run(cx.probes.print_env("SBX_SECRET")).await.map_err(|e| cx.unexpected("run", &e))?;
        expect_eq(out.stdout_lossy().trim(), canary.as_str(), "the secret as the process sees it")?;
        let failing = sandbox.run(cx.probes.echo("x").secret_env("SBX_BAD", format!("{canary}\0"))).await;
        let _ = writeln!(surfaces, "{failing:?}");
        if let Err(e) = failing {
            let _ = writeln!(surfaces, "{e}");
        }
    }
    let text = cx.probe("provider_config_text", cx.probes.provider_config_text(sandbox.id())).await?;
    let id = sandbox.id().to_owned();
    let _ = sandbox.close().await;
    // Positive controls: the configuration text is this sandbox's (it carries the test's
    // label), and the sink holds this sandbox's records; else their silence proves nothing.
    if !text.contains(&cx.token) {
        return Err(cx.control_unavailable(format!(
            "the provider_config_text probe's text for {id} does not mention the sandbox's label value {}: \
             it does not describe this sandbox",
            cx.token
        )));
    }
    surfaces.push_str(&text);
    let records = cx.records();
    if !records.iter().any(|r| r.kind == K::Create) {
        return Err(cx.control_unavailable(
            "the recording sink holds no Create record of this test's sandbox: it sees nothing".to_owned(),
        ));
    }
    let _ = write!(surfaces, "{records:?}");
    expect(!surfaces.contains(&canary), || {
        "expected the secret in no record, error, debug output, label or provider configuration; observed it"
            .to_owned()
    })
}

async fn labels(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx
        .builder()
        .network(cx.default_policy())
        .metadata("team", "contract-suite")
        .create()
        .await
        .map_err(|e| cx.unexpected("create()", &e))?;
    let labels = cx.probe("provider_labels", cx.probes.provider_labels(sandbox.id())).await;
    let _ = sandbox.close().await;
    let labels = labels?;
    expect_eq(
        labels.get("team").map(String::as_str),
        Some("contract-suite"),
        "the provider label for metadata team",
    )
}
