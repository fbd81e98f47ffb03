//! Each sandbox's Python session as an agent sees it: one code context, made at the first
//! `run_code`, that every later cell runs in, so variables, imports and definitions persist
//! from call to call as in a notebook. A context that is lost (its interpreter killed by a
//! timeout that `SIGINT` did not stop, or by the cell itself) stays lost, and says so on
//! every call, until the agent asks for a fresh one (`restart_python`): a new interpreter
//! silently in its place would run the next cell without the state it expects.
//!
//! Backends without stateful code (`Capabilities::STATEFUL_CODE`) run each cell on its own,
//! and the answer says so.

use std::time::Duration;

use sandboxio::{Code, Error, ErrorCode, Sandbox, exec::CodeContext, policy::Capabilities};
use tokio::sync::Mutex;

/// What became of a sandbox's Python session.
#[derive(Debug, Default)]
pub enum State {
    /// No cell has run yet.
    #[default]
    Unstarted,
    /// The context every cell runs in.
    Live(CodeContext),
    /// The context was lost, for this reason.
    Lost(String),
}

/// One sandbox's Python session.
#[derive(Debug, Default)]
pub struct Python {
    state: Mutex<State>,
    /// Cells that [`Python::cell`] gave the context to and that have not ended (their
    /// [`Flight`]s): a timed-out cell's interrupt probe must not reach another call's cell.
    in_flight: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// A cell in the context, counted until it ends (dropped: a call that failed or was
/// cancelled counts as ended too).
#[derive(Debug)]
pub struct Flight(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Flight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The cell to run, in the session's context where the backend keeps one.
pub enum Cell {
    /// Run in this context (counted while the [`Flight`] lives).
    InContext(CodeContext, Flight),
    /// The backend keeps no state: run on its own.
    Alone,
}

impl Cell {
    /// The context the cell ran in, once it has ended (no longer counted).
    pub fn ended(self) -> Option<CodeContext> {
        match self {
            Cell::InContext(ctx, flight) => {
                drop(flight);
                Some(ctx)
            }
            Cell::Alone => None,
        }
    }
}

/// The tool error of a session whose context is lost.
pub fn lost_error(why: &str) -> Error {
    Error::invalid_input(format!(
        "this sandbox's Python session was lost ({why}): the variables, imports and definitions of earlier cells are gone. \
         Call restart_python to start a fresh session, then run again what the next cells need."
    ))
}

impl Python {
    /// The context the next cell runs in, made on the first call.
    ///
    /// # Errors
    ///
    /// [`lost_error`] while the context is lost; the library's error making the context.
    pub async fn cell(&self, sandbox: &Sandbox) -> sandboxio::Result<Cell> {
        if !sandbox.capabilities().contains(Capabilities::STATEFUL_CODE) {
            return Ok(Cell::Alone);
        }
        let mut state = self.state.lock().await;
        let ctx = match &*state {
            State::Live(ctx) => ctx.clone(),
            State::Lost(why) => return Err(lost_error(why)),
            State::Unstarted => {
                let ctx = sandbox.create_context("python").await?;
                *state = State::Live(ctx.clone());
                ctx
            }
        };
        self.in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Cell::InContext(ctx, Flight(std::sync::Arc::clone(&self.in_flight))))
    }

    /// Records what a cell's end says of its context: a `ContextLost` error loses it.
    /// Returns whether the context is (now) lost.
    pub async fn after(&self, ctx: &CodeContext, ended: Option<&Error>) -> bool {
        let mut state = self.state.lock().await;
        let ours = matches!(&*state, State::Live(live) if live.id == ctx.id);
        if let Some(e) = ended
            && e.code() == ErrorCode::ContextLost
            && ours
        {
            *state = State::Lost(e.to_string());
        }
        matches!(&*state, State::Lost(_))
    }

    /// After a timed-out cell: whether its context survived the interrupt (an interrupt
    /// with no cell running does nothing, and on a lost context says it is lost). With
    /// another call's cell in the context, no probe is sent (it would interrupt that cell):
    /// a loss then shows at the next cell.
    pub async fn survived(&self, sandbox: &Sandbox, ctx: &CodeContext) -> bool {
        if self.in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            return !matches!(&*self.state.lock().await, State::Lost(_));
        }
        let interrupted = sandbox.interrupt(ctx).await;
        let lost = interrupted.as_ref().err().filter(|e| e.code() == ErrorCode::ContextLost);
        !self.after(ctx, lost).await
    }

    /// Interrupts the running cell, if any. Returns what happened, for the agent.
    ///
    /// # Errors
    ///
    /// [`lost_error`] on a lost context; the library's error.
    pub async fn interrupt(&self, sandbox: &Sandbox) -> sandboxio::Result<&'static str> {
        let ctx = match &*self.state.lock().await {
            State::Unstarted => return Ok("no cell has run in this sandbox yet: nothing to interrupt"),
            State::Lost(why) => return Err(lost_error(why)),
            State::Live(ctx) => ctx.clone(),
        };
        match sandbox.interrupt(&ctx).await {
            Ok(()) => Ok(
                "interrupted: a running cell gets KeyboardInterrupt and returns with it; the Python session keeps its state",
            ),
            Err(e) => {
                self.after(&ctx, Some(&e)).await;
                Err(e)
            }
        }
    }

    /// Starts a fresh session: the old interpreter (if live) is ended, the next cell runs
    /// in a new context.
    ///
    /// # Errors
    ///
    /// The library's error making the new context.
    pub async fn restart(&self, sandbox: &Sandbox) -> sandboxio::Result<()> {
        let mut state = self.state.lock().await;
        if let State::Live(old) = &*state {
            // No call ends a context; its interpreter ending itself does (its result is the
            // context's loss, expected here). Bounded, so a stuck one cannot hold the restart.
            let end = async {
                let _ = sandbox.interrupt(old).await;
                let end = Code::new("import os\nos._exit(0)").in_context(old).timeout(Duration::from_secs(5));
                let _ = sandbox.run_code(end).await;
            };
            let _ = tokio::time::timeout(Duration::from_secs(10), end).await;
        }
        *state = State::Unstarted;
        let ctx = sandbox.create_context("python").await?;
        *state = State::Live(ctx);
        Ok(())
    }
}
