//! [`HostWriter`]: where a download lands on the host, never through a link, never loosening
//! a host permission, and removed again if the download does not finish.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{NEW_MODE_MASK, host_error};
use crate::error::{Error, Result};

/// Writes a download on the host, remembering what it created so that a failed or
/// cancelled download can remove it (what existed before is never removed).
#[derive(Debug)]
pub(crate) struct HostWriter {
    /// The host target: links above it are the caller's own and are followed; at it and
    /// below it, none is.
    root: PathBuf,
    /// The directories it made, oldest first.
    created_dirs: Vec<PathBuf>,
    /// The files it made: a set, since every hard-link entry of an archive looks its source
    /// up here (a list made a download of many links quadratic in their number).
    created_files: std::collections::HashSet<PathBuf>,
    kept: bool,
}

/// Open flags that never follow a final link nor block on a FIFO, where `libc` is here.
#[cfg(any(feature = "local", feature = "docker"))]
fn no_follow(options: &mut fs::OpenOptions) {
    std::os::unix::fs::OpenOptionsExt::custom_flags(options, libc::O_NOFOLLOW | libc::O_NONBLOCK);
}

/// Without `libc` (a fake-only build) the checks around the open stand alone.
#[cfg(not(any(feature = "local", feature = "docker")))]
fn no_follow(_: &mut fs::OpenOptions) {}

impl HostWriter {
    pub(crate) fn new(root: &Path) -> Self {
        HostWriter {
            root: root.to_path_buf(),
            created_dirs: Vec::new(),
            created_files: std::collections::HashSet::new(),
            kept: false,
        }
    }

    /// Refuses a path whose directories from the root down are anything but real
    /// directories (or not there yet): a link planted in the host target, by anyone, is
    /// never written through, not even by a hostile archive that names a file below it
    /// without naming the directory first.
    fn no_links_below_root(&self, path: &Path) -> Result<()> {
        let Ok(rel) = path.strip_prefix(&self.root) else { return Ok(()) };
        let mut dirs = vec![self.root.clone()];
        let mut current = self.root.clone();
        let mut components: Vec<_> = rel.components().collect();
        components.pop();
        for component in components {
            current.push(component);
            dirs.push(current.clone());
        }
        if rel.as_os_str().is_empty() {
            dirs.clear(); // the root itself: its own kind is checked by the caller
        }
        for dir in dirs {
            match fs::symlink_metadata(&dir) {
                Ok(meta) if meta.is_dir() && !meta.file_type().is_symlink() => {}
                Ok(_) => {
                    return Err(Error::invalid_input(format!(
                        "host path {} is a link or not a directory; download never writes through links",
                        dir.display()
                    )));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(host_error(&dir, e)),
            }
        }
        Ok(())
    }

    /// Makes the missing ancestors of a host path: above the root, the caller's own path
    /// (its links are followed, as for any path the caller gives); at and below it, real
    /// directories only (checked by [`HostWriter::no_links_below_root`]). New ones get
    /// at most [`NEW_MODE_MASK`].
    fn ancestors(&mut self, dir: &Path) -> Result<()> {
        if dir.as_os_str().is_empty() || fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
            return Ok(());
        }
        if let Some(parent) = dir.parent() {
            self.ancestors(parent)?;
        }
        let mut builder = fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, NEW_MODE_MASK);
        match builder.create(dir) {
            Ok(()) => {
                self.created_dirs.push(dir.to_path_buf());
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
            Err(e) => Err(host_error(dir, e)),
        }
    }

    /// What is at `path` on the host, checked before a download writes there: no link from
    /// the root down to it, and not a link itself. When nothing is there yet, its missing
    /// ancestors are made and `None` is returned.
    fn existing(&mut self, path: &Path) -> Result<Option<fs::Metadata>> {
        self.no_links_below_root(path)?;
        match fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => Err(Error::invalid_input(format!(
                "host target {} is a symlink; download never writes through links",
                path.display()
            ))),
            Ok(meta) => Ok(Some(meta)),
            Err(_) => {
                if let Some(parent) = path.parent() {
                    self.ancestors(parent)?;
                }
                Ok(None)
            }
        }
    }

    /// Makes `dir` a directory on the host, never through a link. An existing directory is
    /// left exactly as it is (its mode and owner are the host's business); a new one gets
    /// `mode` masked with [`NEW_MODE_MASK`], and always owner-accessible.
    pub(crate) fn dir(&mut self, dir: &Path, mode: u32) -> Result<()> {
        match self.existing(dir)? {
            Some(meta) if meta.is_dir() => Ok(()),
            Some(_) => Err(Error::invalid_input(format!(
                "host target {} exists and is not a directory",
                dir.display()
            ))),
            None => {
                let mut builder = fs::DirBuilder::new();
                #[cfg(unix)]
                std::os::unix::fs::DirBuilderExt::mode(&mut builder, (mode & NEW_MODE_MASK) | 0o700);
                #[cfg(not(unix))]
                let _ = mode;
                // `create` (not `recursive`) fails on anything already there, a link planted
                // since the check included.
                builder.create(dir).map_err(|e| host_error(dir, e))?;
                self.created_dirs.push(dir.to_path_buf());
                Ok(())
            }
        }
    }

    /// Opens `file` on the host for a download, never through a link: an existing regular
    /// file is truncated and overwritten in place (it keeps its mode, owner and links, as
    /// `cp` does); a new one is created exclusively with `mode` masked with
    /// [`NEW_MODE_MASK`] (and the process umask).
    pub(crate) fn file(&mut self, file: &Path, mode: u32) -> Result<fs::File> {
        match self.existing(file)? {
            Some(meta) if meta.is_file() => {
                let mut options = fs::OpenOptions::new();
                options.write(true);
                no_follow(&mut options);
                let opened = options.open(file).map_err(|e| host_error(file, e))?;
                // The file opened must be the one checked: a link swapped in between is refused.
                #[cfg(unix)]
                {
                    use std::os::unix::fs::MetadataExt as _;
                    let now = opened.metadata().map_err(|e| host_error(file, e))?;
                    if (now.dev(), now.ino()) != (meta.dev(), meta.ino()) || !now.is_file() {
                        return Err(Error::invalid_input(format!(
                            "host target {} changed while downloading",
                            file.display()
                        )));
                    }
                }
                opened.set_len(0).map_err(|e| host_error(file, e))?;
                Ok(opened)
            }
            Some(_) => Err(Error::invalid_input(format!(
                "host target {} exists and is not a regular file",
                file.display()
            ))),
            None => {
                let mut options = fs::OpenOptions::new();
                // `create_new` is O_CREAT|O_EXCL: it never follows a link, nor opens a FIFO.
                options.write(true).create_new(true);
                no_follow(&mut options);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode & NEW_MODE_MASK);
                #[cfg(not(unix))]
                let _ = mode;
                let opened = options.open(file).map_err(|e| host_error(file, e))?;
                self.created_files.insert(file.to_path_buf());
                Ok(opened)
            }
        }
    }

    /// Whether `path` was created by this download.
    #[cfg(any(feature = "local", feature = "docker"))]
    pub(super) fn created_file(&self, path: &Path) -> bool {
        self.created_files.contains(path)
    }

    /// Keeps what was written (the download succeeded).
    pub(crate) fn keep(&mut self) {
        self.kept = true;
    }
}

impl Drop for HostWriter {
    /// A download that failed or was dropped removes what it created: its files, then its
    /// directories newest first; what existed before is never removed (an existing file
    /// overwritten in place stays as far as it got).
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        for path in &self.created_files {
            let _ = fs::remove_file(path);
        }
        for path in self.created_dirs.iter().rev() {
            let _ = fs::remove_dir(path);
        }
    }
}
