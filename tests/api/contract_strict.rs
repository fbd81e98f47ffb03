//! A negative check whose positive control cannot run never passes: it skips visibly, and
//! a strict run (`SANDBOXIO_STRICT=1`, what CI sets) fails. Shown on the egress test with
//! an egress probe whose program the image lacks, as `nc` is missing from many images.
#![allow(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]
#![cfg(feature = "contract")]

use std::process::ExitCode;

use sandboxio::testing::FakeBackend;
use sandboxio::testing::contract::{
    Arguments, Canary, ContractSuite, Facade, FakeProbes, Inapplicable, ProbeKind, Probes,
};
use sandboxio::{Command, policy::Capabilities};

const DENY: &str = "policy__deny_actually_denies_egress_to_the_canary";

/// The fake's probes, except that the egress probe runs a program the sandbox does not
/// have: it can never connect, under any policy.
struct MissingEgressProgram(FakeProbes);

impl Probes for MissingEgressProgram {
    fn egress(&self, host: &str, port: u16) -> Command {
        Command::new("nc-missing-from-this-image").arg(host).arg(port.to_string())
    }

    fn canary(&self) -> Option<Canary> {
        self.0.canary()
    }
}

/// Runs the deny test alone on a fresh fake with the probes `probes` makes for it.
fn run<P: Probes>(probes: fn(FakeBackend) -> P, strict: bool) -> ExitCode {
    let backend = FakeBackend::new();
    let args = Arguments { filter: Some(DENY.to_owned()), exact: true, ..Arguments::default() };
    ContractSuite::new(backend.clone()).probes(probes(backend)).strict(strict).run_with(&args)
}

fn missing(backend: FakeBackend) -> MissingEgressProgram {
    MissingEgressProgram(FakeProbes::new(backend))
}

#[test]
fn contract_strict__a_control_that_cannot_run_fails_a_strict_run() {
    assert_eq!(
        run(missing, true),
        ExitCode::FAILURE,
        "strict: the deny test must fail when its control cannot run"
    );
}

#[test]
fn contract_strict__a_control_that_cannot_run_skips_without_passing() {
    // Not strict: the run succeeds, with the test reported ignored ("skip: positive
    // control could not run") and counted as skipped in the summary, never as passed.
    assert_eq!(run(missing, false), ExitCode::SUCCESS);
}

#[test]
fn contract_strict__a_working_control_passes_a_strict_run() {
    assert_eq!(run(FakeProbes::new, true), ExitCode::SUCCESS);
}

const EXPIRY: &str = "timeouts__expired_sandbox_raises_sandbox_gone";

/// The fake's probes without `expire_sandbox`; `why` declares it not applicable.
struct NoExpiryProbe(Option<Inapplicable>);

impl Probes for NoExpiryProbe {
    fn not_applicable(&self, probe: ProbeKind) -> Option<Inapplicable> {
        (probe == ProbeKind::ExpireSandbox).then_some(self.0).flatten()
    }
}

/// Runs the expiry test alone on a fake declaring `caps`, strict or not, with or without a
/// reason for its probe.
fn run_expiry_on(caps: Capabilities, why: Option<Inapplicable>, strict: bool, facade: Facade) -> ExitCode {
    let args = Arguments { filter: Some(EXPIRY.to_owned()), exact: true, ..Arguments::default() };
    ContractSuite::new(FakeBackend::new().with_capabilities(caps))
        .probes(NoExpiryProbe(why))
        .strict(strict)
        .facade(facade)
        .run_with(&args)
}

/// As [`run_expiry_on`], on a fake declaring `RUN` only.
fn run_expiry(why: Option<Inapplicable>, strict: bool, facade: Facade) -> ExitCode {
    run_expiry_on(Capabilities::RUN, why, strict, facade)
}

#[test]
fn contract_strict__an_unimplemented_probe_fails_a_strict_run_async_and_blocking() {
    for facade in [Facade::Async, Facade::Blocking] {
        assert_eq!(run_expiry(None, true, facade), ExitCode::FAILURE, "{facade:?}: strict, no reason");
        assert_eq!(run_expiry(None, false, facade), ExitCode::SUCCESS, "{facade:?}: a skip outside strict");
    }
}

#[test]
fn contract_strict__a_probe_declared_not_applicable_passes_a_strict_run() {
    for facade in [Facade::Async, Facade::Blocking] {
        assert_eq!(
            run_expiry(Some(Inapplicable::ExpiryCannotBeForced), true, facade),
            ExitCode::SUCCESS,
            "{facade:?}"
        );
    }
}

#[test]
fn contract_strict__a_not_applicable_declaration_the_contract_refuses_fails_even_a_lax_run() {
    for strict in [true, false] {
        // A reason stated for another probe.
        assert_eq!(run_expiry(Some(Inapplicable::KillCannotHang), strict, Facade::Async), ExitCode::FAILURE);
        // The right reason, on a backend that declares what the probe would prove:
        // with EXTEND_TTL the probe can end the sandbox through the provider.
        assert_eq!(
            run_expiry_on(
                Capabilities::RUN | Capabilities::EXTEND_TTL,
                Some(Inapplicable::ExpiryCannotBeForced),
                strict,
                Facade::Async
            ),
            ExitCode::FAILURE
        );
    }
}

/// The fake's probes with no behaviour probe at all: every test that needs one must skip.
struct NoBehaviourProbes(FakeProbes);

impl Probes for NoBehaviourProbes {
    fn code_gated(&self, gate: &str) -> Option<sandboxio::Code> {
        self.0.code_gated(gate)
    }

    fn not_applicable(&self, probe: ProbeKind) -> Option<Inapplicable> {
        self.0.not_applicable(probe)
    }
}

#[test]
fn contract_strict__a_test_whose_probe_is_missing_skips_and_never_fails_a_lax_run() {
    // Every test that asks a behaviour probe declares it, so that it skips (a failure only
    // in a strict run) instead of running and failing on the missing probe: on 1a83cc1
    // `timeouts__create_timeout_raises_create_timeout` ran without `live_sandboxes` and
    // failed ("probe live_sandboxes is not implemented (the case should have been skipped)").
    // Declared: the capabilities a test without behaviour probes proves (the others would
    // rightly fail `capability_honesty__every_declared_capability_has_a_runnable_test`).
    let unproven = Capabilities::NETWORK_DENY
        | Capabilities::NETWORK_ALLOWLIST
        | Capabilities::LIMIT_CPU
        | Capabilities::LIMIT_PIDS
        | Capabilities::DETACH;
    let fake = FakeBackend::new().with_capabilities(Capabilities::all().difference(unproven));
    let args = Arguments { test_threads: Some(1), ..Arguments::default() };
    let lax = ContractSuite::new(fake.clone()).probes(NoBehaviourProbes(FakeProbes::new(fake.clone())));
    assert_eq!(lax.strict(false).run_with(&args), ExitCode::SUCCESS);
}
