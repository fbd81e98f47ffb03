//! Capabilities before create (`Sandbox::capabilities_of`, `backends::capabilities`), the
//! fake harness that mirrors a real backend, and optional limits on the builder.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use sandboxio::backends::capabilities::{self, DOCKER, FAKE, LOCAL};
use sandboxio::testing::{FakeBackend, sbx_fake, sbx_fake_like};
use sandboxio::{ErrorCode, NetworkPolicy, ResourceLimits, Sandbox, policy::Capabilities};

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    futures_lite::future::block_on(f)
}

#[test]
fn capabilities__of_a_dsn_before_create_in_both_facades() {
    assert_eq!(Sandbox::capabilities_of("fake://?seed=3").unwrap(), FAKE);
    assert_eq!(sandboxio::sync::Sandbox::capabilities_of("fake://").unwrap(), FAKE);
    #[cfg(feature = "local")]
    assert_eq!(Sandbox::capabilities_of("local://").unwrap(), LOCAL);
    #[cfg(feature = "docker")]
    assert_eq!(Sandbox::capabilities_of("docker://?image=sandboxio/busybox:1").unwrap(), DOCKER);
    #[cfg(feature = "e2b")]
    assert_eq!(Sandbox::capabilities_of("e2b://").unwrap(), capabilities::E2B, "no key needed to ask");
    #[cfg(not(feature = "e2b"))]
    assert_eq!(Sandbox::capabilities_of("e2b://").unwrap_err().code(), ErrorCode::Configuration);
    #[cfg(feature = "modal")]
    assert_eq!(Sandbox::capabilities_of("modal://").unwrap(), capabilities::MODAL, "no token needed to ask");
    #[cfg(not(feature = "modal"))]
    assert_eq!(Sandbox::capabilities_of("modal://").unwrap_err().code(), ErrorCode::Configuration);
    for dsn in ["nope://", "not a dsn"] {
        let e = Sandbox::capabilities_of(dsn).unwrap_err();
        assert_eq!(e.code(), ErrorCode::Configuration, "{dsn}: {e}");
    }
}

#[test]
fn capabilities__a_sandbox_can_be_narrower_than_its_backend() {
    let narrow = FakeBackend::new().with_capabilities(Capabilities::RUN | Capabilities::NETWORK_DENY);
    let sandbox =
        block_on(Sandbox::builder_with(narrow).network(NetworkPolicy::deny_all()).create()).unwrap();
    assert!(FAKE.contains(sandbox.capabilities()));
    assert_ne!(sandbox.capabilities(), FAKE);
}

#[test]
fn capabilities__the_first_party_sets_need_no_feature() {
    assert_eq!(capabilities::of_scheme("docker"), Some(DOCKER));
    assert_eq!(capabilities::of_scheme("local"), Some(LOCAL));
    assert_eq!(capabilities::of_scheme("fake"), Some(FAKE));
    assert_eq!(capabilities::of_scheme("e2b"), Some(capabilities::E2B));
    assert_eq!(capabilities::of_scheme("modal"), Some(capabilities::MODAL));
    assert_eq!(capabilities::of_scheme("nope"), None);
    // modal:// declares no allowlist (Modal's domain allowlist decides on the TLS server
    // name: it is offered as PROVIDER_ALLOWLIST), no limits (no OOM report), no detach (the
    // idle timeout cannot be lifted), no code contexts.
    assert!(capabilities::MODAL.contains(Capabilities::PROVIDER_ALLOWLIST));
    assert!(!capabilities::MODAL.intersects(
        Capabilities::NETWORK_ALLOWLIST
            | Capabilities::LIMIT_MEMORY
            | Capabilities::LIMIT_CPU
            | Capabilities::LIMIT_PIDS
            | Capabilities::DETACH
            | Capabilities::RUN_CODE
            | Capabilities::COMMAND_SECRETS
    ));
    // e2b:// declares no allowlist (E2B's filter decides on SNI and Host) and no limits
    // (they come from the template).
    assert!(!capabilities::E2B.intersects(
        Capabilities::NETWORK_ALLOWLIST
            | Capabilities::LIMIT_MEMORY
            | Capabilities::LIMIT_CPU
            | Capabilities::LIMIT_PIDS
    ));
    // docker:// offers everything local:// does (both enforce allowlists with the egress
    // gate), and more (limits, command-scoped secrets).
    assert!(DOCKER.contains(LOCAL) && DOCKER != LOCAL);
    assert!(
        LOCAL.contains(Capabilities::NETWORK_ALLOWLIST) && DOCKER.contains(Capabilities::NETWORK_ALLOWLIST)
    );
    // Code contexts and rich results come from sandboxd's runner on docker://.
    assert!(DOCKER.contains(Capabilities::STATEFUL_CODE | Capabilities::RICH_OUTPUTS));
}

#[test]
fn fake_harness__the_default_mirrors_docker_and_says_so() {
    let harness = sbx_fake();
    assert_eq!(harness.mirrors, Some("docker"));
    assert_eq!(harness.sandbox.capabilities(), DOCKER);
    // docker:// keeps state across cells (sandboxd's runner); so does its mirror, and a
    // mirror of a backend without contexts refuses them.
    let context = block_on(harness.sandbox.create_context("python")).unwrap();
    assert_eq!(context.language, "python");
    if !LOCAL.contains(Capabilities::STATEFUL_CODE) {
        let local = sbx_fake_like("local://");
        let refused = block_on(local.sandbox.create_context("python")).unwrap_err();
        assert_eq!(refused.code(), ErrorCode::CapabilityNotSupported);
    }
    // docker:// takes an image; so does its mirror.
    let with_image =
        Sandbox::builder_with(harness.backend.clone()).network(NetworkPolicy::deny_all()).image("x");
    block_on(block_on(with_image.create()).unwrap().close()).unwrap();
}

#[test]
fn fake_harness__like_local_refuses_what_local_refuses() {
    let harness = sbx_fake_like("local://");
    assert_eq!(harness.mirrors, Some("local"));
    assert_eq!(harness.sandbox.capabilities(), LOCAL);
    let limited = Sandbox::builder_with(harness.backend.clone())
        .network(NetworkPolicy::deny_all())
        .limits(ResourceLimits::new().pids(10));
    assert_eq!(block_on(limited.create()).unwrap_err().code(), ErrorCode::Configuration);
    let image = Sandbox::builder_with(harness.backend.clone()).network(NetworkPolicy::deny_all()).image("x");
    assert_eq!(block_on(image.create()).unwrap_err().code(), ErrorCode::CapabilityNotSupported);
    // What local:// offers works.
    let out = block_on(harness.sandbox.run(sandboxio::Command::new("echo").arg("hi"))).unwrap();
    assert_eq!(out.stdout, b"hi\n");
}

#[test]
fn fake_harness__like_fake_keeps_every_capability() {
    let harness = sbx_fake_like("fake");
    assert_eq!(harness.sandbox.capabilities(), FAKE);
    assert!(block_on(harness.sandbox.create_context("python")).is_ok());
}

#[test]
#[should_panic(
    expected = "sbx_fake_like(\"nope\"): no first-party backend of that name has a known capability set; use one of [\"fake\", \"local\", \"docker\", \"e2b\", \"modal\"]"
)]
fn fake_harness__an_unknown_backend_name_is_a_clear_error() {
    let _ = sbx_fake_like("nope");
}

#[test]
fn builder__optional_limits_keep_one_builder_type() {
    for want in [false, true] {
        let limits = want.then(|| ResourceLimits::new().memory_mib(64));
        let builder = Sandbox::builder("fake://").unwrap().network(NetworkPolicy::deny_all()).limits(limits);
        block_on(block_on(builder.create()).unwrap().close()).unwrap();
    }
    // `None` sets no limit, so a backend without limit capabilities accepts it.
    let no_limits = FakeBackend::new().with_capabilities(Capabilities::RUN | Capabilities::NETWORK_DENY);
    let none = Sandbox::builder_with(no_limits.clone()).network(NetworkPolicy::deny_all()).limits(None);
    block_on(block_on(none.create()).unwrap().close()).unwrap();
    let some = Sandbox::builder_with(no_limits)
        .network(NetworkPolicy::deny_all())
        .limits(Some(ResourceLimits::new().memory_mib(64)));
    assert_eq!(block_on(some.create()).unwrap_err().code(), ErrorCode::Configuration);
}
