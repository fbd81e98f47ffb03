//! The process-group wrapper of the remote backends whose agents kill only the process they
//! started (E2B's envd, Modal's command router): each command becomes the leader of a session
//! of its own, so a second process can kill the whole group.

/// Runs `"$@"` in a new session (its own process group), after checking that the program
/// exists (a missing one exits 127 naming it, as a shell would).
///
/// A remote agent that starts each process without a process group of its own (E2B's envd:
/// its infra repository's `packages/envd/internal/services/process/handler/handler.go`)
/// leaves the shell not a group leader, and `exec setsid` makes the command a session leader
/// in place: same pid, and the agent reports its exact status (a signal death as a signal).
/// Where the shell already leads its own group, the command simply replaces it (`exec`):
/// same pid, leader of its group, exact status (an `exit 137` stays code 137), and a group
/// kill reaches it and everything it did not move elsewhere.
pub(crate) const WRAPPER: &str = r#"command -v "$1" >/dev/null 2>&1 || { printf '%s: not found\n' "$1" >&2; exit 127; }
st=$(cat /proc/$$/stat)
pgrp() { printf %s "$3"; }
if [ "$(pgrp ${st##*) })" != "$$" ]; then exec setsid "$@"; fi
exec "$@""#;

/// Helpers for the tests that run the remote backends' kill scripts on this host, under
/// every POSIX shell it has (the scripts run under whatever `/bin/sh` an image has).
#[cfg(test)]
pub(crate) mod host {
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    /// The shells present here, each as the argv that precedes `-c SCRIPT`.
    pub(crate) fn shells() -> Vec<Vec<&'static str>> {
        [vec!["dash"], vec!["bash"], vec!["busybox", "sh"]]
            .into_iter()
            .filter(|sh| {
                Command::new(sh[0]).args(&sh[1..]).args(["-c", "true"]).status().is_ok_and(|s| s.success())
            })
            .collect()
    }

    /// Runs `script` under `shell` with `args` ($1, ...), and waits for it.
    pub(crate) fn run(shell: &[&str], script: &str, args: &[&str]) {
        let status = Command::new(shell[0])
            .args(&shell[1..])
            .arg("-c")
            .arg(script)
            .arg("kill-script")
            .args(args)
            .status();
        assert!(status.is_ok_and(|s| s.success()), "{shell:?} could not run the script");
    }

    /// `(ppid, pgid)` of `pid` from the fields after the last `) ` of its stat file, or
    /// `None` once it is gone or a zombie.
    pub(crate) fn stat(pid: u32) -> Option<(u32, u32)> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let fields: Vec<&str> = text.rsplit_once(") ")?.1.split_whitespace().collect();
        if matches!(fields.first(), Some(&("Z" | "X"))) {
            return None;
        }
        Some((fields.get(1)?.parse().ok()?, fields.get(2)?.parse().ok()?))
    }

    /// Whether `pid` still runs within `wait` (true) or is gone by then (false).
    pub(crate) fn still_running(pid: u32, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if stat(pid).is_none() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        stat(pid).is_some()
    }

    /// Waits until `pid` leads its own process group (a `setsid` has run).
    pub(crate) fn await_leader(pid: u32) {
        let until = Instant::now() + Duration::from_secs(5);
        while stat(pid).is_none_or(|(_, g)| g != pid) {
            assert!(Instant::now() < until, "{pid} never led its own group");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Spawns `sh -c script` as the leader of a new process group with `env`, and reads one
    /// pid per line from its stdout (`count` of them).
    pub(crate) fn spawn_printing_pids(script: &str, env: &[(&str, &str)], count: usize) -> (Child, Vec<u32>) {
        use std::os::unix::process::CommandExt as _;
        let mut child = Command::new("sh")
            .args(["-c", script])
            .envs(env.iter().copied())
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let pids = (0..count).map(|_| lines.next().unwrap().unwrap().trim().parse().unwrap()).collect();
        (child, pids)
    }
}
