//! Resolving a container's user (`name`, `uid`, `name:group`, `uid:gid`) to numbers from
//! the `passwd` and `group` files the caller trusts, as the engine's runtime (runc) does: a
//! name must exist; a numeric uid may be missing from `passwd` (its gid is then 0 and its
//! home `/`).
//!
//! Which files are trusted ([`Source`]): a plain image's own `/etc/passwd` and `/etc/group`
//! (the image as built, read before the container starts), but for a template's image the
//! copies of its *base* image's files that the host placed after the setup
//! ([`BASE_PASSWD`], [`BASE_GROUP`]): the setup runs as root and could rewrite the image's
//! own, say map the base's user to uid 0 (issue 27, hole 5). Whatever the files say, a
//! resolution to uid 0 that the spec did not ask for (`root`, `0`, or no user) is refused
//! ([`vet`]).

mod read;

use crate::error::{Error, Result};

pub(super) use read::{read_small_file, resolve_user};

/// Where a template image holds its base image's `/etc/passwd`, as the base was built
/// (empty when the base had none): placed by the host after the setup, in sandboxd's
/// directory (owned by [`SUPERVISOR_ID`](super::SUPERVISOR_ID), mode `0555`), so neither
/// the setup nor a sandbox user can write it.
pub(super) const BASE_PASSWD: &str = "/.sandboxio/base-passwd";

/// Where a template image holds its base image's `/etc/group` (see [`BASE_PASSWD`]).
pub(super) const BASE_GROUP: &str = "/.sandboxio/base-group";

/// The user the engine would run a command as when asked for `user`: root when none is set.
pub(super) fn user_spec(user: Option<&str>) -> &str {
    user.filter(|u| !u.is_empty()).unwrap_or("0")
}

/// Which `passwd` and `group` files a sandbox's user is resolved against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// The image's own `/etc/passwd` and `/etc/group`.
    Image,
    /// A template image's copies of its base image's files ([`BASE_PASSWD`], [`BASE_GROUP`]).
    TemplateBase,
}

impl Source {
    /// The `passwd` and `group` paths in the container.
    pub(super) fn paths(self) -> (&'static str, &'static str) {
        match self {
            Source::Image => ("/etc/passwd", "/etc/group"),
            Source::TemplateBase => (BASE_PASSWD, BASE_GROUP),
        }
    }

    /// The value of the container label [`USERS`](super::labels::USERS).
    pub(super) fn label(self) -> &'static str {
        match self {
            Source::Image => "image",
            Source::TemplateBase => "template-base",
        }
    }

    /// The source a container's [`USERS`](super::labels::USERS) label names (containers
    /// from before the label: the image's own files).
    pub(super) fn of_label(value: Option<&str>) -> Source {
        if value == Some(Source::TemplateBase.label()) { Source::TemplateBase } else { Source::Image }
    }

    fn describe(self) -> &'static str {
        match self {
            Source::Image => "the image's /etc/passwd",
            Source::TemplateBase => {
                "the template's base image's /etc/passwd (a template's setup cannot change who its sandboxes run as)"
            }
        }
    }
}

/// Whether user spec `spec` asks for root: its user part is `root`, `0` or empty (the
/// engine's default).
pub(super) fn asks_for_root(spec: &str) -> bool {
    matches!(spec.split(':').next().unwrap_or(""), "" | "0" | "root")
}

/// `resolved` when it is what `spec` may be: uid 0 only when `spec` asks for root.
///
/// # Errors
///
/// As [`refuse_unasked_root`].
pub(super) fn vet(spec: &str, resolved: Resolved, source: Source) -> Result<Resolved> {
    refuse_unasked_root(spec, resolved.uid, source)?;
    Ok(resolved)
}

/// Refuses uid `uid` for user spec `spec` when it is 0 and `spec` does not ask for root.
///
/// # Errors
///
/// [`Error::Configuration`] for a spec that does not ask for root resolving to uid 0.
pub(super) fn refuse_unasked_root(spec: &str, uid: u32, source: Source) -> Result<()> {
    if uid == 0 && !asks_for_root(spec) {
        return Err(Error::configuration(format!(
            "the sandbox user {spec:?} resolves to uid 0 (root) in {}, and root was not asked for; name root (`user=0`) to run as root",
            source.describe()
        )));
    }
    Ok(())
}

/// A resolved sandbox user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Resolved {
    /// The uid.
    pub uid: u32,
    /// The primary gid.
    pub gid: u32,
    /// The home directory from `/etc/passwd` (`/` when the user has no entry).
    pub home: String,
}

/// Resolves `spec` against the texts of `source`'s `passwd` and `group` files (`None`:
/// missing), refusing an unasked-for root ([`vet`]).
///
/// # Errors
///
/// [`Error::Configuration`] naming a user or group the files do not have, or a user that
/// resolves to uid 0 without asking for root.
pub(super) fn resolve(
    spec: &str,
    passwd: Option<&str>,
    group: Option<&str>,
    source: Source,
) -> Result<Resolved> {
    vet(spec, resolve_unvetted(spec, passwd, group, source)?, source)
}

fn resolve_unvetted(
    spec: &str,
    passwd: Option<&str>,
    group: Option<&str>,
    source: Source,
) -> Result<Resolved> {
    let (user, group_spec) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let entries = || passwd.unwrap_or("").lines().filter_map(passwd_entry);
    let found = match user.parse::<u32>() {
        Ok(uid) => entries().find(|e| e.1 == uid).map_or(
            Resolved { uid, gid: 0, home: "/".into() },
            |(_, uid, gid, home)| Resolved { uid, gid, home: home.to_owned() },
        ),
        Err(_) => entries()
            .find(|e| e.0 == user)
            .map(|(_, uid, gid, home)| Resolved { uid, gid, home: home.to_owned() })
            .ok_or_else(|| {
                Error::configuration(match source {
                    Source::Image => format!("the image has no user {user:?} in its /etc/passwd"),
                    Source::TemplateBase => format!(
                        "the template's base image has no user {user:?} in its /etc/passwd (users a template's setup adds are not trusted by name: give one as uid:gid)"
                    ),
                })
            })?,
    };
    let Some(group_spec) = group_spec else { return Ok(found) };
    let gid = match group_spec.parse::<u32>() {
        Ok(gid) => gid,
        Err(_) => group
            .unwrap_or("")
            .lines()
            .find_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?;
                let gid = fields.nth(1)?.parse::<u32>().ok()?;
                (name == group_spec).then_some(gid)
            })
            .ok_or_else(|| {
                Error::configuration(match source {
                    Source::Image => format!("the image has no group {group_spec:?} in its /etc/group"),
                    Source::TemplateBase => format!(
                        "the template's base image has no group {group_spec:?} in its /etc/group (groups a template's setup adds are not trusted by name: give a gid)"
                    ),
                })
            })?,
    };
    Ok(Resolved { gid, ..found })
}

/// The archive that places a template base's `passwd` and `group` (`None`: the base had
/// none; placed empty, which resolves names to nothing, as a missing file does) at
/// [`BASE_PASSWD`] and [`BASE_GROUP`]: mode `0444`, in a directory of mode `0555`, both
/// owned by [`SUPERVISOR_ID`](super::SUPERVISOR_ID) as sandboxd's are.
pub(super) fn base_archive(passwd: Option<&[u8]>, group: Option<&[u8]>) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let entry = |kind: tar::EntryType, size: usize, mode: u32| {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_size(size as u64);
        header.set_mode(mode);
        header.set_uid(u64::from(super::SUPERVISOR_ID));
        header.set_gid(u64::from(super::SUPERVISOR_ID));
        header.set_mtime(0);
        header
    };
    let dir = super::sandboxd_path::SANDBOXD_DIR.trim_start_matches('/');
    builder.append_data(
        &mut entry(tar::EntryType::Directory, 0, 0o555),
        format!("{dir}/"),
        std::io::empty(),
    )?;
    for (path, data) in [(BASE_PASSWD, passwd), (BASE_GROUP, group)] {
        let data = data.unwrap_or_default();
        let mut header = entry(tar::EntryType::Regular, data.len(), 0o444);
        builder.append_data(&mut header, path.trim_start_matches('/'), data)?;
    }
    builder.into_inner()
}

/// `(name, uid, gid, home)` of a `/etc/passwd` line.
fn passwd_entry(line: &str) -> Option<(&str, u32, u32, &str)> {
    let fields: Vec<&str> = line.split(':').collect();
    if fields.len() < 6 || line.starts_with('#') {
        return None;
    }
    Some((fields[0], fields[2].parse().ok()?, fields[3].parse().ok()?, fields[5]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str =
        "root:x:0:0:root:/root:/bin/sh\n# comment\nbroken\nsbx:x:1000:1001::/home/sbx:/bin/sh\n";
    const GROUP: &str = "root:x:0:\nstaff:x:50:sbx\n";

    fn r(uid: u32, gid: u32, home: &str) -> Resolved {
        Resolved { uid, gid, home: home.into() }
    }

    #[test]
    fn names_and_numbers_resolve_as_runc_does() {
        assert_eq!(resolve("0", Some(PASSWD), None, Source::Image).unwrap(), r(0, 0, "/root"));
        assert_eq!(resolve("sbx", Some(PASSWD), None, Source::Image).unwrap(), r(1000, 1001, "/home/sbx"));
        assert_eq!(resolve("1000", Some(PASSWD), None, Source::Image).unwrap(), r(1000, 1001, "/home/sbx"));
        assert_eq!(resolve("4242", Some(PASSWD), None, Source::Image).unwrap(), r(4242, 0, "/"));
        assert_eq!(resolve("4242", None, None, Source::Image).unwrap(), r(4242, 0, "/"));
        assert_eq!(
            resolve("sbx:staff", Some(PASSWD), Some(GROUP), Source::Image).unwrap(),
            r(1000, 50, "/home/sbx")
        );
        assert_eq!(resolve("sbx:7", Some(PASSWD), None, Source::Image).unwrap(), r(1000, 7, "/home/sbx"));
        assert_eq!(resolve("5:6", None, None, Source::Image).unwrap(), r(5, 6, "/"));
    }

    #[test]
    fn unknown_names_are_configuration_errors_naming_them() {
        let e = resolve("nobody-here", Some(PASSWD), None, Source::Image).unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::Configuration);
        assert!(e.to_string().contains("nobody-here"), "{e}");
        let e = resolve("sbx:nogroup", Some(PASSWD), Some(GROUP), Source::Image).unwrap_err();
        assert!(e.to_string().contains("nogroup"), "{e}");
        assert!(resolve("sbx", None, None, Source::Image).is_err());
        let e = resolve("added-by-setup", Some(PASSWD), None, Source::TemplateBase).unwrap_err();
        assert!(e.to_string().contains("uid:gid"), "{e}");
    }

    #[test]
    fn root_comes_only_when_asked_for() {
        // A passwd whose non-root names map to uid 0, as a template's setup rewrote it.
        const REMAPPED: &str = "root:x:0:0:root:/root:/bin/sh\nsbx:x:0:0::/home/sbx:/bin/sh\n";
        for spec in ["root", "0", "0:0", "root:5", ""] {
            assert!(asks_for_root(spec), "{spec:?}");
        }
        assert_eq!(resolve("root", Some(REMAPPED), None, Source::Image).unwrap().uid, 0);
        assert_eq!(resolve("0:7", None, None, Source::Image).unwrap(), r(0, 7, "/"));
        for spec in ["sbx", "sbx:0", "sbx:root"] {
            for source in [Source::Image, Source::TemplateBase] {
                let e = resolve(spec, Some(REMAPPED), Some(GROUP), source).unwrap_err();
                assert_eq!(e.code(), crate::ErrorCode::Configuration, "{spec:?}: {e}");
                assert!(e.to_string().contains("uid 0") && e.to_string().contains("user=0"), "{e}");
            }
        }
        // A gid of 0 is not root: images (OpenShift's among them) give users group 0.
        assert_eq!(resolve("sbx:0", Some(PASSWD), None, Source::Image).unwrap(), r(1000, 0, "/home/sbx"));
        let vetted = vet("sandbox", r(0, 0, "/"), Source::TemplateBase).unwrap_err();
        assert!(vetted.to_string().contains("base image"), "{vetted}");
        assert_eq!(Source::of_label(Some("template-base")), Source::TemplateBase);
        assert_eq!(Source::of_label(None), Source::Image);
        assert_eq!(Source::of_label(Some(Source::Image.label())), Source::Image);
    }
}
