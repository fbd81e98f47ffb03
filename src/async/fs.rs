//! [`Fs`]: file operations on a sandbox.

use std::path::Path;

use crate::audit::OperationKind;
use crate::error::{Error, Result};
use crate::fs::DirEntry;
use crate::policy::Capabilities;

use super::sandbox::Sandbox;

/// The file system of a sandbox, from [`Sandbox::fs`]. Needs
/// [`Capabilities::FILESYSTEM`]; every method returns
/// [`ErrorCode::CapabilityNotSupported`](crate::ErrorCode) without it.
///
/// Sandbox paths may be absolute or relative; relative ones resolve against the same
/// working directory [`Sandbox::run`] uses. A path with a `..` component or a NUL byte is
/// refused with [`ErrorCode::InvalidInput`](crate::ErrorCode) before anything is sent.
#[derive(Debug, Clone, Copy)]
pub struct Fs<'a> {
    sandbox: &'a Sandbox,
}

#[sandboxio_macros::blocking_facade]
impl<'a> Fs<'a> {
    pub(crate) fn new(sandbox: &'a Sandbox) -> Self {
        Fs { sandbox }
    }

    fn check(self, paths: &[&str]) -> Result<()> {
        self.sandbox.require(Capabilities::FILESYSTEM)?;
        paths.iter().try_for_each(|p| crate::path::validate(p))
    }

    /// Reads a whole file, byte-exact.
    ///
    /// # Errors
    ///
    /// [`ErrorCode::NotFound`](crate::ErrorCode) (naming the path),
    /// [`ErrorCode::IsADirectory`](crate::ErrorCode),
    /// [`ErrorCode::PermissionDenied`](crate::ErrorCode),
    /// [`ErrorCode::InvalidInput`](crate::ErrorCode), [`ErrorCode::SandboxGone`](crate::ErrorCode).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: reading changes nothing.
    pub async fn read(&self, path: &str) -> Result<Vec<u8>> {
        let handle = self.sandbox.backend_handle();
        self.sandbox
            .context()
            .observe(OperationKind::FsRead, async {
                self.check(&[path])?;
                handle.read(path).await
            })
            .await
    }

    /// Reads a whole file as UTF-8 text.
    ///
    /// # Errors
    ///
    /// As [`Fs::read`], and [`ErrorCode::InvalidInput`](crate::ErrorCode) if the file is not
    /// UTF-8.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: reading changes nothing.
    pub async fn read_text(&self, path: &str) -> Result<String> {
        let handle = self.sandbox.backend_handle();
        self.sandbox
            .context()
            .observe(OperationKind::FsRead, async {
                self.check(&[path])?;
                let bytes = handle.read(path).await?;
                String::from_utf8(bytes).map_err(|e| {
                    Error::invalid_input(format!(
                        "{path:?} is not UTF-8 (first bad byte at {})",
                        e.utf8_error().valid_up_to()
                    ))
                })
            })
            .await
    }

    /// Writes a whole file, creating parent directories and replacing an existing file.
    /// New files get mode `0o644`.
    ///
    /// # Errors
    ///
    /// [`ErrorCode::IsADirectory`](crate::ErrorCode), [`ErrorCode::PermissionDenied`](crate::ErrorCode),
    /// [`ErrorCode::InvalidInput`](crate::ErrorCode), [`ErrorCode::SandboxGone`](crate::ErrorCode).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: the file may be partly written if the future is dropped.
    pub async fn write(&self, path: &str, data: impl Into<Vec<u8>>) -> Result<()> {
        let data = data.into();
        let handle = self.sandbox.backend_handle();
        self.sandbox
            .context()
            .observe(OperationKind::FsWrite, async {
                self.check(&[path])?;
                handle.write(path, data, None).await
            })
            .await
    }

    /// Copies a host file or directory tree to `path` in the sandbox, keeping modes. Host
    /// links are never followed (they are skipped).
    ///
    /// # Errors
    ///
    /// [`ErrorCode::NotFound`](crate::ErrorCode) for a missing host path, the errors of
    /// [`Fs::write`], [`ErrorCode::Provider`](crate::ErrorCode) for host I/O failures.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: part of the tree may have been copied.
    pub async fn upload(&self, host_path: impl AsRef<Path>, path: &str) -> Result<()> {
        let host_path = host_path.as_ref();
        let handle = self.sandbox.backend_handle();
        self.sandbox
            .context()
            .observe(OperationKind::FsUpload, async {
                self.check(&[path])?;
                handle.upload(host_path, path).await
            })
            .await
    }

    /// Copies a sandbox file or directory tree to `host_path`, keeping modes. Sandbox links
    /// are never followed (they are skipped), and nothing is written outside `host_path`.
    ///
    /// # Errors
    ///
    /// [`ErrorCode::NotFound`](crate::ErrorCode) for a missing sandbox path,
    /// [`ErrorCode::InvalidInput`](crate::ErrorCode) for an entry name that would escape,
    /// [`ErrorCode::Provider`](crate::ErrorCode) for host I/O failures.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: part of the tree may have been written on the host.
    pub async fn download(&self, path: &str, host_path: impl AsRef<Path>) -> Result<()> {
        let host_path = host_path.as_ref();
        let handle = self.sandbox.backend_handle();
        self.sandbox
            .context()
            .observe(OperationKind::FsDownload, async {
                self.check(&[path])?;
                handle.download(path, host_path).await
            })
            .await
    }

    /// Lists a directory: name, kind, size in bytes and mode of each entry, sorted by name.
    ///
    /// # Errors
    ///
    /// [`ErrorCode::NotFound`](crate::ErrorCode), [`ErrorCode::InvalidInput`](crate::ErrorCode),
    /// [`ErrorCode::SandboxGone`](crate::ErrorCode).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: listing changes nothing.
    pub async fn list(&self, path: &str) -> Result<Vec<DirEntry>> {
        let handle = self.sandbox.backend_handle();
        self.sandbox
            .context()
            .observe(OperationKind::FsList, async {
                self.check(&[path])?;
                let mut entries = handle.list(path).await?;
                entries.sort_by(|a, b| a.name.cmp(&b.name));
                Ok(entries)
            })
            .await
    }

    /// Creates a directory and its parents; an existing directory is fine.
    ///
    /// # Errors
    ///
    /// [`ErrorCode::PermissionDenied`](crate::ErrorCode), [`ErrorCode::InvalidInput`](crate::ErrorCode),
    /// [`ErrorCode::SandboxGone`](crate::ErrorCode).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: creating a directory again is harmless.
    pub async fn mkdir(&self, path: &str) -> Result<()> {
        let handle = self.sandbox.backend_handle();
        self.sandbox
            .context()
            .observe(OperationKind::FsMkdir, async {
                self.check(&[path])?;
                handle.mkdir(path).await
            })
            .await
    }

    /// Removes a file, or a directory (with its contents when `recursive`).
    ///
    /// # Errors
    ///
    /// [`ErrorCode::NotFound`](crate::ErrorCode), [`ErrorCode::IsADirectory`](crate::ErrorCode)
    /// for a non-empty directory without `recursive`, [`ErrorCode::InvalidInput`](crate::ErrorCode),
    /// [`ErrorCode::SandboxGone`](crate::ErrorCode).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: part of a tree may have been removed.
    pub async fn remove(&self, path: &str, recursive: bool) -> Result<()> {
        let handle = self.sandbox.backend_handle();
        self.sandbox
            .context()
            .observe(OperationKind::FsRemove, async {
                self.check(&[path])?;
                handle.remove(path, recursive).await
            })
            .await
    }
}
