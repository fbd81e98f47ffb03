//! Commands through the command router, with the semantics sandboxio promises on top of
//! what the router does.
//!
//! The router has no per-command kill: it ends a command only at the `timeout_secs` it was
//! started with, and then only the process it started, never its children. So every command
//! runs under the process-group wrapper ([`WRAPPER`]) with [`MARKER`]`=<exec id>` in its
//! environment, no `timeout_secs` is sent, and a timeout (the adapter's own), a dropped
//! `run` future or a dropped stream runs [`KILL_MARKED`] as a second exec, which kills every
//! process that still carries the marker and the process group of each. A process that
//! clears its environment and starts a session of its own escapes (it ends with the
//! sandbox).
//!
//! Every command gets an end-of-file on stdin (after the caller's bytes, if any): an exec's
//! stdin is otherwise open until its end. A working directory the caller names is checked
//! by a first exec (`[ -d dir ]`), so a missing one is [`Error::NotFound`] naming it as
//! written, whatever the router would say.

use std::sync::Arc;
use std::time::Instant;

use super::PORTAL;
use super::router::{self, Fd, Router};
use crate::backends::remote::kill_guard::{KillFuture, KillOnDrop, KillTarget};
use crate::backends::remote::pgroup::WRAPPER;
pub(crate) use crate::backends::remote::pgroup::{KILL_MARKED, MARKER};
use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult, ExitStatus};
use crate::secret::SecretString;

/// The working directory of a command that names none, and what relative file paths are
/// resolved against: made at create time (`mkdir -p`), as `local://` and `docker://` have
/// theirs.
pub(crate) const WORKDIR: &str = "/workspace";

/// Enters the directory `$1` and drops it from the arguments, before [`WRAPPER`]. The
/// router's own `workdir` field is not used: the shell's `cd` behaves the same in every
/// image and on every router, and the adapter checks a caller's directory first anyway.
const ENTER: &str = r#"cd -- "$1" || exit 125
shift
"#;

/// What every command of one sandbox gets besides its own: the builder's environment and
/// secret environment (never part of the sandbox's definition on Modal's side).
#[derive(Default)]
pub(crate) struct SandboxEnv {
    pub(crate) env: Vec<(String, String)>,
    pub(crate) secrets: Vec<(String, SecretString)>,
}

/// The router's command for `command` as exec `exec_id`: [`ENTER`] the working directory
/// (resolved against [`WORKDIR`]), then the wrapper; the environment sandbox-wide first,
/// the command's own over it, the marker last.
pub(crate) fn router_command(command: &Command, base: &SandboxEnv, exec_id: &str) -> router::Command {
    let dir = crate::path::resolve(WORKDIR, command.working_dir().unwrap_or(WORKDIR));
    let mut argv =
        vec!["/bin/sh".to_owned(), "-c".to_owned(), format!("{ENTER}{WRAPPER}"), "sandboxio".to_owned(), dir];
    argv.extend(command.argv().iter().cloned());
    let mut env = std::collections::BTreeMap::new();
    env.extend(base.env.iter().cloned());
    env.extend(base.secrets.iter().map(|(k, v)| (k.clone(), v.expose_secret().to_owned())));
    env.extend(command.env_vars().iter().cloned());
    env.extend(command.secret_env_vars().iter().map(|(k, v)| (k.clone(), v.expose_secret().to_owned())));
    env.insert(MARKER.to_owned(), exec_id.to_owned());
    router::Command { argv, env: env.into_iter().collect(), workdir: None }
}

/// A plain `sh -c script sandboxio args...` where the image starts it, without the wrapper
/// (the adapter's own helpers: the kill, the working-directory check, file scripts, which
/// take absolute paths).
pub(crate) fn script(text: &str, args: &[&str]) -> router::Command {
    let mut words = vec!["/bin/sh".to_owned(), "-c".to_owned(), text.to_owned(), "sandboxio".to_owned()];
    words.extend(args.iter().map(|a| (*a).to_owned()));
    router::Command { argv: words, env: Vec::new(), workdir: None }
}

/// Makes [`WORKDIR`] (once, at create time).
pub(crate) async fn make_workdir(router: &Router) -> Result<()> {
    match helper(router, &script(r#"mkdir -p -- "$1""#, &[WORKDIR]), None, 0).await? {
        (ExitStatus::Code(0), _, _) => Ok(()),
        (status, _, err) => Err(Error::provider_message(
            super::SCHEME,
            format!(
                "could not make the working directory {WORKDIR} ({status:?}): {}",
                String::from_utf8_lossy(&err.data).trim()
            ),
        )),
    }
}

/// Output of one stream gathered up to a limit (the rest is read and dropped).
pub(crate) struct Capped {
    pub(crate) data: Vec<u8>,
    limit: usize,
    pub(crate) truncated: bool,
}

impl Capped {
    pub(crate) fn new(limit: usize) -> Self {
        Capped { data: Vec::new(), limit, truncated: false }
    }

    fn add(&mut self, piece: &[u8]) {
        let room = self.limit.saturating_sub(self.data.len());
        if piece.len() > room {
            self.truncated = true;
        }
        self.data.extend_from_slice(&piece[..piece.len().min(room)]);
    }
}

/// Feeds `stdin` (none: just the end-of-file) to exec `exec_id`, reads both outputs to
/// their ends into `out` and `err`, and waits for the exit. A failed stdin write is not an
/// error of its own: a command may end without reading its input, and a sandbox that is
/// gone fails the reads and the wait as well.
pub(crate) async fn drive(
    router: &Router,
    exec_id: &str,
    stdin: Option<&[u8]>,
    out: &mut Capped,
    err: &mut Capped,
) -> Result<ExitStatus> {
    let feed = async {
        let mut offset = 0u64;
        for chunk in stdin.unwrap_or_default().chunks(1 << 20) {
            router.write_stdin(exec_id, offset, chunk, false).await?;
            offset += chunk.len() as u64;
        }
        router.write_stdin(exec_id, offset, &[], true).await
    };
    let feed = async {
        if let Err(e) = feed.await {
            tracing::debug!(target: "sandboxio::modal", exec = exec_id, error = %e, "stdin not delivered");
        }
        Ok(())
    };
    let ((), _, _, status) = tokio::try_join!(
        feed,
        router.read(exec_id, Fd::Stdout, 0, |p| out.add(p)),
        router.read(exec_id, Fd::Stderr, 0, |p| err.add(p)),
        router.wait(exec_id),
    )?;
    Ok(status)
}

/// Runs one of the adapter's own helper commands to its end: its exit status, stdout (up
/// to `cap`) and stderr (up to 64 KiB). No marker, no kill: helpers are short.
pub(crate) async fn helper(
    router: &Router,
    command: &router::Command,
    stdin: Option<&[u8]>,
    cap: usize,
) -> Result<(ExitStatus, Capped, Capped)> {
    let exec_id = router.start(command).await?;
    let (mut out, mut err) = (Capped::new(cap), Capped::new(64 * 1024));
    let status = drive(router, &exec_id, stdin, &mut out, &mut err).await?;
    Ok((status, out, err))
}

/// Runs one of the adapter's file scripts (`/bin/sh -c text sandboxio args..`) to its end
/// as a command of its own: under the wrapper, with its marker, and killed with its group
/// when the caller drops the future. A file operation cancelled mid-way would otherwise
/// leave its script (a `cat` waiting for the rest of a write) running until the sandbox ends.
pub(crate) async fn marked_helper(
    router: &Router,
    text: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
    cap: usize,
) -> Result<(ExitStatus, Capped, Capped)> {
    let exec_id = super::client::idempotency_key();
    let mut words: Vec<String> =
        ["/bin/sh", "-c", &format!("{ENTER}{WRAPPER}"), "sandboxio", "/", "/bin/sh", "-c", text, "sandboxio"]
            .iter()
            .map(|w| (*w).to_owned())
            .collect();
    words.extend(args.iter().map(|a| (*a).to_owned()));
    let command =
        router::Command { argv: words, env: vec![(MARKER.to_owned(), exec_id.clone())], workdir: None };
    // Armed before the start, as for a command.
    let mut guard = kill_on_drop(router, &exec_id);
    router.start_as(&exec_id, &command).await?;
    let (mut out, mut err) = (Capped::new(cap), Capped::new(64 * 1024));
    let status = drive(router, &exec_id, stdin, &mut out, &mut err).await?;
    guard.disarm();
    Ok((status, out, err))
}

/// Kills every process of exec `exec_id` through a second exec ([`KILL_MARKED`]).
pub(crate) async fn kill_marked(router: &Router, exec_id: &str) -> Result<()> {
    helper(router, &script(KILL_MARKED, &[exec_id]), None, 0).await.map(drop)
}

/// [`Error::NotFound`] naming `command`'s working directory as written when it is not a
/// directory in the sandbox; nothing to check without one.
pub(crate) async fn check_workdir(router: &Router, command: &Command) -> Result<()> {
    let Some(written) = command.working_dir() else { return Ok(()) };
    let abs = crate::path::resolve(WORKDIR, written);
    match helper(router, &script(r#"[ -d "$1" ]"#, &[&abs]), None, 0).await?.0 {
        ExitStatus::Code(0) => Ok(()),
        _ => Err(Error::not_found(written)),
    }
}

/// One exec of one sandbox, as a kill on drop names it (by its mark, the exec id).
pub(crate) struct Started {
    router: Router,
    exec_id: String,
}

impl KillTarget for Started {
    fn describe(&self) -> String {
        format!("exec {}", self.exec_id)
    }

    fn kill(self) -> KillFuture {
        Box::pin(async move { kill_marked(&self.router, &self.exec_id).await })
    }
}

/// Kills the exec's processes on the portal when dropped armed: a cancelled `run`, a
/// dropped stream, a dropped file operation.
pub(crate) fn kill_on_drop(router: &Router, exec_id: &str) -> KillOnDrop<Started> {
    KillOnDrop::new(&PORTAL, Started { router: router.clone(), exec_id: exec_id.to_owned() })
}

/// Runs `command` to completion (call it inside a portal task).
pub(crate) async fn run(router: Router, base: Arc<SandboxEnv>, command: Command) -> Result<ExecResult> {
    let started = Instant::now();
    check_workdir(&router, &command).await?;
    let exec_id = super::client::idempotency_key();
    // Armed before the start: a start whose reply was lost may still have started it.
    let mut guard = kill_on_drop(&router, &exec_id);
    router.start_as(&exec_id, &router_command(&command, &base, &exec_id)).await?;
    let limit = command.output_limit_bytes();
    let (mut out, mut err) = (Capped::new(limit), Capped::new(limit));
    let drained = drive(&router, &exec_id, command.stdin_bytes(), &mut out, &mut err);
    let ended = match command.timeout_duration() {
        Some(limit) => {
            let Ok(ended) = tokio::time::timeout(limit, drained).await else {
                guard.disarm();
                kill_marked(&router, &exec_id).await?;
                let so_far = result(out, err, ExitStatus::Signal(9), started);
                return Err(Error::execution_timeout(limit, so_far));
            };
            ended
        }
        None => drained.await,
    };
    guard.disarm();
    Ok(result(out, err, ended?, started))
}

fn result(out: Capped, err: Capped, status: ExitStatus, started: Instant) -> ExecResult {
    ExecResult::new(0, out.data, err.data)
        .with_truncated(out.truncated || err.truncated)
        .with_status(status)
        .with_duration(started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_runs_under_the_wrapper_with_its_marker_and_environment() {
        let base = SandboxEnv {
            env: vec![("A".into(), "sandbox".into()), ("B".into(), "sandbox".into())],
            secrets: vec![("S".into(), SecretString::new("hidden".to_owned()))],
        };
        let command = Command::new("echo").arg("hi").env("B", "command").cwd("sub");
        let c = router_command(&command, &base, "ex-1");
        assert_eq!(c.argv[..2], ["/bin/sh", "-c"]);
        assert_eq!(c.argv[2], format!("{ENTER}{WRAPPER}"));
        assert_eq!(c.argv[3..], ["sandboxio", "/workspace/sub", "echo", "hi"]);
        let env: std::collections::BTreeMap<_, _> = c.env.into_iter().collect();
        assert_eq!(env["A"], "sandbox");
        assert_eq!(env["B"], "command", "the command's own value wins");
        assert_eq!(env["S"], "hidden");
        assert_eq!(env[MARKER], "ex-1");
        assert_eq!(c.workdir, None, "the shell enters the directory");
        let absolute = router_command(&Command::new("true").cwd("/etc"), &base, "ex-2");
        assert_eq!(absolute.argv[4], "/etc");
    }

    #[test]
    fn output_past_the_limit_is_dropped_and_flagged() {
        let mut c = Capped::new(4);
        c.add(b"abc");
        assert!(!c.truncated);
        c.add(b"def");
        assert_eq!(c.data, b"abcd");
        assert!(c.truncated);
    }
}
