//! Files through the engine's archive API (`GET`/`PUT /containers/{id}/archive`), with tar
//! archives built and read by the `tar` crate, or through an exec where the archive API
//! cannot reach: a tmpfs or a bind mount (the engine writes *under* such a mount and still
//! succeeds, moby/moby#22020), and directory creation and removal, which run as the
//! sandbox's user so that permissions are the container's own.
//!
//! Archives are parsed as they stream in, on a blocking thread, so listing a large
//! directory never holds its files in memory.

use std::io::Read;
use std::sync::Arc;

use bollard::query_parameters::{DownloadFromContainerOptions, UploadToContainerOptions};
use futures_lite::StreamExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio_util::io::{StreamReader, SyncIoBridge};

use crate::error::{Error, Result};
use crate::fs::{DirEntry, FileKind};

use super::Shared;
use super::client::{provider, status};
use super::exec;

/// Paths under these are mounts the archive API does not see (Docker's own tmpfs and bind
/// mounts); file operations there go through an exec.
const EXEC_ONLY: &[&str] = &["/dev", "/proc", "/sys", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"];

fn exec_only(abs: &str) -> bool {
    EXEC_ONLY.iter().any(|m| abs == *m || abs.strip_prefix(m).is_some_and(|rest| rest.starts_with('/')))
}

fn absolute(shared: &Shared, path: &str) -> String {
    crate::path::resolve(&shared.workdir, path)
}

/// Maps an archive error for `abs`: a missing path is `NotFound`, a missing container is
/// `SandboxGone`.
fn archive_error(shared: &Shared, abs: &str, doing: &str, e: bollard::errors::Error) -> Error {
    if let bollard::errors::Error::DockerResponseServerError { status_code, message } = &e {
        if message.contains("No such container") || *status_code == 409 {
            return Error::SandboxGone {
                id: shared.id.clone(),
                message: "its container no longer exists".into(),
            };
        }
        if *status_code == 404 {
            return Error::NotFound { path: abs.to_owned() };
        }
        if message.contains("ermission denied") {
            return Error::PermissionDenied { path: abs.to_owned() };
        }
    }
    provider(doing, e)
}

/// A blocking reader over the tar archive of `abs`, for use inside `spawn_blocking`.
async fn archive(shared: &Shared, abs: &str) -> Result<impl Read + Send + 'static> {
    let mut body = Box::pin(
        shared
            .docker
            .download_from_container(&shared.id, Some(DownloadFromContainerOptions { path: abs.to_owned() })),
    );
    // The first chunk tells whether the path exists; errors after it are I/O errors.
    let first = match body.next().await {
        Some(Ok(bytes)) => bytes,
        Some(Err(e)) => return Err(archive_error(shared, abs, "reading an archive", e)),
        None => bytes::Bytes::new(),
    };
    let rest = body.map(|chunk| chunk.map_err(std::io::Error::other));
    let stream = futures_lite::stream::once(Ok(first)).chain(rest);
    Ok(SyncIoBridge::new(StreamReader::new(stream)))
}

async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::provider(super::SCHEME, "a file task panicked", e))?
}

fn tar_error(abs: &str, e: std::io::Error) -> Error {
    Error::provider(super::SCHEME, format!("reading the archive of {abs}"), e)
}

pub(super) async fn read(shared: &Arc<Shared>, path: &str) -> Result<Vec<u8>> {
    shared.check_alive()?;
    let mut abs = absolute(shared, path);
    // A link is followed inside the container's own file system, as `cat` would.
    for _ in 0..16 {
        if exec_only(&abs) {
            return read_by_exec(shared, &abs).await;
        }
        let reader = archive(shared, &abs).await?;
        let abs_for_task = abs.clone();
        let found = blocking(move || {
            let mut archive = tar::Archive::new(reader);
            let mut entries = archive.entries().map_err(|e| tar_error(&abs_for_task, e))?;
            let Some(entry) = entries.next() else {
                return Err(Error::NotFound { path: abs_for_task });
            };
            let mut entry = entry.map_err(|e| tar_error(&abs_for_task, e))?;
            match entry.header().entry_type() {
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let mut data = Vec::with_capacity(usize::try_from(entry.size()).unwrap_or(0));
                    entry.read_to_end(&mut data).map_err(|e| tar_error(&abs_for_task, e))?;
                    Ok(Ok(data))
                }
                tar::EntryType::Directory => Err(Error::IsADirectory { path: abs_for_task }),
                tar::EntryType::Symlink => {
                    let target = entry
                        .link_name()
                        .map_err(|e| tar_error(&abs_for_task, e))?
                        .map(|t| t.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    Ok(Err(target))
                }
                _ => Err(Error::invalid_input(format!("{abs_for_task} is not a regular file"))),
            }
        })
        .await?;
        match found {
            Ok(data) => return Ok(data),
            Err(target) => {
                let parent = abs.rsplit_once('/').map_or("/", |(p, _)| if p.is_empty() { "/" } else { p });
                abs = crate::path::resolve(parent, &target);
            }
        }
    }
    Err(Error::invalid_input(format!("too many levels of links under {path}")))
}

async fn read_by_exec(shared: &Arc<Shared>, abs: &str) -> Result<Vec<u8>> {
    let (code, out, err) = exec::run_raw(
        shared,
        &["sh", "-c", r#"[ -d "$1" ] && exit 21; exec cat -- "$1""#, "sandboxio-read", abs],
    )
    .await?;
    match code {
        0 => Ok(out),
        21 => Err(Error::IsADirectory { path: abs.to_owned() }),
        _ => Err(exec_failure(abs, &err)),
    }
}

/// Maps a failed file exec by what the tool said.
fn exec_failure(abs: &str, stderr: &[u8]) -> Error {
    let said = String::from_utf8_lossy(stderr);
    if said.contains("No such file") || said.contains("Not a directory") {
        Error::NotFound { path: abs.to_owned() }
    } else if said.contains("ermission denied") || said.contains("Read-only file system") {
        Error::PermissionDenied { path: abs.to_owned() }
    } else if said.contains("Is a directory") {
        Error::IsADirectory { path: abs.to_owned() }
    } else {
        Error::provider(
            super::SCHEME,
            format!("a file operation on {abs} failed"),
            std::io::Error::other(said.trim().to_owned()),
        )
    }
}

/// The numeric owner of files the sandbox's user writes.
async fn owner_ids(shared: &Arc<Shared>) -> Result<(u64, u64)> {
    shared
        .ids
        .get_or_try_init(|| async {
            let Some(user) = shared.user.clone() else { return Ok((0, 0)) };
            let (name, group) = user.split_once(':').map_or((user.as_str(), None), |(u, g)| (u, Some(g)));
            let numeric = |s: &str| s.parse::<u64>().ok();
            if let Some(uid) = numeric(name) {
                return Ok((uid, group.and_then(numeric).unwrap_or(uid)));
            }
            let passwd = String::from_utf8_lossy(&read(shared, "/etc/passwd").await?).into_owned();
            passwd
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .find(|f| f.len() > 3 && f[0] == name)
                .and_then(|f| Some((numeric(f[2])?, numeric(f[3])?)))
                .ok_or_else(|| {
                    Error::configuration(format!("user {name:?} is not in the image's /etc/passwd"))
                })
        })
        .await
        .copied()
}

fn split_parent(abs: &str) -> (String, String) {
    match abs.rsplit_once('/') {
        Some(("", name)) => ("/".to_owned(), name.to_owned()),
        Some((parent, name)) => (parent.to_owned(), name.to_owned()),
        None => ("/".to_owned(), abs.to_owned()),
    }
}

pub(super) async fn write(shared: &Arc<Shared>, path: &str, data: Vec<u8>, mode: Option<u32>) -> Result<()> {
    shared.check_alive()?;
    let abs = absolute(shared, path);
    if abs == "/" {
        return Err(Error::IsADirectory { path: abs });
    }
    if exec_only(&abs) {
        let mode = format!("{:o}", mode.unwrap_or(0o644));
        let mut launched = exec::start_raw(
            shared,
            [
                "sh",
                "-c",
                r#"[ -d "$1" ] && exit 21; cat > "$1" && chmod "$2" "$1""#,
                "sandboxio-write",
                &abs,
                &mode,
            ]
            .map(str::to_owned)
            .to_vec(),
            Vec::new(),
            true,
        )
        .await?;
        let _ = launched.input.write_all(&data).await;
        let _ = launched.input.shutdown().await;
        let mut out = exec::Collected::new(64 * 1024);
        exec::drain(&mut launched.output, &mut out, |_, _| {})
            .await
            .map_err(|e| provider("writing a file", e))?;
        return match exec::exit_code(shared, &launched.exec_id).await? {
            0 => Ok(()),
            21 => Err(Error::IsADirectory { path: abs }),
            _ => Err(exec_failure(&abs, &out.stderr)),
        };
    }
    let (uid, gid) = owner_ids(shared).await?;
    let (parent, name) = split_parent(&abs);
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(data.len() as u64);
    header.set_mode(mode.unwrap_or(0o644) & 0o7777);
    header.set_uid(uid);
    header.set_gid(gid);
    header.set_mtime(super::labels::unix_now());
    let mut builder = tar::Builder::new(Vec::with_capacity(data.len() + 2048));
    builder.append_data(&mut header, &name, data.as_slice()).map_err(|e| tar_error(&abs, e))?;
    let body = bytes::Bytes::from(builder.into_inner().map_err(|e| tar_error(&abs, e))?);
    for attempt in 0..2 {
        let put = shared
            .docker
            .upload_to_container(
                &shared.id,
                Some(UploadToContainerOptions {
                    path: parent.clone(),
                    no_overwrite_dir_non_dir: Some("true".into()),
                    copy_uidgid: None,
                }),
                bollard::body_full(body.clone()),
            )
            .await;
        match put {
            Ok(()) => return Ok(()),
            Err(e)
                if attempt == 0
                    && status(&e) == Some(404)
                    && !e.to_string().contains("No such container") =>
            {
                // The parent is missing: create it as the sandbox's user, then retry once.
                mkdir(shared, &parent).await?;
            }
            Err(e) if e.to_string().contains("directory") && status(&e).is_some_and(|s| s != 404) => {
                return Err(Error::IsADirectory { path: abs });
            }
            Err(e) => return Err(archive_error(shared, &abs, "writing a file", e)),
        }
    }
    Err(Error::NotFound { path: parent })
}

pub(super) async fn list(shared: &Arc<Shared>, path: &str) -> Result<Vec<DirEntry>> {
    shared.check_alive()?;
    let abs = absolute(shared, path);
    if exec_only(&abs) {
        return Err(Error::unsupported(
            super::SCHEME,
            format!("listing {abs} (a mount the archive API cannot read)"),
        ));
    }
    let reader = archive(shared, &abs).await?;
    let abs_for_task = abs.clone();
    blocking(move || {
        let mut archive = tar::Archive::new(reader);
        let mut entries = archive.entries().map_err(|e| tar_error(&abs_for_task, e))?;
        let root = match entries.next() {
            Some(entry) => entry.map_err(|e| tar_error(&abs_for_task, e))?,
            None => return Err(Error::NotFound { path: abs_for_task }),
        };
        match root.header().entry_type() {
            tar::EntryType::Directory => {}
            tar::EntryType::Symlink => {
                return Err(Error::invalid_input(format!("{abs_for_task} is a link, not a directory")));
            }
            _ => return Err(Error::invalid_input(format!("{abs_for_task} is not a directory"))),
        }
        let root_name = root.path().map_err(|e| tar_error(&abs_for_task, e))?.into_owned();
        drop(root);
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| tar_error(&abs_for_task, e))?;
            let path = entry.path().map_err(|e| tar_error(&abs_for_task, e))?.into_owned();
            let Ok(rel) = path.strip_prefix(&root_name) else { continue };
            let mut parts = rel.components();
            let (Some(first), None) = (parts.next(), parts.next()) else { continue };
            let header = entry.header();
            let kind = match header.entry_type() {
                tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::Link => FileKind::File,
                tar::EntryType::Directory => FileKind::Dir,
                tar::EntryType::Symlink => FileKind::Symlink,
                _ => FileKind::Other,
            };
            let size = if kind == FileKind::Dir { 0 } else { header.size().unwrap_or(0) };
            let mode = header.mode().unwrap_or(0) & 0o7777;
            out.push(DirEntry::new(first.as_os_str().to_string_lossy(), kind, size, mode));
        }
        Ok(out)
    })
    .await
}

pub(super) async fn mkdir(shared: &Arc<Shared>, path: &str) -> Result<()> {
    shared.check_alive()?;
    let abs = absolute(shared, path);
    let (code, _, err) = exec::run_raw(
        shared,
        &[
            "sh",
            "-c",
            r#"[ -d "$1" ] && exit 0; [ -e "$1" ] && exit 22; mkdir -p -- "$1""#,
            "sandboxio-mkdir",
            &abs,
        ],
    )
    .await?;
    match code {
        0 => Ok(()),
        22 => Err(Error::invalid_input(format!("{abs} exists and is not a directory"))),
        _ => Err(exec_failure(&abs, &err)),
    }
}

/// `remove`: exit 3 is a missing path, 4 a non-empty directory without `recursive`.
const REMOVE: &str = r#"p=$1
[ -e "$p" ] || [ -L "$p" ] || exit 3
if [ -d "$p" ] && [ ! -L "$p" ]; then
  if [ "$2" = 1 ]; then rm -rf -- "$p"; else rmdir -- "$p" 2>/dev/null || exit 4; fi
else
  rm -f -- "$p"
fi"#;

pub(super) async fn remove(shared: &Arc<Shared>, path: &str, recursive: bool) -> Result<()> {
    shared.check_alive()?;
    let abs = absolute(shared, path);
    if abs == "/" || abs == shared.workdir {
        return Err(Error::PermissionDenied { path: abs });
    }
    let flag = if recursive { "1" } else { "0" };
    let (code, _, err) = exec::run_raw(shared, &["sh", "-c", REMOVE, "sandboxio-remove", &abs, flag]).await?;
    match code {
        0 => Ok(()),
        3 => Err(Error::NotFound { path: abs }),
        4 => Err(Error::IsADirectory { path: abs }),
        _ => Err(exec_failure(&abs, &err)),
    }
}

/// Whether `upload`/`download` of `path` can use one archive stream (else the core's
/// per-file default, through exec for mounts).
pub(super) fn bulk_reachable(shared: &Shared, path: &str) -> bool {
    let abs = absolute(shared, path);
    abs != "/" && !exec_only(&abs)
}

/// Appends the host tree at `host` to `builder` under the archive name `name`, never
/// following links (a host link or special file is skipped), files streamed from disk.
fn append_host_tree<W: std::io::Write>(
    builder: &mut tar::Builder<W>,
    host: &std::path::Path,
    name: &str,
    owner: (u64, u64),
) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::symlink_metadata(host).map_err(|e| crate::transfer::host_error(host, e))?;
    let mut header = tar::Header::new_gnu();
    header.set_uid(owner.0);
    header.set_gid(owner.1);
    header.set_mode(meta.permissions().mode() & 0o777);
    header.set_mtime(super::labels::unix_now());
    let tar_err = |e| Error::provider(super::SCHEME, format!("archiving {}", host.display()), e);
    if meta.is_dir() {
        header.set_entry_type(tar::EntryType::Directory);
        header.set_size(0);
        builder.append_data(&mut header, format!("{name}/"), std::io::empty()).map_err(tar_err)?;
        let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(host)
            .map_err(|e| crate::transfer::host_error(host, e))?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect::<std::io::Result<_>>()
            .map_err(|e| crate::transfer::host_error(host, e))?;
        names.sort();
        for child in names {
            let Some(child_name) = child.to_str() else {
                return Err(Error::invalid_input(format!("host file name {} is not UTF-8", child.display())));
            };
            append_host_tree(builder, &host.join(&child), &format!("{name}/{child_name}"), owner)?;
        }
    } else if meta.is_file() {
        let file = std::fs::File::open(host).map_err(|e| crate::transfer::host_error(host, e))?;
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(meta.len());
        builder.append_data(&mut header, name, file).map_err(tar_err)?;
    } else {
        tracing::debug!(path = %host.display(), "upload skips a host link or special file");
    }
    Ok(())
}

/// `upload` as one tar stream: built on a blocking thread while the engine reads it, so no
/// file is held whole in memory.
pub(super) async fn upload(shared: &Arc<Shared>, host_path: std::path::PathBuf, path: &str) -> Result<()> {
    shared.check_alive()?;
    let abs = absolute(shared, path);
    let meta =
        std::fs::symlink_metadata(&host_path).map_err(|e| crate::transfer::host_error(&host_path, e))?;
    if !(meta.is_dir() || meta.is_file()) {
        return Err(Error::invalid_input(format!(
            "host path {} is a symlink or special file; upload never follows links",
            host_path.display()
        )));
    }
    let owner = owner_ids(shared).await?;
    let (parent, name) = split_parent(&abs);
    mkdir(shared, &parent).await?;
    let (writer, reader) = tokio::io::duplex(256 * 1024);
    let build = tokio::task::spawn_blocking(move || {
        let mut builder = tar::Builder::new(SyncIoBridge::new(writer));
        append_host_tree(&mut builder, &host_path, &name, owner)?;
        builder.finish().map_err(|e| Error::provider(super::SCHEME, "finishing the archive", e))
        // Dropping the builder drops the writer: the engine sees the end of the body.
    });
    let put = shared
        .docker
        .upload_to_container(
            &shared.id,
            Some(UploadToContainerOptions {
                path: parent,
                no_overwrite_dir_non_dir: Some("true".into()),
                copy_uidgid: None,
            }),
            bollard::body_try_stream(tokio_util::io::ReaderStream::new(reader)),
        )
        .await;
    let archived = build.await.map_err(|e| Error::provider(super::SCHEME, "the archive task panicked", e))?;
    // A host error explains a broken upload better than the engine's view of it.
    archived?;
    put.map_err(|e| match e {
        e if e.to_string().contains("directory") && status(&e).is_some_and(|s| s != 404) => {
            Error::IsADirectory { path: abs.clone() }
        }
        e => archive_error(shared, &abs, "uploading", e),
    })
}

/// `download` as one tar stream, unpacked as it arrives. Every entry name must stay under
/// the archive's root (no `..`, no absolute name); links and special files are skipped;
/// nothing is written through a host link.
pub(super) async fn download(shared: &Arc<Shared>, path: &str, host_path: std::path::PathBuf) -> Result<()> {
    shared.check_alive()?;
    let abs = absolute(shared, path);
    let reader = archive(shared, &abs).await?;
    blocking(move || unpack(reader, &abs, &host_path)).await
}

/// Unpacks the archive of sandbox path `abs` into `host_path` (see [`download`]).
fn unpack(reader: impl Read, abs: &str, host_path: &std::path::Path) -> Result<()> {
    use std::path::{Component, Path};
    let abs = abs.to_owned();
    let host_path = host_path.to_path_buf();
    {
        let mut archive = tar::Archive::new(reader);
        let mut root: Option<std::path::PathBuf> = None;
        for entry in archive.entries().map_err(|e| tar_error(&abs, e))? {
            let mut entry = entry.map_err(|e| tar_error(&abs, e))?;
            let name = entry.path().map_err(|e| tar_error(&abs, e))?.into_owned();
            if name.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
                return Err(Error::invalid_input(format!(
                    "the archive of {abs} holds an entry named {}, which would escape the host target",
                    name.display()
                )));
            }
            let rel = match &root {
                None => {
                    root = Some(name.clone());
                    Path::new("").to_path_buf()
                }
                Some(root) => match name.strip_prefix(root) {
                    Ok(rel) => rel.to_path_buf(),
                    Err(_) => {
                        return Err(Error::invalid_input(format!(
                            "the archive of {abs} holds {} outside its root {}",
                            name.display(),
                            root.display()
                        )));
                    }
                },
            };
            let target = if rel.as_os_str().is_empty() { host_path.clone() } else { host_path.join(&rel) };
            let mode = entry.header().mode().unwrap_or(0o644);
            match entry.header().entry_type() {
                tar::EntryType::Directory => crate::transfer::ensure_host_dir(&target, mode)?,
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    crate::transfer::write_host_file(&target, &mut entry, mode)?;
                }
                _ if rel.as_os_str().is_empty() => {
                    return Err(Error::invalid_input(format!(
                        "sandbox path {abs:?} is a link or special file; download never follows links"
                    )));
                }
                _ => tracing::debug!(entry = ?name, "download skips a sandbox link or special file"),
            }
        }
        if root.is_none() {
            return Err(Error::NotFound { path: abs });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_go_through_exec() {
        assert!(exec_only("/dev/shm/x"));
        assert!(exec_only("/etc/hosts"));
        assert!(!exec_only("/etc/hostsx"));
        assert!(!exec_only("/workspace/dev"));
        assert_eq!(split_parent("/a"), ("/".to_owned(), "a".to_owned()));
        assert_eq!(split_parent("/a/b c"), ("/a".to_owned(), "b c".to_owned()));
    }

    /// A tar with `entries` (name, kind, data), written raw so that hostile names survive.
    fn archive_of(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, kind, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_size(data.len() as u64);
            header.set_mode(0o4755);
            if *kind == tar::EntryType::Symlink {
                header.set_link_name("/etc/passwd").unwrap();
            }
            // `set_path` refuses `..`; write the name bytes directly, as a hostile peer would.
            let bytes = name.as_bytes();
            header.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
            header.set_cksum();
            builder.append(&header, *data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sbx-unpack-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn unpack_keeps_files_drops_links_and_setuid() {
        let dir = scratch("ok");
        let tar = archive_of(&[
            ("out/", tar::EntryType::Directory, b""),
            ("out/a b.txt", tar::EntryType::Regular, b"\x00\xff data"),
            ("out/link", tar::EntryType::Symlink, b""),
        ]);
        unpack(tar.as_slice(), "/workspace/out", &dir.join("o")).unwrap();
        assert_eq!(std::fs::read(dir.join("o/a b.txt")).unwrap(), b"\x00\xff data");
        assert!(std::fs::symlink_metadata(dir.join("o/link")).is_err());
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.join("o/a b.txt")).unwrap().permissions(),
        );
        assert_eq!(mode & 0o7000, 0, "setuid kept: {mode:o}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn unpack_refuses_escaping_names() {
        for hostile in ["out/../../escaped", "/etc/escaped", "other/escaped"] {
            let dir = scratch("bad");
            let tar = archive_of(&[
                ("out/", tar::EntryType::Directory, b""),
                (hostile, tar::EntryType::Regular, b"x"),
            ]);
            let err = unpack(tar.as_slice(), "/workspace/out", &dir.join("o")).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidInput, "{hostile}: {err}");
            assert!(!dir.join("escaped").exists() && !std::path::Path::new("/etc/escaped").exists());
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
