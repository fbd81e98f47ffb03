//! Resolving a container's user (`name`, `uid`, `name:group`, `uid:gid`) to numbers from its
//! `/etc/passwd` and `/etc/group`, as the engine's runtime (runc) does: a name must exist; a
//! numeric uid may be missing from `/etc/passwd` (its gid is then 0 and its home `/`).

use crate::error::{Error, Result};

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

/// Resolves `spec` against the texts of `/etc/passwd` and `/etc/group` (`None`: missing).
///
/// # Errors
///
/// [`Error::Configuration`] naming a user or group the files do not have.
pub(super) fn resolve(spec: &str, passwd: Option<&str>, group: Option<&str>) -> Result<Resolved> {
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
                Error::configuration(format!("the image has no user {user:?} in its /etc/passwd"))
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
                Error::configuration(format!("the image has no group {group_spec:?} in its /etc/group"))
            })?,
    };
    Ok(Resolved { gid, ..found })
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
        assert_eq!(resolve("0", Some(PASSWD), None).unwrap(), r(0, 0, "/root"));
        assert_eq!(resolve("sbx", Some(PASSWD), None).unwrap(), r(1000, 1001, "/home/sbx"));
        assert_eq!(resolve("1000", Some(PASSWD), None).unwrap(), r(1000, 1001, "/home/sbx"));
        assert_eq!(resolve("4242", Some(PASSWD), None).unwrap(), r(4242, 0, "/"));
        assert_eq!(resolve("4242", None, None).unwrap(), r(4242, 0, "/"));
        assert_eq!(resolve("sbx:staff", Some(PASSWD), Some(GROUP)).unwrap(), r(1000, 50, "/home/sbx"));
        assert_eq!(resolve("sbx:7", Some(PASSWD), None).unwrap(), r(1000, 7, "/home/sbx"));
        assert_eq!(resolve("5:6", None, None).unwrap(), r(5, 6, "/"));
    }

    #[test]
    fn unknown_names_are_configuration_errors_naming_them() {
        let e = resolve("nobody-here", Some(PASSWD), None).unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::Configuration);
        assert!(e.to_string().contains("nobody-here"), "{e}");
        let e = resolve("sbx:nogroup", Some(PASSWD), Some(GROUP)).unwrap_err();
        assert!(e.to_string().contains("nogroup"), "{e}");
        assert!(resolve("sbx", None, None).is_err());
    }
}
