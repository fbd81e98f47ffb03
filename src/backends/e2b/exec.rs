//! Commands on envd, with the semantics sandboxio promises on top of what envd does.
//!
//! envd kills only the process it started, and only when `Connect-Timeout-Ms` passes; it
//! kills nothing when the client goes away. So every command runs under [`WRAPPER`], a
//! POSIX `sh` that makes it, in place, the leader of a process group of its own (`exec
//! setsid`, or plain `exec` where the shell already leads one); a timeout, a dropped future
//! or a dropped stream runs [`KILL_TREE`] as a second process, which kills that group and
//! every process group whose leader is a child of the command, then the command. No
//! `Connect-Timeout-Ms` is sent: the timeout is the adapter's, so the command is still
//! alive (and its children findable) when the group is killed. A command whose pid is not
//! known yet (dropped while its start was on the way) is killed by its mark instead
//! ([`KILL_MARKED`], whose tombstone also stops a start that arrives after it).
//!
//! The command keeps the pid envd started, so envd reports its exact status: a signal
//! death as a signal (`ExitStatus::Signal`), an `exit(137)` as code 137.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::envd::{Envd, EventStream};
use super::process::{self, ProcessEvent};
use super::{PORTAL, SCHEME};
use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult, ExitStatus, OutputChunk, StreamKind};
use crate::secret::SecretString;

use crate::backends::remote::kill_guard::{KillFuture, KillOnDrop, KillTarget};
/// The process-group wrapper every command runs under (see its documentation).
pub(crate) use crate::backends::remote::pgroup::WRAPPER;
use crate::backends::remote::pgroup::{KILL_MARKED, MARKER};

/// Kills every process group led by a child of pid `$1`, process group `$1` (the
/// command's, when it leads it), then `$1` itself. The children's groups are found first,
/// while `$1` lives: once it is dead its children belong to another parent and can no
/// longer be found by their parent (killing `$1`'s group first let them live on). Reads only
/// `/proc/<pid>/stat`, whose fields are taken after the last `) ` of the whole file: the
/// command name before them is the process's own choice and may hold `) ` and a newline
/// (read line by line, it forged the parent and group fields). `kill -9 -PGID`, never
/// `kill -KILL -- -PGID`: dash's and busybox's `kill` refuse the `--`, and the groups lived
/// on. Group 0 or 1 is never signalled (`kill -9 -1` is every process the user may signal).
/// A child that makes a group of its own after the search escapes until the sandbox ends.
pub(crate) const KILL_TREE: &str = r#"p=$1
groups=""
for d in /proc/[0-9]*; do
  st=$(tr '\n' ' ' < "$d/stat" 2>/dev/null) || continue
  set -- ${st##*) }
  [ "$2" = "$p" ] || continue
  case $3 in ''|*[!0-9]*|0|1) ;; *) groups="$groups $3" ;; esac
done
kill -9 "-$p" 2>/dev/null
for g in $groups; do kill -9 "-$g" 2>/dev/null; done
kill -9 "$p" 2>/dev/null
exit 0"#;

/// A start refused for its working directory (envd's `invalid_argument` "cwd '..' does not
/// exist") is [`Error::NotFound`] naming the directory as the caller wrote it.
pub(crate) fn start_error(e: Error, command: &Command) -> Error {
    let refused_cwd = super::errors::reply_of(&e)
        .is_some_and(|r| r.connect_code() == "invalid_argument" && r.message.contains("cwd"));
    match command.working_dir() {
        Some(cwd) if refused_cwd => Error::not_found(cwd),
        _ => e,
    }
}

/// The argv and environment of a command, as envd's `StartRequest` JSON.
pub(crate) fn start_request(
    command: &Command,
    sandbox_secrets: &[(String, SecretString)],
    stdin: bool,
    tag: &str,
) -> serde_json::Value {
    let mut args = vec!["-c".to_owned(), WRAPPER.to_owned(), "sandboxio".to_owned()];
    args.extend(command.argv().iter().cloned());
    let mut envs = BTreeMap::new();
    for (k, v) in sandbox_secrets {
        envs.insert(k.clone(), v.expose_secret().to_owned());
    }
    for (k, v) in command.env_vars() {
        envs.insert(k.clone(), v.clone());
    }
    for (k, v) in command.secret_env_vars() {
        envs.insert(k.clone(), v.expose_secret().to_owned());
    }
    // The mark, last: what a kill finds the command by before its pid is known.
    envs.insert(MARKER.to_owned(), tag.to_owned());
    let mut request = process::start_request("/bin/sh", &args, &envs, command.working_dir(), stdin);
    request["tag"] = tag.into();
    request
}

/// A new tag: envd's `ProcessSelector` name for the command, and its mark
/// ([`MARKER`]), unguessable (see [`crate::backends::remote::pgroup::new_mark`]).
pub(crate) fn next_tag() -> String {
    format!("sandboxio-{}", crate::backends::remote::pgroup::new_mark())
}

/// Kills the process tree of the command tagged `tag`: by pid `pid` when known
/// ([`KILL_TREE`], then envd's own kill of the pid); else by its mark ([`KILL_MARKED`]),
/// whose tombstone also stops a start still on its way (the caller went away after the
/// start was sent, before envd said which pid it started).
pub(crate) async fn kill_tree(envd: &Envd, pid: Option<u32>, tag: &str) -> Result<()> {
    let Some(pid) = pid else { return run_script(envd, KILL_MARKED, tag).await };
    run_script(envd, KILL_TREE, &pid.to_string()).await?;
    // The wrapper may have been stopped by nothing else: envd's own kill makes sure.
    envd.signal(pid, true).await.map(drop)
}

/// Runs one of the adapter's kill scripts (`/bin/sh -c text sandboxio arg`) to its end.
async fn run_script(envd: &Envd, text: &str, arg: &str) -> Result<()> {
    let request = process::start_request(
        "/bin/sh",
        &["-c".to_owned(), text.to_owned(), "sandboxio".to_owned(), arg.to_owned()],
        &BTreeMap::new(),
        None,
        false,
    );
    let mut stream = envd.start(&request, None).await?;
    while stream.next().await?.is_some() {}
    Ok(())
}

/// One command of one sandbox, as a kill on drop names it: by its tag, and by its pid once
/// envd said it.
pub(crate) struct Started {
    pub(crate) envd: Envd,
    pub(crate) tag: String,
    pub(crate) pid: Option<u32>,
}

impl KillTarget for Started {
    fn describe(&self) -> String {
        format!("{} in sandbox {}", self.tag, self.envd.id())
    }

    fn kill(self) -> KillFuture {
        Box::pin(async move { kill_tree(&self.envd, self.pid, &self.tag).await })
    }
}

/// Kills the command's tree on the portal when dropped armed: a cancelled `run`, a
/// dropped stream.
pub(crate) fn kill_on_drop(envd: &Envd, tag: &str) -> KillOnDrop<Started> {
    KillOnDrop::new(&PORTAL, Started { envd: envd.clone(), tag: tag.to_owned(), pid: None })
}

/// Learns `pid` for a guard's later kill.
pub(crate) fn set_pid(guard: &mut KillOnDrop<Started>, pid: u32) {
    if let Some(started) = guard.target_mut() {
        started.pid = Some(pid);
    }
}

/// Output gathered so far, bounded by the command's output limit.
struct Gathered {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl Gathered {
    fn add(&mut self, kind: StreamKind, data: &[u8]) {
        let buf = if kind == StreamKind::Stdout { &mut self.stdout } else { &mut self.stderr };
        let room = self.limit.saturating_sub(buf.len());
        if data.len() > room {
            self.truncated = true;
        }
        buf.extend_from_slice(&data[..data.len().min(room)]);
    }

    fn result(self, status: ExitStatus, started: Instant) -> ExecResult {
        ExecResult::new(0, self.stdout, self.stderr)
            .with_truncated(self.truncated)
            .with_status(status)
            .with_duration(started.elapsed())
    }
}

/// Runs `command` to completion on the portal (call it inside a portal task).
pub(crate) async fn run(
    envd: Envd,
    secrets: Arc<Vec<(String, SecretString)>>,
    command: Command,
) -> Result<ExecResult> {
    let started = Instant::now();
    let tag = next_tag();
    let stdin = command.stdin_bytes().map(<[u8]>::to_vec);
    let mut guard = kill_on_drop(&envd, &tag);
    let mut stream = envd
        .start(&start_request(&command, &secrets, stdin.is_some(), &tag), None)
        .await
        .map_err(|e| start_error(e, &command))?;
    let pid = first_pid(&mut stream).await.map_err(|e| start_error(e, &command))?;
    set_pid(&mut guard, pid);
    if let Some(data) = stdin {
        for chunk in data.chunks(1 << 20) {
            envd.send_input(pid, chunk).await?;
        }
        envd.close_stdin(pid).await?;
    }
    let mut gathered = Gathered {
        stdout: Vec::new(),
        stderr: Vec::new(),
        limit: command.output_limit_bytes(),
        truncated: false,
    };
    let drain = async {
        loop {
            match stream.next().await? {
                Some(ProcessEvent::Stdout(d)) => gathered.add(StreamKind::Stdout, &d),
                Some(ProcessEvent::Stderr(d)) => gathered.add(StreamKind::Stderr, &d),
                Some(ProcessEvent::End(status)) => return Ok(Some(status)),
                Some(ProcessEvent::Start(_)) => {}
                None => return Ok(None),
            }
        }
    };
    let ended: Result<Option<ExitStatus>> = match command.timeout_duration() {
        Some(limit) => {
            let Ok(ended) = tokio::time::timeout(limit, drain).await else {
                guard.disarm();
                kill_tree(&envd, Some(pid), &tag).await?;
                return Err(Error::execution_timeout(limit, gathered.result(ExitStatus::Signal(9), started)));
            };
            ended
        }
        None => drain.await,
    };
    guard.disarm();
    match ended? {
        Some(status) => Ok(gathered.result(status, started)),
        None => Err(Error::provider_message(SCHEME, "envd ended the process stream without an end event")),
    }
}

/// Reads the stream's first event, which envd always makes `start{pid}`.
pub(crate) async fn first_pid(stream: &mut EventStream) -> Result<u32> {
    match stream.next().await? {
        Some(ProcessEvent::Start(pid)) => Ok(pid),
        other => Err(Error::provider_message(SCHEME, format!("envd's first event was {other:?}, not start"))),
    }
}

/// One chunk of output from an event, `None` for other events.
pub(crate) fn chunk_of(event: &ProcessEvent) -> Option<OutputChunk> {
    match event {
        ProcessEvent::Stdout(d) => Some(OutputChunk { stream: StreamKind::Stdout, data: d.clone() }),
        ProcessEvent::Stderr(d) => Some(OutputChunk { stream: StreamKind::Stderr, data: d.clone() }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::KILL_TREE;
    use crate::backends::remote::pgroup::host;

    /// The command's group, and the group a child of it made for itself, both end under
    /// every shell on this host (dash and busybox refused `kill -KILL -- -PGID`, and the
    /// children lived on).
    #[test]
    fn kill_tree_ends_the_commands_group_and_its_childrens_groups_under_every_shell() {
        let shells = host::shells();
        assert!(!shells.is_empty(), "no POSIX shell found");
        for shell in shells {
            let (mut command, pids) =
                host::spawn_printing_pids("sleep 600 & echo $!; setsid sleep 600 & echo $!; wait", &[], 2);
            host::await_leader(pids[1]);
            let leader = command.id().to_string();
            host::run(&shell, KILL_TREE, &[&leader]);
            let _ = command.wait();
            for pid in &pids {
                assert!(
                    !host::still_running(*pid, Duration::from_secs(2)),
                    "{shell:?}: {pid} survived KILL_TREE"
                );
            }
        }
    }
}
