//! Capability honesty and isolation honesty.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Backend, BackendSandbox, BoxFuture, CreateSpec};
use crate::policy::Capabilities as C;
use crate::{ErrorCode, NetworkPolicy, ResourceLimits, policy::IsolationTier};

use super::super::Row;
use super::super::ctx::{Ctx, Verdict, expect, expect_code};
use super::super::facade::Facade;
use super::Case;

pub(super) fn cases() -> Vec<Case> {
    let mut cases = vec![Case::new(
        Row::CapabilityHonesty,
        "capability_honesty__every_declared_capability_has_a_runnable_test",
        |cx| Box::pin(every_declared_flag_tested(cx)),
    )];
    cases.extend(undeclared_cases().into_iter().map(|case| match case.name {
        // Rich results only exist on code cells; stdin only on streams.
        "capability_honesty__undeclared_rich_outputs_are_never_returned" => case.requires(C::RUN_CODE),
        "capability_honesty__undeclared_stdin_raises" => case.requires(C::STREAM),
        // Command secrets only exist on commands.
        "capability_honesty__undeclared_command_secrets_are_refused" => case.requires(C::RUN),
        _ => case,
    }));
    cases.extend([
        Case::new(
            Row::IsolationHonesty,
            "isolation_honesty__require_isolation_above_the_tier_fails_before_provisioning",
            |cx| Box::pin(above_tier(cx)),
        ),
        Case::new(Row::IsolationHonesty, "isolation_honesty__require_isolation_at_the_tier_succeeds", |cx| {
            Box::pin(at_tier(cx))
        }),
        Case::new(
            Row::IsolationHonesty,
            "isolation_honesty__an_undeclared_tier_is_unknown_and_satisfies_nothing",
            |cx| Box::pin(unknown_tier(cx)),
        ),
    ]);
    cases
}

#[expect(clippy::unused_async, reason = "every case has the same async signature")]
async fn every_declared_flag_tested(cx: Arc<Ctx>) -> Verdict {
    let runnable = |case: &super::Case| {
        case.pending.is_none()
            && case.since <= cx.version
            && !(cx.facade == Facade::Blocking && case.async_only.is_some())
            && case.requires_absent.is_empty()
            && cx.caps.contains(case.requires)
            && case.probes.iter().all(|p| crate::testing::contract::probes::implemented(&*cx.probes, *p))
    };
    let mut untested = Vec::new();
    for (name, flag) in cx.caps.iter_names() {
        let covered = super::all().iter().any(|c| {
            runnable(c)
                && (c.requires.contains(flag) || c.requires_any.contains(flag) || flag == C::RICH_OUTPUTS)
        });
        if !covered {
            untested.push(name);
        }
    }
    expect(untested.is_empty(), || {
        format!(
            "expected every declared capability proven by a test that can run, observed none runnable for {untested:?} in contract {} (implement the probes their tests need, or select the contract version their tests arrived in)",
            cx.version
        )
    })
}

macro_rules! undeclared {
    ($($flag:ident => $name:literal, $body:ident;)*) => {
        fn undeclared_cases() -> Vec<Case> {
            vec![$(Case::new(Row::CapabilityHonesty, $name, |cx| Box::pin($body(cx))).absent(C::$flag),)*]
        }
    };
}

undeclared! {
    RUN => "capability_honesty__undeclared_run_raises", undeclared_run;
    RUN_CODE => "capability_honesty__undeclared_run_code_raises", undeclared_run_code;
    STREAM => "capability_honesty__undeclared_stream_raises", undeclared_stream;
    STDIN => "capability_honesty__undeclared_stdin_raises", undeclared_stdin;
    FILESYSTEM => "capability_honesty__undeclared_filesystem_raises", undeclared_filesystem;
    STATEFUL_CODE => "capability_honesty__undeclared_stateful_code_raises", undeclared_stateful;
    RICH_OUTPUTS => "capability_honesty__undeclared_rich_outputs_are_never_returned", undeclared_rich;
    NETWORK_DENY => "capability_honesty__undeclared_network_deny_raises", undeclared_deny;
    NETWORK_ALLOWLIST => "capability_honesty__undeclared_network_allowlist_raises", undeclared_allowlist;
    PROVIDER_ALLOWLIST => "capability_honesty__undeclared_provider_allowlist_raises", undeclared_provider_allowlist;
    LIMIT_MEMORY => "capability_honesty__undeclared_limit_memory_is_refused", undeclared_memory;
    LIMIT_CPU => "capability_honesty__undeclared_limit_cpu_is_refused", undeclared_cpu;
    LIMIT_PIDS => "capability_honesty__undeclared_limit_pids_is_refused", undeclared_pids;
    CONNECT => "capability_honesty__undeclared_connect_raises", undeclared_connect;
    DETACH => "capability_honesty__undeclared_detach_raises", undeclared_detach;
    COMMAND_SECRETS => "capability_honesty__undeclared_command_secrets_are_refused", undeclared_command_secrets;
    EXTEND_TTL => "capability_honesty__undeclared_extend_ttl_raises", undeclared_extend_ttl;
}

const UNSUPPORTED: ErrorCode = ErrorCode::CapabilityNotSupported;

use super::facts::undeclared_command_secrets;

async fn undeclared_run(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    let result = sandbox.run(cx.probes.echo("x")).await;
    let _ = sandbox.close().await;
    expect_code(&result, UNSUPPORTED, "run() without RUN")
}

async fn undeclared_run_code(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    let result = sandbox.run_code(cx.probes.code_print("x")).await;
    let streamed = sandbox.run_code_stream(cx.probes.code_print("x")).map(drop);
    let _ = sandbox.close().await;
    expect_code(&result, UNSUPPORTED, "run_code() without RUN_CODE")?;
    expect_code(&streamed, UNSUPPORTED, "run_code_stream() without RUN_CODE")
}

async fn undeclared_stream(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    let result = sandbox.stream(cx.probes.echo("x")).map(|_| ());
    let _ = sandbox.close().await;
    expect_code(&result, UNSUPPORTED, "stream() without STREAM")
}

async fn undeclared_stdin(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    let verdict = async {
        let mut stream = sandbox
            .stream(cx.probes.cat_stdin().timeout(Duration::from_secs(5)))
            .map_err(|e| cx.unexpected("stream", &e))?;
        let result = stream.write_stdin("x").await;
        expect_code(&result, UNSUPPORTED, "write_stdin() without STDIN")?;
        let result = stream.close_stdin().await;
        expect_code(&result, UNSUPPORTED, "close_stdin() without STDIN")
    }
    .await;
    let _ = sandbox.close().await;
    verdict
}

async fn undeclared_filesystem(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    let fs = sandbox.fs();
    let results = [
        fs.read("x").await.map(drop),
        fs.write("x", "y").await,
        fs.list(".").await.map(drop),
        fs.mkdir("d").await,
        fs.remove("x", false).await,
    ];
    let _ = sandbox.close().await;
    for result in &results {
        expect_code(result, UNSUPPORTED, "a file operation without FILESYSTEM")?;
    }
    Ok(())
}

async fn undeclared_stateful(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    let result = sandbox.create_context("python").await;
    let _ = sandbox.close().await;
    expect_code(&result, UNSUPPORTED, "create_context() without STATEFUL_CODE")
}

async fn undeclared_rich(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    let result = sandbox.run_code(cx.probes.code_rich_display().0).await;
    let _ = sandbox.close().await;
    let out = result.map_err(|e| cx.unexpected("run_code", &e))?;
    // Positive control: the display cell ran; a cell that failed has no results anyway.
    if !out.success() {
        return Err(cx.control_unavailable(format!(
            "the code_rich_display probe's cell did not run here ({}, error {:?}): its lack of rich results \
             proves nothing",
            out.status, out.error
        )));
    }
    expect(out.results.is_empty(), || {
        format!("expected no rich results without RICH_OUTPUTS, observed {:?}", out.results)
    })
}

async fn refused_policy(cx: &Ctx, policy: NetworkPolicy, what: &str) -> Verdict {
    let result = cx.builder().network(policy).create().await;
    expect_code(&result, UNSUPPORTED, what)
}

async fn undeclared_deny(cx: Arc<Ctx>) -> Verdict {
    refused_policy(&cx, NetworkPolicy::deny_all(), "create() with deny_all() without NETWORK_DENY").await
}

async fn undeclared_allowlist(cx: Arc<Ctx>) -> Verdict {
    let policy = NetworkPolicy::allowlist(["pypi.org"]).map_err(|e| e.to_string())?;
    refused_policy(&cx, policy, "create() with an allowlist without NETWORK_ALLOWLIST").await
}

async fn undeclared_provider_allowlist(cx: Arc<Ctx>) -> Verdict {
    let policy = NetworkPolicy::provider_allowlist(["pypi.org"]).map_err(|e| e.to_string())?;
    refused_policy(&cx, policy, "create() with a provider allowlist without PROVIDER_ALLOWLIST").await
}

async fn refused_limit(cx: &Ctx, limits: ResourceLimits, what: &str) -> Verdict {
    let result = cx.builder().network(cx.default_policy()).limits(limits).create().await;
    expect_code(&result, ErrorCode::Configuration, what)
}

async fn undeclared_memory(cx: Arc<Ctx>) -> Verdict {
    refused_limit(
        &cx,
        ResourceLimits::new().memory_mib(256),
        "create() with a memory limit without LIMIT_MEMORY",
    )
    .await
}

async fn undeclared_cpu(cx: Arc<Ctx>) -> Verdict {
    refused_limit(
        &cx,
        ResourceLimits::new().cpu_millicores(500),
        "create() with a CPU limit without LIMIT_CPU",
    )
    .await
}

async fn undeclared_pids(cx: Arc<Ctx>) -> Verdict {
    refused_limit(&cx, ResourceLimits::new().pids(64), "create() with a pids limit without LIMIT_PIDS").await
}

async fn undeclared_connect(cx: Arc<Ctx>) -> Verdict {
    let result = cx.connect("any-id").await;
    expect_code(&result, UNSUPPORTED, "connect() without CONNECT")
}

async fn undeclared_detach(cx: Arc<Ctx>) -> Verdict {
    let result = cx.builder().network(cx.default_policy()).detached(true).create().await;
    expect_code(&result, UNSUPPORTED, "create() detached without DETACH")?;
    let sandbox = cx.sandbox().await?;
    let result = sandbox.detach().await;
    expect_code(&result, UNSUPPORTED, "detach() without DETACH")
}

async fn undeclared_extend_ttl(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    let result = sandbox.extend_ttl(Duration::from_mins(1)).await;
    let _ = sandbox.close().await;
    expect_code(&result, UNSUPPORTED, "extend_ttl() without EXTEND_TTL")
}

/// The next tier up, or `None` above `MicroVm` (and for `Unknown`).
fn tier_above(tier: IsolationTier) -> Option<IsolationTier> {
    match tier {
        IsolationTier::None => Some(IsolationTier::Process),
        IsolationTier::Process => Some(IsolationTier::Container),
        IsolationTier::Container => Some(IsolationTier::UserspaceKernel),
        IsolationTier::UserspaceKernel => Some(IsolationTier::MicroVm),
        _ => None,
    }
}

async fn above_tier(cx: Arc<Ctx>) -> Verdict {
    let tier = cx.backend.isolation();
    let required = tier_above(tier).unwrap_or(IsolationTier::Unknown);
    let probed = crate::testing::contract::probes::implemented(
        &*cx.probes,
        crate::testing::contract::ProbeKind::LiveSandboxes,
    );
    if probed {
        cx.sandboxes_control().await?;
    }
    let result = cx.builder().network(cx.default_policy()).require_isolation(required).create().await;
    expect_code(
        &result,
        ErrorCode::IsolationUnsatisfied,
        &format!("require_isolation({required}) on a {tier} backend"),
    )?;
    if probed {
        cx.no_sandboxes("after a refused create()", Duration::ZERO).await?;
    }
    Ok(())
}

async fn at_tier(cx: Arc<Ctx>) -> Verdict {
    let tier = cx.backend.isolation();
    let result = cx.builder().network(cx.default_policy()).require_isolation(tier).create().await;
    if tier == IsolationTier::Unknown {
        return expect_code(&result, ErrorCode::IsolationUnsatisfied, "require_isolation(Unknown)");
    }
    let sandbox =
        result.map_err(|e| cx.unexpected(&format!("create() requiring its own tier {tier}"), &e))?;
    sandbox.close().await.map_err(|e| cx.unexpected("close()", &e))
}

/// The backend under test, minus its declared tier.
#[derive(Debug)]
struct UndeclaredTier(Arc<dyn Backend>);

impl Backend for UndeclaredTier {
    fn scheme(&self) -> &str {
        self.0.scheme()
    }
    fn capabilities(&self) -> C {
        self.0.capabilities()
    }
    fn create(&self, spec: CreateSpec) -> BoxFuture<'_, crate::Result<Box<dyn BackendSandbox>>> {
        self.0.create(spec)
    }
}

async fn unknown_tier(cx: Arc<Ctx>) -> Verdict {
    let wrapped = UndeclaredTier(Arc::clone(&cx.backend));
    expect(wrapped.isolation() == IsolationTier::Unknown, || {
        "expected an undeclared tier to resolve to Unknown".to_owned()
    })?;
    for required in [IsolationTier::None, IsolationTier::Process, IsolationTier::Unknown] {
        let result = cx
            .builder_with(Arc::new(UndeclaredTier(Arc::clone(&cx.backend))))
            .network(cx.default_policy())
            .require_isolation(required)
            .create()
            .await;
        expect_code(
            &result,
            ErrorCode::IsolationUnsatisfied,
            &format!("require_isolation({required}) on an Unknown tier"),
        )?;
    }
    Ok(())
}
