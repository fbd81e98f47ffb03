//! Commands through the engine's exec API, each marked by a group of its own.
//!
//! **The mark.** Every exec sandboxio starts for a command runs as the sandbox's user with
//! a primary group id of its own (`<user>:<gid>`, a random gid in [`GID_RANGE`], no
//! supplementary groups). With every capability dropped and `no-new-privileges`, no process
//! can change its group ids (that needs `CAP_SETGID` or a set-group-id program): whatever a
//! command starts, whether it calls `setsid`, double-forks or renames itself, keeps that gid
//! until it dies, and nothing else carries it. The kernel also refuses `ptrace` and
//! `/proc/<pid>/{environ,mem,fd}` between processes whose gids differ, so one command's
//! processes (and their environment: [`Command::secret_env`]) are out of every other
//! command's reach.
//!
//! **The end of a command.** [`WRAPPER_BODY`], a POSIX `sh` script, reads a header from stdin
//! (the secrets, then `go`), runs the command, and once the main process has exited kills
//! every other process carrying its gid ([`SWEEP`]), so a background child never keeps a
//! `run()` waiting. Then the host checks, through the engine's `top` (the host's `ps` over
//! the container's cgroup: nothing the sandboxed code can write or forge), that no process
//! with that gid is left; if one is (the code fought the wrapper), the command is killed as
//! on a timeout.
//!
//! **Timeouts, dropped futures and terminated streams** ([`kill_command`]): a second exec,
//! as the sandbox's user but outside the command's group, kills every process with the
//! command's gid, and `top` verifies it. A killer that cannot start (at the pids limit the
//! engine may fail to start any process in the container), hangs or is fought off (the
//! command may signal it: same uid) is tried again, a few times; if the command still
//! lives, the whole sandbox is removed through the engine (which needs no process inside),
//! and the operation reports [`Error::SandboxGone`] rather than a timeout. The gid is held
//! by the host, never read back from the sandbox: the kill path depends on nothing the sandboxed code can write. A cancel that
//! races the start cannot leak either: the wrapper runs nothing until it has read the whole
//! header, which is only sent once the exec has started, and once it is sent the kill waits
//! for the engine to report the exec started before it kills.
//!
//! The exit code comes from `inspect_exec` once the output has ended. Output frames are
//! demultiplexed by bollard (`LogOutput::StdOut`/`StdErr`, exact bytes; no TTY is ever
//! used, so binary output is never mistaken for a frame header).

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures_lite::StreamExt as _;
use tokio::io::{AsyncWrite, AsyncWriteExt as _};

use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult, StreamKind};

pub(super) use crate::sandboxd::session::Collected;

use crate::backends::docker::client::{provider, sandbox_error, status};
use crate::backends::docker::rt;
use crate::backends::docker::sandbox::Shared;

/// What the wrapper writes to stderr, with exit code 126, when the working directory is
/// missing (the command never started, so nothing else is on stderr).
const NO_CWD: &[u8] = b"sandboxio: no such working directory";

/// The gids commands run with: far above any group an image defines, below runc's limit
/// (2^31 - 1), and away from the supervisor's id ([`SUPERVISOR_ID`](crate::backends::docker::SUPERVISOR_ID)).
pub(crate) const GID_RANGE: std::ops::Range<u32> = 1_000_000_000..2_000_000_000;

/// A POSIX `sh` function: `__sbx_sweep <gid>` sends `SIGKILL` to every process whose real
/// gid is `<gid>` (but the calling shell), and repeats until a pass finds none (a command
/// forking as it dies is caught by the next pass); fails after 200 passes. Shell builtins
/// only (`read`, `kill`, globbing), so it needs no free pid. A zombie is killed too but not
/// counted as left (it is dead already and PID 1 reaps it), unless it still has threads: a
/// thread-group leader that exited while its threads run shows `State: Z` and is alive.
const SWEEP: &str = r#"__sbx_sweep() {
  __sbx_i=0
  while [ "$__sbx_i" -lt 200 ]; do
    __sbx_i=$((__sbx_i + 1)); __sbx_n=0
    for __sbx_p in /proc/[0-9]*; do
      __sbx_p=${__sbx_p#/proc/}
      [ "$__sbx_p" = "$$" ] && continue
      __sbx_z=; __sbx_m=; __sbx_t=1
      while read -r __sbx_k __sbx_r __sbx_x; do
        case $__sbx_k in
          State:) [ "$__sbx_r" = Z ] && __sbx_z=1 ;;
          Gid:) [ "$__sbx_r" = "$1" ] || break; __sbx_m=1 ;;
          Threads:) __sbx_t=$__sbx_r; break ;;
        esac
      done 2>/dev/null < "/proc/$__sbx_p/status"
      if [ -n "$__sbx_m" ]; then
        kill -KILL "$__sbx_p" 2>/dev/null
        { [ -z "$__sbx_z" ] || [ "$__sbx_t" -gt 1 ]; } && __sbx_n=$((__sbx_n + 1))
      fi
    done
    [ "$__sbx_n" = 0 ] && return 0
  done
  return 1
}
"#;

/// `sh -c WRAPPER sandboxio-exec <gid> <cwd> <core: 0|1> <argv>...`, run as `<user>:<gid>`.
///
/// Stdin starts with the header: one line per secret, `NAME <value as \0ooo escapes>`, then
/// the line `go`; the rest of stdin is the command's. Secrets so never appear in the exec's
/// configuration (which the engine logs at debug level, and `docker inspect` of the exec
/// shows). A header cut short (the caller went away before the start) runs nothing.
/// `<core>` 1 (a command with secrets of its own) forbids core dumps, whose files the
/// sandbox's other commands could read. The wrapper's own stderr goes to `/dev/null` while
/// the command runs (the command keeps the exec's, through a subshell that `exec`s it, so
/// that the redirection is the child's): the shell's report of a signal death (`Killed`)
/// is not the command's output.
const WRAPPER_BODY: &str = r#"__sbx_g=$1; __sbx_c=$2; __sbx_o=$3; shift 3
__sbx_go=
while IFS= read -r __sbx_l; do
  [ "$__sbx_l" = go ] && { __sbx_go=1; break; }
  __sbx_v=$(printf '%bx' "${__sbx_l#* }"); export "${__sbx_l%% *}=${__sbx_v%x}"
done
[ -n "$__sbx_go" ] || exit 125
unset __sbx_l __sbx_v __sbx_go
[ "$__sbx_o" = 1 ] && ulimit -c 0
cd -- "$__sbx_c" 2>/dev/null || { printf 'sandboxio: no such working directory' >&2; exit 126; }
exec 5>&2 2>/dev/null
("$@") 2>&5 5>&-
__sbx_rc=$?
__sbx_sweep "$__sbx_g"
exit "$__sbx_rc""#;

/// `sh -c KILLER sandboxio-kill <gid>`, run as the sandbox's user outside the command's
/// group: kills every process of the command. Exits 0 once none is left.
const KILLER_BODY: &str = r#"__sbx_sweep "$1""#;

fn wrapper() -> String {
    format!("{SWEEP}{WRAPPER_BODY}")
}

fn killer() -> String {
    format!("{SWEEP}{KILLER_BODY}")
}

/// How long a killer exec may take before it counts as fought off.
const KILLER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the kill waits for the engine to report a sent exec started.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

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
/// container's configuration; secrets travel on stdin, see [`WRAPPER_BODY`]).
fn exec_env(command: &Command) -> Vec<String> {
    command.env_vars().iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// The secret lines of the header the wrapper reads first from stdin (see [`WRAPPER_BODY`]),
/// or `None` without secrets.
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
        StartExecResults::Detached => Err(Error::provider_message(
            super::SCHEME,
            "the engine started the exec detached, with no attached stream",
        )),
    }
}

/// Runs a short internal command (no wrapper) to completion as the sandbox's user:
/// `(exit code, stdout, stderr)`.
pub(super) async fn run_raw(shared: &Shared, argv: &[&str]) -> Result<(i64, Vec<u8>, Vec<u8>)> {
    run_raw_as(shared, Some(shared.exec_user()), argv).await
}

/// [`run_raw`] as `user`.
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

/// What the engine's `top` says of a command's processes.
enum Seen {
    /// No process carries the command's gid.
    None,
    /// Some do: their host pids.
    Some(Vec<String>),
    /// The container is gone (so is the command).
    Gone,
    /// `top` failed (for example no `ps` on the engine's host): unknown.
    Unknown,
}

/// Lists, through the engine's `top` (the host's `ps` over the container's cgroup), the
/// processes whose real gid is `gid`: a view the sandboxed code can neither write nor fake.
/// Under gVisor (whose processes the host's `ps` does not see) or user-namespace remapping
/// (which shifts the gids the host sees), the view is [`Seen::Unknown`].
async fn seen(shared: &Shared, gid: u32) -> Seen {
    if !shared.host_view.load(std::sync::atomic::Ordering::Acquire) {
        return Seen::Unknown;
    }
    // Every process, so that `ps` always matches something (it fails when nothing does);
    // the engine keeps the container's.
    let options = bollard::query_parameters::TopOptions { ps_args: "-eo pid,rgid".into() };
    match shared.docker.top_processes(&shared.id, Some(options)).await {
        Ok(top) => {
            let gid = gid.to_string();
            let pids: Vec<String> = top
                .processes
                .unwrap_or_default()
                .into_iter()
                .filter(|p| p.get(1) == Some(&gid))
                .filter_map(|p| p.into_iter().next())
                .collect();
            if pids.is_empty() { Seen::None } else { Seen::Some(pids) }
        }
        Err(e) if matches!(status(&e), Some(404 | 409)) => Seen::Gone,
        Err(e) => {
            tracing::warn!(sandbox = %shared.id, error = %e, "cannot list a command's processes through top");
            Seen::Unknown
        }
    }
}

/// Waits (up to [`SETTLE_TIMEOUT`]) until the engine reports exec `exec_id` started or
/// ended: a start request already answered can still be starting the process.
async fn settle(shared: &Shared, exec_id: &str) {
    let started = Instant::now();
    while started.elapsed() < SETTLE_TIMEOUT {
        match shared.docker.inspect_exec(exec_id).await {
            Ok(i) if i.running == Some(true) || i.exit_code.is_some() => return,
            Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(_) => return,
        }
    }
}

/// Checks, after a command's main process ended, that nothing of it is left (the wrapper
/// killed the rest); kills what is ([`kill_command`]).
///
/// # Errors
///
/// [`Error::SandboxGone`] when the container is gone (it died under the command).
pub(super) async fn end_command(shared: &Shared, gid: u32) -> Result<()> {
    match seen(shared, gid).await {
        Seen::None | Seen::Unknown => Ok(()),
        Seen::Gone => Err(Error::SandboxGone {
            id: shared.id.clone(),
            message: "its container ended under the command".into(),
        }),
        Seen::Some(pids) => {
            tracing::warn!(sandbox = %shared.id, ?pids, "a command left processes its wrapper did not end; killing them");
            kill_command(shared, gid, None).await
        }
    }
}

/// Whether the container died under a command that ended with `code`: a container killed
/// or removed (through another handle, say) kills every process in it, which looks like a
/// signal death (`code` >= 128) to the exec. The engine may record the container's end a
/// moment after the exec's, so this watches for 250 ms before saying no.
pub(super) async fn died_under(shared: &Shared, code: i64) -> bool {
    use bollard::models::ContainerStateStatusEnum as State;
    if code < 128 {
        return false;
    }
    let started = Instant::now();
    loop {
        match shared.docker.inspect_container(&shared.id, None).await {
            Err(e) if matches!(status(&e), Some(404)) => return true,
            Ok(inspected) => {
                let state = inspected.state.unwrap_or_default();
                if state.running != Some(true)
                    || matches!(state.status, Some(State::REMOVING | State::EXITED | State::DEAD))
                {
                    return true;
                }
            }
            Err(_) => return false,
        }
        if started.elapsed() > Duration::from_millis(250) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// [`Error::SandboxGone`] for a container that ended under a command.
pub(super) fn gone_under(shared: &Shared) -> Error {
    Error::SandboxGone { id: shared.id.clone(), message: "its container ended under the command".into() }
}

/// How many times the killer exec is tried before the sandbox is removed instead. An exec
/// start the engine refuses is often transient: at the pids limit the runtime's own start-up
/// fails only when it needs a thread after joining the container's cgroup (about one start
/// in four, in the adversarial suite), so a few tries a moment apart usually get through.
const KILLER_TRIES: u32 = 4;

/// The pause between two killer tries.
const KILLER_PAUSE: Duration = Duration::from_millis(100);

/// Why a sandbox was removed when a command's processes could not be ended: what
/// [`Error::SandboxGone`] says from then on.
pub(super) const REMOVED_UNKILLABLE: &str = "a command's processes could not be ended (its killer could not start, \
     for example at the pids limit, or was fought off), so the sandbox was removed";

/// Kills every process of the command running with `gid` (started by exec `exec_id`, when
/// known), and verifies it through `top`. A killer that cannot start, hangs, or leaves a
/// process alive is tried again ([`KILLER_TRIES`] in all); then the whole sandbox is
/// removed instead, through the engine alone (no process in the container needed): a
/// timeout or a cancel never leaves the command running.
///
/// # Errors
///
/// [`Error::SandboxGone`] when the sandbox had to be removed (or was already gone), so that
/// the operation that asked for the kill does not report a sandbox that no longer exists as
/// a plain timeout.
pub(super) async fn kill_command(shared: &Shared, gid: u32, exec_id: Option<&str>) -> Result<()> {
    if let Some(exec_id) = exec_id {
        settle(shared, exec_id).await;
    }
    let script = killer();
    let gid_arg = gid.to_string();
    for attempt in 0..KILLER_TRIES {
        if attempt > 0 {
            tokio::time::sleep(KILLER_PAUSE).await;
        }
        let killed = tokio::time::timeout(
            KILLER_TIMEOUT,
            run_raw(shared, &["sh", "-c", &script, "sandboxio-kill", &gid_arg]),
        )
        .await;
        let killer_ok = match &killed {
            Ok(Ok((0, _, _))) => true,
            Ok(Err(Error::SandboxGone { .. })) => return Err(gone_under(shared)),
            _ => false,
        };
        match seen(shared, gid).await {
            Seen::None => return Ok(()),
            Seen::Gone => return Err(gone_under(shared)),
            // Without `top`, the killer's word is all there is.
            Seen::Unknown if killer_ok => return Ok(()),
            Seen::Unknown | Seen::Some(_) => {}
        }
    }
    tracing::warn!(sandbox = %shared.id, gid, "cannot end a command's processes; removing the sandbox");
    shared.set_gone_reason(REMOVED_UNKILLABLE);
    crate::backends::docker::sandbox::kill(shared).await?;
    Err(Error::SandboxGone { id: shared.id.clone(), message: REMOVED_UNKILLABLE.into() })
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
            return Err(Error::provider_message(
                super::SCHEME,
                format!(
                    "the engine never reported the exec's exit code: exec {exec_id} still running after its output ended"
                ),
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
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

/// A command's gid and, once started, its exec; kills the command when the operation
/// running it is dropped before the command ended (the kill runs on the Docker runtime,
/// whatever the caller does next).
pub(super) struct KillOnDrop {
    shared: Arc<Shared>,
    gid: u32,
    /// The exec, once its start was answered (shared with a stream's `terminate`).
    exec: Arc<Mutex<Option<String>>>,
    armed: bool,
}

impl KillOnDrop {
    pub(super) fn new(shared: &Arc<Shared>) -> Self {
        KillOnDrop { shared: Arc::clone(shared), gid: shared.next_gid(), exec: Arc::default(), armed: false }
    }

    /// The command's gid, chosen by the host and held only here.
    pub(super) fn gid(&self) -> u32 {
        self.gid
    }

    /// The command's exec id, once started.
    pub(super) fn exec_slot(&self) -> Arc<Mutex<Option<String>>> {
        Arc::clone(&self.exec)
    }

    pub(super) fn arm(&mut self) {
        self.armed = true;
    }

    pub(super) fn disarm(&mut self) {
        self.armed = false;
    }
}

/// The exec id in `slot`, if any.
pub(super) fn exec_of(slot: &Mutex<Option<String>>) -> Option<String> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.armed {
            let (shared, gid, exec) = (Arc::clone(&self.shared), self.gid, exec_of(&self.exec));
            rt::detach(async move {
                let _ = kill_command(&shared, gid, exec.as_deref()).await;
            });
        }
    }
}

/// Starts `command` under the wrapper, as the sandbox's user with the guard's gid. The guard
/// is armed before the start request is sent. `with_secrets`: pass the sandbox's and the
/// command's secrets (user commands; sandboxio's own file execs get none). Stdin is always
/// attached (the header travels on it); `stdin` says whether the caller feeds it further.
pub(super) async fn launch(
    shared: &Arc<Shared>,
    guard: &mut KillOnDrop,
    command: &Command,
    stdin: bool,
    with_secrets: bool,
) -> Result<Launched> {
    let _ = stdin;
    shared.check_alive()?;
    if with_secrets
        && !command.secret_env_vars().is_empty()
        && shared.root_user.load(std::sync::atomic::Ordering::Acquire)
    {
        // A root sandbox user can rewrite the image's `sh` (no capability stops uid 0 from
        // writing the files it owns), and so run code inside a later command's wrapper,
        // which holds that command's secrets: they cannot be kept from other commands.
        return Err(Error::CapabilityNotSupported {
            backend: super::SCHEME.into(),
            capability: "COMMAND_SECRETS".into(),
        });
    }
    let cwd = crate::path::resolve(&shared.workdir, command.working_dir().unwrap_or("."));
    let mut header =
        if with_secrets { secrets_block(shared, command)?.unwrap_or_default() } else { Vec::new() };
    header.extend_from_slice(b"go\n");
    let own_secrets = if with_secrets && !command.secret_env_vars().is_empty() { "1" } else { "0" };
    let gid = guard.gid().to_string();
    let script = wrapper();
    let mut argv: Vec<String> = ["sh", "-c", &script, "sandboxio-exec", &gid, &cwd, own_secrets]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    argv.extend(command.argv().iter().cloned());
    let user = format!("{}:{gid}", shared.exec_user_name());
    guard.arm();
    let mut launched = start_raw(shared, Some(user), argv, exec_env(command), true).await?;
    *guard.exec.lock().unwrap_or_else(PoisonError::into_inner) = Some(launched.exec_id.clone());
    launched
        .input
        .write_all(&header)
        .await
        .map_err(|e| Error::provider(super::SCHEME, "starting the command", e))?;
    Ok(launched)
}

/// Whether a finished wrapper reports a missing working directory.
pub(super) fn missing_cwd(code: i64, stderr: &[u8]) -> bool {
    code == 126 && is_no_cwd(stderr)
}

/// Whether `stderr` is the wrapper's report of a missing working directory.
pub(super) fn is_no_cwd(stderr: &[u8]) -> bool {
    stderr == NO_CWD
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
        let killed = kill_command(&shared, guard.gid(), exec_of(&guard.exec).as_deref()).await;
        guard.disarm();
        // A sandbox removed to end the command is `SandboxGone`, not a timeout.
        killed?;
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
    // The output's end means the wrapper has swept the command's group (or was fought off,
    // which `top` sees): the exit code and the check go to the engine at once, not one
    // after the other (one round trip less per command: issue #28).
    let (code, ended) = tokio::join!(exit_code(&shared, &exec_id), end_command(&shared, guard.gid()));
    let code = code?;
    guard.disarm();
    ended?;
    if died_under(&shared, code).await {
        return Err(gone_under(&shared));
    }
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
