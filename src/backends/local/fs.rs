//! File operations on a local sandbox's workspace, from the host side, confined to it:
//! only paths under `/workspace` exist for the API, and no symbolic link inside the
//! workspace is ever followed on the host (a command in the sandbox may plant one).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fs::{DirEntry, FileKind};

use super::{State, WORKDIR};

/// The host path of sandbox path `abs` (absolute, normalised), refusing paths outside the
/// workspace and any symlink on the way.
pub(super) fn host_path(workspace: &Path, abs: &str) -> Result<PathBuf> {
    let rest = abs.strip_prefix(WORKDIR).ok_or_else(|| Error::PermissionDenied { path: abs.to_owned() })?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return Err(Error::PermissionDenied { path: abs.to_owned() });
    }
    let mut host = workspace.to_path_buf();
    for component in rest.split('/').filter(|c| !c.is_empty()) {
        host.push(component);
        if let Ok(meta) = std::fs::symlink_metadata(&host)
            && meta.file_type().is_symlink()
        {
            return Err(Error::invalid_input(format!(
                "{abs:?} goes through a symbolic link, which is never followed on the host"
            )));
        }
    }
    Ok(host)
}

fn io_error(abs: &str, e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::NotFound { path: abs.to_owned() },
        std::io::ErrorKind::PermissionDenied => Error::PermissionDenied { path: abs.to_owned() },
        std::io::ErrorKind::IsADirectory => Error::IsADirectory { path: abs.to_owned() },
        _ => Error::provider("local", format!("file operation on {abs} failed"), e),
    }
}

/// Resolves `path` and runs `op` on its host path on a library thread.
async fn with_host<T, F>(state: &Arc<State>, path: &str, op: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(PathBuf, String) -> Result<T> + Send + 'static,
{
    state.check_alive()?;
    let abs = crate::path::resolve(WORKDIR, path);
    let host = host_path(&state.workspace(), &abs)?;
    crate::runtime::unblock(move || op(host, abs)).await
}

pub(super) async fn read(state: &Arc<State>, path: &str) -> Result<Vec<u8>> {
    with_host(state, path, |host, abs| {
        if host.is_dir() {
            return Err(Error::IsADirectory { path: abs });
        }
        std::fs::read(&host).map_err(|e| io_error(&abs, e))
    })
    .await
}

fn make_parents(workspace: &Path, host: &Path, abs: &str) -> Result<()> {
    let parent = host.parent().unwrap_or(workspace);
    std::fs::create_dir_all(parent).map_err(|e| io_error(abs, e))?;
    // Created parents cannot be links, but ones a command made might be: check again.
    let rel = parent.strip_prefix(workspace).unwrap_or(Path::new(""));
    host_path(workspace, &format!("{WORKDIR}/{}", rel.display())).map(drop)
}

pub(super) async fn write(state: &Arc<State>, path: &str, data: Vec<u8>, mode: Option<u32>) -> Result<()> {
    let workspace = state.workspace();
    with_host(state, path, move |host, abs| {
        if host.is_dir() {
            return Err(Error::IsADirectory { path: abs });
        }
        make_parents(&workspace, &host, &abs)?;
        std::fs::write(&host, data).map_err(|e| io_error(&abs, e))?;
        if let Some(mode) = mode {
            std::fs::set_permissions(&host, std::fs::Permissions::from_mode(mode & 0o777))
                .map_err(|e| io_error(&abs, e))?;
        }
        Ok(())
    })
    .await
}

pub(super) async fn list(state: &Arc<State>, path: &str) -> Result<Vec<DirEntry>> {
    with_host(state, path, |host, abs| {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&host).map_err(|e| io_error(&abs, e))? {
            let entry = entry.map_err(|e| io_error(&abs, e))?;
            let meta = std::fs::symlink_metadata(entry.path()).map_err(|e| io_error(&abs, e))?;
            let kind = if meta.file_type().is_symlink() {
                FileKind::Symlink
            } else if meta.is_dir() {
                FileKind::Dir
            } else if meta.is_file() {
                FileKind::File
            } else {
                FileKind::Other
            };
            let size = if kind == FileKind::Dir { 0 } else { meta.len() };
            entries.push(DirEntry::new(
                entry.file_name().to_string_lossy(),
                kind,
                size,
                meta.permissions().mode() & 0o7777,
            ));
        }
        Ok(entries)
    })
    .await
}

pub(super) async fn mkdir(state: &Arc<State>, path: &str) -> Result<()> {
    let workspace = state.workspace();
    with_host(state, path, move |host, abs| {
        std::fs::create_dir_all(&host).map_err(|e| io_error(&abs, e))?;
        let rel = host.strip_prefix(&workspace).unwrap_or(Path::new(""));
        host_path(&workspace, &format!("{WORKDIR}/{}", rel.display())).map(drop)
    })
    .await
}

pub(super) async fn remove(state: &Arc<State>, path: &str, recursive: bool) -> Result<()> {
    with_host(state, path, move |host, abs| {
        if host == Path::new("") || abs == WORKDIR {
            return Err(Error::PermissionDenied { path: abs });
        }
        let meta = std::fs::symlink_metadata(&host).map_err(|e| io_error(&abs, e))?;
        if meta.is_dir() {
            if recursive {
                // remove_dir_all does not follow links inside the tree.
                std::fs::remove_dir_all(&host).map_err(|e| io_error(&abs, e))
            } else {
                std::fs::remove_dir(&host).map_err(|e| match e.kind() {
                    std::io::ErrorKind::DirectoryNotEmpty => Error::IsADirectory { path: abs.clone() },
                    _ => io_error(&abs, e),
                })
            }
        } else {
            std::fs::remove_file(&host).map_err(|e| io_error(&abs, e))
        }
    })
    .await
}
