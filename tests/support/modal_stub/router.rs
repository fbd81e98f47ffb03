//! The command router (`modal.task_command_router.TaskCommandRouter`): each exec runs for
//! real in the sandbox's `local://` sandbox and is never killed by the router (no
//! per-command kill, nothing when a client goes away). Output is kept whole and served
//! from any byte offset; stdin is accepted at the byte offset already taken (a repeated
//! write of bytes already taken is skipped, a gap is refused).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sandboxio::{Command, ExitStatus};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use super::proto::router::task_command_router_server::TaskCommandRouter;
use super::proto::router::{
    TaskExecPollRequest, TaskExecPollResponse, TaskExecStartRequest, TaskExecStartResponse,
    TaskExecStdinWriteRequest, TaskExecStdinWriteResponse, TaskExecStdioFileDescriptor,
    TaskExecStdioReadRequest, TaskExecStdioReadResponse, TaskExecWaitRequest, TaskExecWaitResponse,
    task_exec_poll_response, task_exec_wait_response,
};
use super::{Exec, State, StubSandbox};

pub struct Router(pub Arc<State>);

pub enum StdinOp {
    Data(Vec<u8>),
    Close,
}

/// The largest piece of output one read message carries.
const PIECE: usize = 64 * 1024;

fn gone() -> Status {
    Status::not_found("Task not found or already finished")
}

impl Router {
    /// The live sandbox of `task_id`, if the request's bearer token is its router's.
    fn sandbox<T>(&self, r: &Request<T>, task_id: &str) -> Result<Arc<StubSandbox>, Status> {
        let s = self.0.by_task(task_id).ok_or_else(gone)?;
        let bearer = r.metadata().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
        if !s.takes(bearer, self.0.faults.refuse_router_tokens.load(Ordering::SeqCst)) {
            return Err(Status::unauthenticated("invalid or expired router token"));
        }
        Ok(s)
    }

    fn exec<T>(
        &self,
        r: &Request<T>,
        task_id: &str,
        exec_id: &str,
    ) -> Result<(Arc<StubSandbox>, Arc<Exec>), Status> {
        let s = self.sandbox(r, task_id)?;
        let exec = s
            .execs
            .lock()
            .unwrap()
            .get(exec_id)
            .cloned()
            .ok_or_else(|| Status::not_found("Exec not found"))?;
        Ok((s, exec))
    }
}

/// Runs one exec to its end, holding its `local://` stream (dropping it would kill the
/// process, which the router never does).
async fn pump(
    sandbox: Arc<StubSandbox>,
    exec: Arc<Exec>,
    command: Command,
    mut stdin: mpsc::Receiver<StdinOp>,
) {
    sandbox.running.fetch_add(1, Ordering::SeqCst);
    let mut stream = match sandbox.local.stream(command) {
        Ok(stream) => stream,
        Err(e) => {
            exec.stderr.lock().unwrap().extend_from_slice(format!("{e}\n").as_bytes());
            *exec.exit.lock().unwrap() = Some(Ok(126));
            exec.bump();
            sandbox.running.fetch_sub(1, Ordering::SeqCst);
            return;
        }
    };
    let mut stdin_open = true;
    loop {
        tokio::select! {
            chunk = stream.next_chunk() => match chunk {
                Some(Ok(chunk)) => {
                    let buf = if chunk.stream == sandboxio::exec::StreamKind::Stdout { &exec.stdout } else { &exec.stderr };
                    buf.lock().unwrap().extend_from_slice(&chunk.data);
                    exec.bump();
                }
                _ => break,
            },
            op = stdin.recv(), if stdin_open => match op {
                Some(StdinOp::Data(d)) => { let _ = stream.write_stdin(d).await; }
                Some(StdinOp::Close) | None => { let _ = stream.close_stdin().await; stdin_open = false; }
            },
        }
    }
    let status = stream.wait().await.map(|r| r.status);
    *exec.exit.lock().unwrap() = Some(match status {
        Ok(ExitStatus::Code(c)) => Ok(c),
        Ok(ExitStatus::Signal(s)) => Err(s),
        Ok(_) | Err(_) => Err(9),
    });
    sandbox.running.fetch_sub(1, Ordering::SeqCst);
    sandbox.touch();
    exec.bump();
}

/// Registers exec `m.exec_id` and starts its command (a repeated id starts nothing).
fn begin(s: Arc<StubSandbox>, m: &TaskExecStartRequest) {
    let (tx, rx) = mpsc::channel(16);
    let exec = {
        let mut execs = s.execs.lock().unwrap();
        if execs.contains_key(&m.exec_id) {
            // The same id is the same command: a retried start starts nothing.
            return;
        }
        let exec = Arc::new(Exec {
            argv: m.command_args.clone(),
            stdout: Mutex::new(Vec::new()),
            stderr: Mutex::new(Vec::new()),
            exit: Mutex::new(None),
            changed: tokio::sync::watch::channel(0).0,
            stdin: tx,
            stdin_at: Mutex::new((0, false)),
        });
        execs.insert(m.exec_id.clone(), Arc::clone(&exec));
        exec
    };
    let mut command = Command::new(&m.command_args[0]).args(m.command_args[1..].iter().cloned());
    for (k, v) in &m.env {
        command = command.env(k.clone(), v.clone());
    }
    if let Some(dir) = &m.workdir {
        command = command.cwd(dir.clone());
    }
    tokio::spawn(pump(s, exec, command, rx));
}

type Pieces = Pin<Box<dyn futures_core::Stream<Item = Result<TaskExecStdioReadResponse, Status>> + Send>>;

#[tonic::async_trait]
impl TaskCommandRouter for Router {
    async fn task_exec_poll(
        &self,
        r: Request<TaskExecPollRequest>,
    ) -> Result<Response<TaskExecPollResponse>, Status> {
        let m = r.get_ref().clone();
        let (_, exec) = self.exec(&r, &m.task_id, &m.exec_id)?;
        let exit_status = (*exec.exit.lock().unwrap()).map(|e| match e {
            Ok(c) => task_exec_poll_response::ExitStatus::Code(c),
            Err(s) => task_exec_poll_response::ExitStatus::Signal(s),
        });
        Ok(Response::new(TaskExecPollResponse { exit_status }))
    }

    async fn task_exec_start(
        &self,
        r: Request<TaskExecStartRequest>,
    ) -> Result<Response<TaskExecStartResponse>, Status> {
        let m = r.get_ref().clone();
        let s = self.sandbox(&r, &m.task_id)?;
        if m.command_args.is_empty() || m.exec_id.is_empty() {
            return Err(Status::invalid_argument("command_args and exec_id are required"));
        }
        s.touch();
        self.0.exec_starts.fetch_add(1, Ordering::SeqCst);
        let delay = Duration::from_millis(self.0.faults.delay_next_exec_start_ms.swap(0, Ordering::SeqCst));
        if !delay.is_zero() {
            // Taken: the command starts after the delay whatever the client does (a handler
            // dropped when its client goes away does not stop this task).
            let _ = tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                begin(s, &m);
            })
            .await;
            return Ok(Response::new(TaskExecStartResponse {}));
        }
        begin(s, &m);
        Ok(Response::new(TaskExecStartResponse {}))
    }

    async fn task_exec_stdin_write(
        &self,
        r: Request<TaskExecStdinWriteRequest>,
    ) -> Result<Response<TaskExecStdinWriteResponse>, Status> {
        let m = r.get_ref().clone();
        let (s, exec) = self.exec(&r, &m.task_id, &m.exec_id)?;
        if self
            .0
            .faults
            .refuse_stdin_writes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(Status::unavailable("connection reset before the write was taken"));
        }
        s.touch();
        let fresh = {
            let mut at = exec.stdin_at.lock().unwrap();
            if m.offset > at.0 {
                return Err(Status::invalid_argument(format!("stdin offset {} is past {}", m.offset, at.0)));
            }
            let skip = usize::try_from(at.0 - m.offset).unwrap_or(usize::MAX).min(m.data.len());
            let fresh = m.data[skip..].to_vec();
            if at.1 && !fresh.is_empty() {
                return Err(Status::failed_precondition("stdin is closed"));
            }
            at.0 += fresh.len() as u64;
            let close = m.eof && !at.1;
            at.1 |= m.eof;
            (fresh, close)
        };
        if !fresh.0.is_empty() {
            let _ = exec.stdin.send(StdinOp::Data(fresh.0)).await;
        }
        if fresh.1 {
            let _ = exec.stdin.send(StdinOp::Close).await;
        }
        Ok(Response::new(TaskExecStdinWriteResponse {}))
    }

    type TaskExecStdioReadStream = Pieces;

    async fn task_exec_stdio_read(
        &self,
        r: Request<TaskExecStdioReadRequest>,
    ) -> Result<Response<Pieces>, Status> {
        let m = r.get_ref().clone();
        let (s, exec) = self.exec(&r, &m.task_id, &m.exec_id)?;
        self.0.read_offsets.lock().unwrap().push(m.offset);
        let state = Arc::clone(&self.0);
        let stderr = m.file_descriptor == TaskExecStdioFileDescriptor::Stderr as i32;
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let mut changed = exec.changed.subscribe();
            let mut offset = usize::try_from(m.offset).unwrap_or(usize::MAX);
            let mut sent = 0;
            loop {
                let (piece, ended) = {
                    let buf = if stderr { exec.stderr.lock().unwrap() } else { exec.stdout.lock().unwrap() };
                    let from = offset.min(buf.len());
                    // A read the fault will cut carries at most 4 bytes, so the cuts come
                    // one per piece however the output arrived.
                    let cuts = state.faults.cut_reads_after_a_piece.load(Ordering::SeqCst) > 0;
                    let size = if cuts { 4 } else { PIECE };
                    let piece = buf[from..buf.len().min(from + size)].to_vec();
                    (piece, exec.exit.lock().unwrap().is_some())
                };
                if s.finished().is_some() {
                    let _ = tx.send(Err(gone())).await;
                    return;
                }
                if !piece.is_empty() {
                    offset += piece.len();
                    if tx.send(Ok(TaskExecStdioReadResponse { data: piece })).await.is_err() {
                        return;
                    }
                    sent += 1;
                    // Only a read that delivered something is cut, so the cut shows.
                    let cut_each = state
                        .faults
                        .cut_reads_after_a_piece
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    if sent == 1 && (state.faults.cut_next_read.swap(false, Ordering::SeqCst) || cut_each) {
                        let _ = tx.send(Err(Status::unavailable("stream reset"))).await;
                        return;
                    }
                    continue;
                }
                if ended {
                    return;
                }
                // Woken by new output or the exit; a sandbox ending wakes it too.
                let _ = tokio::time::timeout(Duration::from_millis(200), changed.changed()).await;
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn task_exec_wait(
        &self,
        r: Request<TaskExecWaitRequest>,
    ) -> Result<Response<TaskExecWaitResponse>, Status> {
        let m = r.get_ref().clone();
        let (s, exec) = self.exec(&r, &m.task_id, &m.exec_id)?;
        let mut changed = exec.changed.subscribe();
        loop {
            if s.finished().is_some() {
                return Err(gone());
            }
            if let Some(exit) = *exec.exit.lock().unwrap() {
                if self.0.faults.malformed_wait.load(Ordering::SeqCst) {
                    return Ok(Response::new(TaskExecWaitResponse { exit_status: None }));
                }
                let exit_status = Some(match exit {
                    Ok(c) => task_exec_wait_response::ExitStatus::Code(c),
                    Err(s) => task_exec_wait_response::ExitStatus::Signal(s),
                });
                return Ok(Response::new(TaskExecWaitResponse { exit_status }));
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), changed.changed()).await;
        }
    }
}
