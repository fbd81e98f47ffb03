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
