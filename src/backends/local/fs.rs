//! File operations on a local sandbox's workspace. Only paths under `/workspace` exist for
//! the API; each operation runs *inside* the sandbox, as a command in its namespaces (the
//! scripts shared with `docker://`), so a link the sandboxed code plants, or swaps in
//! mid-operation, resolves in the sandbox's own view (read-only system directories, its
//! workspace and `/tmp`), never on the host.
//!
//! Everything crosses through the command's exec stream: what the host reads back is
//! bounded (a read by its limit, a listing by [`fs_scripts::LIST_LIMIT`], a download by its
//! budget), `upload` and `download` stream one tar archive one chunk at a time, and
//! dropping an operation drops the stream, which kills its process.

use std::path::{Path, PathBuf};

use crate::backends::fs_scripts::{self, LIST, LIST_LIMIT, MKDIR, READ, REMOVE, WRITE};
use crate::error::{Error, Result};
use crate::exec::Command;
use crate::fs::DirEntry;

use super::{LocalSandbox, SCHEME, WORKDIR};

/// The host path of sandbox path `abs` (absolute, normalised), refusing paths outside the
/// workspace and any symlink on the way. Used only to check a working directory before a
/// command starts (the command itself resolves it inside the sandbox).
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

/// The workspace path `path` stands for, or `PermissionDenied` outside the workspace.
fn workspace_path(path: &str) -> Result<String> {
    let abs = crate::path::resolve(WORKDIR, path);
    if abs == WORKDIR || abs.starts_with(&format!("{WORKDIR}/")) {
        Ok(abs)
    } else {
        Err(Error::PermissionDenied { path: abs })
    }
}

/// Runs `script` with `args` inside the sandbox, `stdin` on its stdin: `(exit code,
/// stdout, stderr)`, stdout bounded by `stdout_cap` (past it the process is killed).
async fn in_sandbox(
    sandbox: &LocalSandbox,
    script: &str,
    args: &[&str],
    stdin: Option<Vec<u8>>,
    stdout_cap: u64,
) -> Result<(i64, Vec<u8>, Vec<u8>)> {
    let command =
        Command::new("/bin/sh").arg("-c").arg(script).arg("sandboxio-fs").args(args.iter().copied());
    crate::transfer::exec_via_stream(sandbox, command, stdin, stdout_cap).await
}

pub(super) async fn read(sandbox: &LocalSandbox, path: &str, limit: u64) -> Result<Vec<u8>> {
    let abs = workspace_path(path)?;
    let take = limit.saturating_add(1).to_string();
    let (code, out, err) = in_sandbox(sandbox, READ, &[&abs, &take], None, limit).await?;
    fs_scripts::read_outcome(SCHEME, abs, limit, code, out, &err)
}

pub(super) async fn write(
    sandbox: &LocalSandbox,
    path: &str,
    data: Vec<u8>,
    mode: Option<u32>,
) -> Result<()> {
    let abs = workspace_path(path)?;
    if abs == WORKDIR {
        return Err(Error::IsADirectory { path: abs });
    }
    let mode = format!("{:o}", mode.unwrap_or(0o644) & 0o777);
    let (code, _, err) = in_sandbox(sandbox, WRITE, &[&abs, &mode], Some(data), 0).await?;
    fs_scripts::write_outcome(SCHEME, abs, code, &err)
}

pub(super) async fn list(sandbox: &LocalSandbox, path: &str) -> Result<Vec<DirEntry>> {
    let abs = workspace_path(path)?;
    let (code, out, err) = in_sandbox(sandbox, LIST, &[&abs], None, LIST_LIMIT).await?;
    fs_scripts::list_outcome(SCHEME, abs, code, &out, &err)
}

pub(super) async fn mkdir(sandbox: &LocalSandbox, path: &str) -> Result<()> {
    let abs = workspace_path(path)?;
    let (code, _, err) = in_sandbox(sandbox, MKDIR, &[&abs], None, 0).await?;
    fs_scripts::mkdir_outcome(SCHEME, &abs, code, &err)
}

pub(super) async fn remove(sandbox: &LocalSandbox, path: &str, recursive: bool) -> Result<()> {
    let abs = workspace_path(path)?;
    if abs == WORKDIR {
        return Err(Error::PermissionDenied { path: abs });
    }
    let flag = if recursive { "1" } else { "0" };
    let (code, _, err) = in_sandbox(sandbox, REMOVE, &[&abs, flag], None, 0).await?;
    fs_scripts::remove_outcome(SCHEME, abs, code, &err)
}

/// The directory an archive for `abs` is extracted in (or archived from), and its root
/// entry's name; the workspace itself is `.` in the workspace.
fn split(abs: &str) -> (String, String) {
    if abs == WORKDIR {
        return (WORKDIR.to_owned(), ".".to_owned());
    }
    match abs.rsplit_once('/') {
        Some(("", name)) => ("/".to_owned(), name.to_owned()),
        Some((parent, name)) => (parent.to_owned(), name.to_owned()),
        None => (WORKDIR.to_owned(), abs.to_owned()),
    }
}

pub(super) async fn upload(sandbox: &LocalSandbox, host_path: &Path, path: &str) -> Result<()> {
    let abs = workspace_path(path)?;
    let (dir, name) = split(&abs);
    crate::transfer::upload_via_stream(sandbox, SCHEME, host_path, &abs, &dir, &name).await
}

pub(super) async fn download(
    sandbox: &LocalSandbox,
    path: &str,
    host_path: &Path,
    budget: u64,
) -> Result<()> {
    let abs = workspace_path(path)?;
    let (dir, name) = split(&abs);
    crate::transfer::download_via_stream(sandbox, SCHEME, &abs, &dir, &name, host_path, budget).await
}
