//! One command through sandboxd, as a stream of output chunks and then its exit.
//!
//! sandboxd reports a command that could not start (`Failed`) instead of an exit: a missing
//! program or working directory (`NotFound`, which one the host asks with a `stat`), a
//! program the user may not execute (`PermissionDenied`). They read as a shell would report
//! them: a missing program exits 127 and says `<program>: not found` on stderr, a program
//! that may not run exits 126; a missing working directory is [`Error::NotFound`] naming it.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::backend::{BackendExecStream, BoxFuture};
use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult, ExitStatus, OutputChunk, StreamKind};
use crate::sandboxd::client::{Cmd, CmdInput, Event};
use crate::sandboxd::proto::{Failure, Message, Status, Stream};

use super::Session;

/// How long a timed-out command may take to report its end after the kill, before the
/// stream gives up waiting (sandboxd's shepherd kills in rounds; this bounds a stuck one).
const KILL_WAIT: Duration = Duration::from_secs(5);

/// A command running under sandboxd. Dropping it kills the command and everything it
/// started.
pub(crate) struct SessionExecStream {
    session: Arc<Session>,
    cmd: Option<Cmd>,
    /// A `stat` of the working directory, after a start that failed with `NotFound`.
    stat: Option<Cmd>,
    program: String,
    /// The working directory, absolute (what is asked of sandboxd) and as the caller wrote it
    /// (what a `NotFound` names).
    cwd: String,
    cwd_written: String,
    /// Chunks made up on the host (a missing program's words), sent before the end.
    pending: VecDeque<OutputChunk>,
    /// The timeout, and its timer while it runs; after it fired, the wait for the kill.
    deadline: Option<(Duration, Pin<Box<futures_timer::Delay>>)>,
    timed_out: bool,
    /// How the command ended, once it has.
    outcome: Option<(ExitStatus, bool)>,
    /// When the command was asked for, and when its end was seen: its duration, whenever
    /// `wait` is called (it was measured from `wait`'s own start, about 1 µs after a
    /// stream read to its end).
    started: std::time::Instant,
    ended_at: Option<std::time::Instant>,
    /// Whether the stream has yielded its end (`None` or an error).
    over: bool,
    stdin_closed: bool,
}

impl std::fmt::Debug for SessionExecStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionExecStream")
            .field("program", &self.program)
            .field("over", &self.over)
            .finish_non_exhaustive()
    }
}

impl SessionExecStream {
    pub(super) fn new(session: Arc<Session>, cmd: Cmd, command: &Command) -> Self {
        let cwd = session.absolute(command.working_dir().unwrap_or("."));
        SessionExecStream {
            session,
            cmd: Some(cmd),
            stat: None,
            program: command.argv().first().cloned().unwrap_or_default(),
            cwd,
            cwd_written: command.working_dir().unwrap_or(".").to_owned(),
            pending: VecDeque::new(),
            deadline: command.timeout_duration().map(|d| (d, Box::pin(futures_timer::Delay::new(d)))),
            timed_out: false,
            outcome: None,
            started: std::time::Instant::now(),
            ended_at: None,
            over: false,
            stdin_closed: false,
        }
    }

    /// A handle that feeds the command's stdin while the stream is read elsewhere.
    pub(crate) fn input(&self) -> Option<CmdInput> {
        self.cmd.as_ref().map(Cmd::input)
    }

    /// How the command ended (status, out-of-memory kill), once the stream has ended.
    ///
    /// # Errors
    ///
    /// [`Error::Provider`] when called before the end.
    pub(crate) fn finish(&self) -> Result<(ExitStatus, bool)> {
        self.outcome
            .ok_or_else(|| Error::provider_message(self.session.scheme, "the command's stream has not ended"))
    }

    fn end(&mut self, outcome: Option<(ExitStatus, bool)>) {
        if outcome.is_some() && self.ended_at.is_none() {
            self.ended_at = Some(std::time::Instant::now());
        }
        self.outcome = outcome.or(self.outcome);
        self.cmd = None;
        self.stat = None;
    }

    fn fail(&mut self, e: Error) -> Poll<Option<Result<OutputChunk>>> {
        self.end(None);
        self.over = true;
        Poll::Ready(Some(Err(e)))
    }

    fn timeout_error(&mut self) -> Poll<Option<Result<OutputChunk>>> {
        let timeout = self.deadline.as_ref().map_or(Duration::ZERO, |(d, _)| *d);
        let partial = ExecResult::new(0, "", "").with_status(ExitStatus::Signal(9));
        self.fail(Error::ExecutionTimeout { timeout, partial: Box::new(partial) })
    }

    /// The next chunk; `None` once the command has ended (see [`SessionExecStream::finish`]).
    pub(crate) fn poll_next_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        loop {
            if let Some(chunk) = self.pending.pop_front() {
                return Poll::Ready(Some(Ok(chunk)));
            }
            if self.over {
                return Poll::Ready(None);
            }
            if self.outcome.is_some() {
                self.over = true;
                return Poll::Ready(None);
            }
            if let Some(stat) = &mut self.stat {
                let Poll::Ready(event) = stat.poll_next(cx) else { return Poll::Pending };
                match event {
                    Some(Event::Stat { .. }) => {
                        let words = format!("{}: not found\n", self.program);
                        self.pending
                            .push_back(OutputChunk { stream: StreamKind::Stderr, data: words.into_bytes() });
                        self.end(Some((ExitStatus::Code(127), false)));
                    }
                    Some(Event::Gone(why)) => return self.fail(self.session.gone_error(&why)),
                    _ => return self.fail(Error::NotFound { path: self.cwd_written.clone() }),
                }
                continue;
            }
            if let Some((_, delay)) = &mut self.deadline
                && delay.as_mut().poll(cx).is_ready()
            {
                if self.timed_out {
                    // The kill did not report back in time: give up on it (the drop of the
                    // request asks sandboxd once more).
                    return self.timeout_error();
                }
                self.timed_out = true;
                if let Some(cmd) = &self.cmd
                    && cmd.signal(9).is_err()
                {
                    return self.timeout_error();
                }
                *delay = Box::pin(futures_timer::Delay::new(KILL_WAIT));
                continue;
            }
            let Some(cmd) = &mut self.cmd else { return self.fail(self.session.gone_error("ended")) };
            let Poll::Ready(event) = cmd.poll_next(cx) else { return Poll::Pending };
            match event {
                Some(Event::Output(stream @ (Stream::Stdout | Stream::Stderr), data)) if !self.timed_out => {
                    let stream =
                        if stream == Stream::Stdout { StreamKind::Stdout } else { StreamKind::Stderr };
                    return Poll::Ready(Some(Ok(OutputChunk { stream, data })));
                }
                // After the kill, whatever ends the command ends it as a timeout.
                Some(Event::Exit { .. } | Event::Failed(..)) | None if self.timed_out => {
                    return self.timeout_error();
                }
                Some(Event::Exit { status, oom_killed }) => {
                    let status = match status {
                        Status::Code(code) => ExitStatus::Code(code),
                        Status::Signal(signal) => ExitStatus::Signal(signal),
                    };
                    self.end(Some((status, oom_killed)));
                }
                Some(Event::Failed(failure, why)) => {
                    if let Some(end) = self.start_failed(failure, &why) {
                        return end;
                    }
                }
                Some(Event::Gone(why)) => return self.fail(self.session.gone_error(&why)),
                None => return self.fail(self.session.gone_error("the command's answers ended")),
                Some(_) => {}
            }
        }
    }

    /// Turns a start that sandboxd refused into what a shell would report; `Some` when
    /// the stream ends here.
    fn start_failed(&mut self, failure: Failure, why: &str) -> Option<Poll<Option<Result<OutputChunk>>>> {
        match failure {
            Failure::NotFound => {
                let stat = Message::FsStat { path: self.cwd.clone().into_bytes() };
                match self.session.client().request(stat) {
                    Ok(stat) => {
                        self.cmd = None;
                        self.stat = Some(stat);
                        None
                    }
                    Err(why) => Some(self.fail(self.session.gone_error(&why))),
                }
            }
            Failure::PermissionDenied => {
                let words = format!("{}: permission denied\n", self.program);
                self.pending.push_back(OutputChunk { stream: StreamKind::Stderr, data: words.into_bytes() });
                self.end(Some((ExitStatus::Code(126), false)));
                None
            }
            _ => {
                let e = Error::provider_message(self.session.scheme, format!("starting the command: {why}"));
                Some(self.fail(e))
            }
        }
    }
}

impl BackendExecStream for SessionExecStream {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        self.poll_next_chunk(cx)
    }

    fn write_stdin<'a>(&'a mut self, data: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if self.stdin_closed {
                return Err(Error::invalid_input("stdin was already closed"));
            }
            let Some(input) = self.input() else {
                return Err(Error::provider_message(self.session.scheme, "the process has ended"));
            };
            input.write_stdin(data).await.map_err(|why| match self.session.check_alive() {
                Err(gone) => gone,
                Ok(()) => Error::provider_message(self.session.scheme, format!("writing stdin: {why}")),
            })
        })
    }

    fn close_stdin(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if !self.stdin_closed {
                self.stdin_closed = true;
                if let Some(input) = self.input() {
                    // A command that ended already has no stdin to close.
                    let _ = input.close_stdin();
                }
            }
            Ok(())
        })
    }

    fn wait(&mut self) -> BoxFuture<'_, Result<ExecResult>> {
        Box::pin(async move {
            while let Some(chunk) = std::future::poll_fn(|cx| self.poll_next_chunk(cx)).await {
                chunk?;
            }
            let (status, oom_killed) = self.finish()?;
            self.session.check_alive()?;
            let ended = self.ended_at.unwrap_or_else(std::time::Instant::now);
            Ok(ExecResult::new(0, "", "")
                .with_status(status)
                .with_oom_killed(oom_killed)
                .with_duration(ended.saturating_duration_since(self.started)))
        })
    }

    fn terminate(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            // Dropping the request kills the command and everything it started.
            self.end(None);
            self.over = true;
            Ok(())
        })
    }
}
