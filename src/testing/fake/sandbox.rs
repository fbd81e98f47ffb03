//! [`FakeSandbox`]: one sandbox's operations. A command or cell is simulated to a trace
//! under the world's lock, then the trace is delivered step by step on the virtual clock.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::MutexGuard;
use std::time::Duration;

use futures_lite::future;

use crate::audit::OperationKind;
use crate::backend::{
    Backend, BackendCodeStream, BackendExecStream, BackendSandbox, BoxFuture, CellStream, ChunkSink,
    KillOutcome, TransferMeter, collect_cell,
};
use crate::error::{Error, Result};
use crate::exec::{Code, CodeContext, CodeResult, Command, ExecResult, ExitStatus, OutputChunk};
use crate::fs::DirEntry;
use crate::policy::{Capabilities, NetworkPolicy};

use super::machine::{Stdin, Trace};
use super::process::{Launch, apply_due, simulate, simulate_cell};
use super::vfs::{Vfs, WORKDIR};
use super::world::{Life, World, scripted};
use super::{Failure, FakeBackend, SCHEME, python, stream};

/// One fake sandbox handle.
#[derive(Debug)]
pub(super) struct FakeSandbox {
    backend: FakeBackend,
    id: String,
    /// Whether its calls go to [`FakeBackend::calls`]: not for the file operations an
    /// upload or download makes, which are recorded as that one call.
    recorded: bool,
}

/// What a scripted rule decides before a command is simulated.
#[derive(Debug)]
pub(super) enum Early {
    /// A failure injected with `fail_next`, `fail_on` or `flaky_every`.
    Fail(Failure),
    /// An answer scripted with `on_run`.
    Answer(ExecResult),
}

/// Unregisters a process when the operation running it ends or is dropped.
struct ProcessGuard<'a> {
    backend: &'a FakeBackend,
    pid: u64,
}

impl Drop for ProcessGuard<'_> {
    fn drop(&mut self) {
        self.backend.world().processes.remove(&self.pid);
    }
}

/// Marks a context lost when the cell running in it is dropped before its end.
struct LoseOnDrop<'a> {
    backend: &'a FakeBackend,
    sandbox: &'a str,
    /// `None` once the cell has ended (or for a cell outside any context).
    context: Option<&'a str>,
}

impl Drop for LoseOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(context) = self.context
            && let Some(sandbox) = self.backend.world().sandboxes.get_mut(self.sandbox)
        {
            let why =
                "a cell's run_code or run_code_stream was dropped mid-cell, which killed the interpreter";
            sandbox.lost_contexts.insert(context.to_owned(), why.to_owned());
        }
    }
}

impl FakeSandbox {
    pub(super) fn new(backend: FakeBackend, id: String) -> Self {
        FakeSandbox { backend, id, recorded: true }
    }

    fn world(&self) -> MutexGuard<'_, World> {
        self.backend.world()
    }

    /// Delivers a trace step by step on the virtual clock: output is collected and file
    /// changes land on the sandbox as the replay reaches their time, so a run dropped mid-way
    /// has made exactly the changes made before that point. A sandbox killed meanwhile ends
    /// the process with [`Error::SandboxGone`].
    ///
    /// With a `sink`, each event's output is sent to it as the replay reaches it (a streamed
    /// cell), and the output returned is empty.
    async fn replay(
        &self,
        trace: &Trace,
        start: Duration,
        sink: Option<&ChunkSink>,
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut applied = 0;
        for event in &trace.events {
            future::yield_now().await;
            self.advance(trace, start, event.at, &mut applied)?;
            match (sink, event.stream) {
                (Some(sink), stream) => sink.send(OutputChunk { stream, data: event.data.clone() }).await,
                (None, crate::exec::StreamKind::Stdout) => stdout.extend_from_slice(&event.data),
                (None, crate::exec::StreamKind::Stderr) => stderr.extend_from_slice(&event.data),
            }
        }
        future::yield_now().await;
        self.advance(trace, start, trace.elapsed, &mut applied)?;
        Ok((stdout, stderr))
    }

    /// Moves a replay to `at` (since the process started): checks the sandbox is alive,
    /// advances the clock and applies the file changes due.
    fn advance(&self, trace: &Trace, start: Duration, at: Duration, applied: &mut usize) -> Result<()> {
        let mut world = self.world();
        let now = world.clock.max(start.saturating_add(at));
        world.clock = now;
        let sandbox = world.alive(&self.id)?;
        apply_due(&mut sandbox.vfs, &trace.effects, applied, at);
        Ok(())
    }

    async fn fs_op<T>(
        &self,
        kind: OperationKind,
        path: &str,
        op: impl FnOnce(&mut Vfs, String) -> Result<T>,
    ) -> Result<T> {
        future::yield_now().await;
        let mut world = self.world();
        if self.recorded {
            world.record(kind, &self.id, |c| c.path = Some(path.to_owned()));
        }
        let sandbox = world.alive(&self.id)?;
        let abs = crate::path::resolve(WORKDIR, path);
        op(&mut sandbox.vfs, abs)
    }

    /// Starts an upload or download of `path`: records it as one call and checks the
    /// sandbox is alive. Returns a handle whose file operations, which do the transfer,
    /// are not recorded, so that `calls()` names operations as the audit log does.
    async fn transfer(&self, kind: OperationKind, path: &str) -> Result<FakeSandbox> {
        self.fs_op(kind, path, |_, _| Ok(())).await?;
        Ok(FakeSandbox { backend: self.backend.clone(), id: self.id.clone(), recorded: false })
    }

    /// A cell as a stream: the call is recorded (as `kind`) and checked at once; the cell is
    /// simulated when the stream is first polled, then its output replayed chunk by chunk
    /// on the virtual clock.
    fn cell_stream(&self, code: Code, kind: OperationKind) -> Result<CellStream> {
        {
            let mut world = self.world();
            world.record(kind, &self.id, |c| c.code = Some(code.source().to_owned()));
            world.alive(&self.id)?;
        }
        if code.language_name() != "python" {
            return Err(Error::unsupported(SCHEME, format!("code language {:?}", code.language_name())));
        }
        let me = FakeSandbox { backend: self.backend.clone(), id: self.id.clone(), recorded: self.recorded };
        let limit = code.output_limit_bytes();
        Ok(CellStream::with_output_limit(limit, move |sink| async move { me.cell(&code, &sink).await }))
    }

    /// Simulates a cell and replays its output to `sink`; the result carries no output.
    async fn cell(&self, code: &Code, sink: &ChunkSink) -> Result<CodeResult> {
        // A scripted answer (`Ok`), or the simulated cell (`Err`), and when it started.
        let (simulated, start) = {
            let mut world = self.world();
            world.alive(&self.id)?;
            if let Some(failure) = world.take_failure(code.source()) {
                let status = world.apply_failure(&self.id, failure, code.timeout_duration())?;
                return Ok(CodeResult::new(status, "", ""));
            }
            if let Some(why) =
                code.context_id().and_then(|c| world.alive(&self.id).ok()?.lost_contexts.get(c))
            {
                return Err(Error::context_lost(code.context_id().unwrap_or_default(), why.clone()));
            }
            let clock = world.clock;
            if let Some(answer) = scripted(&world.code_scripts, code.source()) {
                (Ok(answer), clock)
            } else {
                let sandbox = world.alive(&self.id)?;
                let launch = Launch::new(clock, sandbox, &[], &[], code.timeout_duration());
                let (end, trace) =
                    simulate_cell(&mut world, &self.id, code.source(), code.context_id(), &launch)?;
                let pid = world.spawn(&self.id);
                (Err((end, trace, launch, pid)), clock)
            }
        };
        let (end, trace, launch, pid) = match simulated {
            Ok(answer) => {
                // A scripted answer's stdout, then its stderr, each as one chunk.
                let printed = ExecResult::new(0, answer.stdout.clone(), answer.stderr.clone());
                self.replay(&stream::scripted_trace(&printed), start, Some(sink)).await?;
                return Ok(answer);
            }
            Err(simulated) => simulated,
        };
        let _running = ProcessGuard { backend: &self.backend, pid };
        // As a real backend's interpreter, a context's dies with a cell dropped mid-way.
        let mut lose = LoseOnDrop { backend: &self.backend, sandbox: &self.id, context: code.context_id() };
        self.replay(&trace, start, Some(sink)).await?;
        lose.context = None;
        let outcome = match end {
            Ok(outcome) => outcome,
            Err(Some(killed)) => {
                return Ok(CodeResult::new(0, "", "")
                    .with_status(killed)
                    .with_duration(trace.elapsed)
                    .with_oom_killed(trace.oom_killed));
            }
            Err(None) => {
                let partial = ExecResult::new(0, "", "").with_status(ExitStatus::Signal(2));
                return Err(launch.deadline_error(&self.id, partial.with_duration(trace.elapsed)));
            }
        };
        let status = outcome.exit_code.unwrap_or(i32::from(outcome.error.is_some()));
        let mut result = CodeResult::new(status, "", "").with_duration(trace.elapsed);
        if let Some(error) = outcome.error {
            result = result.with_error(error);
        }
        if let Some(bundle) = outcome.display {
            result = result.with_result(bundle);
        }
        Ok(result)
    }

    /// Checks liveness, records the call and finds a scripted failure or answer.
    fn prologue(&self, world: &mut World, kind: OperationKind, argv: &[String]) -> Result<Option<Early>> {
        world.record(kind, &self.id, |c| c.argv = argv.to_vec());
        world.alive(&self.id)?;
        let subject = argv.join(" ");
        if let Some(failure) = world.take_failure(&subject) {
            return Ok(Some(Early::Fail(failure)));
        }
        Ok(scripted(&world.run_scripts, &subject).map(Early::Answer))
    }
}

impl BackendSandbox for FakeSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    fn capabilities(&self) -> Capabilities {
        Backend::capabilities(&self.backend)
    }

    fn network_policy(&self) -> Option<NetworkPolicy> {
        self.world().sandboxes.get(&self.id).map(|s| s.spec.network.clone())
    }

    fn network_enforcement(&self) -> Option<crate::policy::NetworkEnforcement> {
        Some(crate::policy::NetworkEnforcement::simulated())
    }

    fn metadata(&self) -> BTreeMap<String, String> {
        self.world().sandboxes.get(&self.id).map(|s| s.spec.metadata.clone()).unwrap_or_default()
    }

    fn run(&self, command: Command) -> BoxFuture<'_, Result<ExecResult>> {
        Box::pin(async move {
            future::yield_now().await;
            let argv = command.argv().to_vec();
            let (trace, start, launch, pid) = {
                let mut world = self.world();
                match self.prologue(&mut world, OperationKind::Run, &argv)? {
                    Some(Early::Answer(answer)) => return Ok(answer),
                    Some(Early::Fail(failure)) => {
                        let code = world.apply_failure(&self.id, failure, command.timeout_duration())?;
                        return Ok(ExecResult::new(code, "", ""));
                    }
                    None => {}
                }
                let clock = world.clock;
                let s = world.alive(&self.id)?;
                let launch = Launch::new(
                    clock,
                    s,
                    command.env_vars(),
                    command.secret_env_vars(),
                    command.timeout_duration(),
                )
                .with_cwd(s, command.working_dir())?;
                let stdin = Stdin::Bytes(command.stdin_bytes().unwrap_or_default().to_vec());
                let trace =
                    simulate(&mut world, &self.id, &argv, stdin, &launch, command.output_limit_bytes())?
                        .map_err(|_| Error::Provider {
                            backend: SCHEME.into(),
                            message: "the command waited for stdin that never closes".into(),
                            source: None,
                        })?;
                let pid = world.spawn(&self.id);
                (trace, clock, launch, pid)
            };
            let _running = ProcessGuard { backend: &self.backend, pid };
            let (stdout, stderr) = self.replay(&trace, start, None).await?;
            let result = ExecResult::new(0, stdout, stderr)
                .with_duration(trace.elapsed)
                .with_truncated(trace.truncated)
                .with_oom_killed(trace.oom_killed);
            match trace.exit {
                Some(status) => Ok(result.with_status(status)),
                None => Err(launch.deadline_error(&self.id, result.with_status(ExitStatus::Signal(9)))),
            }
        })
    }

    fn stream(&self, command: Command) -> Result<Box<dyn BackendExecStream>> {
        let argv = command.argv().to_vec();
        let mut world = self.world();
        let early = self.prologue(&mut world, OperationKind::Stream, &argv)?;
        let clock = world.clock;
        let s = world.alive(&self.id)?;
        let launch =
            Launch::new(clock, s, command.env_vars(), command.secret_env_vars(), command.timeout_duration())
                .with_cwd(s, command.working_dir())?;
        let pid = world.spawn(&self.id);
        drop(world);
        let spawned = stream::Spawned {
            backend: self.backend.clone(),
            sandbox_id: self.id.clone(),
            pid,
            command,
            launch,
            start: clock,
        };
        Ok(Box::new(stream::FakeExecStream::start(spawned, early)))
    }

    fn run_code(&self, code: Code) -> BoxFuture<'_, Result<CodeResult>> {
        Box::pin(async move {
            future::yield_now().await;
            collect_cell(Box::new(self.cell_stream(code, OperationKind::RunCode)?)).await
        })
    }

    fn run_code_stream(&self, code: Code) -> Result<Box<dyn BackendCodeStream>> {
        Ok(Box::new(self.cell_stream(code, OperationKind::RunCodeStream)?))
    }

    fn create_context(&self, language: &str) -> BoxFuture<'_, Result<CodeContext>> {
        let language = language.to_owned();
        Box::pin(async move {
            future::yield_now().await;
            let mut world = self.world();
            world.record(OperationKind::CreateContext, &self.id, |_| {});
            if language != "python" {
                return Err(Error::unsupported(SCHEME, format!("code language {language:?}")));
            }
            let id = format!("ctx-{}", world.next_context);
            world.next_context += 1;
            world.alive(&self.id)?.contexts.insert(id.clone(), python::Globals::default());
            Ok(CodeContext { id, language })
        })
    }

    fn interrupt(&self, context_id: &str) -> BoxFuture<'_, Result<()>> {
        let context_id = context_id.to_owned();
        Box::pin(async move {
            future::yield_now().await;
            let mut world = self.world();
            world.record(OperationKind::Interrupt, &self.id, |_| {});
            // The fake runs each cell to its end at once: there is never a cell to interrupt.
            let sandbox = world.alive(&self.id)?;
            if let Some(why) = sandbox.lost_contexts.get(&context_id) {
                return Err(Error::context_lost(&context_id, why.clone()));
            }
            if sandbox.contexts.contains_key(&context_id) {
                Ok(())
            } else {
                Err(Error::NotFound { path: format!("code context {context_id}") })
            }
        })
    }

    fn read(&self, path: &str, limit: u64) -> BoxFuture<'_, Result<Vec<u8>>> {
        let path = path.to_owned();
        Box::pin(async move {
            self.fs_op(OperationKind::FsRead, &path, |vfs, abs| {
                let data = vfs.read(&abs)?;
                if data.len() as u64 > limit {
                    return Err(crate::transfer::over_read_limit(&abs, limit));
                }
                Ok(data)
            })
            .await
        })
    }

    fn write(&self, path: &str, data: Vec<u8>, mode: Option<u32>) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        Box::pin(async move {
            self.fs_op(OperationKind::FsWrite, &path, |vfs, abs| vfs.write(&abs, data, mode, false)).await
        })
    }

    fn list(&self, path: &str) -> BoxFuture<'_, Result<Vec<DirEntry>>> {
        let path = path.to_owned();
        Box::pin(async move { self.fs_op(OperationKind::FsList, &path, |vfs, abs| vfs.list(&abs)).await })
    }

    fn mkdir(&self, path: &str) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        Box::pin(
            async move { self.fs_op(OperationKind::FsMkdir, &path, |vfs, abs| vfs.mkdir_all(&abs)).await },
        )
    }

    fn remove(&self, path: &str, recursive: bool) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        Box::pin(async move {
            self.fs_op(OperationKind::FsRemove, &path, |vfs, abs| vfs.remove(&abs, recursive)).await
        })
    }

    fn upload<'a>(
        &'a self,
        host_path: &'a Path,
        path: &'a str,
        meter: TransferMeter,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let quiet = self.transfer(OperationKind::FsUpload, path).await?;
            crate::transfer::upload_via_primitives(&quiet, host_path, path, meter).await
        })
    }

    fn download<'a>(
        &'a self,
        path: &'a str,
        host_path: &'a Path,
        budget: u64,
        meter: TransferMeter,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let quiet = self.transfer(OperationKind::FsDownload, path).await?;
            crate::transfer::download_via_primitives(&quiet, path, (host_path, budget), meter).await
        })
    }

    fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
        Box::pin(async move {
            future::yield_now().await;
            if self.world().kill_hangs.contains(&self.id) {
                future::pending::<()>().await;
            }
            let mut world = self.world();
            world.record(OperationKind::Kill, &self.id, |_| {});
            let outcome = if world.end(&self.id, Life::Killed) {
                KillOutcome::Killed
            } else {
                KillOutcome::AlreadyGone
            };
            // A dead sandbox keeps no process either.
            world.processes.retain(|_, owner| *owner != self.id);
            Ok(outcome)
        })
    }

    fn detach(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            future::yield_now().await;
            let mut world = self.world();
            world.record(OperationKind::Detach, &self.id, |_| {});
            world.alive(&self.id).map(|s| s.spec.detached = true)
        })
    }

    fn extend_ttl(&self, ttl: Duration) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            future::yield_now().await;
            let mut world = self.world();
            world.record(OperationKind::ExtendTtl, &self.id, |_| {});
            let now = world.clock;
            // The TTL counts from creation on the virtual clock: the new end is `now + ttl`.
            world.alive(&self.id).map(|s| s.spec.ttl = now.saturating_sub(s.created_at).saturating_add(ttl))
        })
    }
}
