//! Default upload and download, built on a backend's file primitives.
//!
//! Host-side rules: links are never followed (a host symlink is skipped on upload; a sandbox
//! symlink is skipped on download), and nothing is written outside the host target: every
//! name coming from the sandbox is checked to be a plain single path component, and an
//! existing host symlink is never written through. Host I/O runs on a library thread
//! ([`crate::runtime`]), never on the caller's executor. Whole files are held in memory
//! while they cross; adapters with a bulk transfer should override these.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::backend::BackendSandbox;
use crate::error::{Error, Result};
use crate::fs::FileKind;
use crate::runtime::unblock;

enum HostItem {
    Dir(String),
    File(String, Vec<u8>, u32),
}

pub(crate) fn host_error(path: &Path, e: io::Error) -> Error {
    let shown = path.display().to_string();
    match e.kind() {
        io::ErrorKind::NotFound => Error::NotFound { path: shown },
        io::ErrorKind::PermissionDenied => Error::PermissionDenied { path: shown },
        _ => Error::Provider {
            backend: "host".into(),
            message: format!("host file error at {shown}: {e}"),
            source: Some(Box::new(e)),
        },
    }
}

#[cfg(unix)]
fn mode_of(meta: &fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o777
}

#[cfg(not(unix))]
fn mode_of(meta: &fs::Metadata) -> u32 {
    if meta.permissions().readonly() { 0o444 } else { 0o644 }
}

/// Reads the host tree at `root` without following links. `rel` is the path under the
/// sandbox target, `""` for the root itself.
fn collect_host(root: &Path, rel: &str, out: &mut Vec<HostItem>) -> Result<()> {
    let meta = fs::symlink_metadata(root).map_err(|e| host_error(root, e))?;
    if meta.file_type().is_symlink() {
        tracing::debug!(path = %root.display(), "upload skips a host symlink");
        return Ok(());
    }
    if meta.is_dir() {
        out.push(HostItem::Dir(rel.to_owned()));
        let mut names: Vec<_> = fs::read_dir(root)
            .map_err(|e| host_error(root, e))?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect::<io::Result<_>>()
            .map_err(|e| host_error(root, e))?;
        names.sort();
        for name in names {
            let Some(name_str) = name.to_str() else {
                return Err(Error::invalid_input(format!(
                    "host file name {} under {} is not UTF-8",
                    name.display(),
                    root.display()
                )));
            };
            let child_rel = if rel.is_empty() { name_str.to_owned() } else { format!("{rel}/{name_str}") };
            collect_host(&root.join(&name), &child_rel, out)?;
        }
    } else if meta.is_file() {
        let data = fs::read(root).map_err(|e| host_error(root, e))?;
        out.push(HostItem::File(rel.to_owned(), data, mode_of(&meta)));
    }
    Ok(())
}

fn join(base: &str, rel: &str) -> String {
    if rel.is_empty() { base.to_owned() } else { format!("{}/{rel}", base.trim_end_matches('/')) }
}

pub(crate) async fn upload_via_primitives<S: BackendSandbox + ?Sized>(
    sandbox: &S,
    host_path: &Path,
    path: &str,
) -> Result<()> {
    let root = host_path.to_path_buf();
    let items = unblock(move || {
        let mut items = Vec::new();
        collect_host(&root, "", &mut items).map(|()| items)
    })
    .await?;
    if items.is_empty() {
        return Err(Error::invalid_input(format!(
            "host path {} is a symlink or special file; upload never follows links",
            host_path.display()
        )));
    }
    for item in items {
        match item {
            HostItem::Dir(rel) => sandbox.mkdir(&join(path, &rel)).await?,
            HostItem::File(rel, data, mode) => sandbox.write(&join(path, &rel), data, Some(mode)).await?,
        }
    }
    Ok(())
}

enum SandboxItem {
    Dir(PathBuf, u32),
    File(PathBuf, Vec<u8>, u32),
}

/// A name listed by the sandbox, accepted only if it is one plain path component.
fn safe_component(name: &str) -> Result<&str> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(Error::invalid_input(format!(
            "the sandbox listed an entry named {name:?}, which would escape the host target"
        )));
    }
    Ok(name)
}

pub(crate) async fn download_via_primitives<S: BackendSandbox + ?Sized>(
    sandbox: &S,
    path: &str,
    host_path: &Path,
) -> Result<()> {
    let mut items = Vec::new();
    // Is `path` a directory? Listing its parent tells the kind without following links.
    let trimmed = path.trim_end_matches('/');
    let (parent, name) = match trimmed.rsplit_once('/') {
        Some((p, n)) => (if p.is_empty() { "/" } else { p }, n),
        None => (".", trimmed),
    };
    let (kind, mode) = if name.is_empty() || name == "." {
        (FileKind::Dir, 0o755)
    } else {
        let entries = sandbox.list(parent).await?;
        entries
            .into_iter()
            .find(|e| e.name == name)
            .map(|e| (e.kind, e.mode))
            .ok_or_else(|| Error::NotFound { path: path.to_owned() })?
    };
    match kind {
        FileKind::Dir => {
            let mut stack = vec![(path.to_owned(), host_path.to_path_buf())];
            items.push(SandboxItem::Dir(host_path.to_path_buf(), mode));
            while let Some((dir, host_dir)) = stack.pop() {
                for entry in sandbox.list(&dir).await? {
                    let component = safe_component(&entry.name)?;
                    let child = join(&dir, component);
                    let host_child = host_dir.join(component);
                    match entry.kind {
                        FileKind::Dir => {
                            items.push(SandboxItem::Dir(host_child.clone(), entry.mode));
                            stack.push((child, host_child));
                        }
                        FileKind::File => {
                            let data = sandbox.read(&child).await?;
                            items.push(SandboxItem::File(host_child, data, entry.mode));
                        }
                        FileKind::Symlink | FileKind::Other => {
                            tracing::debug!(path = %child, "download skips a sandbox link or special file");
                        }
                    }
                }
            }
        }
        FileKind::File => {
            let data = sandbox.read(path).await?;
            items.push(SandboxItem::File(host_path.to_path_buf(), data, mode));
        }
        FileKind::Symlink | FileKind::Other => {
            return Err(Error::invalid_input(format!(
                "sandbox path {path:?} is a link or special file; download never follows links"
            )));
        }
    }
    unblock(move || write_host(items)).await
}

fn refuse_symlink(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(Error::invalid_input(format!(
            "host target {} is a symlink; download never writes through links",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Permission bits a download keeps: never setuid, setgid or sticky.
const KEPT_MODE_BITS: u32 = 0o777;

fn write_host(items: Vec<SandboxItem>) -> Result<()> {
    for item in items {
        match item {
            SandboxItem::Dir(dir, mode) => ensure_host_dir(&dir, mode)?,
            SandboxItem::File(file, data, mode) => write_host_file(&file, &mut data.as_slice(), mode)?,
        }
    }
    Ok(())
}

/// Makes `dir` a directory on the host (never through a link) with `mode` (kept bits only,
/// and always owner-accessible). For adapters' own bulk downloads too.
pub(crate) fn ensure_host_dir(dir: &Path, mode: u32) -> Result<()> {
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_symlink() => refuse_symlink(dir)?,
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(Error::invalid_input(format!(
                "host target {} exists and is not a directory",
                dir.display()
            )));
        }
        Err(_) => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs::create_dir_all(parent).map_err(|e| host_error(parent, e))?;
            }
            // `create_dir` (not `_all`) fails on anything already there, a link
            // planted since the check included.
            fs::create_dir(dir).map_err(|e| host_error(dir, e))?;
        }
    }
    set_mode(dir, (mode & KEPT_MODE_BITS) | 0o700)
}

/// Writes a host file from `data` (streamed), replacing it, never writing through a link,
/// keeping only plain permission bits. For adapters' own bulk downloads too.
pub(crate) fn write_host_file(file: &Path, data: &mut dyn io::Read, mode: u32) -> Result<()> {
    refuse_symlink(file)?;
    if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| host_error(parent, e))?;
    }
    write_replacing(file, data, mode & KEPT_MODE_BITS)
}

/// Writes `data` to a new temporary file beside `target`, then renames it over `target`.
/// The rename replaces whatever directory entry `target` is (a link planted after the check
/// included) instead of writing through it.
fn write_replacing(target: &Path, data: &mut dyn io::Read, mode: u32) -> Result<()> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = target.with_file_name(format!(".{name}.sandboxio-{}-{n}.tmp", std::process::id()));
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| host_error(&tmp, e))?;
        io::copy(data, &mut file).map_err(|e| host_error(&tmp, e))?;
        set_mode(&tmp, mode)?;
        fs::rename(&tmp, target).map_err(|e| host_error(target, e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|e| host_error(path, e))
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> Result<()> {
    Ok(())
}
