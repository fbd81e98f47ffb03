//! The process-group wrapper of the remote backends whose agents kill only the process they
//! started (E2B's envd, Modal's command router): each command becomes the leader of a session
//! of its own, so a second process can kill the whole group.

/// Runs `"$@"` in a new session (its own process group), after checking that the program
/// exists (a missing one exits 127 naming it, as a shell would).
///
/// A remote agent that starts each process without a process group of its own (E2B's envd:
/// its infra repository's `packages/envd/internal/services/process/handler/handler.go`)
/// leaves the shell not a group leader and `exec setsid` makes the command a session leader in place: same pid,
/// and the agent reports its exact status (a signal death as a signal). Where the shell does
/// lead its group, `setsid` would fork and its parent exit at once, so the command runs in
/// a subshell instead, whose status the shell passes on (an exit of 128 + n then reads as
/// signal n). A shell without job control gives a background job `/dev/null` as stdin
/// before any redirection, so stdin is handed over on fd 3 first.
pub(crate) const WRAPPER: &str = r#"command -v "$1" >/dev/null 2>&1 || { printf '%s: not found\n' "$1" >&2; exit 127; }
st=$(cat /proc/$$/stat)
pgrp() { printf %s "$3"; }
if [ "$(pgrp ${st##*) })" != "$$" ]; then exec setsid "$@"; fi
exec 3<&0
( exec setsid "$@" <&3 3<&- ) &
c=$!
exec 3<&- 0</dev/null
wait "$c"
s=$?
if [ "$s" -gt 128 ] && [ "$s" -lt 160 ]; then trap - "$((s - 128))" 2>/dev/null; kill -"$((s - 128))" $$; fi
exit "$s""#;
