//! Class 3 (docker side): what a command's end, timeout, kill or dropped stream ends is
//! everything that command started, including processes that called `setsid` or
//! double-forked. First seen failing on d269073 (main): the wrapper killed only the command's
//! process group, so `setsid sleep` outlived every path below.

use std::time::Duration;

use sandboxio::{Command, ErrorCode, NetworkPolicy};

use super::survivors;
use crate::support::{self, block_on, eventually};

/// Starts one `setsid` escapee and one double-forked escapee (both `sleep <tag>…`), then
/// reports, from `/proc`, each escapee's session and parent next to the command's own: the
/// positive control that the escape really happened.
fn escape(tag: &str) -> String {
    format!(
        r#"setsid sleep {tag}1 </dev/null >/dev/null 2>&1 &
(sleep {tag}2 </dev/null >/dev/null 2>&1 &)
sleep 0.5
for p in /proc/[0-9]*; do
  c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null)
  case $c in "sleep {tag}"*) echo "escapee $c sid=$(cut -d' ' -f6 $p/stat) ppid=$(cut -d' ' -f4 $p/stat)";; esac
done
echo "me sid=$(cut -d' ' -f6 /proc/$$/stat) pid=$$"
"#
    )
}

/// Whether the report shows a `setsid` escapee in another session and a double-forked one
/// no longer the command's child.
fn escaped(report: &str, tag: &str) -> bool {
    let field =
        |line: &str, key: &str| line.split_whitespace().find_map(|w| w.strip_prefix(key)).map(str::to_owned);
    let Some(me) = report.lines().find(|l| l.starts_with("me ")) else { return false };
    let (own_session, own_pid) = (field(me, "sid="), field(me, "pid="));
    let setsid =
        report.lines().any(|l| l.contains(&format!("sleep {tag}1")) && field(l, "sid=") != own_session);
    let orphan = report.lines().any(|l| l.contains(&format!("sleep {tag}2")) && field(l, "ppid=") != own_pid);
    setsid && orphan
}

fn assert_none_left(test: &str, id: &str, tag: &str, path: &str) {
    let marker = format!("sleep {tag}");
    assert!(
        eventually(Duration::from_secs(5), || survivors(id, &marker).is_empty()),
        "{test}: after {path}, the command's escapees still run: {:?}",
        survivors(id, &marker)
    );
}

#[test]
fn class_03__setsid_and_double_fork_end_with_their_command() {
    const TEST: &str = "class_03__setsid_and_double_fork_end_with_their_command";
    if !support::docker_ready(TEST) {
        return;
    }
    let sandbox = support::docker(NetworkPolicy::deny_all());
    let id = sandbox.id().to_owned();
    block_on(async {
        // 1. The command's own end.
        let out = sandbox.run(Command::shell(escape("7301"))).await.unwrap();
        let report = out.stdout_lossy().into_owned();
        if !escaped(&report, "7301") {
            support::skip(TEST, &format!("the escape did not happen unconfined: {report}"));
            return;
        }
        assert_none_left(TEST, &id, "7301", "the command's end");

        // 2. A timeout.
        let err = sandbox
            .run(Command::shell(format!("{}\nsleep 1000", escape("7302"))).timeout(Duration::from_secs(3)))
            .await
            .unwrap_err();
        let sandboxio::Error::ExecutionTimeout { partial, .. } = &err else { panic!("{err}") };
        assert!(escaped(&partial.stdout_lossy(), "7302"), "control: {partial:?}");
        assert_eq!(err.code(), ErrorCode::ExecutionTimeout);
        assert_none_left(TEST, &id, "7302", "a timeout");

        // 2b. A command that kills the wrapper meant to end its escapees: the host's own view
        // (the engine's `top`) still finds them.
        let out = sandbox.run(Command::shell(format!("{}\nkill -KILL $PPID; exit 0", escape("7305")))).await;
        match &out {
            Ok(out) if escaped(&out.stdout_lossy(), "7305") => {}
            other => panic!("control: the escape or the wrapper kill did not happen: {other:?}"),
        }
        assert_none_left(TEST, &id, "7305", "a command that killed its wrapper");

        // 3. A dropped stream, and 4. a stream closed (terminated) by its caller.
        for (tag, close) in [("7303", false), ("7304", true)] {
            let mut stream = sandbox.stream(Command::shell(format!("{}\nsleep 1000", escape(tag)))).unwrap();
            let mut seen = String::new();
            while !seen.contains("me sid=") {
                let chunk = stream.next_chunk().await.expect("output before the end").unwrap();
                seen.push_str(&String::from_utf8_lossy(&chunk.data));
            }
            while !seen.ends_with('\n') {
                let chunk = stream.next_chunk().await.expect("the rest of the line").unwrap();
                seen.push_str(&String::from_utf8_lossy(&chunk.data));
            }
            assert!(escaped(&seen, tag), "control: {seen}");
            if close {
                stream.close().await.unwrap();
                assert_none_left(TEST, &id, tag, "a stream's close()");
            } else {
                drop(stream);
                assert_none_left(TEST, &id, tag, "a dropped stream");
            }
        }
    });
    let _ = block_on(sandbox.close());
}

/// A program whose main thread exits while another thread keeps writing a heartbeat (the
/// process then shows `State: Z`, and lives), built static on the host with `cc`. Each beat
/// is renamed into place, so a kill between truncating and writing never leaves the
/// heartbeat empty (which read as a failed control under load).
const ZOMBIE_LEADER_C: &str = r#"#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static void *beat(void *a) {
  for (long n = 1;; n++) {
    FILE *f = fopen("/tmp/hb.new", "w");
    if (f) { fprintf(f, "%ld\n", n); fclose(f); rename("/tmp/hb.new", "/tmp/hb"); }
    usleep(20000);
  }
  return a;
}
int main(void) {
  pthread_t t;
  pthread_create(&t, 0, beat, 0);
  usleep(100000);
  pthread_exit(0);
}
"#;

fn zombie_leader_binary(test: &str) -> Option<Vec<u8>> {
    let dir = std::env::temp_dir().join(format!("sbx-adv-zl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::write(dir.join("zl.c"), ZOMBIE_LEADER_C).ok()?;
    let built = std::process::Command::new("cc")
        .args(["-static", "-pthread", "-o"])
        .arg(dir.join("zl"))
        .arg(dir.join("zl.c"))
        .status()
        .is_ok_and(|s| s.success());
    let binary = built.then(|| std::fs::read(dir.join("zl")).ok()).flatten();
    let _ = std::fs::remove_dir_all(&dir);
    if binary.is_none() {
        support::skip(test, "no C compiler (cc) with a static libc to build the payload");
    }
    binary
}

/// Runs the payload in the background, then shows its state while it is a live zombie.
const ZOMBIE_LEADER: &str =
    r"cat > /tmp/zl && chmod 755 /tmp/zl && { /tmp/zl & } && sleep 1 && grep State /proc/$!/status";

#[test]
fn class_03__a_leader_that_exited_while_its_threads_run_ends_with_its_command() {
    const TEST: &str = "class_03__a_leader_that_exited_while_its_threads_run_ends_with_its_command";
    if !support::docker_ready(TEST) {
        return;
    }
    let Some(binary) = zombie_leader_binary(TEST) else { return };
    let sandbox = support::docker(NetworkPolicy::deny_all());
    block_on(async {
        let out = sandbox.run(Command::shell(ZOMBIE_LEADER).stdin(binary)).await.unwrap();
        // Positive control: the leader really was a zombie with its thread alive.
        if !out.stdout_lossy().contains("Z (zombie)") {
            support::skip(TEST, &format!("the leader did not become a live zombie: {out:?}"));
            return;
        }
        let first = sandbox.run(Command::shell("cat /tmp/hb")).await.unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let second = sandbox.run(Command::shell("cat /tmp/hb")).await.unwrap();
        assert!(!first.stdout.is_empty(), "control: the thread never wrote its heartbeat");
        assert_eq!(first.stdout, second.stdout, "the thread of an exited leader outlived its command");
    });
    let _ = block_on(sandbox.kill());
}
