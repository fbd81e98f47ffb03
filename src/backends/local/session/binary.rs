//! The sandboxd binary every local sandbox runs as its init, written once per process (and
//! per build of sandboxd) to a cache file that is then bound read-only into each sandbox.
//!
//! The file lives in the caller's workspace root, a directory only the caller owns (`0700`;
//! `0710` with the sandbox's group for a root caller, so that the sandbox's uid can reach
//! it), under a name that carries the binary's length and hash: a file of another build is
//! never taken for this one. It is written to a temporary name and renamed into place, mode
//! `0555`, so no process ever sees it half written, and a sandbox running an older copy
//! keeps its inode.
//!
//! **`ETXTBSY`**: while the file is open for writing, a child that another thread of the
//! caller forks holds a copy of that descriptor until the child `exec`s, and executing the
//! file meanwhile fails with "Text file busy". The descriptor is closed before the rename,
//! so the window is the length of one `fork`+`exec` elsewhere in the process; starting a
//! sandbox retries a bounded number of times when bwrap reports it ([`is_text_busy`]).

use std::hash::Hasher as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Result};

use crate::backends::local::SCHEME;

/// The path of the cache file under `root`, writing it on the first call of this process.
///
/// # Errors
///
/// [`Error::Provider`] when this build has no sandboxd, or the file cannot be written.
pub(crate) fn installed(root: &Path) -> Result<PathBuf> {
    static INSTALLED: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| install(root))
        .clone()
        .map_err(|why| Error::provider_message(SCHEME, format!("cannot place sandboxd: {why}")))
}

fn install(root: &Path) -> std::result::Result<PathBuf, String> {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
    let binary = crate::sandboxd::BINARY
        .ok_or("this build of sandboxio has no sandboxd (build.rs said why in a cargo warning)")?;
    let mut hash = std::collections::hash_map::DefaultHasher::new();
    hash.write(binary);
    let path =
        root.join(format!("sandboxd-{}-{}-{:016x}", env!("CARGO_PKG_VERSION"), binary.len(), hash.finish()));
    // Only this user writes in `root` (checked by `ensure_private_root`): a file of the right
    // name, length, owner and mode is this binary.
    if let Ok(meta) = std::fs::symlink_metadata(&path)
        && meta.is_file()
        && meta.len() == binary.len() as u64
        && meta.uid() == crate::backends::local::dirs::current_uid()
        && meta.mode() & 0o7777 == 0o555
    {
        return Ok(path);
    }
    let tmp = root.join(format!(".sandboxd-{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(&tmp)
        .and_then(|mut f| f.write_all(binary).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o555)))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("writing {}: {e}", path.display()));
    }
    Ok(path)
}

/// Whether bwrap's words say it could not execute sandboxd because the file was busy
/// (see the module docs).
pub(super) fn is_text_busy(said: &str) -> bool {
    said.contains("Text file busy")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_binary_is_written_once_read_only_and_reused() {
        let root = std::env::temp_dir().join(format!("sandboxio-binary-test-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let first = super::install(&root).unwrap();
        let meta = std::fs::metadata(&first).unwrap();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o555);
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        let again = super::install(&root).unwrap();
        assert_eq!(first, again);
        assert_eq!(std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&again).unwrap()), inode);
        assert_eq!(std::fs::read(&again).unwrap(), crate::sandboxd::BINARY.unwrap());
        assert!(super::is_text_busy("bwrap: execvp /.sandboxio/sandboxd: Text file busy"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
