//! [`Inapplicable`]: the reasons the contract accepts for declaring a behaviour probe not
//! applicable, and the rules that refuse every other declaration.
//!
//! A probe declared not applicable turns the tests that need it into `n/a`, which a strict
//! run accepts. Free text made that a way round the suite: "not applicable" on the process
//! and sandbox probes turned every orphan and cancellation check into `n/a`, and an adapter
//! that left every dropped command running passed. So a declaration names one of a few
//! stated reasons, each accepted for one probe only (and only where the backend does not
//! declare the capability the probe would prove), and the probes that prove a MUST of
//! every backend can never be declared not applicable: the suite fails each test a refused
//! declaration would have excused, saying what to do instead.

use std::fmt;

use crate::backend::Backend;
use crate::policy::Capabilities;

use super::probes::ProbeKind;

/// Why a behaviour probe cannot apply to a backend: the only reasons the contract accepts
/// from [`Probes::not_applicable`](super::Probes::not_applicable). Each is for one probe
/// ([`Inapplicable::probe`]); the suite refuses it for any other, and refuses every
/// declaration for the probes that have no accepted reason (`running_processes`,
/// `live_sandboxes`, `limits_in_effect`, `provider_labels`, `provider_config_text`,
/// `missing_credentials`). `docs/contract.md`, "Probes that may be declared not applicable",
/// is the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Inapplicable {
    /// For `simulate_kill_hang`: the provider has no way to make its kill (delete) hang, and
    /// the adapter no seam to make one. The test it drives checks the core's grace timer
    /// (the orphan warning at grace expiry), which the `FakeBackend`'s runs hold for every
    /// backend.
    KillCannotHang,
    /// For `expire_sandbox`: the provider ends a sandbox at its TTL but offers no call that
    /// ends it early as expiry would. Refused where the backend declares `EXTEND_TTL`: the
    /// probe can then move the sandbox's end to a second from now through the provider.
    ExpiryCannotBeForced,
    /// For `canary`: the backend's sandboxes cannot reach any server the test runs.
    /// Refused where the backend declares `NETWORK_DENY` or `NETWORK_ALLOWLIST`: a policy
    /// the suite cannot watch refuse a connection is not declared.
    CanaryUnreachable,
    /// For `test_network`: the backend's sandboxes cannot join sandboxio's own test network
    /// (`scripts/testnet up`, on the machine that runs the suite), as a remote provider's
    /// cannot. The allowlist tests against the canary still run.
    NoTestNetwork,
    /// For `code_gated`: the backend simulates each cell whole before it delivers its
    /// output. Accepted for the in-memory `FakeBackend` (`fake://`) only: a backend that
    /// runs real cells streams their output as it is printed, or does not declare
    /// `RUN_CODE`.
    CellsSimulatedWhole,
}

impl Inapplicable {
    /// Every reason, in the order of the contract's table.
    pub const ALL: &'static [Inapplicable] = &[
        Inapplicable::KillCannotHang,
        Inapplicable::ExpiryCannotBeForced,
        Inapplicable::CanaryUnreachable,
        Inapplicable::NoTestNetwork,
        Inapplicable::CellsSimulatedWhole,
    ];

    /// The one probe this reason may be given for.
    #[must_use]
    pub fn probe(self) -> ProbeKind {
        match self {
            Inapplicable::KillCannotHang => ProbeKind::SimulateKillHang,
            Inapplicable::ExpiryCannotBeForced => ProbeKind::ExpireSandbox,
            Inapplicable::CanaryUnreachable => ProbeKind::Canary,
            Inapplicable::NoTestNetwork => ProbeKind::TestNetwork,
            Inapplicable::CellsSimulatedWhole => ProbeKind::CodeGated,
        }
    }

    /// The reason as the suite lists it after the summary.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Inapplicable::KillCannotHang => {
                "the provider cannot make its kill hang (the orphan warning at grace expiry is the \
                 core's, held by the FakeBackend's runs)"
            }
            Inapplicable::ExpiryCannotBeForced => {
                "the provider cannot end a sandbox early as its TTL would (and EXTEND_TTL is not declared)"
            }
            Inapplicable::CanaryUnreachable => {
                "the sandboxes cannot reach a server the test runs (and no network policy but allow-all \
                 is declared)"
            }
            Inapplicable::NoTestNetwork => "the sandboxes cannot join sandboxio's own test network",
            Inapplicable::CellsSimulatedWhole => {
                "the in-memory fake simulates a cell whole before it delivers its output"
            }
        }
    }
}

impl fmt::Display for Inapplicable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// For a probe that no reason excuses: what an adapter does instead.
pub(crate) fn never(probe: ProbeKind) -> Option<&'static str> {
    match probe {
        ProbeKind::RunningProcesses => Some(
            "list the sandbox's processes through your own exec where the provider has no process \
             list (`ps -eo pid,stat,args`, or /proc inside the sandbox, leaving out your exec's own \
             process and zombies); a backend that cannot show its commands end when dropped does \
             not declare RUN, STREAM, RUN_CODE or FILESYSTEM, whose tests need it",
        ),
        ProbeKind::LiveSandboxes => Some(
            "list the provider's sandboxes by the label the suite puts on each \
             (`sandboxio.contract.test`; rule 6 puts builder metadata on the provider's labels): \
             without it nothing shows that a dropped, refused or closed sandbox leaves nothing",
        ),
        ProbeKind::LimitsInEffect => Some(
            "read the limits from inside the sandbox through your own exec (cgroup files, \
             `ulimit -a`) or from the provider, or do not declare the LIMIT_* capabilities",
        ),
        ProbeKind::ProviderLabels => Some(
            "read the sandbox's labels from the provider's API: rule 6 requires the builder's \
             metadata there",
        ),
        ProbeKind::ProviderConfigText => Some(
            "return everything the provider's API shows about the sandbox (its describe or \
             inspect call), which the secrets test scans",
        ),
        ProbeKind::MissingCredentials => Some(
            "implement Probes::missing_credentials (the backend built without its credentials), \
             or Probes::no_credentials for a backend that takes none",
        ),
        _ => None,
    }
}

/// Why the declaration that `probe` is not applicable for `reason` is refused on `backend`,
/// with what to do instead; `None` when the contract accepts it.
pub(crate) fn refusal(probe: ProbeKind, reason: Inapplicable, backend: &dyn Backend) -> Option<String> {
    let declared = format!("Probes::not_applicable declares probe {} not applicable", probe.name());
    if let Some(instead) = never(probe) {
        return Some(format!(
            "{declared} ({reason:?}), and no reason excuses this probe: {instead} \
             (docs/contract.md#probes-that-may-be-declared-not-applicable)"
        ));
    }
    if reason.probe() != probe {
        return Some(format!(
            "{declared} for {reason:?}, a reason for probe {} only: implement {}, or declare it \
             with the reason the contract accepts for it \
             (docs/contract.md#probes-that-may-be-declared-not-applicable)",
            reason.probe().name(),
            probe.name()
        ));
    }
    let caps = backend.capabilities();
    let conflict = match reason {
        Inapplicable::ExpiryCannotBeForced => caps & Capabilities::EXTEND_TTL,
        Inapplicable::CanaryUnreachable => {
            caps & (Capabilities::NETWORK_DENY | Capabilities::NETWORK_ALLOWLIST)
        }
        _ => Capabilities::empty(),
    };
    if !conflict.is_empty() {
        return Some(format!(
            "{declared} ({reason:?}), but the backend declares {conflict}, which that probe is how \
             the suite proves: implement {}, or do not declare {conflict}",
            probe.name()
        ));
    }
    if reason == Inapplicable::CellsSimulatedWhole && backend.scheme() != "fake" {
        return Some(format!(
            "{declared} ({reason:?}), which only the in-memory fake may: a {}:// cell that runs for \
             real streams its output as it prints it (implement code_gated), or the backend does \
             not declare RUN_CODE",
            backend.scheme()
        ));
    }
    None
}
