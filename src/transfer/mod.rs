//! Upload and download, shared by every backend.
//!
//! Host-side rules: links are never followed (a host symlink is skipped on upload; a sandbox
//! symlink is skipped on download), and nothing is written outside the host target: every
//! name coming from the sandbox is checked to be a plain path below the target, and an
//! existing host symlink is never written through. Host permissions are never loosened: an
//! existing host directory or file keeps its mode and owner (a file is overwritten in
//! place), a new one gets the sandbox's permission bits masked with [`NEW_MODE_MASK`].
//! Every byte read from the sandbox counts against a budget (class 4 of `SECURITY.md`:
//! a sparse file, a hard-link bomb or a hostile `tar` must not fill the host's disk or
//! memory). Host I/O runs on library threads ([`crate::runtime`]), never on the caller's
//! executor.
//!
//! One job per module: `primitives` is the default transfer every backend inherits (one
//! file at a time through `list`, `read`, `mkdir` and `write`); `host_writer` writes a
//! download on the host under the rules above; the tar path that `local://` and `docker://`
//! override it with is `pack` (host tree to archive) and `unpack` (archive to host,
//! within the budget); `stream` runs that tar path through an exec stream, with
//! `cancel` stopping its library thread when the operation is dropped; `progress` counts
//! the file bytes a transfer moves and reports them to the caller.

#[cfg(any(feature = "local", feature = "docker"))]
mod cancel;
mod host_writer;
#[cfg(any(feature = "local", feature = "docker"))]
mod pack;
mod primitives;
pub(crate) mod progress;
#[cfg(any(feature = "local", feature = "docker"))]
pub(crate) mod scripts;
#[cfg(any(feature = "local", feature = "docker"))]
mod stream;
#[cfg(any(feature = "local", feature = "docker"))]
mod unpack;

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::Path;

use crate::error::{Error, Result};

#[cfg(feature = "docker")]
pub(crate) use pack::append_host_tree;
pub(crate) use primitives::{download_via_primitives, upload_via_primitives};
pub use progress::{TransferMeter, TransferProgress};
#[cfg(any(feature = "local", feature = "docker"))]
pub(crate) use stream::{StartStream, download_via_stream, upload_via_stream};
#[cfg(feature = "docker")]
pub(crate) use unpack::Unpacker;

/// A host I/O error at `path` as the caller's error: a missing path and a refusal keep their
/// own kinds, anything else is the host's provider error.
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

/// The permission bits a *new* host entry may take from the sandbox: never setuid, setgid,
/// sticky, group- or world-writable (the sandbox must not hand the host a writable or
/// privileged file). Existing entries keep theirs.
pub(crate) const NEW_MODE_MASK: u32 = 0o755;

/// The error for a download over its budget.
pub(crate) fn over_budget(abs: &str, budget: u64) -> Error {
    Error::TooLarge {
        path: abs.to_owned(),
        limit: budget,
        what: "the download budget; raise it with Fs::download_limit".to_owned(),
    }
}

/// The error for a read over its limit.
pub(crate) fn over_read_limit(abs: &str, limit: u64) -> Error {
    Error::TooLarge {
        path: abs.to_owned(),
        limit,
        what: "the read limit; raise it with Fs::read_limit, or use Fs::download".to_owned(),
    }
}

/// Charges `bytes` against the budget of a download of `abs`.
fn charge(used: &mut u64, bytes: u64, budget: u64, abs: &str) -> Result<()> {
    *used = used.saturating_add(bytes);
    if *used > budget { Err(over_budget(abs, budget)) } else { Ok(()) }
}

/// The names in the host directory `dir`, sorted: an upload walks a host tree in the same
/// order every time.
fn sorted_names(dir: &Path) -> Result<Vec<OsString>> {
    let mut names = fs::read_dir(dir)
        .map_err(|e| host_error(dir, e))?
        .map(|entry| entry.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| host_error(dir, e))?;
    names.sort();
    Ok(names)
}
