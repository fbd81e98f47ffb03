//! Class 10: the kill path depends on nothing the sandboxed code can write. First seen
//! failing on d269073 (main): a command rewrote `/tmp/.sandboxio/<key>` (the process group
//! its killer read) and `run()` reported `ExecutionTimeout` while the process lived on.
//! The rewrite is an attack on the exec-API path's old state; on the sandboxd path the kill
//! is a frame to sandboxd and a pipe to the shepherd (class 17 shows the code reaches
//! neither), so there it finds nothing to rewrite and shows only that the command still
//! ends. The hunter attacks the killer on both paths.

use std::time::Duration;

use sandboxio::{Command, ErrorCode, NetworkPolicy};

use super::survivors;
use crate::support::{self, block_on, eventually};

/// Rewrites every file it can under sandboxio's directories with a process group that does
/// not exist, and removes every cancel marker, then sleeps. The positive control: it proves
/// it can write there (a probe file round-trips).
const REWRITER: &str = r#"n=0
for d in /tmp/.sandboxio /run/sandboxio; do
  for f in "$d"/* "$d"/.[!.]*; do
    [ -f "$f" ] || continue
    case $f in *.cancel) rm -f "$f" 2>/dev/null && n=$((n+1)); continue ;; esac
    echo 4194000 > "$f" 2>/dev/null && n=$((n+1))
  done
done
echo probe > /tmp/.sandboxio/probe-$$ && [ "$(cat /tmp/.sandboxio/probe-$$)" = probe ] && echo control-writable
rm -f /tmp/.sandboxio/probe-$$
echo "rewrote $n"
exec sleep 7401"#;

#[test]
fn class_10__a_command_cannot_rewrite_its_own_kill_path() {
    const TEST: &str = "class_10__a_command_cannot_rewrite_its_own_kill_path";
    if !support::docker_ready(TEST) {
        return;
    }
    let sandbox = support::docker(NetworkPolicy::deny_all());
    let id = sandbox.id().to_owned();
    block_on(async {
        let err = sandbox
            .run(Command::shell(format!("sleep 0.5\n{REWRITER}")).timeout(Duration::from_secs(3)))
            .await
            .unwrap_err();
        let sandboxio::Error::ExecutionTimeout { partial, .. } = &err else { panic!("{err}") };
        assert_eq!(err.code(), ErrorCode::ExecutionTimeout);
        let said = partial.stdout_lossy();
        if !said.contains("control-writable") {
            support::skip(TEST, &format!("the command cannot write where the kill state lived: {said}"));
            return;
        }
        println!("{TEST}: the payload said {said:?}");
        assert!(
            eventually(Duration::from_secs(5), || survivors(&id, "sleep 7401").is_empty()),
            "ExecutionTimeout was reported but the command lives on: {:?}",
            survivors(&id, "sleep 7401")
        );
    });
    let _ = block_on(sandbox.close());
}

/// Attacks the killer itself: a background loop stops (SIGSTOP) and kills every process of
/// the user outside the command, so a killer running as that user is frozen or killed the
/// moment it starts. Control: the loop really ends a fresh process of the user started by
/// another command. Then: after the stream is dropped, nothing of the command is left (or the
/// whole sandbox is gone: the kill path fails closed).
const HUNTER: &str = r#"me=$(id -u)
while :; do
  for p in /proc/[0-9]*; do
    case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in *7402*|'') continue ;; esac
    grep -q "^Uid:[[:space:]]*$me[[:space:]]" $p/status 2>/dev/null || continue
    kill -STOP ${p#/proc/} 2>/dev/null; kill -KILL ${p#/proc/} 2>/dev/null
  done
done"#;

#[test]
fn class_10__a_command_that_hunts_its_killer_still_ends() {
    const TEST: &str = "class_10__a_command_that_hunts_its_killer_still_ends";
    if !support::docker_ready(TEST) {
        return;
    }
    let sandbox = support::docker(NetworkPolicy::deny_all());
    let id = sandbox.id().to_owned();
    block_on(async {
        let mut stream = sandbox
            .stream(Command::new("sh").args([
                "-c",
                &format!("({HUNTER}) & echo started; exec sleep 7402"),
                "hunter-7402",
            ]))
            .unwrap();
        let first = stream.next_chunk().await.expect("the hunter starts").unwrap();
        assert_eq!(first.data, b"started\n");
        // Control: a fresh process of the same user, started by another command, is hunted.
        let probe =
            sandbox.run(Command::shell("sleep 5; echo survived").timeout(Duration::from_secs(20))).await;
        match &probe {
            Ok(out) if out.stdout_lossy().contains("survived") => {
                support::skip(TEST, "the hunter does not reach other processes of the user");
                return;
            }
            _ => println!("{TEST}: control: a fresh process of the user was hunted ({probe:?})"),
        }
        drop(stream);
        let gone_or_clean = eventually(Duration::from_secs(40), || {
            let left = survivors(&id, "7402");
            left.is_empty()
        });
        assert!(gone_or_clean, "the hunter outlived its dropped stream: {:?}", survivors(&id, "7402"));
    });
    let _ = block_on(sandbox.kill());
}
