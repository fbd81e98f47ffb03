//! One simulated process: what it starts with ([`Launch`]), running it to a [`Trace`] on a
//! scratch copy of the sandbox's files, and landing its file changes as the trace is
//! delivered.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::exec::{ExecResult, ExitStatus};

use super::machine::{Proc, SandboxView, Stdin, Stop, Trace};
use super::python;
use super::shell::Shell;
use super::vfs::{self, Vfs, WORKDIR};
use super::world::{SandboxState, World, gone};

/// Everything a simulated process needs, cut from the world under the lock.
pub(super) struct Launch {
    pub(super) env: BTreeMap<String, String>,
    /// The earlier of the command's timeout and the sandbox's remaining TTL.
    pub(super) deadline: Option<Duration>,
    /// Whether the deadline is the TTL (expiry) rather than the timeout.
    deadline_is_ttl: bool,
    timeout: Option<Duration>,
    /// The absolute working directory.
    cwd: String,
    /// The sandbox's memory limit in bytes, if it has one.
    memory_limit: Option<u64>,
}

// Not derived: the environment holds secret values.
impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch").field("deadline", &self.deadline).finish_non_exhaustive()
    }
}

impl Launch {
    /// What a process of sandbox `s` starts with at virtual time `clock`: the sandbox's
    /// environment plus `extra_env` and `extra_secret`, and a deadline.
    pub(super) fn new(
        clock: Duration,
        s: &SandboxState,
        extra_env: &[(String, String)],
        extra_secret: &[(String, crate::secret::SecretString)],
        timeout: Option<Duration>,
    ) -> Launch {
        let mut env = BTreeMap::new();
        env.insert("HOME".to_owned(), WORKDIR.to_owned());
        env.insert("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned());
        env.insert("HOSTNAME".to_owned(), "fake".to_owned());
        for (k, v) in s.spec.env.iter().chain(extra_env) {
            env.insert(k.clone(), v.clone());
        }
        for (k, v) in s.spec.secret_env.iter().chain(extra_secret) {
            env.insert(k.clone(), v.expose_secret().to_owned());
        }
        let ttl_left = s.created_at.saturating_add(s.spec.ttl).saturating_sub(clock);
        let (deadline, deadline_is_ttl) = match timeout {
            Some(t) if t < ttl_left => (Some(t), false),
            _ => (Some(ttl_left), true),
        };
        let memory_limit = s.spec.limits.memory_mib.map(|mib| mib.saturating_mul(1024 * 1024));
        Launch { env, deadline, deadline_is_ttl, timeout, cwd: WORKDIR.to_owned(), memory_limit }
    }

    /// Sets the working directory, which must be an existing directory of `s`.
    pub(super) fn with_cwd(mut self, s: &SandboxState, cwd: Option<&str>) -> Result<Launch> {
        if let Some(dir) = cwd {
            let abs = crate::path::resolve(WORKDIR, dir);
            if !matches!(s.vfs.get(&abs), Some(vfs::Node::Dir { .. })) {
                return Err(Error::NotFound { path: abs });
            }
            self.env.insert("PWD".to_owned(), abs.clone());
            self.cwd = abs;
        }
        Ok(self)
    }

    /// The error of a process that reached this deadline.
    pub(super) fn deadline_error(&self, id: &str, partial: ExecResult) -> Error {
        if self.deadline_is_ttl {
            gone(id, "its TTL expired while the command ran")
        } else {
            Error::ExecutionTimeout { timeout: self.timeout.unwrap_or_default(), partial: Box::new(partial) }
        }
    }

    /// Runs `program` in a fresh shell process of `sandbox`, on a scratch copy of its files
    /// (the changes are replayed as the process is delivered). Returns what `program`
    /// returned, the finished process and its file changes with their times.
    fn run<R>(
        &self,
        sandbox: &mut SandboxState,
        rng: &mut super::machine::Rng,
        limit: usize,
        program: impl FnOnce(&mut Shell<'_, '_>) -> R,
    ) -> (R, Proc, Vec<(Duration, vfs::Effect)>) {
        let proc = Proc::new(self.deadline, limit, self.env.clone(), self.cwd.clone())
            .with_memory_limit(self.memory_limit);
        let mut scratch = sandbox.vfs.scratch();
        let mut view = SandboxView { vfs: &mut scratch, policy: &sandbox.spec.network, rng };
        let mut shell = Shell::new(&mut view, proc);
        let result = program(&mut shell);
        let proc = shell.proc;
        (result, proc, scratch.take_journal())
    }
}

/// Runs `argv` to a trace against the sandbox's world. `Err(stop)` only for
/// [`Stop::NeedsStdin`].
pub(super) fn simulate(
    world: &mut World,
    id: &str,
    argv: &[String],
    stdin: Stdin,
    launch: &Launch,
    limit: usize,
) -> Result<std::result::Result<Trace, Stop>> {
    let World { sandboxes, rng, .. } = world;
    let sandbox = sandboxes.get_mut(id).ok_or_else(|| gone(id, "no such sandbox"))?;
    let (result, proc, journal) = launch.run(sandbox, rng, limit, |sh| sh.run_argv(argv, stdin));
    let mut trace = match result {
        Ok(code) | Err(Stop::Exit(code) | Stop::Unmodelled(code)) => proc.finish(Some(code)),
        Err(Stop::Signal(n)) => proc.finish_with(Some(ExitStatus::Signal(n))),
        // A program's out-of-memory kill becomes a signal death where it runs (see the
        // shell); one that reaches here killed the command's main process.
        Err(Stop::OomKilled) => proc.finish_with(Some(ExitStatus::Signal(9))),
        Err(Stop::TimedOut) => proc.finish(None),
        Err(stop @ Stop::NeedsStdin) => return Ok(Err(stop)),
    };
    trace.effects = settled_effects(journal, trace.elapsed);
    world.reaped_children += trace.killed_children;
    Ok(Ok(trace))
}

/// How a code cell ended: its outcome, or `Err(Some(status))` for a kill (a signal, the
/// out-of-memory killer), `Err(None)` at its deadline.
pub(super) type CellEnd = std::result::Result<python::Outcome, Option<ExitStatus>>;

/// Runs a code cell to a trace in sandbox `id`, in context `context` (`None`: a fresh
/// namespace), whose namespace it then keeps.
///
/// # Errors
///
/// [`Error::SandboxGone`] for an unknown sandbox, [`Error::InvalidInput`] for an unknown
/// context.
pub(super) fn simulate_cell(
    world: &mut World,
    id: &str,
    source: &str,
    context: Option<&str>,
    launch: &Launch,
) -> Result<(CellEnd, Trace)> {
    let World { sandboxes, rng, .. } = world;
    let sandbox = sandboxes.get_mut(id).ok_or_else(|| gone(id, "no such sandbox"))?;
    let mut globals = match context {
        Some(ctx) => sandbox
            .contexts
            .get(ctx)
            .cloned()
            .ok_or_else(|| Error::invalid_input(format!("no code context {ctx:?} in sandbox {id}")))?,
        None => python::Globals::default(),
    };
    let (result, proc, journal) =
        launch.run(sandbox, rng, crate::exec::DEFAULT_OUTPUT_LIMIT, |sh| sh.run_cell(source, &mut globals));
    if let Some(ctx) = context {
        sandbox.contexts.insert(ctx.to_owned(), globals);
    }
    let (end, mut trace) = match result {
        Ok(outcome) => (Ok(outcome), proc.finish(Some(0))),
        // The interpreter was killed: by the out-of-memory killer, or a signal.
        Err(Stop::OomKilled) => (Err(Some(ExitStatus::Signal(9))), proc.finish(None)),
        Err(Stop::Signal(n)) => (Err(Some(ExitStatus::Signal(n))), proc.finish(None)),
        Err(_) => (Err(None), proc.finish(None)),
    };
    trace.effects = settled_effects(journal, trace.elapsed);
    Ok((end, trace))
}

/// The changes a process made before it ended (later ones belong to background children
/// killed with it), in time order.
fn settled_effects(journal: Vec<(Duration, vfs::Effect)>, end: Duration) -> Vec<(Duration, vfs::Effect)> {
    let mut effects: Vec<_> = journal.into_iter().filter(|(at, _)| *at <= end).collect();
    effects.sort_by_key(|(at, _)| *at);
    effects
}

/// Applies, in order, the effects due by `until` and not applied yet; `next` is the index
/// of the first one not applied.
pub(super) fn apply_due(
    vfs: &mut Vfs,
    effects: &[(Duration, vfs::Effect)],
    next: &mut usize,
    until: Duration,
) {
    while let Some((at, effect)) = effects.get(*next) {
        if *at > until {
            break;
        }
        vfs.apply(effect.clone());
        *next += 1;
    }
}
