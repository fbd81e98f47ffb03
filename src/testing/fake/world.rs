//! The fake's shared state ([`World`]) and what happens to it: calls recorded, sandboxes
//! alive or gone, scripted failures taken and applied, processes registered.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::audit::OperationKind;
use crate::backend::CreateSpec;
use crate::error::{Error, Result};
use crate::exec::{CodeResult, ExecResult};
use crate::policy::NetworkPolicy;

use super::machine::Rng;
use super::python;
use super::vfs::Vfs;
use super::{Failure, FakeCall, SCHEME};

/// Where a sandbox is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Life {
    Alive,
    Killed,
    Expired,
}

/// One sandbox: how it was created, its files, its code contexts.
#[derive(Debug)]
pub(super) struct SandboxState {
    pub(super) spec: CreateSpec,
    /// On the virtual clock.
    pub(super) created_at: Duration,
    pub(super) vfs: Vfs,
    /// The namespaces of its code contexts, by id.
    pub(super) contexts: BTreeMap<String, python::Globals>,
    /// Contexts whose interpreter a dropped cell killed, and why: lost for good.
    pub(super) lost_contexts: BTreeMap<String, String>,
    pub(super) life: Life,
}

impl SandboxState {
    /// A live sandbox with no files, created at `created_at` on the virtual clock.
    pub(super) fn new(spec: CreateSpec, created_at: Duration) -> Self {
        SandboxState {
            spec,
            created_at,
            vfs: Vfs::new(),
            contexts: BTreeMap::new(),
            lost_contexts: BTreeMap::new(),
            life: Life::Alive,
        }
    }
}

/// A scripted answer or failure for calls whose subject contains `matcher`.
#[derive(Debug)]
pub(super) struct Rule<T> {
    pub(super) matcher: String,
    pub(super) value: T,
}

/// Everything a [`FakeBackend`](super::FakeBackend) and its clones share, under one lock:
/// the virtual clock, the sandboxes, the scripts, the calls and the running processes.
#[derive(Debug)]
pub(super) struct World {
    pub(super) clock: Duration,
    pub(super) rng: Rng,
    pub(super) sandboxes: BTreeMap<String, SandboxState>,
    pub(super) run_scripts: Vec<Rule<ExecResult>>,
    pub(super) code_scripts: Vec<Rule<CodeResult>>,
    pub(super) fail_on: Vec<Rule<Failure>>,
    pub(super) fail_next: Vec<Failure>,
    pub(super) flaky: Option<(u64, Failure)>,
    pub(super) exec_calls: u64,
    pub(super) calls: Vec<FakeCall>,
    pub(super) processes: BTreeMap<u64, String>,
    pub(super) next_pid: u64,
    pub(super) next_context: u64,
    /// Sandboxes whose `kill` hangs forever (the `simulate_kill_hang` probe).
    pub(super) kill_hangs: std::collections::BTreeSet<String>,
    pub(super) reaped_children: usize,
}

pub(super) fn gone(id: &str, why: &str) -> Error {
    Error::SandboxGone { id: id.to_owned(), message: why.to_owned() }
}

/// The value of the latest of `rules` whose matcher `subject` contains.
pub(super) fn scripted<T: Clone>(rules: &[Rule<T>], subject: &str) -> Option<T> {
    rules.iter().rev().find(|r| subject.contains(&r.matcher)).map(|r| r.value.clone())
}

/// Marks a sandbox expired once `now` is past its TTL.
pub(super) fn refresh_ttl(s: &mut SandboxState, now: Duration) {
    if s.life == Life::Alive && now >= s.created_at.saturating_add(s.spec.ttl) {
        s.life = Life::Expired;
    }
}

impl World {
    pub(super) fn new(seed: u64) -> Self {
        World {
            clock: Duration::ZERO,
            rng: Rng::new(seed),
            sandboxes: BTreeMap::new(),
            run_scripts: Vec::new(),
            code_scripts: Vec::new(),
            fail_on: Vec::new(),
            fail_next: Vec::new(),
            flaky: None,
            exec_calls: 0,
            calls: Vec::new(),
            processes: BTreeMap::new(),
            next_pid: 1,
            next_context: 1,
            kill_hangs: BTreeSet::new(),
            reaped_children: 0,
        }
    }

    /// Ends sandbox `id` if it is alive (`life` is `Killed` or `Expired`), and every
    /// process in it. Returns whether it was alive.
    pub(super) fn end(&mut self, id: &str, life: Life) -> bool {
        let was_alive = match self.sandboxes.get_mut(id) {
            Some(s) if s.life == Life::Alive => {
                s.life = life;
                true
            }
            _ => false,
        };
        if was_alive {
            self.processes.retain(|_, owner| owner != id);
        }
        was_alive
    }

    /// Ids of live sandboxes (neither killed nor expired) that `keep` selects.
    pub(super) fn live_where(&mut self, keep: impl Fn(&SandboxState) -> bool) -> Vec<String> {
        let now = self.clock;
        self.sandboxes
            .iter_mut()
            .filter_map(|(id, s)| {
                refresh_ttl(s, now);
                (s.life == Life::Alive && keep(s)).then(|| id.clone())
            })
            .collect()
    }

    /// Appends a call on `sandbox_id` to [`World::calls`]; `f` fills in its details.
    pub(super) fn record(&mut self, kind: OperationKind, sandbox_id: &str, f: impl FnOnce(&mut FakeCall)) {
        let network =
            self.sandboxes.get(sandbox_id).map_or(NetworkPolicy::DenyAll, |s| s.spec.network.clone());
        let mut call = FakeCall {
            kind,
            sandbox_id: Some(sandbox_id.to_owned()),
            network,
            argv: Vec::new(),
            code: None,
            path: None,
            at: self.clock,
        };
        f(&mut call);
        self.calls.push(call);
    }

    /// The sandbox `id`, if it is alive; else why it is gone.
    pub(super) fn alive(&mut self, id: &str) -> Result<&mut SandboxState> {
        let now = self.clock;
        let s = self.sandboxes.get_mut(id).ok_or_else(|| gone(id, "no such sandbox"))?;
        refresh_ttl(s, now);
        match s.life {
            Life::Alive => Ok(s),
            Life::Killed => Err(gone(id, "it was killed")),
            Life::Expired => Err(gone(id, "its TTL expired")),
        }
    }

    /// The failure injected for this exec call, if any.
    pub(super) fn take_failure(&mut self, subject: &str) -> Option<Failure> {
        self.exec_calls += 1;
        if !self.fail_next.is_empty() {
            return Some(self.fail_next.remove(0));
        }
        if let Some(failure) = scripted(&self.fail_on, subject) {
            return Some(failure);
        }
        match &self.flaky {
            Some((n, failure)) if self.exec_calls.is_multiple_of(*n) => Some(failure.clone()),
            _ => None,
        }
    }

    /// Applies a failure; `Ok(code)` for [`Failure::ExitCode`].
    pub(super) fn apply_failure(
        &mut self,
        id: &str,
        failure: Failure,
        timeout: Option<Duration>,
    ) -> Result<i32> {
        match failure {
            Failure::ExitCode(code) => Ok(code),
            Failure::Timeout => {
                let timeout = timeout.unwrap_or_default();
                self.clock = self.clock.saturating_add(timeout);
                Err(Error::ExecutionTimeout { timeout, partial: Box::new(ExecResult::new(-1, "", "")) })
            }
            Failure::NetworkPolicyViolation => {
                let policy = self.sandboxes.get(id).map(|s| s.spec.network.to_string()).unwrap_or_default();
                Err(Error::NetworkPolicyViolation {
                    message: format!("simulated egress from sandbox {id} refused by policy {policy}"),
                })
            }
            Failure::Expire => {
                // Injected only into calls on a live sandbox, so this ends it.
                self.end(id, Life::Expired);
                Err(gone(id, "its TTL expired"))
            }
            Failure::RateLimited(retry_after) => {
                Err(Error::RateLimited { backend: SCHEME.into(), retry_after, source: None })
            }
            Failure::Provider(message) => {
                Err(Error::Provider { backend: SCHEME.into(), message, source: None })
            }
            Failure::Auth => Err(Error::Auth {
                backend: SCHEME.into(),
                message: "simulated: the provider refused the credentials".into(),
                env_var: None,
                source: None,
            }),
        }
    }

    /// Registers a running process of sandbox `id`; returns its pid.
    pub(super) fn spawn(&mut self, id: &str) -> u64 {
        let pid = self.next_pid;
        self.next_pid += 1;
        self.processes.insert(pid, id.to_owned());
        pid
    }
}
