//! Policy, Errors and Timeouts.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::BackendOption;
use crate::policy::Capabilities as C;
use crate::{Error, ErrorCode, NetworkPolicy, ResourceLimits};

use super::super::ProbeKind as P;
use super::super::Row;
use super::super::ctx::{Ctx, Verdict, expect, expect_code, expect_eq};
use super::Case;

const ANY_LIMIT: C = C::LIMIT_MEMORY.union(C::LIMIT_CPU).union(C::LIMIT_PIDS);

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(Row::Policy, "policy__allow_all_reaches_the_canary", |cx| Box::pin(allow_reaches(cx)))
            .requires(C::RUN)
            .probes(&[P::Canary]),
        Case::new(Row::Policy, "policy__deny_actually_denies_egress_to_the_canary", |cx| {
            Box::pin(deny_denies(cx))
        })
        .requires(C::RUN | C::NETWORK_DENY)
        .probes(&[P::Canary]),
        Case::new(Row::Policy, "policy__allowlist_permits_only_listed_hosts", |cx| Box::pin(allowlist(cx)))
            .requires(C::RUN | C::NETWORK_ALLOWLIST)
            .probes(&[P::Canary]),
        Case::new(Row::Policy, "policy__allowlist_covers_only_the_listed_port", |cx| {
            Box::pin(listed_port(cx))
        })
        .requires(C::RUN | C::NETWORK_ALLOWLIST)
        .probes(&[P::Canary]),
        Case::new(
            Row::Policy,
            "policy__allowlist_judges_an_ip_literal_by_its_address_in_any_spelling",
            |cx| Box::pin(literal_spellings(cx)),
        )
        .requires(C::RUN | C::NETWORK_ALLOWLIST)
        .probes(&[P::Canary]),
        Case::new(
            Row::Policy,
            "policy__a_provider_allowlist_is_kept_and_reported_as_the_providers_name_filter",
            |cx| Box::pin(provider_allowlist(cx)),
        )
        .requires(C::PROVIDER_ALLOWLIST),
        Case::new(Row::Policy, "policy__resource_caps_are_applied", |cx| Box::pin(caps_applied(cx)))
            .requires_any(ANY_LIMIT)
            .probes(&[P::LimitsInEffect]),
        Case::new(
            Row::Policy,
            "policy__caps_the_backend_cannot_apply_are_refused_before_provisioning",
            |cx| Box::pin(caps_refused(cx)),
        )
        .absent_any(ANY_LIMIT),
        Case::new(Row::Errors, "errors__operations_on_a_killed_sandbox_raise_sandbox_gone", |cx| {
            Box::pin(killed_gone(cx))
        })
        .requires(C::RUN),
        Case::new(Row::Errors, "errors__unsupported_typed_option_raises_capability_not_supported", |cx| {
            Box::pin(typed_option(cx))
        })
        .unless(|backend| {
            [BackendOption::Image, BackendOption::Template]
                .iter()
                .all(|o| backend.supports_option(*o))
                .then(|| "the backend supports every typed option".to_owned())
        }),
        Case::new(Row::Errors, "errors__auth_error_names_the_missing_env_var", |cx| Box::pin(auth(cx)))
            .probes(&[P::MissingCredentials]),
        // Its control and its check ask `live_sandboxes`: without the probe it must skip, not
        // run and fail on the missing probe.
        Case::new(Row::Timeouts, "timeouts__create_timeout_raises_create_timeout", |cx| {
            Box::pin(create_timeout(cx))
        })
        .probes(&[P::LiveSandboxes]),
        Case::new(Row::Timeouts, "timeouts__expired_sandbox_raises_sandbox_gone", |cx| Box::pin(expired(cx)))
            .requires(C::RUN)
            .probes(&[P::ExpireSandbox]),
        Case::new(Row::Timeouts, "timeouts__no_bare_timeout_error_escapes", |cx| {
            Box::pin(no_bare_timeout(cx))
        })
        .requires(C::RUN),
    ]
}

async fn egress(cx: &Ctx, policy: NetworkPolicy, host: &str, port: u16) -> std::result::Result<bool, String> {
    Ok(cx.egress(policy, host, port).await?.success())
}

async fn allow_reaches(cx: Arc<Ctx>) -> Verdict {
    let canary = cx.probes.canary().ok_or("no canary")?;
    let reached = egress(&cx, NetworkPolicy::allow_all(), &canary.host, canary.port).await?;
    expect(reached, || {
        format!(
            "expected the canary {}:{} reachable under allow-all (else the deny tests prove nothing)",
            canary.host, canary.port
        )
    })
}

async fn deny_denies(cx: Arc<Ctx>) -> Verdict {
    let canary = cx.probes.canary().ok_or("no canary")?;
    // Positive control: the same probe reaches the canary where egress is allowed.
    cx.egress_control(&canary).await?;
    let reached = egress(&cx, NetworkPolicy::deny_all(), &canary.host, canary.port).await?;
    expect(!reached, || {
        format!(
            "expected the canary {}:{} unreachable under deny-all, observed a connection",
            canary.host, canary.port
        )
    })
}

async fn allowlist(cx: Arc<Ctx>) -> Verdict {
    let canary = cx.probes.canary().ok_or("no canary")?;
    cx.egress_control(&canary).await?;
    let listed =
        NetworkPolicy::allowlist([format!("{}:{}", canary.host, canary.port)]).map_err(|e| e.to_string())?;
    let reached = egress(&cx, listed, &canary.host, canary.port).await?;
    expect(reached, || "expected the listed canary reachable under its allowlist".to_owned())?;
    let other = NetworkPolicy::allowlist(["unlisted.sandboxio.invalid"]).map_err(|e| e.to_string())?;
    let reached = egress(&cx, other, &canary.host, canary.port).await?;
    expect(!reached, || "expected the canary unreachable under an allowlist that does not list it".to_owned())
}

async fn listed_port(cx: Arc<Ctx>) -> Verdict {
    let canary = cx.probes.canary().ok_or("no canary")?;
    cx.egress_control(&canary).await?;
    let entry = |port: u16| NetworkPolicy::allowlist([format!("{}:{port}", bracketed(&canary.host))]);
    // The positive control: the canary's own port, listed.
    let listed = entry(canary.port).map_err(|e| e.to_string())?;
    let reached = egress(&cx, listed, &canary.host, canary.port).await?;
    expect(reached, || format!("expected {}:{} reachable when listed", canary.host, canary.port))?;
    let other = entry(if canary.port == 1 { 2 } else { canary.port - 1 }).map_err(|e| e.to_string())?;
    let reached = egress(&cx, other, &canary.host, canary.port).await?;
    expect(!reached, || {
        format!("expected {}:{} refused when only another port of it is listed", canary.host, canary.port)
    })
}

/// An IPv6 address in brackets, as an allowlist entry with a port needs it.
fn bracketed(host: &str) -> String {
    if host.contains(':') { format!("[{host}]") } else { host.to_owned() }
}

/// The other spellings of an IPv4 address clients and resolvers accept: one decimal number,
/// one hexadecimal number, and the IPv4-mapped IPv6 form.
fn spellings(ip: std::net::Ipv4Addr) -> Vec<String> {
    let n = u32::from(ip);
    vec![n.to_string(), format!("0x{n:08x}"), format!("[::ffff:{ip}]")]
}

async fn literal_spellings(cx: Arc<Ctx>) -> Verdict {
    let canary = cx.probes.canary().ok_or("no canary")?;
    let Ok(ip) = canary.host.parse::<std::net::Ipv4Addr>() else {
        return Err(cx.control_unavailable(format!(
            "the canary's host {:?} is not an IPv4 address, whose other spellings this test tries",
            canary.host
        )));
    };
    cx.egress_control(&canary).await?;
    // The positive control: the canary's address, listed, is reached in every spelling.
    let listed = NetworkPolicy::allowlist([format!("{ip}/32:{}", canary.port)]).map_err(|e| e.to_string())?;
    for spelling in spellings(ip) {
        let reached = egress(&cx, listed.clone(), &spelling, canary.port).await?;
        expect(reached, || format!("expected the listed canary reached as {spelling}:{}", canary.port))?;
    }
    // Not listed (only a name is): refused in every spelling.
    let unlisted = NetworkPolicy::allowlist([format!("unlisted.sandboxio.invalid:{}", canary.port)])
        .map_err(|e| e.to_string())?;
    for spelling in std::iter::once(ip.to_string()).chain(spellings(ip)) {
        let reached = egress(&cx, unlisted.clone(), &spelling, canary.port).await?;
        expect(!reached, || format!("expected the unlisted canary refused as {spelling}:{}", canary.port))?;
    }
    Ok(())
}

/// A provider allowlist is handed to the provider as given, and never reported as a
/// mechanism that checks more than names (sandboxio's gate, TLS termination, no route).
async fn provider_allowlist(cx: Arc<Ctx>) -> Verdict {
    let policy =
        NetworkPolicy::provider_allowlist(["pypi.org", "*.pythonhosted.org"]).map_err(|e| e.to_string())?;
    let sandbox =
        cx.builder().network(policy.clone()).create().await.map_err(|e| cx.unexpected("create", &e))?;
    let (kept, report) = (sandbox.network_policy().cloned(), sandbox.network_enforcement());
    let _ = sandbox.close().await;
    expect_eq(kept.as_ref(), Some(&policy), "the sandbox's policy")?;
    let Some(report) = report else { return Ok(()) };
    let honest = report.mechanisms == [crate::policy::EgressMechanism::Simulated]
        || (report.mechanisms.contains(&crate::policy::EgressMechanism::ProviderNameFilter)
            && report.domain_fronting_possible
            && !report.mechanisms.iter().any(|m| {
                matches!(
                    m,
                    crate::policy::EgressMechanism::ProxyConnect
                        | crate::policy::EgressMechanism::TlsTerminate
                        | crate::policy::EgressMechanism::NoRoute
                )
            }));
    expect(honest, || {
        format!("expected the provider's name filter reported (fronting possible), observed {report}")
    })
}

async fn caps_applied(cx: Arc<Ctx>) -> Verdict {
    let mut limits = ResourceLimits::new();
    if cx.caps.contains(C::LIMIT_MEMORY) {
        limits = limits.memory_mib(256);
    }
    if cx.caps.contains(C::LIMIT_CPU) {
        limits = limits.cpu_millicores(500);
    }
    if cx.caps.contains(C::LIMIT_PIDS) {
        limits = limits.pids(64);
    }
    let sandbox = cx
        .builder()
        .network(cx.default_policy())
        .limits(limits)
        .create()
        .await
        .map_err(|e| cx.unexpected("create()", &e))?;
    let in_effect = cx.probe("limits_in_effect", cx.probes.limits_in_effect(sandbox.id())).await;
    let _ = sandbox.close().await;
    expect_eq(in_effect?, limits, "the limits in effect inside the sandbox")
}

async fn caps_refused(cx: Arc<Ctx>) -> Verdict {
    for (flag, limits) in [
        (C::LIMIT_MEMORY, ResourceLimits::new().memory_mib(256)),
        (C::LIMIT_CPU, ResourceLimits::new().cpu_millicores(500)),
        (C::LIMIT_PIDS, ResourceLimits::new().pids(64)),
    ] {
        if cx.caps.contains(flag) {
            continue;
        }
        let result = cx.builder().network(cx.default_policy()).limits(limits).create().await;
        expect_code(&result, ErrorCode::Configuration, &format!("create() with an undeclared {flag} limit"))?;
    }
    // Refused in the core's preflight: nothing can have been provisioned.
    Ok(())
}

async fn killed_gone(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    sandbox.kill().await.map_err(|e| cx.unexpected("kill()", &e))?;
    let run = sandbox.run(cx.probes.echo("x")).await;
    expect_code(&run, ErrorCode::SandboxGone, "run() on a killed sandbox")?;
    if cx.caps.contains(C::FILESYSTEM) {
        let read = sandbox.fs().read("x").await;
        expect_code(&read, ErrorCode::SandboxGone, "fs().read() on a killed sandbox")?;
    }
    Ok(())
}

async fn typed_option(cx: Arc<Ctx>) -> Verdict {
    let mut tried = 0;
    for option in [BackendOption::Image, BackendOption::Template] {
        if cx.backend.supports_option(option) {
            continue;
        }
        tried += 1;
        let builder = cx.builder().network(cx.default_policy());
        let builder = match option {
            BackendOption::Image => builder.image("sandboxio/contract:unsupported"),
            _ => builder.template("sandboxio-contract-unsupported"),
        };
        let result = builder.create().await;
        expect_code(
            &result,
            ErrorCode::CapabilityNotSupported,
            &format!("create() with the unsupported {option}"),
        )?;
    }
    expect(tried > 0, || "expected an unsupported typed option to try".to_owned())
}

async fn auth(cx: Arc<Ctx>) -> Verdict {
    let (backend, var) = cx.probes.missing_credentials().ok_or("no missing_credentials probe")?;
    let result = cx.facade.builder(backend).network(cx.default_policy()).create().await;
    match result {
        Err(Error::Auth { env_var, message, .. }) => {
            expect_eq(env_var.as_deref(), Some(var.as_str()), "the env var named by the Auth error")?;
            expect(message.contains(&var), || {
                format!("expected the message to name {var}, observed {message:?}")
            })
        }
        other => Err(format!("expected an Auth error naming {var}, observed {other:?}")),
    }
}

async fn create_timeout(cx: Arc<Ctx>) -> Verdict {
    cx.sandboxes_control().await?;
    let result =
        cx.builder().network(cx.default_policy()).create_timeout(Duration::from_nanos(1)).create().await;
    expect_code(&result, ErrorCode::CreateTimeout, "create() with a 1 ns create timeout")?;
    cx.no_sandboxes("after a timed-out create()", Duration::from_mins(1)).await
}

async fn expired(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    cx.probe("expire_sandbox", cx.probes.expire_sandbox(sandbox.id())).await?;
    let result = sandbox.run(cx.probes.echo("x")).await;
    expect_code(&result, ErrorCode::SandboxGone, "run() on an expired sandbox")
}

async fn no_bare_timeout(cx: Arc<Ctx>) -> Verdict {
    let sandbox = cx.sandbox().await?;
    let result = sandbox.run(cx.probes.hang().timeout(Duration::from_millis(500))).await;
    let _ = sandbox.close().await;
    let Err(e) = result else {
        return Err(format!("expected an ExecutionTimeout, observed {result:?}"));
    };
    expect_eq(e.code(), ErrorCode::ExecutionTimeout, "the timeout's code")?;
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            expect(io.kind() != std::io::ErrorKind::TimedOut, || {
                format!("a bare io TimedOut sits in the source chain: {io}")
            })?;
        }
        source = s.source();
    }
    Ok(())
}
