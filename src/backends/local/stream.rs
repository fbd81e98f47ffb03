//! A streamed local command.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::backend::{BackendExecStream, BoxFuture};
use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult, ExitStatus, OutputChunk};

use super::ProcessGuard;
use super::process::Piece;

pub(super) struct LocalExecStream {
    guard: Option<ProcessGuard>,
    listener: Option<Pin<Box<event_listener::EventListener>>>,
    deadline: Option<(Duration, Pin<Box<futures_timer::Delay>>)>,
    ended: bool,
    started: Instant,
    done: Option<ExecResult>,
}

impl std::fmt::Debug for LocalExecStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalExecStream").field("ended", &self.ended).finish_non_exhaustive()
    }
}

impl LocalExecStream {
    pub(super) fn new(guard: ProcessGuard, command: &Command) -> Self {
        LocalExecStream {
            guard: Some(guard),
            listener: None,
            deadline: command.timeout_duration().map(|d| (d, Box::pin(futures_timer::Delay::new(d)))),
            ended: false,
            started: Instant::now(),
            done: None,
        }
    }

    fn timed_out(&mut self) -> Error {
        let timeout = self.deadline.as_ref().map_or(Duration::ZERO, |(d, _)| *d);
        self.guard = None; // kills the process tree
        self.ended = true;
        let partial = ExecResult::new(0, "", "").with_status(ExitStatus::Signal(9));
        Error::ExecutionTimeout { timeout, partial: Box::new(partial) }
    }
}

impl BackendExecStream for LocalExecStream {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let Some(guard) = &self.guard else { return Poll::Ready(None) };
        let pieces = Arc::clone(&guard.running.pieces);
        loop {
            if let Some(piece) = pieces.try_pop() {
                self.listener = None;
                return match piece {
                    Piece::Output(stream, data) => Poll::Ready(Some(Ok(OutputChunk { stream, data }))),
                    Piece::End => {
                        self.ended = true;
                        // A command that ended because its sandbox died (killed through
                        // another handle, or its TTL) says so once, then the stream ends.
                        match guard.state.check_alive() {
                            Ok(()) => Poll::Ready(None),
                            Err(gone) => Poll::Ready(Some(Err(gone))),
                        }
                    }
                };
            }
            if let Some((_, delay)) = &mut self.deadline
                && delay.as_mut().poll(cx).is_ready()
            {
                let e = self.timed_out();
                return Poll::Ready(Some(Err(e)));
            }
            match &mut self.listener {
                Some(listener) => {
                    if listener.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.listener = None;
                }
                None => self.listener = Some(Box::pin(pieces.listen())),
            }
        }
    }

    fn write_stdin<'a>(&'a mut self, data: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            match &self.guard {
                Some(guard) => guard.running.write_stdin(data.to_vec()).await,
                None => Err(Error::provider_message("local", "the process has ended")),
            }
        })
    }

    fn close_stdin(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if let Some(guard) = &self.guard {
                guard.running.close_stdin();
            }
            Ok(())
        })
    }

    fn wait(&mut self) -> BoxFuture<'_, Result<ExecResult>> {
        Box::pin(async move {
            if let Some(done) = &self.done {
                return Ok(done.clone());
            }
            while !self.ended {
                if let Some(Err(e)) = std::future::poll_fn(|cx| self.poll_chunk(cx)).await {
                    return Err(e);
                }
            }
            let Some(guard) = &self.guard else {
                return Err(Error::provider_message("local", "the process was terminated"));
            };
            let status = guard.running.wait().await?;
            let (status, _) = guard.outcome(status, false).await;
            // A command that ended because its sandbox died (killed through another handle,
            // or its TTL) did not end on its own: that is the sandbox's fact, not an exit.
            guard.state.check_alive()?;
            let result = ExecResult::new(0, "", "").with_status(status).with_duration(self.started.elapsed());
            self.done = Some(result.clone());
            Ok(result)
        })
    }

    fn terminate(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.guard = None;
            self.ended = true;
            Ok(())
        })
    }
}
