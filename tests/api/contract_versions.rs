//! The contract as a versioned promise, and not-applicable declarations that cannot be
//! abused. Both are shown on adapters built on the fake:
//!
//! - `Leaky`: its `run` leaves the command running when the caller drops the future (the
//!   fake's process is kept alive instead of dropped). Declaring the process and sandbox
//!   probes not applicable used to turn every orphan and cancellation check into `n/a`, and
//!   it passed a strict run; the declaration is now refused and the run fails. With its
//!   probes implemented, the suite catches the leak itself (the positive control).
//! - `SignalAsCode`: reports a signal death as exit code 128 + n, as an adapter written
//!   against contract v1 may: it keeps v1 and fails v2's signal clause.
#![allow(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]
#![cfg(feature = "contract")]

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use sandboxio::backend::{Backend, BackendExecStream, BackendSandbox, BoxFuture, CreateSpec, KillOutcome};
use sandboxio::testing::FakeBackend;
use sandboxio::testing::contract::{
    Arguments, Canary, ContractSuite, ContractVersion, FakeProbes, Inapplicable, ProbeFuture, ProbeKind,
    Probes, cases,
};
use sandboxio::{
    Command, ExecResult, ExitStatus, ResourceLimits, Result, audit::AuditConfig, policy::Capabilities,
};

/// What the wrapped adapter gets wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    /// A dropped `run` leaves its command running.
    LeavesDroppedRunsRunning,
    /// A signal death is reported as exit code 128 + n.
    SignalAsCode,
}

/// An adapter over the fake that declares `RUN` and `STREAM` and has `flaw` (its streams are
/// the fake's own).
#[derive(Debug, Clone)]
struct Flawed {
    fake: FakeBackend,
    flaw: Flaw,
}

impl Backend for Flawed {
    fn scheme(&self) -> &'static str {
        "flawed"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::RUN | Capabilities::STREAM
    }

    fn audit(&self) -> AuditConfig {
        Backend::audit(&self.fake)
    }

    fn create(&self, spec: CreateSpec) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        Box::pin(async move {
            let inner = Backend::create(&self.fake, spec).await?;
            Ok(Box::new(FlawedSandbox { inner: Arc::from(inner), flaw: self.flaw })
                as Box<dyn BackendSandbox>)
        })
    }
}

#[derive(Debug)]
struct FlawedSandbox {
    inner: Arc<dyn BackendSandbox>,
    flaw: Flaw,
}

/// The runs `Leaky` did not let go of: alive, never polled again, never dropped.
static LEAKED: Mutex<Vec<BoxFuture<'static, Result<ExecResult>>>> = Mutex::new(Vec::new());

/// A run's future that, when dropped before it finished, keeps the command alive by handing
/// the provider's future to [`LEAKED`] instead of dropping it.
struct Leaky(Option<BoxFuture<'static, Result<ExecResult>>>);

impl Future for Leaky {
    type Output = Result<ExecResult>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut().expect("polled after completion");
        let out = inner.as_mut().poll(cx);
        if out.is_ready() {
            self.0 = None;
        }
        out
    }
}

impl Drop for Leaky {
    fn drop(&mut self) {
        if let Some(running) = self.0.take() {
            LEAKED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(running);
        }
    }
}

impl BackendSandbox for FlawedSandbox {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::RUN | Capabilities::STREAM
    }

    fn metadata(&self) -> BTreeMap<String, String> {
        self.inner.metadata()
    }

    fn run(&self, command: Command) -> BoxFuture<'_, Result<ExecResult>> {
        let inner = Arc::clone(&self.inner);
        let run: BoxFuture<'static, Result<ExecResult>> = Box::pin(async move { inner.run(command).await });
        match self.flaw {
            Flaw::LeavesDroppedRunsRunning => Box::pin(Leaky(Some(run))),
            Flaw::SignalAsCode => Box::pin(async move {
                let result = run.await?;
                Ok(match result.status {
                    ExitStatus::Signal(n) => {
                        let status = ExitStatus::Code(128 + n);
                        result.with_status(status)
                    }
                    _ => result,
                })
            }),
        }
    }

    fn stream(&self, command: Command) -> Result<Box<dyn BackendExecStream>> {
        self.inner.stream(command)
    }

    fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
        self.inner.kill()
    }
}

/// The fake's probes, but those in `hidden` are not implemented and declared not
/// applicable.
struct FlawedProbes {
    fake: FakeProbes,
    hidden: &'static [ProbeKind],
}

impl Probes for FlawedProbes {
    fn code_gated(&self, gate: &str) -> Option<sandboxio::Code> {
        self.fake.code_gated(gate)
    }

    fn running_processes(&self, sandbox_id: &str) -> Option<ProbeFuture<Vec<String>>> {
        self.fake
            .running_processes(sandbox_id)
            .filter(|_| !self.hidden.contains(&ProbeKind::RunningProcesses))
    }

    fn live_sandboxes(&self, key: &str, value: &str) -> Option<ProbeFuture<Vec<String>>> {
        self.fake.live_sandboxes(key, value).filter(|_| !self.hidden.contains(&ProbeKind::LiveSandboxes))
    }

    fn simulate_kill_hang(&self, sandbox_id: &str) -> Option<ProbeFuture<()>> {
        self.fake.simulate_kill_hang(sandbox_id)
    }

    fn expire_sandbox(&self, sandbox_id: &str) -> Option<ProbeFuture<()>> {
        self.fake.expire_sandbox(sandbox_id)
    }

    fn canary(&self) -> Option<Canary> {
        self.fake.canary()
    }

    fn limits_in_effect(&self, sandbox_id: &str) -> Option<ProbeFuture<ResourceLimits>> {
        self.fake.limits_in_effect(sandbox_id)
    }

    fn provider_labels(&self, sandbox_id: &str) -> Option<ProbeFuture<BTreeMap<String, String>>> {
        self.fake.provider_labels(sandbox_id)
    }

    fn provider_config_text(&self, sandbox_id: &str) -> Option<ProbeFuture<String>> {
        self.fake.provider_config_text(sandbox_id)
    }

    fn missing_credentials(&self) -> Option<(Arc<dyn Backend>, String)> {
        self.fake.missing_credentials()
    }

    fn test_network(
        &self,
    ) -> Option<sandboxio::testing::contract::ProbeResult<sandboxio::testing::TestNetwork>> {
        None
    }

    fn not_applicable(&self, probe: ProbeKind) -> Option<Inapplicable> {
        if self.hidden.contains(&probe) {
            // The made-up excuse: no reason the contract states fits these probes, so the
            // dishonest adapter gives one of another probe's.
            Some(Inapplicable::KillCannotHang)
        } else {
            self.fake.not_applicable(probe)
        }
    }
}

/// The suite against a fresh `flaw` adapter, strict, tests one at a time (the fake's
/// virtual clock is shared by its sandboxes), on the tests `filter` selects.
fn run(
    flaw: Flaw,
    hidden: &'static [ProbeKind],
    version: Option<ContractVersion>,
    filter: Option<&str>,
) -> ExitCode {
    let fake = FakeBackend::new();
    let probes = FlawedProbes { fake: FakeProbes::new(fake.clone()), hidden };
    let mut suite = ContractSuite::new(Flawed { fake: fake.clone(), flaw })
        .probes(probes)
        .audit_sink(fake.audit_sink())
        .strict(true);
    if let Some(version) = version {
        suite = suite.contract_version(version);
    }
    let args = Arguments { filter: filter.map(str::to_owned), test_threads: Some(1), ..Arguments::default() };
    suite.run_with(&args)
}

const PROCESSES: &[ProbeKind] = &[ProbeKind::RunningProcesses];
const ORPHANS: &[ProbeKind] = &[ProbeKind::RunningProcesses, ProbeKind::LiveSandboxes];

#[test]
fn contract_na__an_adapter_leaving_dropped_commands_running_fails_strict_however_it_declares_its_probes() {
    // The abuse: the process probe (and the orphan probe) declared not applicable. Before
    // the rules every process check went n/a and the first strict run passed (on aefc7e8's
    // successor 1a83cc1: exit code 0).
    for hidden in [PROCESSES, ORPHANS] {
        assert_eq!(
            run(Flaw::LeavesDroppedRunsRunning, hidden, None, None),
            ExitCode::FAILURE,
            "strict: declaring {hidden:?} not applicable must be refused"
        );
    }
    // The positive control: with the probes implemented, the suite sees the leak itself.
    assert_eq!(
        run(Flaw::LeavesDroppedRunsRunning, &[], None, Some("cancellation__mid_run_leaves_no_orphan")),
        ExitCode::FAILURE,
        "the leak must fail the mid-run cancellation check when the probe is there"
    );
    LEAKED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
}

#[test]
fn contract_version__an_adapter_keeping_v1_passes_v1_strict_and_fails_the_latest() {
    // Signal deaths as `Signal(n)` arrived in v2: the v1 adapter passes v1, strict, with the
    // v2 clauses listed as not yet promised, and fails the latest contract.
    // It is also the control of the test above: the wrapper and its probes pass a whole
    // strict run when nothing leaks.
    assert_eq!(run(Flaw::SignalAsCode, &[], Some(ContractVersion::V1), None), ExitCode::SUCCESS);
    let signal = "run__a_signal_death_is_the_signal_never_an_exit_code";
    assert_eq!(run(Flaw::SignalAsCode, &[], None, Some(signal)), ExitCode::FAILURE);
    assert_eq!(run(Flaw::SignalAsCode, &[], Some(ContractVersion::V2), Some(signal)), ExitCode::FAILURE);
}

#[test]
fn contract_version__every_clause_carries_a_version_and_v1_is_the_suite_at_59c04a6() {
    let all = cases();
    let v1 = all.iter().filter(|c| c.since == ContractVersion::V1).count();
    let v2 = all.iter().filter(|c| c.since == ContractVersion::V2).count();
    assert_eq!((v1, v2, all.len()), (87, 39, 126), "clauses per version");
    assert_eq!(ContractVersion::LATEST, ContractVersion::V2);
    assert_eq!("1".parse::<ContractVersion>(), Ok(ContractVersion::V1));
    assert_eq!("v2".parse::<ContractVersion>(), Ok(ContractVersion::V2));
    assert_eq!("latest".parse::<ContractVersion>(), Ok(ContractVersion::LATEST));
    assert!("3".parse::<ContractVersion>().is_err());
    assert!("one".parse::<ContractVersion>().is_err());
}
