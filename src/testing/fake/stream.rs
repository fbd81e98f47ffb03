//! The fake's streamed process.

use std::task::{Context, Poll};
use std::time::Duration;

use crate::backend::{Backend, BackendExecStream, BoxFuture};
use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult, ExitStatus, OutputChunk};
use crate::policy::Capabilities;

use super::machine::{Stdin, Trace};
use super::process::{Launch, apply_due, simulate};
use super::sandbox::Early;
use super::{FakeBackend, SCHEME};

#[derive(Debug)]
enum Phase {
    /// The program reads stdin, which is still open: collecting writes until it closes.
    AwaitingStdin,
    /// A scripted failure, delivered as the stream's first item.
    Failing(Error),
    /// Delivering output, one event per poll with a yield in between; file changes land as
    /// their time is reached.
    Replaying { trace: Trace, next: usize, applied: usize, yielded: bool },
    /// Finished (or killed): the outcome `wait` returns.
    Done(std::result::Result<ExecResult, ErrorSnapshot>),
}

/// Errors are not `Clone`; keep enough to rebuild the same one.
#[derive(Debug, Clone)]
enum ErrorSnapshot {
    Timeout(Duration, Box<ExecResult>),
    Gone(String, String),
    Other(String),
}

impl ErrorSnapshot {
    fn of(e: &Error) -> Self {
        match e {
            Error::ExecutionTimeout { timeout, partial } => ErrorSnapshot::Timeout(*timeout, partial.clone()),
            Error::SandboxGone { id, message } => ErrorSnapshot::Gone(id.clone(), message.clone()),
            other => ErrorSnapshot::Other(other.to_string()),
        }
    }

    fn error(&self) -> Error {
        match self {
            ErrorSnapshot::Timeout(t, p) => Error::ExecutionTimeout { timeout: *t, partial: p.clone() },
            ErrorSnapshot::Gone(id, m) => Error::SandboxGone { id: id.clone(), message: m.clone() },
            ErrorSnapshot::Other(m) => {
                Error::Provider { backend: SCHEME.into(), message: m.clone(), source: None }
            }
        }
    }
}

/// What a streamed command was started as: set once, by the sandbox that spawned it.
#[derive(Debug)]
pub(super) struct Spawned {
    pub(super) backend: FakeBackend,
    pub(super) sandbox_id: String,
    pub(super) pid: u64,
    pub(super) command: Command,
    pub(super) launch: Launch,
    /// The virtual clock when it started.
    pub(super) start: Duration,
}

#[derive(Debug)]
pub(super) struct FakeExecStream {
    spawned: Spawned,
    phase: Phase,
    stdin: Vec<u8>,
    stdin_closed: bool,
}

impl FakeExecStream {
    pub(super) fn start(spawned: Spawned, early: Option<Early>) -> Self {
        // Without STDIN nobody can ever write: the process reads end-of-file at once.
        let stdin_closed = !Backend::capabilities(&spawned.backend).contains(Capabilities::STDIN);
        let mut stream =
            FakeExecStream { spawned, phase: Phase::AwaitingStdin, stdin: Vec::new(), stdin_closed };
        match early {
            Some(Early::Answer(answer)) => {
                stream.phase =
                    Phase::Replaying { trace: scripted_trace(&answer), next: 0, applied: 0, yielded: false };
            }
            Some(Early::Fail(failure)) => {
                let mut world = stream.spawned.backend.world();
                let timeout = stream.spawned.command.timeout_duration();
                stream.phase = match world.apply_failure(&stream.spawned.sandbox_id, failure, timeout) {
                    Ok(code) => Phase::Replaying {
                        trace: scripted_trace(&ExecResult::new(code, "", "")),
                        next: 0,
                        applied: 0,
                        yielded: false,
                    },
                    Err(e) => Phase::Failing(e),
                };
            }
            None => {
                let stdin = match stream.spawned.command.stdin_bytes() {
                    Some(bytes) => Stdin::Bytes(bytes.to_vec()),
                    None if stream.stdin_closed => Stdin::Bytes(Vec::new()),
                    None => Stdin::Open,
                };
                stream.simulate(stdin);
            }
        }
        stream
    }

    /// Runs the program; stays in `AwaitingStdin` if it needs stdin that is still open.
    fn simulate(&mut self, stdin: Stdin) {
        let mut world = self.spawned.backend.world();
        let outcome = simulate(
            &mut world,
            &self.spawned.sandbox_id,
            self.spawned.command.argv(),
            stdin,
            &self.spawned.launch,
            self.spawned.command.output_limit_bytes(),
        );
        drop(world);
        self.phase = match outcome {
            Ok(Ok(trace)) => Phase::Replaying { trace, next: 0, applied: 0, yielded: false },
            Ok(Err(_needs_stdin)) => Phase::AwaitingStdin,
            Err(e) => self.finish(Err(ErrorSnapshot::of(&e))),
        };
    }

    fn finish(&mut self, outcome: std::result::Result<ExecResult, ErrorSnapshot>) -> Phase {
        self.spawned.backend.world().processes.remove(&self.spawned.pid);
        Phase::Done(outcome)
    }

    /// Ends the stream with `error` as its last item.
    fn fail(&mut self, error: &Error) -> Poll<Option<Result<OutputChunk>>> {
        let snapshot = ErrorSnapshot::of(error);
        self.phase = self.finish(Err(snapshot.clone()));
        Poll::Ready(Some(Err(snapshot.error())))
    }

    /// The process blocks on stdin that nobody can write while it is being waited on (the
    /// stream is borrowed), so it stays blocked until its deadline, which the virtual clock
    /// reaches at once.
    fn block_until_deadline(&mut self) -> Error {
        let mut world = self.spawned.backend.world();
        world.clock = world
            .clock
            .max(self.spawned.start.saturating_add(self.spawned.launch.deadline.unwrap_or_default()));
        drop(world);
        let partial = ExecResult::new(0, "", "").with_status(ExitStatus::Signal(9));
        self.spawned.launch.deadline_error(&self.spawned.sandbox_id, partial)
    }

    fn step(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        match &mut self.phase {
            Phase::AwaitingStdin if self.stdin_closed => {
                let input = std::mem::take(&mut self.stdin);
                self.simulate(Stdin::Bytes(input));
                self.step(cx)
            }
            Phase::AwaitingStdin => {
                let e = self.block_until_deadline();
                self.fail(&e)
            }
            Phase::Failing(_) => {
                let Phase::Failing(e) = std::mem::replace(&mut self.phase, Phase::AwaitingStdin) else {
                    unreachable!("matched above")
                };
                self.fail(&e)
            }
            Phase::Replaying { yielded, .. } if !*yielded => {
                *yielded = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Phase::Replaying { trace, next, applied, yielded } => {
                *yielded = false;
                let at = trace.events.get(*next).map_or(trace.elapsed, |e| e.at);
                let mut world = self.spawned.backend.world();
                world.clock = world.clock.max(self.spawned.start.saturating_add(at));
                let sandbox = match world.alive(&self.spawned.sandbox_id) {
                    Ok(sandbox) => sandbox,
                    Err(e) => {
                        drop(world);
                        return self.fail(&e);
                    }
                };
                apply_due(&mut sandbox.vfs, &trace.effects, applied, at);
                drop(world);
                if let Some(event) = trace.events.get(*next) {
                    *next += 1;
                    return Poll::Ready(Some(Ok(OutputChunk {
                        stream: event.stream,
                        data: event.data.clone(),
                    })));
                }
                let result = ExecResult::new(0, "", "")
                    .with_duration(trace.elapsed)
                    .with_truncated(trace.truncated)
                    .with_oom_killed(trace.oom_killed);
                if let Some(status) = trace.exit {
                    let done = Ok(result.with_status(status));
                    self.phase = self.finish(done);
                    Poll::Ready(None)
                } else {
                    let e = self
                        .spawned
                        .launch
                        .deadline_error(&self.spawned.sandbox_id, result.with_status(ExitStatus::Signal(9)));
                    self.fail(&e)
                }
            }
            Phase::Done(_) => Poll::Ready(None),
        }
    }
}

pub(super) fn scripted_trace(answer: &ExecResult) -> Trace {
    let mut events = Vec::new();
    for (stream, data) in
        [(crate::exec::StreamKind::Stdout, &answer.stdout), (crate::exec::StreamKind::Stderr, &answer.stderr)]
    {
        if !data.is_empty() {
            events.push(super::machine::Event { at: Duration::ZERO, stream, data: data.clone() });
        }
    }
    Trace {
        events,
        elapsed: answer.duration,
        exit: Some(answer.status),
        truncated: answer.truncated,
        killed_children: 0,
        effects: Vec::new(),
        oom_killed: answer.oom_killed,
    }
}

impl BackendExecStream for FakeExecStream {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        self.step(cx)
    }

    fn write_stdin<'a>(&'a mut self, data: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            futures_lite::future::yield_now().await;
            if self.stdin_closed || matches!(self.phase, Phase::Done(_)) {
                return Err(Error::Provider {
                    backend: SCHEME.into(),
                    message: "stdin is closed (the process exited or close_stdin was called)".into(),
                    source: None,
                });
            }
            self.stdin.extend_from_slice(data);
            Ok(())
        })
    }

    fn close_stdin(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.stdin_closed = true;
            Ok(())
        })
    }

    fn wait(&mut self) -> BoxFuture<'_, Result<ExecResult>> {
        Box::pin(async move {
            loop {
                if let Phase::Done(outcome) = &self.phase {
                    return outcome.clone().map_err(|e| e.error());
                }
                std::future::poll_fn(|cx| match self.step(cx) {
                    Poll::Ready(_) => Poll::Ready(()),
                    Poll::Pending => Poll::Pending,
                })
                .await;
            }
        })
    }

    fn terminate(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if !matches!(self.phase, Phase::Done(_)) {
                let killed = ExecResult::new(0, "", "").with_status(ExitStatus::Signal(9));
                self.phase = self.finish(Ok(killed));
            }
            Ok(())
        })
    }
}

impl Drop for FakeExecStream {
    fn drop(&mut self) {
        // Dropping the stream kills the process.
        self.spawned.backend.world().processes.remove(&self.spawned.pid);
    }
}
