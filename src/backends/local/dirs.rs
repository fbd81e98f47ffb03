//! The host directories of local sandboxes: the caller's private root, each sandbox's
//! directory in it (workspace, sandboxd's socket directory, user database), and their
//! removal.

use std::path::Path;
use std::process::Command as OsCommand;

use crate::error::{Error, Result};

use super::{ROOT_CALLER_SANDBOX_UID, SCHEME};

/// Makes sure the root of this user's workspaces is a real directory that this user owns and
/// no one else can change: another local user must never plant or swap files there (the
/// seccomp filter, or a workspace). `0700`, or for a root caller `0710` with the group of
/// [`ROOT_CALLER_SANDBOX_UID`]: its sandboxes must pass through it, and no other host user
/// may (a sandbox can open its own workspace up, even plant a setuid program there; a
/// host user who could reach it would become the sandbox uid).
pub(super) fn ensure_private_root(root: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    let refuse = |why: String| Error::Configuration { message: why, source: None };
    match std::fs::DirBuilder::new().mode(0o700).create(root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::provider(SCHEME, format!("cannot create {}", root.display()), e)),
    }
    let meta = std::fs::symlink_metadata(root)
        .map_err(|e| Error::provider(SCHEME, "cannot inspect the workspace root", e))?;
    if meta.file_type().is_symlink() || !meta.is_dir() || meta.uid() != current_uid() {
        return Err(refuse(format!(
            "the local workspace root {} is not a directory owned by this user; remove it (another user may have planted it)",
            root.display()
        )));
    }
    passable_by_the_sandbox_only(root, &meta)
        .map_err(|e| Error::provider(SCHEME, "cannot make the workspace root private", e))?;
    if meta.permissions().mode() & 0o777 != private_mode() {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(private_mode()))
            .map_err(|e| Error::provider(SCHEME, "cannot make the workspace root private", e))?;
    }
    Ok(())
}

/// The mode of the directories between the host and a workspace: `0710` (group: the
/// sandbox's) for a root caller, `0700` otherwise.
pub(super) fn private_mode() -> u32 {
    if run_as().is_some() { 0o710 } else { 0o700 }
}

/// Gives a directory root made the sandbox's group (root callers only), so that the sandbox
/// and no other host user can pass through it.
pub(super) fn passable_by_the_sandbox_only(dir: &Path, meta: &std::fs::Metadata) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    match run_as() {
        Some((_, gid)) if meta.gid() != gid => std::os::unix::fs::lchown(dir, None, Some(gid)),
        _ => Ok(()),
    }
}

/// The host uid and gid sandboxed code runs as when it is not the caller's own: `Some` for
/// a root caller.
pub(super) fn run_as() -> Option<(u32, u32)> {
    (current_uid() == 0).then_some((ROOT_CALLER_SANDBOX_UID, ROOT_CALLER_SANDBOX_UID))
}

/// Makes `path` (a directory sandboxio just created, in a directory the sandbox cannot
/// write) the sandbox user's, `0700`. Never follows a link.
pub(super) fn hand_over(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if !std::fs::symlink_metadata(path)?.is_dir() {
        return Err(std::io::Error::other("not a directory sandboxio made"));
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
    if let Some((uid, gid)) = run_as() {
        std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// The sandbox's own `/etc/passwd` and `/etc/group`: root, nobody, and `sandbox` for the
/// uid the code runs as (the host's user database is not shown).
pub(super) fn user_database(dir: &Path) -> std::io::Result<()> {
    let (uid, gid) = run_as().unwrap_or_else(|| (current_uid(), current_gid()));
    std::fs::write(
        dir.join("passwd"),
        format!(
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}:sandbox:/workspace:/bin/sh\n"
        ),
    )?;
    std::fs::write(dir.join("group"), format!("root:x:0:\nnogroup:x:65534:\nsandbox:x:{gid}:\n"))
}

/// 16 random hex digits from the kernel (sandbox ids: unguessable, and no owner pid in them).
pub(super) fn random_hex() -> String {
    use std::io::Read as _;
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).is_err() {
        use std::hash::{BuildHasher as _, Hasher as _};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
        );
        bytes = h.finish().to_ne_bytes();
    }
    bytes.iter().fold(String::with_capacity(16), |mut hex, b| {
        use std::fmt::Write as _;
        let _ = write!(hex, "{b:02x}");
        hex
    })
}

/// The real user id of this process (workspaces are kept per user, so that users on one
/// host never share or block each other's directory).
pub(super) fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
}

pub(super) fn current_gid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.gid())
}

/// Makes a sandbox's directory: the workspace and the `run` directory (the egress gate's
/// socket), owned by the uid the code runs as, and the sandbox's own user database.
/// sandboxd's socket goes in the directory itself (`session::bind_socket`), out of the
/// sandbox's reach.
pub(super) fn make_sandbox_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    std::fs::DirBuilder::new().mode(0o700).create(dir)?;
    // A root caller's sandbox user must pass through it to reach the workspace; no other
    // host user may.
    passable_by_the_sandbox_only(dir, &std::fs::symlink_metadata(dir)?)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(private_mode()))?;
    std::fs::create_dir(dir.join("workspace"))?;
    hand_over(&dir.join("workspace"))?;
    // Bound into the sandbox at `/run/sandboxio`: the egress gate's socket (never sandboxd's).
    std::fs::create_dir(dir.join("run"))?;
    hand_over(&dir.join("run"))?;
    user_database(dir)
}

/// Marks the record in `dir` expired (so that `LocalBackend::reap` sweeps whatever a
/// failed removal leaves), removes the workspace and the rest, and the record last.
pub(super) fn remove_sandbox_dir(dir: &Path) {
    let _ = super::record::set(dir, "expires", "0");
    for part in ["workspace", "run"] {
        if remove_tree(&dir.join(part)).is_err() {
            return;
        }
    }
    let _ = remove_tree(dir);
}

/// Removes a tree the sandboxed code wrote, without following links. Code can leave
/// directories it made unwritable or unreadable (`chmod 0`): for a caller that is not root
/// (and so owns them) they get `0700` back first; root needs no permission, and never
/// changes a mode by path in a tree the sandbox wrote. A tree deeper than the descriptors
/// `std`'s removal may hold goes to `rm -rf`, which removes trees of any depth.
pub(super) fn remove_tree(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Ok(()) => return Ok(()),
        Err(_) => {}
    }
    if run_as().is_none() {
        // Iterative: the code decides how deep the tree is.
        let mut dirs = Vec::new();
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
            dirs.push(path.to_path_buf());
        }
        while let Some(dir) = dirs.pop() {
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
            if let Ok(entries) = std::fs::read_dir(&dir) {
                dirs.extend(
                    entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()),
                );
            }
        }
    }
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Ok(()) => return Ok(()),
        Err(_) => {}
    }
    let removed = OsCommand::new("/bin/rm")
        .arg("-rf")
        .arg("--one-file-system")
        .arg("--")
        .arg(path)
        .env_clear()
        .status()?;
    if removed.success() && !path.exists() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("rm -rf could not remove {}", path.display())))
    }
}
