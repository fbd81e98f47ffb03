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

/// `sh -c WRAPPER sandboxio-exec <key> <cwd> <secrets: 0|1> <argv>...`
///
/// With secrets, stdin starts with one line per secret, `NAME <value as \0ooo escapes>`,
/// then an empty line; the rest of stdin is the command's. Secrets so never appear in the
/// exec's configuration (which the engine logs at debug level, and `docker inspect` of the
/// exec shows).
const WRAPPER: &str = r#"__sbx_k=$1; __sbx_c=$2; __sbx_s=$3; shift 3
if [ "$__sbx_s" = 1 ]; then
  while IFS= read -r __sbx_l && [ -n "$__sbx_l" ]; do
    __sbx_v=$(printf '%bx' "${__sbx_l#* }"); export "${__sbx_l%% *}=${__sbx_v%x}"
  done
  unset __sbx_l __sbx_v
fi
cd -- "$__sbx_c" 2>/dev/null || { printf 'sandboxio: no such working directory' >&2; exit 126; }
__sbx_d=/tmp/.sandboxio
[ -f "$__sbx_d/$__sbx_k.cancel" ] && exit 137
exec 3<&0
setsid -- "$@" <&3 3<&- &
__sbx_p=$!
exec 3<&-
echo "$__sbx_p" > "$__sbx_d/$__sbx_k"
[ -f "$__sbx_d/$__sbx_k.cancel" ] && kill -KILL -"$__sbx_p" 2>/dev/null
wait "$__sbx_p"; __sbx_rc=$?
kill -KILL -"$__sbx_p" 2>/dev/null
rm -f "$__sbx_d/$__sbx_k" "$__sbx_d/$__sbx_k.cancel"
exit "$__sbx_rc""#;

/// `sh -c KILLER sandboxio-kill <key>`: marks the command cancelled, then kills its group.
/// Only shell builtins after the marker (no `cat`), so it works when the sandbox has no
/// pids left. Exits 0 when the group is gone (or never started), 1 when it survived.
const KILLER: &str = r#"d=/tmp/.sandboxio; : > "$d/$1.cancel"
[ -f "$d/$1" ] || exit 0
read -r p < "$d/$1" || exit 0
case $p in ''|*[!0-9]*) exit 0 ;; esac
kill -KILL -"$p" 2>/dev/null || ! kill -0 -"$p" 2>/dev/null"#;

type Output =
    Pin<Box<dyn futures_core::Stream<Item = std::result::Result<LogOutput, bollard::errors::Error>> + Send>>;

/// A started exec.
pub(super) struct Launched {
    pub exec_id: String,
    pub output: Output,
    pub input: Pin<Box<dyn AsyncWrite + Send>>,
    /// Whether the exec's stdin is attached (it then needs a close for end-of-file).
    pub stdin_attached: bool,
}

/// `K=V` strings for an exec: the command's plain variables (the sandbox's are in the
/// container's configuration; secrets travel on stdin, see [`WRAPPER`]).
fn exec_env(command: &Command) -> Vec<String> {
    command.env_vars().iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// The secrets block [`WRAPPER`] reads first from stdin, or `None` without secrets.
pub(super) fn secrets_block(shared: &Shared, command: &Command) -> Result<Option<Vec<u8>>> {
    let secrets: Vec<&(String, crate::secret::SecretString)> =
        shared.secret_env.iter().chain(command.secret_env_vars()).collect();
    if secrets.is_empty() {
        return Ok(None);
    }
    let mut block = Vec::new();
    for (name, value) in secrets {
        // The wrapper `export`s secrets, so their names must be shell names; `__sbx_` is
        // the wrapper's own.
        let shell_name = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with("__sbx_");
        if !shell_name {
            return Err(Error::invalid_input(format!(
                "secret env name {name:?}: docker:// needs letters, digits and '_' (not starting with a digit or __sbx_)"
            )));
        }
        block.extend_from_slice(name.as_bytes());
        block.push(b' ');
        for byte in value.expose_secret().bytes() {
            block.extend_from_slice(format!("\\0{byte:03o}").as_bytes());
        }
        block.push(b'\n');
    }
    block.push(b'\n');
    Ok(Some(block))
}

/// Creates and starts an exec of `argv` as the sandbox's user, attached.
pub(super) async fn start_raw(
    shared: &Shared,
    user: Option<String>,
    argv: Vec<String>,
    env: Vec<String>,
    stdin: bool,
) -> Result<Launched> {
    let config = ExecConfig {
        cmd: Some(argv),
        env: Some(env),
        user,
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
        StartExecResults::Attached { output, input } => {
            Ok(Launched { exec_id: created.id, output, input, stdin_attached: stdin })
        }
        StartExecResults::Detached => Err(Error::provider(
            super::SCHEME,
            "the engine started the exec detached",
            std::io::Error::other("no attached stream"),
        )),
    }
}

/// Runs a short internal command (no wrapper) to completion: `(exit code, stdout, stderr)`.
pub(super) async fn run_raw(shared: &Shared, argv: &[&str]) -> Result<(i64, Vec<u8>, Vec<u8>)> {
    run_raw_as(shared, shared.user.clone(), argv).await
}

/// [`run_raw`] as `user` (`Some("0")`: root, for sandboxio's own processes).
pub(super) async fn run_raw_as(
    shared: &Shared,
    user: Option<String>,
    argv: &[&str],
) -> Result<(i64, Vec<u8>, Vec<u8>)> {
    let mut launched =
        start_raw(shared, user, argv.iter().map(|s| (*s).to_owned()).collect(), Vec::new(), false).await?;
    let mut out = Collected::new(usize::MAX);
    drain(&mut launched.output, &mut out, |_, _| {})
        .await
        .map_err(|e| provider("reading an exec's output", e))?;
    let code = exit_code(shared, &launched.exec_id).await?;
    Ok((code, out.stdout, out.stderr))
}

/// Kills the process group of the command started under `key`, waiting for the kill. If
/// the group cannot be killed (the kill exec cannot start, say, because the command used
/// up the pids limit), the whole sandbox is removed instead: a timeout or a cancel never
/// leaves the command running.
pub(super) async fn kill_group(shared: &Shared, key: &str) -> Result<()> {
    match run_raw(shared, &["sh", "-c", KILLER, "sandboxio-kill", key]).await {
        Ok((0, _, _)) | Err(Error::SandboxGone { .. }) => Ok(()),
        failed => {
            tracing::warn!(sandbox = %shared.id, ?failed, "cannot kill a command's process group; removing the sandbox");
            super::kill(shared).await.map(drop)
        }
    }
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

/// Aborts a helper task when its owner goes away (a dropped operation included).
pub(super) struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
/// `with_secrets`: pass the sandbox's and the command's secrets (user commands; sandboxio's
/// own file execs get none).
pub(super) async fn launch(
    shared: &Arc<Shared>,
    guard: &mut KillOnDrop,
    command: &Command,
    stdin: bool,
    with_secrets: bool,
) -> Result<Launched> {
    shared.check_alive()?;
    let cwd = crate::path::resolve(&shared.workdir, command.working_dir().unwrap_or("."));
    let secrets = if with_secrets { secrets_block(shared, command)? } else { None };
    let flag = if secrets.is_some() { "1" } else { "0" };
    let mut argv: Vec<String> = ["sh", "-c", WRAPPER, "sandboxio-exec", guard.key(), &cwd, flag]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    argv.extend(command.argv().iter().cloned());
    guard.arm();
    let mut launched =
        start_raw(shared, shared.user.clone(), argv, exec_env(command), stdin || secrets.is_some()).await?;
    if let Some(block) = secrets {
        launched
            .input
            .write_all(&block)
            .await
            .map_err(|e| Error::provider(super::SCHEME, "passing secrets to the command", e))?;
    }
    Ok(launched)
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
    let Launched { exec_id, mut output, mut input, stdin_attached } =
        launch(&shared, &mut guard, &command, stdin.is_some(), true).await?;
    // Written beside the drain, so a command that writes before reading never deadlocks.
    let writer = AbortOnDrop(tokio::spawn(async move {
        if let Some(data) = stdin {
            // A command that exits without reading all its stdin is not an error.
            let _ = input.write_all(&data).await;
        }
        if stdin_attached {
            let _ = input.shutdown().await;
        }
        // Keep the write half until the exec ends.
        std::future::pending::<()>().await;
    }));
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
        drop(writer);
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
    drop(writer);
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
