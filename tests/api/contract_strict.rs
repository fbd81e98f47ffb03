//! A negative check whose positive control cannot run never passes: it skips visibly, and
//! a strict run (`SANDBOXIO_STRICT=1`, what CI sets) fails. Shown on the egress test with
//! an egress probe whose program the image lacks, as `nc` is missing from many images.
#![allow(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]
#![cfg(feature = "contract")]

use std::process::ExitCode;

use sandboxio::Command;
use sandboxio::testing::FakeBackend;
use sandboxio::testing::contract::{Arguments, Canary, ContractSuite, Facade, FakeProbes, ProbeKind, Probes};

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
struct NoExpiryProbe(Option<&'static str>);

impl Probes for NoExpiryProbe {
    fn not_applicable(&self, probe: ProbeKind) -> Option<String> {
        (probe == ProbeKind::ExpireSandbox).then(|| self.0.map(str::to_owned)).flatten()
    }
}

/// Runs the expiry test alone, strict or not, with or without a reason for its probe.
fn run_expiry(why: Option<&'static str>, strict: bool, facade: Facade) -> ExitCode {
    let args = Arguments { filter: Some(EXPIRY.to_owned()), exact: true, ..Arguments::default() };
    ContractSuite::new(FakeBackend::new())
        .probes(NoExpiryProbe(why))
        .strict(strict)
        .facade(facade)
        .run_with(&args)
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
            run_expiry(Some("this provider's sandboxes have no TTL"), true, facade),
            ExitCode::SUCCESS,
            "{facade:?}"
        );
    }
}
