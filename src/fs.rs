//! File-system types returned by [`Fs`](crate::Fs).

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

/// One entry of [`Fs::list`](crate::Fs::list).
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
