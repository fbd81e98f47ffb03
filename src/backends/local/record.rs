//! The record beside each sandbox's workspace that `LocalBackend::reap`, `list` and
//! `connect` read: its owner, when it was created, the end of its TTL, whether it is
//! detached, its sandboxd process, and its metadata (keys and values escaped as Rust string
//! literals). Written whole or not at all (temporary file and rename), so a
//! sweep in another process never reads half of it.

use std::path::Path;

use crate::backend::CreateSpec;
use crate::backends::owner::Owner;
use crate::error::{Error, Result};

use super::SCHEME;

/// The record's file name in a sandbox's directory.
const RECORD_FILE: &str = "sandbox";

pub(super) fn write_record(dir: &Path, spec: &CreateSpec) -> Result<()> {
    use std::fmt::Write as _;
    let owner = Owner::current();
    let expires = crate::backends::owner::unix_now().saturating_add(spec.ttl.as_secs());
    let created = crate::backends::owner::unix_now();
    let mut text = format!(
        "owner {}\ncreated {created}\nexpires {expires}\ndetached {}\n",
        owner.label(),
        spec.detached
    );
    for (k, v) in &spec.metadata {
        let _ = writeln!(text, "label {k:?}={v:?}");
    }
    replace(dir, &text).map_err(|e| Error::provider(SCHEME, "cannot record the sandbox", e))
}

/// Whether the sandbox recorded in `dir` should be swept: past its TTL, or (with
/// `owner_dead`) owned by a process on this host that is gone. A directory with no record
/// is left alone.
pub(super) fn sweepable(dir: &Path, owner_dead: bool) -> bool {
    let Some(text) = read(dir) else { return false };
    let detached = field(&text, "detached") == Some("true");
    let dead = field(&text, "owner").and_then(Owner::parse).and_then(|o| o.is_dead_here()) == Some(true);
    expired(&text) || (owner_dead && !detached && dead)
}

/// What `Sandbox::list` reports of the sandbox `id` recorded in `text`. Records written
/// before the `created` line have no age.
pub(super) fn info(id: &str, text: &str) -> crate::inventory::SandboxInfo {
    let now = crate::backends::owner::unix_now();
    let seconds = |name| field(text, name).and_then(|v| v.parse::<u64>().ok());
    let mut info = crate::inventory::SandboxInfo::new(id, SCHEME);
    info.age = seconds("created").map(|at| std::time::Duration::from_secs(now.saturating_sub(at)));
    info.ttl_left = seconds("expires").map(|at| std::time::Duration::from_secs(at.saturating_sub(now)));
    info.owner_alive =
        field(text, "owner").and_then(Owner::parse).and_then(|o| o.is_dead_here()).map(|dead| !dead);
    info.detached = Some(field(text, "detached") == Some("true"));
    info.labels = text.lines().filter_map(|l| label(l.strip_prefix("label ")?)).collect();
    info
}

/// A `"key"="value"` label line's pair, as `write_record` escaped it.
fn label(line: &str) -> Option<(String, String)> {
    let (key, rest) = literal(line)?;
    let (value, rest) = literal(rest.strip_prefix('=')?)?;
    rest.is_empty().then_some((key, value))
}

/// Reads one string literal in `{:?}` form off the front of `s`: the string and the rest.
fn literal(s: &str) -> Option<(String, &str)> {
    let mut chars = s.strip_prefix('"')?.char_indices();
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &s[i + 2..])),
            '\\' => out.push(match chars.next()?.1 {
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                '0' => '\0',
                'u' => {
                    let hex: String =
                        chars.by_ref().map(|(_, c)| c).skip(1).take_while(|c| *c != '}').collect();
                    char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?
                }
                other => other,
            }),
            c => out.push(c),
        }
    }
    None
}

/// The record's text (at most 64 KiB), if there is one.
pub(super) fn read(dir: &Path) -> Option<String> {
    let bytes = read_record(&dir.join(RECORD_FILE), 64 * 1024)?;
    String::from_utf8(bytes).ok()
}

/// The value of field `name` in a record's text.
pub(super) fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
}

/// Whether a record's TTL is over.
pub(super) fn expired(text: &str) -> bool {
    field(text, "expires")
        .and_then(|e| e.parse::<u64>().ok())
        .is_none_or(|at| at <= crate::backends::owner::unix_now())
}

/// The sandbox's sandboxd process on this host (its pid and start time), once recorded.
pub(super) fn sandboxd(text: &str) -> Option<Owner> {
    field(text, "sandboxd").and_then(Owner::parse)
}

/// Sets field `name` of the record in `dir` to `value` (added when missing).
pub(super) fn set(dir: &Path, name: &str, value: &str) -> std::io::Result<()> {
    let text = read(dir).ok_or_else(|| std::io::Error::other("the sandbox has no record"))?;
    let line = format!("{name} {value}");
    let mut found = false;
    let mut out: String = text
        .lines()
        .map(|l| {
            if field(l, name).is_some() {
                found = true;
                format!("{line}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    if !found {
        out.push_str(&line);
        out.push('\n');
    }
    replace(dir, &out)
}

fn replace(dir: &Path, text: &str) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{RECORD_FILE}.tmp"));
    std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, dir.join(RECORD_FILE)))
}

/// A file a command left in its private directory, read on the host without following a
/// link it may have put in its place, and at most `max` bytes of it. `None` when there is no
/// regular file.
fn read_record(host: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let meta = std::fs::symlink_metadata(host).ok().filter(std::fs::Metadata::is_file)?;
    // Never through a link, and never blocking on a FIFO swapped in after the check.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(host)
        .ok()?;
    let opened = file.metadata().ok()?;
    if (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn labels_round_trip_through_their_escaped_form() {
        let mut spec = CreateSpec::new(crate::NetworkPolicy::deny_all());
        spec.metadata = BTreeMap::from([
            ("team".to_owned(), "search".to_owned()),
            ("odd \"key\"=".to_owned(), "tab\there\nnewline \\ \u{7f} é".to_owned()),
        ]);
        let dir = std::env::temp_dir().join(format!("sandboxio-record-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_record(&dir, &spec).unwrap();
        let info = info("local-0000000000000000", &read(&dir).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(info.labels, spec.metadata);
        assert_eq!(info.owner_alive, Some(true));
        assert_eq!(info.detached, Some(false));
        assert!(info.age.is_some_and(|a| a.as_secs() < 5), "{info:?}");
        assert!(
            info.ttl_left.is_some_and(|t| t <= crate::builder::DEFAULT_TTL && t.as_secs() > 500),
            "{info:?}"
        );
    }

    #[test]
    fn a_malformed_label_is_skipped() {
        assert_eq!(label(r#""k"="v""#), Some(("k".to_owned(), "v".to_owned())));
        assert_eq!(label(r#""k"="v"#), None);
        assert_eq!(label(r#""k"="v"x"#), None);
        assert_eq!(label(r#"k="v""#), None);
    }
}
