//! Files on `docker://`'s exec-API path (on the sandboxd path they are the session's
//! requests, `sandboxd_path/sandbox.rs`).
//!
//! Files go through execs run as the sandbox's user, so that permissions, links and
//! mounts are the container's own: a link the sandboxed code planted leads only where that user may go,
//! and a tmpfs or bind mount is written for real (the engine's archive API writes *under*
//! such mounts and still succeeds, moby/moby#22020, and acts as root). Each exec runs under
//! the process-group wrapper, so a dropped operation kills it.
//!
//! `upload` and `download` stream one tar archive through `tar -x`/`tar -c` in the sandbox
//! (built with the `tar` crate and read by [`crate::transfer::Unpacker`], on a blocking
//! thread), so no file is held whole in memory. Everything the host reads from an exec is
//! bounded (a read by its limit, a listing by [`LIST_LIMIT`], a download by its
//! budget and header bound, stderr by [`STDERR_LIMIT`]): in an image whose user
//! is root the sandbox can replace `head`, `tar` or `sh`, and gains nothing by it. Paths
//! reach the scripts as arguments, never spliced into shell text, and are always absolute
//! (so never mistaken for options).

use std::io::Read;
use std::sync::Arc;

use tokio::io::AsyncWriteExt as _;
use tokio_util::io::{StreamReader, SyncIoBridge};

use crate::backend::TransferMeter;
use crate::error::{Error, Result};
use crate::exec::Command;
use crate::fs::DirEntry;

use super::exec::{self, AbortOnDrop, Collected, KillOnDrop, Launched};
use crate::backends::docker::sandbox::Shared;
use crate::backends::file_errors::{LIST_LIMIT, STDERR_LIMIT, exec_failure};
use crate::backends::file_scripts::{self, LIST, MKDIR, READ, REMOVE, WRITE};
use crate::transfer::scripts::{TAR, UNTAR};

fn absolute(shared: &Shared, path: &str) -> String {
    crate::path::resolve(&shared.workdir, path)
}

fn tar_error(abs: &str, e: std::io::Error) -> Error {
    Error::provider(super::SCHEME, format!("the archive of {abs}"), e)
}

/// Runs `sh -c script sandboxio-fs args...` as the sandbox's user with `stdin` (none: no
/// stdin), as an engine exec under the wrapper (the exec-API path): `(exit code, stdout, stderr)`. Stdout is kept up to
/// `stdout_cap + 1` bytes: past `stdout_cap` the exec is killed at once (the guard) and the
/// exit is `-1`; stderr is kept up to [`STDERR_LIMIT`].
async fn fs_exec(
    shared: &Arc<Shared>,
    script: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
    stdout_cap: u64,
) -> Result<(i64, Vec<u8>, Vec<u8>)> {
    use futures_lite::StreamExt as _;
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
    let cap = usize::try_from(stdout_cap.saturating_add(1)).unwrap_or(usize::MAX);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while let Some(frame) = output.next().await {
        let frame = frame.map_err(|e| {
            crate::backends::docker::client::sandbox_error(&shared.id, "reading a file exec", e)
        })?;
        match frame {
            bollard::container::LogOutput::StdOut { message }
            | bollard::container::LogOutput::Console { message } => {
                out.extend_from_slice(&message[..message.len().min(cap - out.len())]);
                if out.len() as u64 > stdout_cap {
                    // Over the bound: stop reading; the guard kills the exec.
                    return Ok((-1, out, err));
                }
            }
            bollard::container::LogOutput::StdErr { message } => {
                let room = STDERR_LIMIT.saturating_sub(err.len());
                err.extend_from_slice(&message[..message.len().min(room)]);
            }
            bollard::container::LogOutput::StdIn { .. } => {}
        }
    }
    let code = exec::exit_code(shared, &exec_id).await?;
    guard.disarm();
    Ok((code, out, err))
}

pub(super) async fn read(shared: &Arc<Shared>, path: &str, limit: u64) -> Result<Vec<u8>> {
    let abs = absolute(shared, path);
    shared.check_alive()?;
    let take = limit.saturating_add(1).to_string();
    let (code, out, err) = fs_exec(shared, READ, &[&abs, &take], None, limit).await?;
    file_scripts::read_outcome(super::SCHEME, abs, limit, code, out, &err)
}

pub(super) async fn write(shared: &Arc<Shared>, path: &str, data: Vec<u8>, mode: Option<u32>) -> Result<()> {
    let abs = absolute(shared, path);
    if abs == "/" {
        return Err(Error::IsADirectory { path: abs });
    }
    shared.check_alive()?;
    let mode = format!("{:o}", mode.unwrap_or(0o644) & 0o777);
    let (code, _, err) = fs_exec(shared, WRITE, &[&abs, &mode], Some(&data), 0).await?;
    file_scripts::write_outcome(super::SCHEME, abs, code, &err)
}

pub(super) async fn list(shared: &Arc<Shared>, path: &str) -> Result<Vec<DirEntry>> {
    let abs = absolute(shared, path);
    shared.check_alive()?;
    let (code, out, err) = fs_exec(shared, LIST, &[&abs], None, LIST_LIMIT).await?;
    file_scripts::list_outcome(super::SCHEME, abs, code, &out, &err)
}

pub(super) async fn mkdir(shared: &Arc<Shared>, path: &str) -> Result<()> {
    let abs = absolute(shared, path);
    shared.check_alive()?;
    let (code, _, err) = fs_exec(shared, MKDIR, &[&abs], None, 0).await?;
    file_scripts::mkdir_outcome(super::SCHEME, &abs, code, &err)
}

pub(super) async fn remove(shared: &Arc<Shared>, path: &str, recursive: bool) -> Result<()> {
    let abs = absolute(shared, path);
    if abs == "/" || abs == shared.workdir {
        return Err(Error::PermissionDenied { path: abs });
    }
    shared.check_alive()?;
    let flag = if recursive { "1" } else { "0" };
    let (code, _, err) = fs_exec(shared, REMOVE, &[&abs, flag], None, 0).await?;
    file_scripts::remove_outcome(super::SCHEME, abs, code, &err)
}

fn split_parent(abs: &str) -> (String, String) {
    match abs.rsplit_once('/') {
        Some(("", name)) => ("/".to_owned(), name.to_owned()),
        Some((parent, name)) => (parent.to_owned(), name.to_owned()),
        None => ("/".to_owned(), abs.to_owned()),
    }
}

/// `upload` as one tar stream: built on a blocking thread while `tar -x` in the sandbox
/// reads it, so no file is held whole in memory.
pub(super) async fn upload(
    shared: &Arc<Shared>,
    host_path: std::path::PathBuf,
    path: &str,
    meter: &TransferMeter,
) -> Result<()> {
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
    let meter = meter.clone();
    let build = tokio::task::spawn_blocking(move || {
        let mut builder = tar::Builder::new(SyncIoBridge::new(input));
        let appended =
            crate::transfer::append_host_tree(&mut builder, &host_path, &name, super::SCHEME, &meter);
        // Whatever happened, `tar -x` must see end-of-file, or it waits for more forever.
        let finished = builder.into_inner();
        let closed = match finished {
            Ok(mut input) => input.shutdown(),
            Err(e) => Err(e),
        };
        appended?;
        closed.map_err(|e| Error::provider(super::SCHEME, "finishing the archive", e))
    });
    let mut out = Collected::new(STDERR_LIMIT);
    let drained = exec::drain(&mut output, &mut out, |_, _| {}).await;
    let archived = build.await.map_err(|e| Error::provider(super::SCHEME, "the archive task panicked", e))?;
    drained.map_err(|e| crate::backends::docker::client::sandbox_error(&shared.id, "uploading", e))?;
    let code = exec::exit_code(shared, &exec_id).await?;
    guard.disarm();
    // A host error explains a broken upload better than what `tar` said of it.
    archived?;
    if code == 0 { Ok(()) } else { Err(exec_failure(super::SCHEME, &abs, &out.stderr)) }
}

/// `download` as one tar stream from `tar -c` in the sandbox, unpacked as it arrives by
/// [`crate::transfer::Unpacker`] (bounded by `budget` on the host's disk and by the header
/// bound; names kept under the archive's root; links and special files skipped; nothing
/// written through a host link; host permissions never loosened).
pub(super) async fn download(
    shared: &Arc<Shared>,
    path: &str,
    host_path: std::path::PathBuf,
    budget: u64,
    meter: TransferMeter,
) -> Result<()> {
    shared.check_alive()?;
    let abs = absolute(shared, path);
    if abs == "/" {
        return Err(Error::invalid_input("download needs a source path below /"));
    }
    let (parent, name) = split_parent(&abs);
    let command = Command::new("sh").arg("-c").arg(TAR).arg("sandboxio-fs").arg(&parent).arg(&name).cwd("/");
    let mut guard = KillOnDrop::new(shared);
    let Launched { exec_id, output, .. } = exec::launch(shared, &mut guard, &command, false, false).await?;
    // Stdout feeds the unpacker; stderr is kept (bounded) for the error message.
    let stderr = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = Arc::clone(&stderr);
    let stdout = futures_lite::StreamExt::filter_map(output, move |frame| match frame {
        Ok(bollard::container::LogOutput::StdOut { message }) => Some(Ok(message)),
        Ok(bollard::container::LogOutput::StdErr { message }) => {
            let mut kept = keep.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let room = STDERR_LIMIT.saturating_sub(kept.len());
            kept.extend_from_slice(&message[..message.len().min(room)]);
            None
        }
        Ok(_) => None,
        Err(e) => Some(Err(std::io::Error::other(e))),
    });
    let reader = SyncIoBridge::new(StreamReader::new(stdout));
    let (abs_for_task, host) = (abs.clone(), host_path.clone());
    let unpacked = tokio::task::spawn_blocking(move || {
        let mut reader = reader;
        let mut unpacker = crate::transfer::Unpacker::new(super::SCHEME, &abs_for_task, &host, budget, meter);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // Reads to the end, `tar`'s padding past the end-of-archive block included, so
            // that `tar` is not cut off mid-write (and exits 0); the padding is charged too.
            let n = reader.read(&mut buf).map_err(|e| tar_error(&abs_for_task, e))?;
            if n == 0 {
                return Ok(unpacker);
            }
            unpacker.push(&buf[..n])?;
        }
    })
    .await
    .map_err(|e| Error::provider(super::SCHEME, "the unpack task panicked", e))?;
    // An archive refused here (or cut short) ends the download now; the guard kills `tar`
    // and the unpacker, dropped, removes what it created.
    let unpacker_done = unpacked?;
    let code = exec::exit_code(shared, &exec_id).await?;
    guard.disarm();
    let said = stderr.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    match code {
        0 => tokio::task::spawn_blocking(move || unpacker_done.finish())
            .await
            .map_err(|e| Error::provider(super::SCHEME, "the unpack task panicked", e))?,
        3 => Err(Error::NotFound { path: abs }),
        _ => Err(exec_failure(super::SCHEME, &abs, &said)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FileKind;

    #[test]
    fn parents_and_listings() {
        let listing = b"81a4 3\na b\x0041ed 4096\nd\n\x00a1ff 11\nlink\x00";
        let entries = file_scripts::parse_listing("docker", "/w", listing).unwrap();
        assert_eq!(entries[0], DirEntry::new("a b", FileKind::File, 3, 0o644));
        assert_eq!(entries[1], DirEntry::new("d\n", FileKind::Dir, 0, 0o755));
        assert_eq!(entries[2].kind, FileKind::Symlink);
        assert!(file_scripts::parse_listing("docker", "/w", b"81a4 3\nno-terminator").is_err());
        assert_eq!(split_parent("/a"), ("/".to_owned(), "a".to_owned()));
        assert_eq!(split_parent("/a/b c"), ("/a".to_owned(), "b c".to_owned()));
    }
}
