//! Files on `modal://`: the shared file scripts ([`crate::backends::file_scripts`]) run as
//! execs through the command router, as the sandbox's user, so links, permissions and
//! mounts are the sandbox's own. The trimmed protocol carries no file service of its own:
//! the router's exec is the one path, and every byte it returns is bounded here (a read by
//! its limit, a listing by [`LIST_LIMIT`], stderr by 64 KiB). Relative paths resolve against
//! [`WORKDIR`], the working directory of every command.

use super::SCHEME;
use super::exec::{WORKDIR, marked_helper};
use super::router::Router;
use crate::backends::file_errors::LIST_LIMIT;
use crate::backends::file_scripts::{self, LIST, MKDIR, READ, REMOVE, WRITE};
use crate::error::{Error, Result};
use crate::exec::ExitStatus;
use crate::fs::DirEntry;

fn absolute(path: &str) -> String {
    crate::path::resolve(WORKDIR, path)
}

/// Runs `script` with `args` and `stdin`: its exit code (a signal death is -1), stdout up
/// to `cap + 1` bytes, and stderr.
async fn fs_exec(
    router: &Router,
    script: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
    cap: u64,
) -> Result<(i64, Vec<u8>, Vec<u8>)> {
    let cap = usize::try_from(cap.saturating_add(1)).unwrap_or(usize::MAX);
    let (status, out, err) = marked_helper(router, script, args, stdin, cap).await?;
    let code = match status {
        ExitStatus::Code(c) => i64::from(c),
        ExitStatus::Signal(_) => -1,
    };
    Ok((code, out.data, err.data))
}

pub(super) async fn read(router: &Router, path: &str, limit: u64) -> Result<Vec<u8>> {
    let abs = absolute(path);
    let take = limit.saturating_add(1).to_string();
    let (code, out, err) = fs_exec(router, READ, &[&abs, &take], None, limit).await?;
    file_scripts::read_outcome(SCHEME, abs, limit, code, out, &err)
}

pub(super) async fn write(router: &Router, path: &str, data: Vec<u8>, mode: Option<u32>) -> Result<()> {
    let abs = absolute(path);
    if abs == "/" {
        return Err(Error::IsADirectory { path: abs });
    }
    let mode = format!("{:o}", mode.unwrap_or(0o644) & 0o777);
    let (code, _, err) = fs_exec(router, WRITE, &[&abs, &mode], Some(&data), 0).await?;
    file_scripts::write_outcome(SCHEME, abs, code, &err)
}

pub(super) async fn list(router: &Router, path: &str) -> Result<Vec<DirEntry>> {
    let abs = absolute(path);
    let (code, out, err) = fs_exec(router, LIST, &[&abs], None, LIST_LIMIT).await?;
    file_scripts::list_outcome(SCHEME, abs, code, &out, &err)
}

pub(super) async fn mkdir(router: &Router, path: &str) -> Result<()> {
    let abs = absolute(path);
    let (code, _, err) = fs_exec(router, MKDIR, &[&abs], None, 0).await?;
    file_scripts::mkdir_outcome(SCHEME, &abs, code, &err)
}

pub(super) async fn remove(router: &Router, path: &str, recursive: bool) -> Result<()> {
    let abs = absolute(path);
    if abs == "/" || abs == WORKDIR {
        return Err(Error::PermissionDenied { path: abs });
    }
    let flag = if recursive { "1" } else { "0" };
    let (code, _, err) = fs_exec(router, REMOVE, &[&abs, flag], None, 0).await?;
    file_scripts::remove_outcome(SCHEME, abs, code, &err)
}
