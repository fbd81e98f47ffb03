//! File operations as `sh` scripts run inside a sandbox, as its user, so that links,
//! permissions and mounts are the sandbox's own and nothing on the host side ever follows a
//! path the sandboxed code controls: every file operation of `docker://`'s exec-API path
//! (which has no sandboxd to ask) and of `modal://`. Their errors are made in
//! [`file_errors`](super::file_errors), so that sandboxd's own file requests read alike.
//! Paths reach the scripts as arguments (`$1`), never spliced into shell text, and are
//! always absolute, so never mistaken for options. Exit codes: 3 missing, 4 non-empty
//! directory, 13 permission, 21 is a directory, 22 wrong kind; anything else is mapped from
//! what the tool said on stderr.

use crate::error::{Error, Result};
use crate::fs::{DirEntry, FileKind};

use super::file_errors::{
    LIST_LIMIT, a_special_file, exec_failure, exists_not_a_directory, not_a_directory, not_a_regular_file,
    over_list_limit,
};

/// Reads at most `$2` bytes of a regular file (links followed inside the sandbox, as `cat`
/// would): the caller passes its limit plus one, so that a larger file (or one with no
/// end, such as a link to `/proc/self/pagemap`) shows as too large without the rest being
/// read. `cat` reads in its usual aligned blocks (some `/proc` files refuse an odd-sized
/// read) and `head` cuts; an unreadable file gets `cat`'s own error and status. The host
/// bounds what it takes as well: a replaced `head` gains nothing.
pub(crate) const READ: &str = r#"[ -d "$1" ] && exit 21
[ -e "$1" ] && [ ! -f "$1" ] && exit 22
[ -r "$1" ] || exec cat "$1"
cat "$1" | head -c "$2""#;

/// Writes stdin to `$1` as the sandbox user's own write would (class 6 of `SECURITY.md`),
/// creating parents. An existing file is truncated and written in place, so it
/// keeps its mode, owner and hard links, a link to it is followed (inside the sandbox),
/// and a file the user may not write is refused (13); a special file is refused (22) rather
/// than written to. A new file is created exclusively (`set -C`: `O_EXCL`, which never
/// follows a link planted meanwhile), private until it gets mode `$2`; a dangling link is
/// followed, as the user's `>` would. No temporary name exists to predict or plant (class
/// 5): the only name written is the target itself.
pub(crate) const WRITE: &str = r#"p=$1
mkdir -p "${p%/*}/" 2>/dev/null
[ -d "$p" ] && exit 21
if [ -e "$p" ]; then
  [ -f "$p" ] || exit 22
  [ -w "$p" ] || exit 13
  exec cat > "$p"
fi
umask 077
[ -L "$p" ] || set -C
cat > "$p" && exec chmod "$2" "$p""#;

/// Lists `$1`: per entry, `<mode in hex> <size>\n<name>\0` (`stat` does not follow links).
pub(crate) const LIST: &str = r#"[ -d "$1" ] || { [ -e "$1" ] && exit 22; exit 3; }
cd "$1" 2>/dev/null || exit 13
for f in * .[!.]* ..?*; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  # An entry removed meanwhile is skipped, not an error for the whole listing.
  s=$(stat -c '%f %s' "./$f" 2>/dev/null) || continue
  printf '%s\n%s\0' "$s" "$f"
done"#;

/// `mkdir -p $1`: exit 22 where something not a directory is at the path, 3 where one is
/// on the way (through a file: `ENOTDIR`, reported as `NotFound` as everywhere).
pub(crate) const MKDIR: &str = r#"[ -d "$1" ] && exit 0; [ -e "$1" ] && exit 22
p=$1; while p=${p%/*}; [ -n "$p" ]; do [ -e "$p" ] && { [ -d "$p" ] || exit 3; break; }; done
mkdir -p "$1""#;

/// `remove`: exit 3 is a missing path, 4 a non-empty directory without `recursive`.
pub(crate) const REMOVE: &str = r#"p=$1
[ -e "$p" ] || [ -L "$p" ] || exit 3
if [ -d "$p" ] && [ ! -L "$p" ]; then
  if [ "$2" = 1 ]; then rm -rf "$p"; else rmdir "$p" 2>/dev/null || exit 4; fi
else
  rm -f "$p"
fi"#;

/// Parses [`LIST`]'s output.
pub(crate) fn parse_listing(backend: &str, abs: &str, mut out: &[u8]) -> Result<Vec<DirEntry>> {
    let malformed = || Error::provider_message(backend, format!("listing {abs}: malformed listing"));
    let mut entries = Vec::new();
    while !out.is_empty() {
        let line_end = out.iter().position(|b| *b == b'\n').ok_or_else(malformed)?;
        let line = std::str::from_utf8(&out[..line_end]).map_err(|_| malformed())?;
        let rest = &out[line_end + 1..];
        let name_end = rest.iter().position(|b| *b == 0).ok_or_else(malformed)?;
        let name = String::from_utf8_lossy(&rest[..name_end]).into_owned();
        out = &rest[name_end + 1..];
        let (mode, size) = line.split_once(' ').ok_or_else(malformed)?;
        let mode = u32::from_str_radix(mode, 16).map_err(|_| malformed())?;
        let size: u64 = size.parse().map_err(|_| malformed())?;
        let kind = match mode & 0o170_000 {
            0o040_000 => FileKind::Dir,
            0o100_000 => FileKind::File,
            0o120_000 => FileKind::Symlink,
            _ => FileKind::Other,
        };
        let size = if kind == FileKind::Dir { 0 } else { size };
        entries.push(DirEntry::new(name, kind, size, mode & 0o7777));
    }
    Ok(entries)
}

/// What [`READ`]'s exit means for `abs`, read with `limit`: more than `limit` bytes is
/// too large, whatever the exit (the reader may have been stopped early).
pub(crate) fn read_outcome(
    backend: &str,
    abs: String,
    limit: u64,
    code: i64,
    out: Vec<u8>,
    err: &[u8],
) -> Result<Vec<u8>> {
    if out.len() as u64 > limit {
        return Err(crate::transfer::over_read_limit(&abs, limit));
    }
    match code {
        0 => Ok(out),
        21 => Err(Error::IsADirectory { path: abs }),
        22 => Err(not_a_regular_file(&abs)),
        _ => Err(exec_failure(backend, &abs, err)),
    }
}

/// What [`WRITE`]'s exit means for `abs`.
pub(crate) fn write_outcome(backend: &str, abs: String, code: i64, err: &[u8]) -> Result<()> {
    match code {
        0 => Ok(()),
        13 => Err(Error::PermissionDenied { path: abs }),
        21 => Err(Error::IsADirectory { path: abs }),
        22 => Err(a_special_file(&abs)),
        _ => Err(exec_failure(backend, &abs, err)),
    }
}

/// What [`LIST`]'s exit means for `abs`.
pub(crate) fn list_outcome(
    backend: &str,
    abs: String,
    code: i64,
    out: &[u8],
    err: &[u8],
) -> Result<Vec<DirEntry>> {
    if out.len() as u64 > LIST_LIMIT {
        return Err(over_list_limit(&abs));
    }
    match code {
        0 => parse_listing(backend, &abs, out),
        3 => Err(Error::NotFound { path: abs }),
        13 => Err(Error::PermissionDenied { path: abs }),
        22 => Err(not_a_directory(&abs)),
        _ => Err(exec_failure(backend, &abs, err)),
    }
}

/// What [`MKDIR`]'s exit means for `abs`.
pub(crate) fn mkdir_outcome(backend: &str, abs: &str, code: i64, err: &[u8]) -> Result<()> {
    match code {
        0 => Ok(()),
        3 => Err(Error::NotFound { path: abs.to_owned() }),
        22 => Err(exists_not_a_directory(abs)),
        _ => Err(exec_failure(backend, abs, err)),
    }
}

/// What [`REMOVE`]'s exit means for `abs`.
pub(crate) fn remove_outcome(backend: &str, abs: String, code: i64, err: &[u8]) -> Result<()> {
    match code {
        0 => Ok(()),
        3 => Err(Error::NotFound { path: abs }),
        4 => Err(Error::IsADirectory { path: abs }),
        _ => Err(exec_failure(backend, &abs, err)),
    }
}
