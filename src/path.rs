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
}
