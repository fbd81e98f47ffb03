//! Create, connect, kill, close, detach, drop: ownership and teardown.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use crate::support;

use std::time::Duration;

use sandboxio::testing::FakeBackend;
use sandboxio::{
    Command, Error, ErrorCode, NetworkPolicy, ResourceLimits, Sandbox,
    audit::{OperationKind, Outcome},
    policy::{Capabilities, IsolationTier},
};
use support::{block_on, fake_sandbox};

#[test]
fn lifecycle__create_run_kill() {
    let (fake, sbx) = fake_sandbox();
    assert_eq!(fake.live_sandboxes(), vec![sbx.id().to_owned()]);
    assert_eq!(block_on(sbx.run(Command::new("echo").arg("hi"))).unwrap().stdout, b"hi\n");
    block_on(sbx.kill()).unwrap();
    assert!(fake.live_sandboxes().is_empty());
    let err = block_on(sbx.run(Command::new("true"))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::SandboxGone);
}

#[test]
fn lifecycle__double_kill_is_idempotent_and_recorded_as_no_op() {
    let (fake, sbx) = fake_sandbox();
    block_on(sbx.kill()).unwrap();
    block_on(sbx.kill()).unwrap();
    let kills = fake.audit_sink().records_of(OperationKind::Kill);
    assert_eq!(kills.iter().map(|r| r.outcome).collect::<Vec<_>>(), vec![Outcome::Ok, Outcome::NoOp]);
}

#[test]
fn lifecycle__close_kills_and_consumes_the_handle() {
    let (fake, sbx) = fake_sandbox();
    block_on(sbx.close()).unwrap();
    assert!(fake.live_sandboxes().is_empty());
    assert_eq!(fake.audit_sink().records_of(OperationKind::Close).len(), 1);
}

#[test]
fn lifecycle__dropping_an_owned_sandbox_tears_it_down_in_the_background() {
    let (fake, sbx) = fake_sandbox();
    drop(sbx);
    assert_eq!(block_on(sandboxio::runtime::shutdown(Duration::from_secs(5))), 0);
    assert!(fake.live_sandboxes().is_empty());
    assert_eq!(fake.audit_sink().records_of(OperationKind::DropTeardown).len(), 1);
}

#[test]
fn lifecycle__connect_to_unknown_id_raises_connect_error() {
    let fake = FakeBackend::new();
    let err = block_on(Sandbox::connect_with(fake, "fake-does-not-exist")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Connect);
    assert!(err.to_string().contains("fake-does-not-exist"), "{err}");
    let err = block_on(Sandbox::connect("fake://", "nope")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Connect);
}

#[test]
fn lifecycle__connect_attaches_without_owning() {
    let (fake, owner) = fake_sandbox();
    let attached = block_on(Sandbox::connect_with(fake.clone(), owner.id())).unwrap();
    assert!(!attached.is_owner());
    assert_eq!(attached.network_policy(), Some(&NetworkPolicy::deny_all()));
    block_on(attached.close()).unwrap();
    assert_eq!(
        fake.live_sandboxes(),
        vec![owner.id().to_owned()],
        "closing a connected handle kills nothing"
    );
    block_on(owner.close()).unwrap();
}

#[test]
fn lifecycle__detach_gives_up_ownership_and_returns_the_id() {
    let (fake, sbx) = fake_sandbox();
    let id = block_on(sbx.detach()).unwrap();
    assert_eq!(block_on(sandboxio::runtime::shutdown(Duration::from_secs(5))), 0);
    assert_eq!(fake.live_sandboxes(), vec![id.clone()], "a detached sandbox lives until its TTL");
    let again = block_on(Sandbox::connect_with(fake.clone(), &id)).unwrap();
    block_on(again.kill()).unwrap();
}

#[test]
fn lifecycle__detached_sandboxes_expire_at_their_ttl() {
    let fake = FakeBackend::new();
    let sbx = block_on(
        Sandbox::builder_with(fake.clone())
            .network(NetworkPolicy::deny_all())
            .detached(true)
            .ttl(Duration::from_mins(1))
            .create(),
    )
    .unwrap();
    assert!(!sbx.is_owner());
    let id = sbx.id().to_owned();
    drop(sbx);
    assert_eq!(fake.live_sandboxes(), vec![id]);
    fake.advance_clock(Duration::from_secs(61));
    assert!(fake.live_sandboxes().is_empty());
}

#[test]
fn lifecycle__every_sandbox_gets_the_default_ttl() {
    let (fake, sbx) = fake_sandbox();
    fake.advance_clock(sandboxio::builder::DEFAULT_TTL);
    let err = block_on(sbx.run(Command::new("true"))).unwrap_err();
    assert!(matches!(err, Error::SandboxGone { .. }), "{err}");
}

#[test]
fn isolation__require_isolation_above_the_tier_fails_before_provisioning() {
    let fake = FakeBackend::new();
    let err = block_on(
        Sandbox::builder_with(fake.clone())
            .network(NetworkPolicy::deny_all())
            .require_isolation(IsolationTier::Container)
            .create(),
    )
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::IsolationUnsatisfied);
    assert!(fake.live_sandboxes().is_empty() && fake.calls().is_empty());
    block_on(
        Sandbox::builder_with(fake.clone())
            .network(NetworkPolicy::deny_all())
            .require_isolation(IsolationTier::None)
            .create(),
    )
    .unwrap();
}

#[test]
fn isolation__unknown_satisfies_nothing() {
    let fake = FakeBackend::new().with_isolation(IsolationTier::Unknown);
    let err = block_on(
        Sandbox::builder_with(fake)
            .network(NetworkPolicy::deny_all())
            .require_isolation(IsolationTier::None)
            .create(),
    )
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::IsolationUnsatisfied);
}

#[test]
fn errors__unsupported_typed_option_raises_capability_not_supported() {
    let fake = FakeBackend::new();
    let err = block_on(
        Sandbox::builder_with(fake.clone()).network(NetworkPolicy::deny_all()).image("python:3.12").create(),
    )
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityNotSupported);
    assert!(err.to_string().contains("image"), "{err}");
    assert!(fake.live_sandboxes().is_empty());
}

#[test]
fn policy__limits_on_a_backend_that_cannot_apply_them_are_refused_before_provisioning() {
    let fake = FakeBackend::new().with_capabilities(Capabilities::all() - Capabilities::LIMIT_MEMORY);
    let err = block_on(
        Sandbox::builder_with(fake.clone())
            .network(NetworkPolicy::deny_all())
            .limits(ResourceLimits::new().memory_mib(256))
            .create(),
    )
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Configuration);
    assert!(err.to_string().contains("LIMIT_MEMORY"), "{err}");
    assert!(fake.live_sandboxes().is_empty());
}

#[test]
fn policy__a_policy_the_backend_cannot_enforce_is_refused() {
    let fake = FakeBackend::new().with_capabilities(Capabilities::all() - Capabilities::NETWORK_ALLOWLIST);
    let err = block_on(
        Sandbox::builder_with(fake).network(NetworkPolicy::allowlist(["pypi.org"]).unwrap()).create(),
    )
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityNotSupported);
    assert!(err.to_string().contains("NETWORK_ALLOWLIST"), "{err}");
}

#[test]
fn policy__a_provider_allowlist_is_never_taken_for_an_allowlist() {
    // A backend that enforces sandboxio's allowlist but has no provider filter refuses a
    // provider allowlist, and the other way round: neither stands in for the other.
    let allowlist_only =
        FakeBackend::new().with_capabilities(Capabilities::all() - Capabilities::PROVIDER_ALLOWLIST);
    let policy = NetworkPolicy::provider_allowlist(["pypi.org"]).unwrap();
    let err = block_on(Sandbox::builder_with(allowlist_only).network(policy.clone()).create()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityNotSupported);
    assert!(err.to_string().contains("PROVIDER_ALLOWLIST"), "{err}");
    let provider_only =
        FakeBackend::new().with_capabilities(Capabilities::all() - Capabilities::NETWORK_ALLOWLIST);
    let err = block_on(
        Sandbox::builder_with(provider_only.clone())
            .network(NetworkPolicy::allowlist(["pypi.org"]).unwrap())
            .create(),
    )
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityNotSupported);
    let sandbox = block_on(Sandbox::builder_with(provider_only).network(policy.clone()).create()).unwrap();
    assert_eq!(sandbox.network_policy(), Some(&policy));
}

#[test]
fn timeouts__create_timeout_raises_create_timeout() {
    let fake = FakeBackend::new().with_create_latency(Duration::from_secs(90));
    let err = block_on(
        Sandbox::builder_with(fake.clone())
            .network(NetworkPolicy::deny_all())
            .create_timeout(Duration::from_secs(30))
            .create(),
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::CreateTimeout { timeout, .. } if timeout == Duration::from_secs(30)),
        "{err}"
    );
    assert!(fake.live_sandboxes().is_empty());
    assert_eq!(fake.now(), Duration::from_secs(30), "a virtual 30 s, finished at once");
}
