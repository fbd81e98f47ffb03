//! Files in a sandbox: [`Fs`] (from [`Sandbox::fs`](crate::Sandbox::fs)), what it returns
//! ([`DirEntry`], [`FileKind`]), the progress of uploads and downloads
//! ([`TransferProgress`]), and its default limits.

pub use crate::api::fs::Fs;
pub use crate::transfer::TransferProgress;

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed on the host side).
    Symlink,
    /// Anything else (device, socket, FIFO).
    Other,
}

/// One entry of [`Fs::list`](crate::fs::Fs::list).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DirEntry {
    /// The entry's name (not its full path).
    pub name: String,
    /// What it is.
    pub kind: FileKind,
    /// Size in bytes (0 for directories).
    pub size: u64,
    /// Permission bits, for example `0o644`.
    pub mode: u32,
}

impl DirEntry {
    /// An entry.
    pub fn new(name: impl Into<String>, kind: FileKind, size: u64, mode: u32) -> Self {
        DirEntry { name: name.into(), kind, size, mode }
    }
}

/// How many bytes [`Fs::read`](crate::fs::Fs::read) (and `read_text`) takes from the sandbox
/// before it stops with [`Error::TooLarge`](crate::Error::TooLarge): 64 MiB. Change it per
/// call with [`Fs::read_limit`](crate::fs::Fs::read_limit); read larger files with
/// [`Fs::download`](crate::fs::Fs::download). Listings are bounded by the same limit.
pub const DEFAULT_READ_LIMIT: u64 = 64 * 1024 * 1024;

/// How many bytes [`Fs::download`](crate::fs::Fs::download) may put on the host's disk before it
/// stops with [`Error::TooLarge`](crate::Error::TooLarge) and removes what it wrote: 1 GiB.
/// Change it per call with [`Fs::download_limit`](crate::fs::Fs::download_limit).
pub const DEFAULT_DOWNLOAD_LIMIT: u64 = 1024 * 1024 * 1024;

/// How long one file operation may take before it is stopped (its process in the sandbox
/// killed) with [`Error::ExecutionTimeout`](crate::Error::ExecutionTimeout): 120 seconds. Change it
/// per call with [`Fs::timeout`](crate::fs::Fs::timeout).
pub const DEFAULT_FS_TIMEOUT: std::time::Duration = std::time::Duration::from_mins(2);

/// The most a header of an archive from the sandbox may take (a GNU long name, a pax
/// record): 64 KiB. Longer is [`Error::TooLarge`](crate::Error::TooLarge).
#[cfg(any(feature = "local", feature = "docker"))]
pub(crate) const MAX_ARCHIVE_HEADER: u64 = 64 * 1024;
