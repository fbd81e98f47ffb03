//! The fake's streamed process.

use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::backend::{BackendExecStream, BoxFuture};
use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult, ExitStatus, OutputChunk};

use super::machine::{Stdin, Trace};
use super::{FakeBackend, Launch, SCHEME, deadline_error, simulate};

#[derive(Debug)]
enum Phase {
    /// The program reads stdin, which is still open: collecting writes until it closes.
    AwaitingStdin,
    /// Delivering output, one event per poll with a yield in between.
    Replaying { trace: Trace, next: usize, yielded: bool },
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

#[derive(Debug)]
pub(super) struct FakeExecStream {
    backend: FakeBackend,
    sandbox_id: String,
    pid: u64,
    command: Command,
    launch: Launch,
    start: Duration,
    phase: Phase,
    stdin: Vec<u8>,
    stdin_closed: bool,
    waker: Option<Waker>,
    stdout_len: usize,
    stderr_len: usize,
}

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch").field("deadline", &self.deadline).finish_non_exhaustive()
    }
}

impl FakeExecStream {
    pub(super) fn start(
        backend: FakeBackend,
        sandbox_id: String,
        pid: u64,
        command: Command,
        launch: Launch,
        start: Duration,
        early: Option<ExecResult>,
    ) -> Self {
        let mut stream = FakeExecStream {
            backend,
            sandbox_id,
            pid,
            command,
            launch,
            start,
            phase: Phase::AwaitingStdin,
            stdin: Vec::new(),
            stdin_closed: false,
            waker: None,
            stdout_len: 0,
            stderr_len: 0,
        };
        if let Some(answer) = early {
            stream.phase = Phase::Replaying { trace: scripted_trace(&answer), next: 0, yielded: false };
        } else {
            let stdin =
                stream.command.stdin_bytes().map_or(Stdin::Open, |bytes| Stdin::Bytes(bytes.to_vec()));
            stream.simulate(stdin);
        }
        stream
    }

    /// Runs the program; stays in `AwaitingStdin` if it needs stdin that is still open.
    fn simulate(&mut self, stdin: Stdin) {
        let mut world = self.backend.world();
        let outcome = simulate(
            &mut world,
            &self.sandbox_id,
            self.command.argv(),
            stdin,
            &self.launch,
            self.command.output_limit_bytes(),
        );
        drop(world);
        self.phase = match outcome {
            Ok(Ok(trace)) => Phase::Replaying { trace, next: 0, yielded: false },
            Ok(Err(_needs_stdin)) => Phase::AwaitingStdin,
            Err(e) => self.finish(Err(ErrorSnapshot::of(&e))),
        };
    }

    fn finish(&mut self, outcome: std::result::Result<ExecResult, ErrorSnapshot>) -> Phase {
        self.backend.world().processes.remove(&self.pid);
        Phase::Done(outcome)
    }

    fn step(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        match &mut self.phase {
            Phase::AwaitingStdin => {
                if self.stdin_closed {
                    let input = std::mem::take(&mut self.stdin);
                    self.simulate(Stdin::Bytes(input));
                    return self.step(cx);
                }
                self.waker = Some(cx.waker().clone());
                Poll::Pending
            }
            Phase::Replaying { trace, next, yielded } => {
                if !*yielded {
                    *yielded = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                *yielded = false;
                let mut world = self.backend.world();
                if let Some(event) = trace.events.get(*next) {
                    *next += 1;
                    world.clock = world.clock.max(self.start + event.at);
                    match event.stream {
                        crate::StreamKind::Stdout => self.stdout_len += event.data.len(),
                        crate::StreamKind::Stderr => self.stderr_len += event.data.len(),
                    }
                    return Poll::Ready(Some(Ok(OutputChunk {
                        stream: event.stream,
                        data: event.data.clone(),
                    })));
                }
                world.clock = world.clock.max(self.start + trace.elapsed);
                drop(world);
                let result =
                    ExecResult::new(0, "", "").with_duration(trace.elapsed).with_truncated(trace.truncated);
                let outcome = match trace.exit {
                    Some(code) => Ok(result.with_status(ExitStatus::Code(code))),
                    None => Err(ErrorSnapshot::of(&deadline_error(
                        &self.sandbox_id,
                        &self.launch,
                        result.with_status(ExitStatus::Signal(9)),
                    ))),
                };
                self.phase = self.finish(outcome.clone());
                Poll::Ready(outcome.err().map(|e| Err(e.error())))
            }
            Phase::Done(_) => Poll::Ready(None),
        }
    }
}

fn scripted_trace(answer: &ExecResult) -> Trace {
    let mut events = Vec::new();
    for (stream, data) in
        [(crate::StreamKind::Stdout, &answer.stdout), (crate::StreamKind::Stderr, &answer.stderr)]
    {
        if !data.is_empty() {
            events.push(super::machine::Event { at: Duration::ZERO, stream, data: data.clone() });
        }
    }
    Trace {
        events,
        elapsed: answer.duration,
        exit: answer.status.code().or(Some(128 + answer.status.signal().unwrap_or(0))),
        truncated: answer.truncated,
        killed_children: 0,
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
            if let Some(w) = self.waker.take() {
                w.wake();
            }
            Ok(())
        })
    }

    fn wait(&mut self) -> BoxFuture<'_, Result<ExecResult>> {
        Box::pin(async move {
            if matches!(self.phase, Phase::AwaitingStdin) && !self.stdin_closed {
                // Nobody can write stdin while we wait: the process blocks until its
                // deadline, which the virtual clock reaches at once.
                let mut world = self.backend.world();
                world.clock = world.clock.max(self.start + self.launch.deadline.unwrap_or_default());
                drop(world);
                let partial = ExecResult::new(0, "", "").with_status(ExitStatus::Signal(9));
                let e = deadline_error(&self.sandbox_id, &self.launch, partial);
                self.phase = self.finish(Err(ErrorSnapshot::of(&e)));
                return Err(e);
            }
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
        self.backend.world().processes.remove(&self.pid);
    }
}
