//! The archive scripts of `upload` and `download` over a command's stream (`stream.rs`):
//! `tar -x` into a directory, `tar -c` out of one, and a paced `tar -c` for transports that
//! do not push back on their own. Run as the sandbox's user, inside the sandbox.

/// Extracts the archive on stdin into `$1`, created first, as the sandbox user: permission
/// bits exactly as archived (`umask 0`; the host side sends no setuid, setgid or sticky
/// bit), owned by the user (`-o`), an existing entry replaced as `tar -x` does.
pub(crate) const UNTAR: &str = r#"mkdir -p "$1" && cd "$1" && umask 0 && exec tar -x -o -f -"#;

/// Archives `$2` (a name in directory `$1`) to stdout. Whatever comes out is bounded on
/// the host (budget, header size), so a replaced `tar` gains nothing.
pub(crate) const TAR: &str = r#"cd "$1" && [ -e "./$2" ] || { echo "No such file or directory" >&2; exit 3; }
exec tar -cf - "./$2""#;

/// [`TAR`] paced by the host, for transports that do not push back on their own (the
/// `local://` exec stream queues whatever a process writes): the archive leaves the
/// sandbox one [`PACE_CHUNK`] per line the host writes on stdin, so no more than its window
/// is ever in flight (the asks arrive on the script's stdin, kept as fd 3, since the loop's
/// own stdin is `tar`'s output). `tar`'s exit status is the script's. Each chunk goes
/// through the command's private `/tmp`.
pub(crate) const TAR_PACED: &str = r#"cd "$1" && [ -e "./$2" ] || { echo "No such file or directory" >&2; exit 3; }
exec 3<&0
{ tar -cf - "./$2" 3<&-; echo $? > /tmp/.sandboxio-tar-status; } </dev/null | while read -r _ <&3; do
  head -c 1048576 > /tmp/.sandboxio-chunk || exit 1
  [ -s /tmp/.sandboxio-chunk ] || break
  cat /tmp/.sandboxio-chunk || exit 1
done
exit "$(cat /tmp/.sandboxio-tar-status 2>/dev/null || echo 1)""#;

/// The size of one chunk of [`TAR_PACED`].
pub(crate) const PACE_CHUNK: u64 = 1024 * 1024;
