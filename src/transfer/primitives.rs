//! The default upload and download every backend inherits: one entry at a time through the
//! sandbox's `list`, `read`, `mkdir` and `write`, with host I/O on library threads.

use std::fs;
use std::io;
use std::path::Path;

use super::host_writer::HostWriter;
use super::progress::TransferMeter;
use super::{charge, host_error, over_budget, sorted_names};
use crate::backend::BackendSandbox;
use crate::error::{Error, Result};
use crate::fs::FileKind;
use crate::runtime::unblock;

#[cfg(unix)]
fn mode_of(meta: &fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o777
}

#[cfg(not(unix))]
fn mode_of(meta: &fs::Metadata) -> u32 {
    if meta.permissions().readonly() { 0o444 } else { 0o644 }
}

fn join(base: &str, rel: &str) -> String {
    if rel.is_empty() { base.to_owned() } else { format!("{}/{rel}", base.trim_end_matches('/')) }
}

/// Reads the host tree at `root` without following links, into `(relative path, is_dir,
/// mode)`; contents are read later, one file at a time.
fn collect_host(root: &Path, rel: &str, out: &mut Vec<(String, bool, u32)>) -> Result<()> {
    let meta = fs::symlink_metadata(root).map_err(|e| host_error(root, e))?;
    if meta.file_type().is_symlink() {
        tracing::debug!(path = %root.display(), "upload skips a host symlink");
        return Ok(());
    }
    if meta.is_dir() {
        out.push((rel.to_owned(), true, mode_of(&meta)));
        for name in sorted_names(root)? {
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
        out.push((rel.to_owned(), false, mode_of(&meta)));
    }
    Ok(())
}

/// The default upload: the host tree walked without following links, then
/// [`BackendSandbox::mkdir`] and [`BackendSandbox::write`] per entry, holding one file in
/// memory at a time. Each file's bytes are counted into `meter` once it is written.
pub(crate) async fn upload_via_primitives<S: BackendSandbox + ?Sized>(
    sandbox: &S,
    host_path: &Path,
    path: &str,
    meter: TransferMeter,
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
    for (rel, dir, mode) in items {
        if dir {
            sandbox.mkdir(&join(path, &rel)).await?;
        } else {
            let file = if rel.is_empty() { host_path.to_path_buf() } else { host_path.join(&rel) };
            let data = unblock(move || read_host_file(&file)).await?;
            let sent = data.len() as u64;
            sandbox.write(&join(path, &rel), data, Some(mode)).await?;
            meter.add(sent);
        }
    }
    Ok(())
}

/// Reads a host file for upload, never through a link (a link swapped in since the walk is
/// refused).
fn read_host_file(file: &Path) -> Result<Vec<u8>> {
    use io::Read as _;
    let meta = fs::symlink_metadata(file).map_err(|e| host_error(file, e))?;
    if !meta.is_file() {
        return Err(Error::invalid_input(format!("{} changed while uploading", file.display())));
    }
    let mut opened = fs::File::open(file).map_err(|e| host_error(file, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let now = opened.metadata().map_err(|e| host_error(file, e))?;
        if (now.dev(), now.ino()) != (meta.dev(), meta.ino()) {
            return Err(Error::invalid_input(format!("{} changed while uploading", file.display())));
        }
    }
    let mut data = Vec::new();
    opened.read_to_end(&mut data).map_err(|e| host_error(file, e))?;
    Ok(data)
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

/// The default download: the sandbox tree walked with [`BackendSandbox::list`] and
/// [`BackendSandbox::read`], each read bounded by what is left of `budget` (512 bytes are
/// charged per entry, as an archive would). Each file's bytes are counted into `meter`
/// once it is on the host's disk.
pub(crate) async fn download_via_primitives<S: BackendSandbox + ?Sized>(
    sandbox: &S,
    path: &str,
    (host_path, budget): (&Path, u64),
    meter: TransferMeter,
) -> Result<()> {
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
    let mut used = 0u64;
    let mut writer = HostWriter::new(host_path);
    match kind {
        FileKind::Dir => {
            charge(&mut used, 512, budget, path)?;
            let host = host_path.to_path_buf();
            writer = unblock(move || writer.dir(&host, mode).map(|()| writer)).await?;
            let mut stack = vec![(path.to_owned(), host_path.to_path_buf())];
            while let Some((dir, host_dir)) = stack.pop() {
                for entry in sandbox.list(&dir).await? {
                    let component = safe_component(&entry.name)?;
                    let child = join(&dir, component);
                    let host_child = host_dir.join(component);
                    match entry.kind {
                        FileKind::Dir => {
                            charge(&mut used, 512, budget, path)?;
                            let host = host_child.clone();
                            let mode = entry.mode;
                            writer = unblock(move || writer.dir(&host, mode).map(|()| writer)).await?;
                            stack.push((child, host_child));
                        }
                        FileKind::File => {
                            charge(&mut used, 512, budget, path)?;
                            let left = budget - used;
                            let data = sandbox.read(&child, left).await.map_err(|e| match e {
                                Error::TooLarge { .. } => over_budget(path, budget),
                                other => other,
                            })?;
                            charge(&mut used, data.len() as u64, budget, path)?;
                            let landed = data.len() as u64;
                            writer = unblock(move || {
                                write_whole(&mut writer, &host_child, &data, entry.mode).map(|()| writer)
                            })
                            .await?;
                            meter.add(landed);
                        }
                        FileKind::Symlink | FileKind::Other => {
                            tracing::debug!(path = %crate::text::Escaped(&child), "download skips a sandbox link or special file");
                        }
                    }
                }
            }
        }
        FileKind::File => {
            charge(&mut used, 512, budget, path)?;
            let data = sandbox.read(path, budget - used).await.map_err(|e| match e {
                Error::TooLarge { .. } => over_budget(path, budget),
                other => other,
            })?;
            let host = host_path.to_path_buf();
            let landed = data.len() as u64;
            writer = unblock(move || write_whole(&mut writer, &host, &data, mode).map(|()| writer)).await?;
            meter.add(landed);
        }
        FileKind::Symlink | FileKind::Other => {
            return Err(Error::invalid_input(format!(
                "sandbox path {path:?} is a link or special file; download never follows links"
            )));
        }
    }
    writer.keep();
    Ok(())
}

fn write_whole(writer: &mut HostWriter, file: &Path, data: &[u8], mode: u32) -> Result<()> {
    use io::Write as _;
    let mut out = writer.file(file, mode)?;
    out.write_all(data).map_err(|e| host_error(file, e))
}
