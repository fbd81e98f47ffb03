//! Commands through the engine's exec API, each in its own process group.
//!
//! Every command runs under [`WRAPPER`], a POSIX `sh` script that starts it with `setsid`
//! (a new session, so a new process group), records the group id in
//! `/tmp/.sandboxio/<key>`, waits for it, and then kills whatever the command left in its
//! group, so a background child holding stdout never keeps a `run()` waiting. A timeout, a
//! dropped future or a terminated stream kills the whole group with a second exec
//! ([`kill_group`]); busybox's `timeout` would kill only the main process (research
//! `docker.md` §F1). A cancel that races the start is caught by a marker file both sides
//! check, so the command is killed whichever runs first.
//!
//! The exit code comes from `inspect_exec` once the output has ended. Output frames are
//! demultiplexed by bollard (`LogOutput::StdOut`/`StdErr`, exact bytes; no TTY is ever
//! used, so binary output is never mistaken for a frame header).

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures_lite::StreamExt as _;
use tokio::io::{AsyncWrite, AsyncWriteExt as _};

use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult, StreamKind};

use super::Shared;
use super::client::{provider, sandbox_error};
use super::rt;

/// What the wrapper writes to stderr, with exit code 126, when the working directory is
/// missing (the command never started, so nothing else is on stderr).
const NO_CWD: &[u8] = b"sandboxio: no such working directory";

/// `sh -c WRAPPER sandboxio-exec <key> <cwd> <argv>...`
const WRAPPER: &str = r#"k=$1; c=$2; shift 2
cd -- "$c" 2>/dev/null || { printf 'sandboxio: no such working directory' >&2; exit 126; }
d=/tmp/.sandboxio
[ -f "$d/$k.cancel" ] && exit 137
exec 3<&0
setsid "$@" <&3 3<&- &
p=$!
exec 3<&-
echo "$p" > "$d/$k"
[ -f "$d/$k.cancel" ] && kill -KILL -"$p" 2>/dev/null
wait "$p"; rc=$?
kill -KILL -"$p" 2>/dev/null
rm -f "$d/$k" "$d/$k.cancel"
exit "$rc""#;

/// `sh -c KILLER sandboxio-kill <key>`: marks the command cancelled, then kills its group.
const KILLER: &str = r#"d=/tmp/.sandboxio; : > "$d/$1.cancel"; [ -f "$d/$1" ] && kill -KILL -"$(cat "$d/$1")" 2>/dev/null; exit 0"#;

type Output =
    Pin<Box<dyn futures_core::Stream<Item = std::result::Result<LogOutput, bollard::errors::Error>> + Send>>;

/// A started exec.
pub(super) struct Launched {
    pub exec_id: String,
    pub output: Output,
    pub input: Pin<Box<dyn AsyncWrite + Send>>,
}

/// `K=V` strings for an exec: the sandbox's secrets and the command's own variables.
/// (The sandbox's plain env is in the container's configuration.)
fn exec_env(shared: &Shared, command: &Command) -> Vec<String> {
    let mut env: Vec<String> =
        shared.secret_env.iter().map(|(k, v)| format!("{k}={}", v.expose_secret())).collect();
    env.extend(command.env_vars().iter().map(|(k, v)| format!("{k}={v}")));
    env.extend(command.secret_env_vars().iter().map(|(k, v)| format!("{k}={}", v.expose_secret())));
    env
}

/// Creates and starts an exec of `argv` as the sandbox's user, attached.
pub(super) async fn start_raw(
    shared: &Shared,
    argv: Vec<String>,
    env: Vec<String>,
    stdin: bool,
) -> Result<Launched> {
    let config = ExecConfig {
        cmd: Some(argv),
        env: Some(env),
        user: shared.user.clone(),
        attach_stdin: Some(stdin),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        ..Default::default()
    };
    let created = shared
        .docker
        .create_exec(&shared.id, config)
        .await
        .map_err(|e| sandbox_error(&shared.id, "creating an exec", e))?;
    let started = shared
        .docker
        .start_exec(&created.id, Some(StartExecOptions { detach: false, tty: false, output_capacity: None }))
        .await
        .map_err(|e| sandbox_error(&shared.id, "starting an exec", e))?;
    match started {
        StartExecResults::Attached { output, input } => Ok(Launched { exec_id: created.id, output, input }),
        StartExecResults::Detached => Err(Error::provider(
            super::SCHEME,
            "the engine started the exec detached",
            std::io::Error::other("no attached stream"),
        )),
    }
}

/// Runs a short internal command (no wrapper) to completion: `(exit code, stdout, stderr)`.
pub(super) async fn run_raw(shared: &Shared, argv: &[&str]) -> Result<(i64, Vec<u8>, Vec<u8>)> {
    let mut launched =
        start_raw(shared, argv.iter().map(|s| (*s).to_owned()).collect(), Vec::new(), false).await?;
    let mut out = Collected::new(usize::MAX);
    drain(&mut launched.output, &mut out, |_, _| {})
        .await
        .map_err(|e| provider("reading an exec's output", e))?;
    let code = exit_code(shared, &launched.exec_id).await?;
    Ok((code, out.stdout, out.stderr))
}

/// Kills the process group of the command started under `key`, waiting for the kill.
pub(super) async fn kill_group(shared: &Shared, key: &str) -> Result<()> {
    run_raw(shared, &["sh", "-c", KILLER, "sandboxio-kill", key]).await.map(|_| ())
}

/// The exit code of a finished exec. The output stream can end a moment before the engine
/// records the exit, so this polls `inspect_exec` until it says the process is done.
pub(super) async fn exit_code(shared: &Shared, exec_id: &str) -> Result<i64> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        let inspected = shared
            .docker
            .inspect_exec(exec_id)
            .await
            .map_err(|e| sandbox_error(&shared.id, "inspecting an exec", e))?;
        if inspected.running != Some(true)
            && let Some(code) = inspected.exit_code
        {
            return Ok(code);
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err(Error::provider(
                super::SCHEME,
                "the engine never reported the exec's exit code",
                std::io::Error::other(format!("exec {exec_id} still running after its output ended")),
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Output kept up to a per-stream cap; the rest is drained and dropped.
pub(super) struct Collected {
    limit: usize,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub truncated: bool,
}

impl Collected {
    pub(super) fn new(limit: usize) -> Self {
        Collected { limit, stdout: Vec::new(), stderr: Vec::new(), truncated: false }
    }

    fn push(&mut self, kind: StreamKind, data: &[u8]) {
        let buf = if kind == StreamKind::Stdout { &mut self.stdout } else { &mut self.stderr };
        let room = self.limit.saturating_sub(buf.len());
        self.truncated |= data.len() > room;
        buf.extend_from_slice(&data[..data.len().min(room)]);
    }
}

/// Reads frames until the stream ends, collecting them and telling `each` about them.
pub(super) async fn drain(
    output: &mut Output,
    out: &mut Collected,
    mut each: impl FnMut(StreamKind, &[u8]),
) -> std::result::Result<(), bollard::errors::Error> {
    while let Some(frame) = output.next().await {
        let (kind, data) = match frame? {
            LogOutput::StdOut { message } | LogOutput::Console { message } => (StreamKind::Stdout, message),
            LogOutput::StdErr { message } => (StreamKind::Stderr, message),
            LogOutput::StdIn { .. } => continue,
        };
        each(kind, &data);
        out.push(kind, &data);
    }
    Ok(())
}

/// Kills a command's process group when the operation running it is dropped before the
/// command ended (the kill runs on the Docker runtime, whatever the caller does next).
pub(super) struct KillOnDrop {
    shared: Arc<Shared>,
    key: String,
    armed: bool,
}

impl KillOnDrop {
    pub(super) fn new(shared: &Arc<Shared>) -> Self {
        KillOnDrop { shared: Arc::clone(shared), key: shared.next_key(), armed: false }
    }

    pub(super) fn key(&self) -> &str {
        &self.key
    }

    pub(super) fn arm(&mut self) {
        self.armed = true;
    }

    pub(super) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.armed {
            let (shared, key) = (Arc::clone(&self.shared), std::mem::take(&mut self.key));
            rt::detach(async move {
                let _ = kill_group(&shared, &key).await;
            });
        }
    }
}

/// Starts `command` under the wrapper. The guard is armed before the start request is sent.
pub(super) async fn launch(
    shared: &Arc<Shared>,
    guard: &mut KillOnDrop,
    command: &Command,
    stdin: bool,
) -> Result<Launched> {
    shared.check_alive()?;
    let cwd = crate::path::resolve(&shared.workdir, command.working_dir().unwrap_or("."));
    let mut argv: Vec<String> =
        vec!["sh".into(), "-c".into(), WRAPPER.into(), "sandboxio-exec".into(), guard.key().to_owned(), cwd];
    argv.extend(command.argv().iter().cloned());
    guard.arm();
    start_raw(shared, argv, exec_env(shared, command), stdin).await
}

/// Whether a finished wrapper reports a missing working directory.
pub(super) fn missing_cwd(code: i64, stderr: &[u8]) -> bool {
    code == 126 && stderr == NO_CWD
}

/// `run`: to completion, with the timeout and output cap of `command`.
pub(super) async fn run(shared: Arc<Shared>, command: Command) -> Result<ExecResult> {
    let started = Instant::now();
    let mut guard = KillOnDrop::new(&shared);
    let stdin = command.stdin_bytes().map(<[u8]>::to_vec);
    let Launched { exec_id, mut output, mut input } =
        launch(&shared, &mut guard, &command, stdin.is_some()).await?;
    // Written beside the drain, so a command that writes before reading never deadlocks.
    let writer = tokio::spawn(async move {
        if let Some(data) = stdin {
            // A command that exits without reading all its stdin is not an error.
            let _ = input.write_all(&data).await;
            let _ = input.shutdown().await;
        }
        input
    });
    let mut out = Collected::new(command.output_limit_bytes());
    let drained = match command.timeout_duration() {
        Some(limit) => tokio::time::timeout(limit, drain(&mut output, &mut out, |_, _| {})).await.ok(),
        None => Some(drain(&mut output, &mut out, |_, _| {}).await),
    };
    let Some(drained) = drained else {
        kill_group(&shared, guard.key()).await?;
        guard.disarm();
        // Keep what the command wrote before it was killed.
        let _ = tokio::time::timeout(Duration::from_secs(2), drain(&mut output, &mut out, |_, _| {})).await;
        writer.abort();
        let partial = ExecResult::new(137, out.stdout, out.stderr)
            .with_truncated(out.truncated)
            .with_duration(started.elapsed());
        return Err(Error::ExecutionTimeout {
            timeout: command.timeout_duration().unwrap_or_default(),
            partial: Box::new(partial),
        });
    };
    drained.map_err(|e| sandbox_error(&shared.id, "reading the command's output", e))?;
    let code = exit_code(&shared, &exec_id).await?;
    guard.disarm();
    writer.abort();
    if missing_cwd(code, &out.stderr) {
        return Err(Error::NotFound {
            path: crate::path::resolve(&shared.workdir, command.working_dir().unwrap_or(".")),
        });
    }
    shared.check_alive()?;
    Ok(ExecResult::new(i32::try_from(code).unwrap_or(-1), out.stdout, out.stderr)
        .with_truncated(out.truncated)
        .with_duration(started.elapsed()))
}
