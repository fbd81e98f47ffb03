//! A negative check whose positive control cannot run never passes: it skips visibly, and
//! a strict run (`SANDBOXIO_STRICT=1`, what CI sets) fails. Shown on the egress test with
//! an egress probe whose program the image lacks, as `nc` is missing from many images.
#![allow(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]
#![cfg(feature = "contract")]

use std::process::ExitCode;

use sandboxio::Command;
use sandboxio::testing::FakeBackend;
use sandboxio::testing::contract::{Arguments, Canary, ContractSuite, FakeProbes, Probes};

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
