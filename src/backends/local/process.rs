//! Running one command in a fresh set of namespaces with `bwrap`, off the caller's
//! executor.
//!
//! Every `bwrap` is spawned from one long-lived thread: `--die-with-parent` (a parent-death
//! signal) fires when the *thread* that spawned bwrap exits, and short-lived helper threads
//! would kill sandboxes as they retire. Output is read by helper threads into a queue the
//! async side awaits; killing bwrap (its PID-namespace init is bwrap's child, bound to it
//! by the same signal) kills the whole process tree.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command as OsCommand, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use event_listener::Event;

use crate::exec::StreamKind;

/// What the output readers deliver.
#[derive(Debug)]
pub(super) enum Piece {
    Output(StreamKind, Vec<u8>),
    /// Both pipes are closed.
    End,
}

/// A queue of output pieces, filled by reader threads and drained by async code.
#[derive(Debug, Default)]
pub(super) struct Pieces {
    queue: Mutex<VecDeque<Piece>>,
    ready: Event,
}

impl Pieces {
    fn push(&self, piece: Piece) {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).push_back(piece);
        self.ready.notify(usize::MAX);
    }

    pub(super) fn try_pop(&self) -> Option<Piece> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).pop_front()
    }

    pub(super) fn listen(&self) -> event_listener::EventListener {
        self.ready.listen()
    }

    pub(super) async fn pop(&self) -> Piece {
        loop {
            if let Some(p) = self.try_pop() {
                return p;
            }
            let listener = self.listen();
            if let Some(p) = self.try_pop() {
                return p;
            }
            listener.await;
        }
    }
}

/// A running `bwrap`.
#[derive(Debug)]
pub(super) struct Running {
    pub(super) pid: u32,
    child: Arc<Mutex<Option<Child>>>,
    pub(super) stdin: Mutex<Option<ChildStdin>>,
    pub(super) pieces: Arc<Pieces>,
}

type SpawnRequest = (OsCommand, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("sandboxio-local-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("the OS refused to start the local spawner thread");
        Mutex::new(tx)
    })
}

/// Spawns `cmd` (a `bwrap` invocation) from the long-lived spawner thread, with piped
/// stdio, and starts its output readers.
pub(super) fn spawn(mut cmd: OsCommand, pipe_stdin: bool) -> std::io::Result<Running> {
    cmd.stdin(if pipe_stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send((cmd, reply_tx))
        .map_err(|_| std::io::Error::other("the local spawner thread is gone"))?;
    let mut child =
        reply_rx.recv().map_err(|_| std::io::Error::other("the local spawner thread is gone"))??;
    let pieces = Arc::new(Pieces::default());
    let open = Arc::new(Mutex::new(2u8));
    for (stream, reader) in [
        (StreamKind::Stdout, child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>)),
        (StreamKind::Stderr, child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>)),
    ] {
        let (pieces, open) = (Arc::clone(&pieces), Arc::clone(&open));
        let Some(mut reader) = reader else { continue };
        std::thread::Builder::new().name("sandboxio-local-io".into()).spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => pieces.push(Piece::Output(stream, buf[..n].to_vec())),
                }
            }
            let mut left = open.lock().unwrap_or_else(PoisonError::into_inner);
            *left -= 1;
            if *left == 0 {
                pieces.push(Piece::End);
            }
        })?;
    }
    let pid = child.id();
    let stdin = child.stdin.take();
    Ok(Running { pid, child: Arc::new(Mutex::new(Some(child))), stdin: Mutex::new(stdin), pieces })
}

impl Running {
    /// Kills bwrap, and with it the command's whole process tree.
    pub(super) fn kill(&self) {
        if let Some(child) = self.child.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            let _ = child.kill();
        }
    }

    /// Waits for the exit status on a library thread.
    pub(super) async fn wait(&self) -> crate::Result<std::process::ExitStatus> {
        let child = Arc::clone(&self.child);
        crate::runtime::unblock(move || {
            let mut guard = child.lock().unwrap_or_else(PoisonError::into_inner);
            match guard.as_mut() {
                Some(c) => {
                    c.wait().map_err(|e| crate::Error::provider("local", "waiting for bwrap failed", e))
                }
                None => Err(crate::Error::provider(
                    "local",
                    "the process was already reaped",
                    std::io::Error::other("reaped"),
                )),
            }
        })
        .await
    }

    /// Whether bwrap is still running.
    pub(super) fn is_running(&self) -> bool {
        match self.child.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Writes to the command's stdin on a library thread.
    pub(super) async fn write_stdin(&self, data: Vec<u8>) -> crate::Result<()> {
        let stdin = self.stdin.lock().unwrap_or_else(PoisonError::into_inner).take();
        let Some(mut stdin) = stdin else {
            return Err(crate::Error::provider("local", "stdin is closed", std::io::Error::other("closed")));
        };
        let (result, stdin) = crate::runtime::unblock(move || {
            let r = stdin.write_all(&data).and_then(|()| stdin.flush());
            Ok((r, stdin))
        })
        .await?;
        *self.stdin.lock().unwrap_or_else(PoisonError::into_inner) = Some(stdin);
        result.map_err(|e| crate::Error::provider("local", "writing to the command's stdin failed", e))
    }

    /// Closes stdin (end-of-file for the command).
    pub(super) fn close_stdin(&self) {
        drop(self.stdin.lock().unwrap_or_else(PoisonError::into_inner).take());
    }
}
