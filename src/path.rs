//! Sandbox path rules shared by every backend.

use crate::error::{Error, Result};

/// Checks a sandbox path: non-empty, no NUL byte, no `..` component.
///
/// Relative paths are allowed; they resolve against the sandbox's default working
/// directory, the same one `run` uses.
///
/// # Errors
///
/// [`Error::InvalidInput`] naming the path.
pub fn validate(path: &str) -> Result<()> {
    if path.is_empty() {
        return Err(Error::invalid_input("empty path"));
    }
    if path.contains('\0') {
        return Err(Error::invalid_input(format!("NUL byte in path {path:?}")));
    }
    if path.split('/').any(|c| c == "..") {
        return Err(Error::invalid_input(format!("'..' component in path {path:?}")));
    }
    Ok(())
}

/// Joins `path` onto `cwd` (unless it is absolute) and removes `.` and empty components.
/// `path` must already have passed [`validate`].
#[must_use]
pub fn resolve(cwd: &str, path: &str) -> String {
    let joined = if path.starts_with('/') { path.to_owned() } else { format!("{cwd}/{path}") };
    let parts: Vec<&str> = joined.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    format!("/{}", parts.join("/"))
}

/// `e`, naming the sandbox path as the caller wrote it when it names `written` as a
/// backend resolved it (backends report absolute paths: `/workspace/a.txt` for `a.txt`), so
/// that every backend's `NotFound`, `PermissionDenied` and `IsADirectory` read alike. An
/// error about another path (a parent directory, a host path) is left as it is.
pub(crate) fn as_written(e: Error, written: &str) -> Error {
    let normal = resolve("/", written);
    let names_it = |reported: &str| {
        if written.starts_with('/') {
            reported == normal
        } else {
            // `normal` is `/` plus the relative path: the reported one ends with it, after
            // the working directory.
            normal != "/" && reported.ends_with(&normal)
        }
    };
    match e {
        Error::NotFound { path } if names_it(&path) => Error::NotFound { path: written.to_owned() },
        Error::PermissionDenied { path } if names_it(&path) => {
            Error::PermissionDenied { path: written.to_owned() }
        }
        Error::IsADirectory { path } if names_it(&path) => Error::IsADirectory { path: written.to_owned() },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        assert!(validate("a/b").is_ok());
        assert!(validate("/a/./b").is_ok());
        assert!(validate("a/../b").is_err());
        assert!(validate("..").is_err());
        assert!(validate("a\0b").is_err());
        assert!(validate("").is_err());
        assert_eq!(resolve("/work", "x/./y"), "/work/x/y");
        assert_eq!(resolve("/work", "/etc//z"), "/etc/z");
        assert_eq!(resolve("/", "."), "/");
    }

    #[test]
    fn errors_name_the_path_as_written() {
        let nf = |p: &str| Error::NotFound { path: p.to_owned() };
        let shown = |e: Error| e.to_string();
        assert_eq!(shown(as_written(nf("/workspace/a/b.txt"), "./a//b.txt")), shown(nf("./a//b.txt")));
        assert_eq!(shown(as_written(nf("/etc/x"), "/etc/./x")), shown(nf("/etc/./x")));
        let denied = Error::PermissionDenied { path: "/home/u/ro".into() };
        assert_eq!(shown(as_written(denied, "ro")), shown(Error::PermissionDenied { path: "ro".into() }));
        // Another path (a parent, a different file) keeps the backend's words.
        assert_eq!(shown(as_written(nf("/workspace/a"), "a/b.txt")), shown(nf("/workspace/a")));
        assert_eq!(shown(as_written(nf("/workspace/xb.txt"), "b.txt")), shown(nf("/workspace/xb.txt")));
        // A working directory of `/` still counts as the caller's path.
        assert_eq!(shown(as_written(nf("/b.txt"), "b.txt")), shown(nf("b.txt")));
    }
}
