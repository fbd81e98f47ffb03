//! Code cells on sandboxd's runner (`sandboxd/src/runner.py`): one persistent `python3`
//! per code context, driven over its control channel, so variables survive from cell to
//! cell and results come back by MIME type (a cell's value and its `display()`s, every open
//! matplotlib figure as PNG), never parsed from printed output. A cell outside a context
//! gets a runner of its own, which ends with the cell.
//!
//! A cell's stdout and stderr reach the host as sandboxd output frames while it runs: they
//! are streamed as they arrive ([`Session::run_code_stream`]), and `run_code` collects them.
//!
//! A context whose runner is gone (the cell killed its interpreter, or a timeout had to) is
//! lost: that cell and every later one report [`Error::ContextLost`]; nothing starts a fresh
//! interpreter in its place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::backend::{CellStream, ChunkSink};
use crate::error::{Error, Result};
use crate::exec::{Code, CodeContext, CodeResult, Command, ExecResult, ExitStatus, OutputChunk, StreamKind};
use crate::sandboxd::cells::{Cell, Record, Records, cell_request};
use crate::sandboxd::client::{Cmd, Event};
use crate::sandboxd::proto::{Spawn, StdinMode, Stream};

use super::Session;

/// The interpreter runners start with.
const PYTHON: &str = "python3";

/// How long a timed-out cell has to stop on `SIGINT` before its runner is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// How long a runner may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// `SIGINT`.
const SIGINT: i32 = 2;

/// One running interpreter.
struct Runner {
    cmd: Cmd,
    records: Records,
}

/// A context's runner, taken out while a cell runs in it (`None` then), or lost (`Err`).
type Slot = std::result::Result<Option<Runner>, String>;

/// The contexts of one sandbox session.
#[derive(Default)]
pub(super) struct Contexts {
    slots: Mutex<HashMap<String, Slot>>,
    /// Rung when a runner is put back.
    returned: event_listener::Event,
    next: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Contexts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contexts").finish_non_exhaustive()
    }
}

/// The outcome of one cell on a runner: its result, and whether the runner is still good.
struct Ran {
    result: Result<CodeResult>,
    runner: Option<Runner>,
}

impl Session {
    /// Starts a code context for `language` (`python` only).
    ///
    /// # Errors
    ///
    /// [`Error::CapabilityNotSupported`] for another language; [`Error::Provider`] when the
    /// interpreter does not start; [`Error::SandboxGone`].
    pub(crate) async fn create_context(self: &Arc<Self>, language: &str) -> Result<CodeContext> {
        python_only(self.scheme, language)?;
        let runner = self.start_runner().await?;
        let n = self.contexts.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("ctx-{n}");
        self.contexts
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), Ok(Some(runner)));
        Ok(CodeContext { id, language: language.to_owned() })
    }

    /// Starts a cell, in its context when it names one, else on a runner of its own, and
    /// returns its output as the runner's stdout and stderr frames arrive (the cell's
    /// results come on the runner's control channel and end the stream).
    ///
    /// # Errors
    ///
    /// At once: [`Error::CapabilityNotSupported`] for a language other than Python,
    /// [`Error::SandboxGone`]. As the stream's end: [`Error::ExecutionTimeout`] past the
    /// cell's timeout; [`Error::ContextLost`]; [`Error::NotFound`] for an unknown context;
    /// [`Error::SandboxGone`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream interrupts the cell: a context's runner is killed (the context is
    /// lost) unless the cell had finished; a runner of its own is killed.
    pub(crate) fn run_code_stream(self: &Arc<Self>, code: Code) -> Result<CellStream> {
        python_only(self.scheme, code.language_name())?;
        self.check_alive()?;
        let session = Arc::clone(self);
        let limit = code.output_limit_bytes();
        Ok(CellStream::with_output_limit(
            limit,
            move |sink| async move { session.run_cell(&code, &sink).await },
        ))
    }

    /// The cell of [`Session::run_code_stream`], its output sent to `sink`.
    async fn run_cell(self: &Arc<Self>, code: &Code, sink: &ChunkSink) -> Result<CodeResult> {
        let Some(id) = code.context_id() else {
            let runner = self.start_runner().await?;
            let ran = self.cell(runner, code, None, sink).await;
            return ran.result;
        };
        let runner = self.take_runner(id).await?;
        // Dropped before the cell ended, the future drops the runner (killing it): the
        // context is lost then, and says so.
        let mut slot = Return { contexts: &self.contexts, id, slot: Some(Err(CANCELLED.to_owned())) };
        let ran = self.cell(runner, code, Some(id), sink).await;
        slot.slot = Some(match ran.runner {
            Some(runner) => Ok(Some(runner)),
            None => Err(match &ran.result {
                Err(Error::ContextLost { message, .. }) => message.clone(),
                _ => "its interpreter was killed to end a cell".to_owned(),
            }),
        });
        ran.result
    }

    /// Interrupts the cell running in context `id` (`SIGINT`: it raises `KeyboardInterrupt`
    /// and the context keeps its state). Nothing happens when no cell runs.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] for an unknown context, [`Error::ContextLost`].
    pub(crate) fn interrupt(&self, id: &str) -> Result<()> {
        let slots = self.contexts.slots.lock().unwrap_or_else(PoisonError::into_inner);
        match slots.get(id) {
            None => Err(Error::NotFound { path: format!("code context {id}") }),
            Some(Err(why)) => Err(Error::context_lost(id, why.clone())),
            // Idle: nothing to interrupt.
            Some(Ok(Some(_))) => Ok(()),
            Some(Ok(None)) => {
                drop(slots);
                let interrupts = self.interrupts.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(input) = interrupts.get(id) {
                    let _ = input.signal(SIGINT);
                }
                Ok(())
            }
        }
    }

    /// Takes context `id`'s runner, waiting while another cell runs in it.
    async fn take_runner(&self, id: &str) -> Result<Runner> {
        loop {
            let listener = self.contexts.returned.listen();
            {
                let mut slots = self.contexts.slots.lock().unwrap_or_else(PoisonError::into_inner);
                match slots.get_mut(id) {
                    None => return Err(Error::NotFound { path: format!("code context {id}") }),
                    Some(Err(why)) => return Err(Error::context_lost(id, why.clone())),
                    Some(Ok(slot)) => {
                        if let Some(runner) = slot.take() {
                            return Ok(runner);
                        }
                    }
                }
            }
            listener.await;
        }
    }

    /// Starts `python3 -I -u -c RUNNER` with a control channel and waits for its `ready`.
    /// `-I` (isolated): no user site directory (`usercustomize.py`, its `.pth` files), no
    /// `PYTHON*` variables and no working directory on the path before the runner is up, so
    /// nothing an earlier cell or command planted runs in a later runner (the runner puts
    /// the working directory and `PYTHONPATH` back for the cells' own imports).
    async fn start_runner(self: &Arc<Self>) -> Result<Runner> {
        self.check_alive()?;
        let command = Command::new(PYTHON).arg("-I").arg("-u").arg("-c").arg(crate::sandboxd::RUNNER);
        // Undumpable from its first instruction (sandboxd checks it, or refuses to start it):
        // the sandbox's other processes, of the same user on `local://`, can never take its
        // channel, its memory or its environment, not even while it starts.
        let spec =
            Spawn { control: true, undumpable: true, ..self.spawn_spec(&command, StdinMode::Null, true) };
        let cmd = self.client.spawn(spec).map_err(|why| self.gone_error(&why))?;
        let mut runner = Runner { cmd, records: Records::default() };
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut said = Vec::new();
        // The runner is used once it said `ready` and sandboxd said `Spawned`, which it does
        // only after checking that the runner is out of the other processes' reach.
        let (mut ready, mut spawned) = (false, false);
        loop {
            if ready && spawned {
                return Ok(runner);
            }
            let event = with_deadline(deadline, runner.cmd.next()).await;
            match event {
                Some(Some(Event::Spawned(_))) => spawned = true,
                Some(Some(Event::Output(Stream::Control, data))) => {
                    runner.records.push(&data);
                    // Nothing but `ready` is expected: no item is admitted.
                    match runner.records.next_record(&mut |_| false) {
                        Ok(Some(Record::Ready)) if !ready => ready = true,
                        Ok(None) => {}
                        Ok(Some(other)) => {
                            return Err(self.runner_failed(&format!("it said {other:?} first")));
                        }
                        Err(e) => return Err(self.runner_failed(&e.0)),
                    }
                }
                Some(Some(Event::Output(_, data))) => {
                    said.extend_from_slice(&data[..data.len().min(4096usize.saturating_sub(said.len()))]);
                }
                Some(Some(Event::Gone(why))) => return Err(self.gone_error(&why)),
                Some(Some(Event::Failed(_, why))) => return Err(self.runner_failed(&why)),
                Some(Some(Event::Exit { status, .. })) => {
                    let said = String::from_utf8_lossy(&said);
                    return Err(self.runner_failed(&format!("it exited ({status:?}): {}", said.trim())));
                }
                Some(Some(_)) => {}
                Some(None) => return Err(self.runner_failed("its answers ended")),
                None => return Err(self.runner_failed("no answer within 30 s")),
            }
        }
    }

    fn runner_failed(&self, why: &str) -> Error {
        Error::provider_message(self.scheme, format!("the code runner ({PYTHON}) did not start: {why}"))
    }

    /// Runs one cell on `runner`, sending what it prints to `sink` as it arrives; `context`
    /// names the context it belongs to (for errors and interrupts). The result (and a
    /// timeout's partial one) carries no output: it went to `sink`.
    async fn cell(&self, mut runner: Runner, code: &Code, context: Option<&str>, sink: &ChunkSink) -> Ran {
        let started = Instant::now();
        let lost = |why: &str| Error::context_lost(context.unwrap_or("(a cell's own)"), why);
        if let Err(why) = runner.cmd.send_control(&cell_request(code.source())).await {
            let e = self.check_alive().err().unwrap_or_else(|| lost(&why));
            return Ran { result: Err(e), runner: None };
        }
        if let Some(id) = context {
            self.interrupts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id.to_owned(), runner.cmd.input());
        }
        let _forget = Forget { session: self, id: context };
        let mut deadline = code.timeout_duration().map(|d| started + d);
        let mut interrupted = false;
        // What the host keeps of the cell's records counts against its budget as they arrive.
        let mut cell = Cell::new(sink.budget().clone());
        loop {
            let event = match deadline {
                Some(at) => with_deadline(at, runner.cmd.next()).await,
                None => Some(runner.cmd.next().await),
            };
            let Some(event) = event else {
                if interrupted {
                    // It did not stop on SIGINT: the runner goes (dropping it kills it).
                    let timeout = code.timeout_duration().unwrap_or_default();
                    let partial = ExecResult::new(0, "", "").with_status(ExitStatus::Signal(9));
                    return Ran {
                        result: Err(Error::ExecutionTimeout { timeout, partial: Box::new(partial) }),
                        runner: None,
                    };
                }
                interrupted = true;
                let _ = runner.cmd.signal(SIGINT);
                deadline = Some(Instant::now() + INTERRUPT_GRACE);
                continue;
            };
            match event {
                Some(Event::Output(Stream::Stdout, data)) => {
                    sink.send(OutputChunk { stream: StreamKind::Stdout, data }).await;
                }
                Some(Event::Output(Stream::Stderr, data)) => {
                    sink.send(OutputChunk { stream: StreamKind::Stderr, data }).await;
                }
                Some(Event::Output(Stream::Control, data)) => {
                    runner.records.push(&data);
                    loop {
                        match runner.records.next_record(&mut |cost| cell.admit(cost)) {
                            Ok(None) => break,
                            Ok(Some(record)) => match cell.take(record) {
                                Ok(false) => {}
                                Ok(true) => {
                                    if interrupted {
                                        let timeout = code.timeout_duration().unwrap_or_default();
                                        let partial = ExecResult::new(0, "", "")
                                            .with_status(ExitStatus::Signal(SIGINT));
                                        let e =
                                            Error::ExecutionTimeout { timeout, partial: Box::new(partial) };
                                        return Ran { result: Err(e), runner: Some(runner) };
                                    }
                                    let result = finished(cell, started);
                                    return Ran { result: Ok(result), runner: Some(runner) };
                                }
                                Err(e) => {
                                    return Ran {
                                        result: Err(lost(&format!("the runner's records broke: {}", e.0))),
                                        runner: None,
                                    };
                                }
                            },
                            Err(e) => {
                                return Ran {
                                    result: Err(lost(&format!("the runner's records broke: {}", e.0))),
                                    runner: None,
                                };
                            }
                        }
                    }
                }
                Some(Event::Exit { oom_killed: false, .. }) if interrupted => {
                    // The timeout's interrupt ended the interpreter (it can land before the
                    // runner's handler does, as a zero timeout's does): the cell timed out.
                    let timeout = code.timeout_duration().unwrap_or_default();
                    let partial = ExecResult::new(0, "", "").with_status(ExitStatus::Signal(SIGINT));
                    let e = Error::ExecutionTimeout { timeout, partial: Box::new(partial) };
                    return Ran { result: Err(e), runner: None };
                }
                Some(Event::Exit { status, oom_killed }) => {
                    let why = if oom_killed {
                        "the out-of-memory killer ended its interpreter".to_owned()
                    } else {
                        format!("its interpreter ended ({status:?})")
                    };
                    return Ran { result: Err(lost(&why)), runner: None };
                }
                Some(Event::Gone(why)) => return Ran { result: Err(self.gone_error(&why)), runner: None },
                Some(Event::Failed(_, why)) => return Ran { result: Err(lost(&why)), runner: None },
                None => return Ran { result: Err(lost("its answers ended")), runner: None },
                Some(_) => {}
            }
        }
    }
}

/// Why a context whose cell was cancelled is lost.
const CANCELLED: &str = "a cell's run_code was cancelled (its future dropped), which killed the interpreter";

/// Puts a context's runner (or the news of its loss) back in its slot, whatever happens to
/// the cell's future, and wakes the cells waiting for it.
struct Return<'a> {
    contexts: &'a Contexts,
    id: &'a str,
    slot: Option<Slot>,
}

impl Drop for Return<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.contexts
                .slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(self.id.to_owned(), slot);
            self.contexts.returned.notify(usize::MAX);
        }
    }
}

/// Forgets a context's interrupt handle when its cell ends (or its future is dropped).
struct Forget<'a> {
    session: &'a Session,
    id: Option<&'a str>,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.session.interrupts.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
        }
    }
}

/// The cell's result from the runner's records (its output went to the stream).
fn finished(cell: Cell, started: Instant) -> CodeResult {
    let mut result = CodeResult::new(0, "", "");
    for bundle in cell.results {
        result = result.with_result(bundle);
    }
    if let Some(error) = cell.error {
        result = result.with_error(error);
    }
    result.with_duration(started.elapsed())
}

fn python_only(scheme: &str, language: &str) -> Result<()> {
    if language == "python" {
        Ok(())
    } else {
        Err(Error::CapabilityNotSupported {
            backend: scheme.to_owned(),
            capability: format!("RUN_CODE({language})"),
        })
    }
}

/// `work`'s output, or `None` once `at` has passed.
async fn with_deadline<T>(at: Instant, work: impl std::future::Future<Output = T>) -> Option<T> {
    let delay = futures_timer::Delay::new(at.saturating_duration_since(Instant::now()));
    futures_lite::future::or(async { Some(work.await) }, async {
        delay.await;
        None
    })
    .await
}
