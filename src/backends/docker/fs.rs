//! Files through execs run as the sandbox's user, so that permissions, links and mounts are
//! the container's own: a link the sandboxed code planted leads only where that user may go,
//! and a tmpfs or bind mount is written for real (the engine's archive API writes *under*
//! such mounts and still succeeds, moby/moby#22020, and acts as root). Each exec runs under
//! the process-group wrapper, so a dropped operation kills it.
//!
//! `upload` and `download` stream one tar archive through `tar -x`/`tar -c` in the sandbox
//! (built and read here with the `tar` crate, on a blocking thread), so no file is held whole
//! in memory. Paths reach the scripts as arguments, never spliced into shell text, and are
//! always absolute (so never mistaken for options).

use std::io::Read;
use std::sync::Arc;

use tokio::io::AsyncWriteExt as _;
use tokio_util::io::{StreamReader, SyncIoBridge};

use crate::error::{Error, Result};
use crate::exec::Command;
use crate::fs::DirEntry;

use super::Shared;
use super::exec::{self, AbortOnDrop, Collected, KillOnDrop, Launched};
use crate::backends::fs_scripts::{self, LIST, MKDIR, READ, REMOVE, WRITE};

fn absolute(shared: &Shared, path: &str) -> String {
    crate::path::resolve(&shared.workdir, path)
}

fn tar_error(abs: &str, e: std::io::Error) -> Error {
    Error::provider(super::SCHEME, format!("the archive of {abs}"), e)
}

/// Runs `sh -c script sandboxio-fs args...` as the sandbox's user with `stdin` (none: no
/// stdin), under the wrapper: `(exit code, stdout, stderr)`.
async fn fs_exec(
    shared: &Arc<Shared>,
    script: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<(i64, Vec<u8>, Vec<u8>)> {
    shared.check_alive()?;
    let command =
        Command::new("sh").arg("-c").arg(script).arg("sandboxio-fs").args(args.iter().copied()).cwd("/");
    let mut guard = KillOnDrop::new(shared);
    let Launched { exec_id, mut output, mut input, stdin_attached } =
        exec::launch(shared, &mut guard, &command, stdin.is_some(), false).await?;
    let data = stdin.map(<[u8]>::to_vec);
    let _writer = AbortOnDrop(tokio::spawn(async move {
        if let Some(data) = data {
            let _ = input.write_all(&data).await;
        }
        if stdin_attached {
            let _ = input.shutdown().await;
        }
        std::future::pending::<()>().await;
    }));
    let mut out = Collected::new(usize::MAX);
    exec::drain(&mut output, &mut out, |_, _| {})
        .await
        .map_err(|e| super::client::sandbox_error(&shared.id, "reading a file exec", e))?;
    let code = exec::exit_code(shared, &exec_id).await?;
    guard.disarm();
    Ok((code, out.stdout, out.stderr))
}

pub(super) async fn read(shared: &Arc<Shared>, path: &str) -> Result<Vec<u8>> {
    let abs = absolute(shared, path);
    let (code, out, err) = fs_exec(shared, READ, &[&abs], None).await?;
    fs_scripts::read_outcome(super::SCHEME, abs, code, out, &err)
}

pub(super) async fn write(shared: &Arc<Shared>, path: &str, data: Vec<u8>, mode: Option<u32>) -> Result<()> {
    let abs = absolute(shared, path);
    if abs == "/" {
        return Err(Error::IsADirectory { path: abs });
    }
    let mode = format!("{:o}", mode.unwrap_or(0o644) & 0o7777);
    let (code, _, err) = fs_exec(shared, WRITE, &[&abs, &mode], Some(&data)).await?;
    fs_scripts::write_outcome(super::SCHEME, abs, code, &err)
}

pub(super) async fn list(shared: &Arc<Shared>, path: &str) -> Result<Vec<DirEntry>> {
    let abs = absolute(shared, path);
    let (code, out, err) = fs_exec(shared, LIST, &[&abs], None).await?;
    fs_scripts::list_outcome(super::SCHEME, abs, code, &out, &err)
}

pub(super) async fn mkdir(shared: &Arc<Shared>, path: &str) -> Result<()> {
    let abs = absolute(shared, path);
    let (code, _, err) = fs_exec(shared, MKDIR, &[&abs], None).await?;
    fs_scripts::mkdir_outcome(super::SCHEME, &abs, code, &err)
}

pub(super) async fn remove(shared: &Arc<Shared>, path: &str, recursive: bool) -> Result<()> {
    let abs = absolute(shared, path);
    if abs == "/" || abs == shared.workdir {
        return Err(Error::PermissionDenied { path: abs });
    }
    let flag = if recursive { "1" } else { "0" };
    let (code, _, err) = fs_exec(shared, REMOVE, &[&abs, flag], None).await?;
    fs_scripts::remove_outcome(super::SCHEME, abs, code, &err)
}

fn split_parent(abs: &str) -> (String, String) {
    match abs.rsplit_once('/') {
        Some(("", name)) => ("/".to_owned(), name.to_owned()),
        Some((parent, name)) => (parent.to_owned(), name.to_owned()),
        None => ("/".to_owned(), abs.to_owned()),
    }
}

/// A reader that yields exactly `left` bytes or fails: a host file that shrinks or grows
/// while it is archived never corrupts the archive.
struct Exactly<R> {
    inner: std::io::Take<R>,
    left: u64,
}

impl<R: Read> Read for Exactly<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.left > 0 && !buf.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file shrank while uploading",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Appends the host tree at `host` to `builder` under the archive name `name`, never
/// following links (a host link or special file is skipped), files streamed from disk.
fn append_host_tree<W: std::io::Write>(
    builder: &mut tar::Builder<W>,
    host: &std::path::Path,
    name: &str,
) -> Result<()> {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
    let meta = std::fs::symlink_metadata(host).map_err(|e| crate::transfer::host_error(host, e))?;
    let mut header = tar::Header::new_gnu();
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
            append_host_tree(builder, &host.join(&child), &format!("{name}/{child_name}"))?;
        }
    } else if meta.is_file() {
        // Never through a link, and never blocking on a FIFO swapped in after the check.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(host)
            .map_err(|e| crate::transfer::host_error(host, e))?;
        // The file opened must be the one checked: a link swapped in between is refused.
        let opened = file.metadata().map_err(|e| crate::transfer::host_error(host, e))?;
        if (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
            return Err(Error::invalid_input(format!(
                "{} changed while uploading; upload never follows links",
                host.display()
            )));
        }
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(meta.len());
        let exact = Exactly { inner: file.take(meta.len()), left: meta.len() };
        builder.append_data(&mut header, name, exact).map_err(tar_err)?;
    } else {
        tracing::debug!(path = %host.display(), "upload skips a host link or special file");
    }
    Ok(())
}

/// Extracts the archive on stdin into `$1`, created first.
const UNTAR: &str = r#"mkdir -p "$1" && cd "$1" && exec tar -xf -"#;

/// `upload` as one tar stream: built on a blocking thread while `tar -x` in the sandbox
/// reads it, so no file is held whole in memory.
pub(super) async fn upload(shared: &Arc<Shared>, host_path: std::path::PathBuf, path: &str) -> Result<()> {
    shared.check_alive()?;
    let abs = absolute(shared, path);
    if abs == "/" {
        return Err(Error::invalid_input("upload needs a target path below /"));
    }
    let meta =
        std::fs::symlink_metadata(&host_path).map_err(|e| crate::transfer::host_error(&host_path, e))?;
    if !(meta.is_dir() || meta.is_file()) {
        return Err(Error::invalid_input(format!(
            "host path {} is a symlink or special file; upload never follows links",
            host_path.display()
        )));
    }
    let (parent, name) = split_parent(&abs);
    let command = Command::new("sh").arg("-c").arg(UNTAR).arg("sandboxio-fs").arg(&parent).cwd("/");
    let mut guard = KillOnDrop::new(shared);
    let Launched { exec_id, mut output, input, .. } =
        exec::launch(shared, &mut guard, &command, true, false).await?;
    let build = tokio::task::spawn_blocking(move || {
        let mut builder = tar::Builder::new(SyncIoBridge::new(input));
        let appended = append_host_tree(&mut builder, &host_path, &name);
        // Whatever happened, `tar -x` must see end-of-file, or it waits for more forever.
        let finished = builder.into_inner();
        let closed = match finished {
            Ok(mut input) => input.shutdown(),
            Err(e) => Err(e),
        };
        appended?;
        closed.map_err(|e| Error::provider(super::SCHEME, "finishing the archive", e))
    });
    let mut out = Collected::new(64 * 1024);
    let drained = exec::drain(&mut output, &mut out, |_, _| {}).await;
    let archived = build.await.map_err(|e| Error::provider(super::SCHEME, "the archive task panicked", e))?;
    drained.map_err(|e| super::client::sandbox_error(&shared.id, "uploading", e))?;
    let code = exec::exit_code(shared, &exec_id).await?;
    guard.disarm();
    // A host error explains a broken upload better than what `tar` said of it.
    archived?;
    if code == 0 { Ok(()) } else { Err(fs_scripts::exec_failure(super::SCHEME, &abs, &out.stderr)) }
}

/// Archives `$2` (a name in directory `$1`) to stdout.
const TAR: &str = r#"cd "$1" && [ -e "./$2" ] || { echo "No such file or directory" >&2; exit 3; }
exec tar -cf - "./$2""#;

/// `download` as one tar stream from `tar -c` in the sandbox, unpacked as it arrives. Every
/// entry name must stay under the archive's root (no `..`, no absolute name); links and
/// special files are skipped; nothing is written through a host link.
pub(super) async fn download(shared: &Arc<Shared>, path: &str, host_path: std::path::PathBuf) -> Result<()> {
    shared.check_alive()?;
    let abs = absolute(shared, path);
    if abs == "/" {
        return Err(Error::invalid_input("download needs a source path below /"));
    }
    let (parent, name) = split_parent(&abs);
    let command = Command::new("sh").arg("-c").arg(TAR).arg("sandboxio-fs").arg(&parent).arg(&name).cwd("/");
    let mut guard = KillOnDrop::new(shared);
    let Launched { exec_id, output, .. } = exec::launch(shared, &mut guard, &command, false, false).await?;
    // Stdout feeds the unpacker; stderr is kept for the error message.
    let stderr = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = Arc::clone(&stderr);
    let stdout = futures_lite::StreamExt::filter_map(output, move |frame| match frame {
        Ok(bollard::container::LogOutput::StdOut { message }) => Some(Ok(message)),
        Ok(bollard::container::LogOutput::StdErr { message }) => {
            let mut kept = keep.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if kept.len() < 64 * 1024 {
                kept.extend_from_slice(&message);
            }
            None
        }
        Ok(_) => None,
        Err(e) => Some(Err(std::io::Error::other(e))),
    });
    let reader = SyncIoBridge::new(StreamReader::new(stdout));
    let (abs_for_task, host) = (abs.clone(), host_path.clone());
    let unpacked = tokio::task::spawn_blocking(move || {
        let mut reader = reader;
        unpack(&mut reader, &abs_for_task, &host)?;
        // `tar` pads its output past the end-of-archive marker: read it all, so that `tar`
        // is not cut off mid-write (and exits 0).
        std::io::copy(&mut reader, &mut std::io::sink()).map_err(|e| tar_error(&abs_for_task, e))?;
        Ok(())
    })
    .await
    .map_err(|e| Error::provider(super::SCHEME, "the unpack task panicked", e))?;
    // An archive refused here (or cut short) ends the download now; the guard kills `tar`.
    unpacked?;
    let code = exec::exit_code(shared, &exec_id).await?;
    guard.disarm();
    let said = stderr.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    match code {
        0 => Ok(()),
        3 => Err(Error::NotFound { path: abs }),
        _ => Err(fs_scripts::exec_failure(super::SCHEME, &abs, &said)),
    }
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
                tar::EntryType::Link => {
                    // A second name of a file already unpacked: copy it from there.
                    let first =
                        entry.link_name().map_err(|e| tar_error(&abs, e))?.map(std::borrow::Cow::into_owned);
                    let source = first
                        .filter(|l| {
                            l.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
                        })
                        .and_then(|l| {
                            root.as_ref().and_then(|r| l.strip_prefix(r).ok().map(|rel| host_path.join(rel)))
                        })
                        .filter(|src| std::fs::symlink_metadata(src).is_ok_and(|m| m.is_file()));
                    match source {
                        Some(src) => {
                            let mut file = std::fs::File::open(&src)
                                .map_err(|e| crate::transfer::host_error(&src, e))?;
                            crate::transfer::write_host_file(&target, &mut file, mode)?;
                        }
                        None => {
                            tracing::debug!(entry = ?name, "download skips a hard link to outside the tree");
                        }
                    }
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
    use crate::fs::FileKind;

    #[test]
    fn parents_and_listings() {
        let listing = b"81a4 3\na b\x0041ed 4096\nd\n\x00a1ff 11\nlink\x00";
        let entries = fs_scripts::parse_listing("docker", "/w", listing).unwrap();
        assert_eq!(entries[0], DirEntry::new("a b", FileKind::File, 3, 0o644));
        assert_eq!(entries[1], DirEntry::new("d\n", FileKind::Dir, 0, 0o755));
        assert_eq!(entries[2].kind, FileKind::Symlink);
        assert!(fs_scripts::parse_listing("docker", "/w", b"81a4 3\nno-terminator").is_err());
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
