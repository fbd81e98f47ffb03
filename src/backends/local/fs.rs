//! File operations on a local sandbox's workspace. Only paths under `/workspace` exist for
//! the API; each operation is done *inside* the sandbox by its sandboxd, so a link the
//! sandboxed code plants, or swaps in mid-operation, resolves in the sandbox's own view
//! (read-only system directories, its workspace and `/tmp`), never on the host.
//!
//! `read`, `write`, `list`, `mkdir` and `remove` are sandboxd's own file requests
//! ([`Session`](crate::sandboxd::session::Session)'s, bounded there); `upload` and `download`
//! stream one tar archive, one chunk at a time, through a `tar` command in the sandbox, and
//! dropping one drops its stream, which kills its process.

use std::path::Path;

use crate::backend::{BackendExecStream, TransferMeter};
use crate::error::{Error, Result};
use crate::fs::DirEntry;
use crate::sandboxd::session::Session;
use crate::sandboxd::session::transfer;

use super::sandbox::LocalSandbox;
use super::{SCHEME, WORKDIR};

/// The workspace path `path` stands for, or `PermissionDenied` outside the workspace.
fn workspace_path(path: &str) -> Result<String> {
    let abs = crate::path::resolve(WORKDIR, path);
    if abs == WORKDIR || abs.starts_with(&format!("{WORKDIR}/")) {
        Ok(abs)
    } else {
        Err(Error::PermissionDenied { path: abs })
    }
}

/// The sandbox's session, once the sandbox is known to be alive (its TTL not passed).
fn session(sandbox: &LocalSandbox) -> Result<&Session> {
    sandbox.state.check_alive()?;
    Ok(&sandbox.state.session)
}

/// Starts sandboxio's own commands (the archive scripts) through the session,
/// without the sandbox's secrets.
fn starter(sandbox: &LocalSandbox) -> impl crate::transfer::StartStream + '_ {
    move |command| {
        sandbox.state.check_alive()?;
        let stream = sandbox.state.session.stream_piped(&command, false)?;
        Ok(Box::new(stream) as Box<dyn BackendExecStream>)
    }
}

pub(super) async fn read(sandbox: &LocalSandbox, path: &str, limit: u64) -> Result<Vec<u8>> {
    let abs = workspace_path(path)?;
    session(sandbox)?.read_file(&abs, limit).await
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
    session(sandbox)?.write_file(&abs, &data, mode).await
}

pub(super) async fn list(sandbox: &LocalSandbox, path: &str) -> Result<Vec<DirEntry>> {
    let abs = workspace_path(path)?;
    session(sandbox)?.list_dir(&abs).await
}

pub(super) async fn mkdir(sandbox: &LocalSandbox, path: &str) -> Result<()> {
    let abs = workspace_path(path)?;
    session(sandbox)?.make_dir(&abs).await
}

pub(super) async fn remove(sandbox: &LocalSandbox, path: &str, recursive: bool) -> Result<()> {
    let abs = workspace_path(path)?;
    if abs == WORKDIR {
        return Err(Error::PermissionDenied { path: abs });
    }
    session(sandbox)?.remove_path(&abs, recursive).await
}

pub(super) async fn upload(
    sandbox: &LocalSandbox,
    host_path: &Path,
    path: &str,
    meter: TransferMeter,
) -> Result<()> {
    let abs = workspace_path(path)?;
    transfer::upload(starter(sandbox), SCHEME, host_path, &abs, WORKDIR, meter).await
}

pub(super) async fn download(
    sandbox: &LocalSandbox,
    path: &str,
    host_path: &Path,
    budget: u64,
    meter: TransferMeter,
) -> Result<()> {
    let abs = workspace_path(path)?;
    // sandboxd sends output only within the host's credit: no pacing needed.
    transfer::download(starter(sandbox), SCHEME, (&abs, WORKDIR), host_path, budget, false, meter).await
}
