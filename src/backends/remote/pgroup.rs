//! The process-group wrapper of the remote backends whose agents kill only the process they
//! started (E2B's envd, Modal's command router): each command becomes the leader of a session
//! of its own, so a second process can kill the whole group.
//!
//! Each command also carries a mark, `SANDBOXIO_EXEC=<id>` ([`MARKER`]), so that the kill of
//! a command whose start is still on its way (the caller's future dropped after the start
//! request was sent, before the agent said what it started) can find it without its pid:
//! [`KILL_MARKED`] leaves a tombstone for the id before it looks for the mark, and the
//! wrapper of a start that arrives after that finds the tombstone and exits before running
//! anything. Either the kill sees the command's processes, or the command sees the tombstone.

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
///
/// First of all, a command whose kill already came (the tombstone (`TOMBSTONE`) for its mark exists) takes
/// the tombstone away (`rmdir`: the test and the removal are one step) and exits 137 without
/// running anything.
pub(crate) const WRAPPER: &str = r#"case ${SANDBOXIO_EXEC-} in ''|*/*) ;; *) rmdir "/tmp/.sandboxio-cancelled.$SANDBOXIO_EXEC" 2>/dev/null && exit 137 ;; esac
command -v "$1" >/dev/null 2>&1 || { printf '%s: not found\n' "$1" >&2; exit 127; }
st=$(cat /proc/$$/stat)
pgrp() { printf %s "$3"; }
if [ "$(pgrp ${st##*) })" != "$$" ]; then exec setsid "$@"; fi
exec "$@""#;

/// The environment variable that marks every process of one command with its id (an exec id
/// on `modal://`, a process tag on `e2b://`): set last, over the caller's environment.
pub(crate) const MARKER: &str = "SANDBOXIO_EXEC";

/// A new mark: 128 random bits as hex, from the standard library's randomly seeded hasher
/// (no extra dependency). Unguessable, so that code in the sandbox cannot make the
/// tombstone of a command not yet started and so stop it.
pub(crate) fn new_mark() -> String {
    use std::hash::{BuildHasher, Hasher};
    let half = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    };
    format!("{:016x}{:016x}", half(), half())
}

/// Where the tombstone of a killed command whose start may still come is: this path and the
/// command's mark (a directory, so that making it follows no link and writes nothing). The
/// kill makes it; the wrapper of the late start takes it away. A start that never arrives
/// leaves an empty directory in the sandbox's `/tmp`. Without a writable `/tmp` the tombstone
/// is not made, and such a late start runs (as it did before the tombstone existed). The
/// scripts spell it out (a test holds them to it).
#[cfg(test)]
pub(crate) const TOMBSTONE: &str = "/tmp/.sandboxio-cancelled.";

/// Kills, twice over (a process forked meanwhile is caught by the second pass), every
/// process whose environment holds `SANDBOXIO_EXEC=$1`, and its process group. Reads only
/// `/proc`, and each stat file after the last `) ` of the whole file (the command name
/// before it is the process's own choice). Skips itself. Before looking, it makes the
/// the tombstone (`TOMBSTONE`) of `$1`, so that a start still on its way exits at once in the wrapper;
/// when it found a marked process, the command had started and the tombstone goes again.
/// A mark that is empty or holds a `/` is refused (nothing is made, nothing is killed).
pub(crate) const KILL_MARKED: &str = r#"case $1 in ''|*/*) exit 0 ;; esac
m="SANDBOXIO_EXEC=$1"
t="/tmp/.sandboxio-cancelled.$1"
mkdir "$t" 2>/dev/null
found=0
for pass in 1 2; do
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] && continue
    tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qxF "$m" || continue
    found=1
    st=$(tr '\n' ' ' < "$d/stat" 2>/dev/null) || continue
    set -- ${st##*) }
    case $3 in ''|*[!0-9]*|0|1) ;; *) kill -9 "-$3" 2>/dev/null ;; esac
    kill -9 "$p" 2>/dev/null
  done
done
[ "$found" = 1 ] && rmdir "$t" 2>/dev/null
exit 0"#;

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

#[cfg(test)]
mod kill_tests {
    use std::time::Duration;

    use super::host;
    use super::{KILL_MARKED, MARKER, TOMBSTONE, WRAPPER};

    /// Marked processes and their groups end under every shell on this host; a marked
    /// process whose name forges its stat line (`) S 1 <victim's group>` and a newline)
    /// cannot turn the kill on a group of its choosing (it did, read line by line). The
    /// victim living is proven by the same run killing everything marked.
    #[test]
    fn kill_marked_ends_the_marked_and_never_a_group_a_name_forges_under_every_shell() {
        use std::os::unix::process::CommandExt as _;
        let shells = host::shells();
        assert!(!shells.is_empty(), "no POSIX shell found");
        let dir = std::env::temp_dir().join(format!("sandboxio-kill-marked-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (n, shell) in shells.iter().enumerate() {
            let marker = format!("kill-test-{}-{n}", std::process::id());
            let mut victim = std::process::Command::new("sleep").arg("600").process_group(0).spawn().unwrap();
            let forged_name = dir.join(format!(") S 1 {}\n", victim.id()));
            std::fs::copy("/bin/sleep", &forged_name).unwrap();
            let mut forger = std::process::Command::new(&forged_name)
                .arg("600")
                .env(MARKER, &marker)
                .process_group(0)
                .spawn()
                .unwrap();
            let (mut command, pids) =
                host::spawn_printing_pids("sleep 600 & echo $!; wait", &[(MARKER, marker.as_str())], 1);
            std::thread::sleep(Duration::from_millis(100));
            host::run(shell, KILL_MARKED, &[&marker]);
            let (_, _) = (forger.wait(), command.wait());
            assert!(
                !host::still_running(pids[0], Duration::from_secs(2)),
                "{shell:?}: a marked child survived"
            );
            let victim_lives = host::still_running(victim.id(), Duration::from_millis(300));
            let _ = victim.kill();
            let _ = victim.wait();
            assert!(victim_lives, "{shell:?}: a forged process name turned the kill on another group");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_scripts_spell_the_tombstone_and_the_mark() {
        for script in [WRAPPER, KILL_MARKED] {
            assert!(script.contains(&format!("\"{TOMBSTONE}$")), "{script}");
            assert!(script.contains(MARKER), "{script}");
        }
    }

    /// A kill that comes before its command's start leaves a tombstone, and the late start
    /// runs nothing, under every shell on this host; the same start without a kill before it
    /// runs its command (the positive control, same run). A kill that finds its command takes
    /// the tombstone away again, and a mark with a `/` makes nothing.
    #[test]
    fn a_start_after_its_kill_runs_nothing_and_a_kill_that_found_its_command_leaves_no_tombstone() {
        let shells = host::shells();
        assert!(!shells.is_empty(), "no POSIX shell found");
        let dir = std::env::temp_dir().join(format!("sandboxio-tombstone-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let start = |shell: &[&str], marker: &str, witness: &std::path::Path| {
            std::process::Command::new(shell[0])
                .args(&shell[1..])
                .arg("-c")
                .arg(WRAPPER)
                .arg("sandboxio")
                .args(["touch", witness.to_str().unwrap()])
                .env(MARKER, marker)
                .status()
                .unwrap()
        };
        for (n, shell) in shells.iter().enumerate() {
            let marker = format!("tombstone-test-{}-{n}", std::process::id());
            let tombstone = format!("{TOMBSTONE}{marker}");
            // Killed first: the tombstone stays (nothing was found), the start runs nothing.
            host::run(shell, KILL_MARKED, &[&marker]);
            assert!(std::path::Path::new(&tombstone).is_dir(), "{shell:?}: no tombstone");
            let cancelled = dir.join(format!("cancelled-{n}"));
            let status = start(shell, &marker, &cancelled);
            assert_eq!(status.code(), Some(137), "{shell:?}");
            assert!(!cancelled.exists(), "{shell:?}: a start after its kill ran its command");
            assert!(!std::path::Path::new(&tombstone).exists(), "{shell:?}: the start left the tombstone");
            // Not killed: the same start runs its command.
            let ran = dir.join(format!("ran-{n}"));
            assert!(start(shell, &marker, &ran).success(), "{shell:?}");
            assert!(ran.exists(), "{shell:?}: the control start ran nothing");
            // A kill that finds its command removes its tombstone.
            let (mut command, _) =
                host::spawn_printing_pids("echo $$; exec sleep 600", &[(MARKER, &marker)], 1);
            host::run(shell, KILL_MARKED, &[&marker]);
            let _ = command.wait();
            assert!(
                !std::path::Path::new(&tombstone).exists(),
                "{shell:?}: a kill that found its command left a tombstone"
            );
            // A mark with a `/` could reach out of a tombstone that exists.
            std::fs::create_dir(&tombstone).unwrap();
            host::run(shell, KILL_MARKED, &[&format!("{marker}/../{marker}-escaped")]);
            let escaped = std::path::PathBuf::from(format!("/tmp/{marker}-escaped"));
            let _ = std::fs::remove_dir(&tombstone);
            assert!(!escaped.exists(), "{shell:?}: a mark with a `/` made {escaped:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
