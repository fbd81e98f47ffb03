//! File operations as the `fs_scripts` run through a sandbox's exec stream, for every
//! backend whose commands stream (`local://`, and `docker://` over sandboxd): each
//! operation is one command in the sandbox, as its user, so links, permissions and mounts
//! are the sandbox's own. Paths arrive absolute and checked by the backend (which keeps its
//! own rules for its root directories); what the host reads back is bounded (a read by its
//! limit, a listing by `LIST_LIMIT`, a download by its budget), and dropping an operation
//! drops its stream, which kills its process.

use std::path::Path;

#[cfg(feature = "local")]
use crate::backends::fs_scripts::{self, LIST, LIST_LIMIT, MKDIR, READ, REMOVE, WRITE};
use crate::error::Result;
#[cfg(feature = "local")]
use crate::exec::Command;
#[cfg(feature = "local")]
use crate::fs::DirEntry;
use crate::transfer::StartStream;

#[cfg(feature = "local")]
/// Runs `script` with `args` through `start`'s stream, `stdin` on its stdin: `(exit code,
/// stdout, stderr)`, stdout bounded by `stdout_cap` (past it the process is killed).
async fn script(
    start: impl StartStream,
    script: &str,
    args: &[&str],
    stdin: Option<Vec<u8>>,
    stdout_cap: u64,
) -> Result<(i64, Vec<u8>, Vec<u8>)> {
    let command =
        Command::new("/bin/sh").arg("-c").arg(script).arg("sandboxio-fs").args(args.iter().copied());
    crate::transfer::exec_via_stream(start, command, stdin, stdout_cap).await
}

#[cfg(feature = "local")]
/// Reads the file `abs`, at most `limit` bytes.
pub(crate) async fn read(start: impl StartStream, scheme: &str, abs: String, limit: u64) -> Result<Vec<u8>> {
    let take = limit.saturating_add(1).to_string();
    let (code, out, err) = script(start, READ, &[&abs, &take], None, limit).await?;
    fs_scripts::read_outcome(scheme, abs, limit, code, out, &err)
}

#[cfg(feature = "local")]
/// Writes `data` to `abs` (mode `mode` for a new file, `0o644` without).
pub(crate) async fn write(
    start: impl StartStream,
    scheme: &str,
    abs: String,
    data: Vec<u8>,
    mode: Option<u32>,
) -> Result<()> {
    let mode = format!("{:o}", mode.unwrap_or(0o644) & 0o777);
    let (code, _, err) = script(start, WRITE, &[&abs, &mode], Some(data), 0).await?;
    fs_scripts::write_outcome(scheme, abs, code, &err)
}

#[cfg(feature = "local")]
/// Lists the directory `abs`.
pub(crate) async fn list(start: impl StartStream, scheme: &str, abs: String) -> Result<Vec<DirEntry>> {
    let (code, out, err) = script(start, LIST, &[&abs], None, LIST_LIMIT).await?;
    fs_scripts::list_outcome(scheme, abs, code, &out, &err)
}

#[cfg(feature = "local")]
/// Creates the directory `abs` and its parents.
pub(crate) async fn mkdir(start: impl StartStream, scheme: &str, abs: &str) -> Result<()> {
    let (code, _, err) = script(start, MKDIR, &[abs], None, 0).await?;
    fs_scripts::mkdir_outcome(scheme, abs, code, &err)
}

#[cfg(feature = "local")]
/// Removes `abs` (a directory's contents too when `recursive`).
pub(crate) async fn remove(
    start: impl StartStream,
    scheme: &str,
    abs: String,
    recursive: bool,
) -> Result<()> {
    let flag = if recursive { "1" } else { "0" };
    let (code, _, err) = script(start, REMOVE, &[&abs, flag], None, 0).await?;
    fs_scripts::remove_outcome(scheme, abs, code, &err)
}

/// The directory an archive for `abs` is extracted in (or archived from), and its root
/// entry's name; `root` itself (a workspace) is `.` in `root`.
pub(crate) fn split(abs: &str, root: &str) -> (String, String) {
    if abs == root {
        return (root.to_owned(), ".".to_owned());
    }
    match abs.rsplit_once('/') {
        Some(("", name)) => ("/".to_owned(), name.to_owned()),
        Some((parent, name)) => (parent.to_owned(), name.to_owned()),
        None => (root.to_owned(), abs.to_owned()),
    }
}

/// Copies the host tree at `host_path` to `abs` as one tar stream.
pub(crate) async fn upload(
    start: impl StartStream,
    scheme: &'static str,
    host_path: &Path,
    abs: &str,
    root: &str,
) -> Result<()> {
    let (dir, name) = split(abs, root);
    crate::transfer::upload_via_stream(start, scheme, host_path, abs, &dir, &name).await
}

/// Copies the sandbox tree at `abs` to `host_path` as one tar stream, within `budget`;
/// `paced` for a transport without flow control of its own (see
/// [`download_via_stream`](crate::transfer::download_via_stream)).
pub(crate) async fn download(
    start: impl StartStream,
    scheme: &'static str,
    (abs, root): (&str, &str),
    host_path: &Path,
    budget: u64,
    paced: bool,
) -> Result<()> {
    let (dir, name) = split(abs, root);
    crate::transfer::download_via_stream(start, scheme, abs, (&dir, &name), host_path, budget, paced).await
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn archives_root_at_the_parent_directory() {
        assert_eq!(split("/workspace", "/workspace"), ("/workspace".to_owned(), ".".to_owned()));
        assert_eq!(split("/workspace/a b", "/workspace"), ("/workspace".to_owned(), "a b".to_owned()));
        assert_eq!(split("/a", "/"), ("/".to_owned(), "a".to_owned()));
    }
}
