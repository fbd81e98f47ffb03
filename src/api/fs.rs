//! [`Fs`]: file operations on a sandbox.

use std::path::Path;
use std::time::Duration;

use crate::audit::OperationKind;
use crate::backend::BackendSandbox;
use crate::error::{Error, Result};
use crate::exec::ExecResult;
use crate::fs::{DEFAULT_DOWNLOAD_LIMIT, DEFAULT_FS_TIMEOUT, DEFAULT_READ_LIMIT, DirEntry};
use crate::policy::Capabilities;
use crate::transfer::progress::{OnProgress, TransferMeter, TransferProgress, host_tree_bytes, reported};

use super::sandbox::Sandbox;

/// The file system of a sandbox, from [`Sandbox::fs`]. Needs
/// [`Capabilities::FILESYSTEM`]; every method returns
/// [`Error::CapabilityNotSupported`](crate::Error::CapabilityNotSupported) without it.
///
/// Sandbox paths may be absolute or relative; relative ones resolve against the same
/// working directory [`Sandbox::run`] uses. A path with a `..` component or a NUL byte is
/// refused with [`Error::InvalidInput`](crate::Error::InvalidInput) before anything is sent.
///
/// Every operation runs as the sandbox's user, inside the sandbox, and is bounded:
///
/// - in time: each call has a deadline ([`DEFAULT_FS_TIMEOUT`], 120 s, or
///   [`Fs::timeout`]); past it the call's work in the sandbox (its process, or its request
///   to the sandbox's supervisor) is stopped and the call fails with
///   [`Error::ExecutionTimeout`](crate::Error::ExecutionTimeout). Dropping the future stops
///   it too;
/// - in what the host reads: [`Fs::read`] takes at most [`DEFAULT_READ_LIMIT`] bytes
///   (64 MiB, or [`Fs::read_limit`]), [`Fs::list`] a listing of at most
///   [`DEFAULT_READ_LIMIT`] bytes, [`Fs::download`] puts at
///   most [`DEFAULT_DOWNLOAD_LIMIT`] bytes on the host's disk (1 GiB, or
///   [`Fs::download_limit`]); over a limit is [`Error::TooLarge`](crate::Error::TooLarge);
/// - in client memory: [`Fs::upload`] and [`Fs::download`] stream, whatever the size.
///
/// The limits are per call: `sandbox.fs().read_limit(1 << 30).read("big.bin")`. So is
/// a progress callback for [`Fs::upload`] and [`Fs::download`], set with
/// [`Fs::on_progress`].
///
/// # Errors name the path as you wrote it
///
/// A missing path is [`Error::NotFound`](crate::Error::NotFound), a path the sandbox refuses
/// [`Error::PermissionDenied`](crate::Error::PermissionDenied), a directory where a file is needed
/// [`Error::IsADirectory`](crate::Error::IsADirectory): on every backend, each naming the path
/// exactly as it was passed (`read("./a.txt")` names `./a.txt`, not `/workspace/a.txt`).
///
/// # Which paths each backend reaches
///
/// - `local://`: only the workspace, `/workspace` (the default working directory), which
///   the sandbox's user may read and write. Every other path, even a system file the
///   commands themselves can read such as `/etc/hostname`, is
///   [`Error::PermissionDenied`](crate::Error::PermissionDenied): the host's `/usr` is mounted
///   read-only and `/tmp` is private to each command, so neither is a place to exchange
///   files.
/// - `docker://`: the container's whole file system, as the image's user may read and
///   write it; relative paths resolve against the image's `WORKDIR` (`/workspace` in
///   sandboxio's images, `/` when the image sets none).
/// - `fake://`: an in-memory tree with `/workspace` as the default working directory;
///   a file without its owner's write bit refuses writes.
#[derive(Debug, Clone, Copy)]
pub struct Fs<'a> {
    sandbox: &'a Sandbox,
    read_limit: u64,
    download_limit: u64,
    timeout: Duration,
    progress: Option<OnProgress<'a>>,
}

#[sandboxio_macros::blocking_facade]
impl<'a> Fs<'a> {
    pub(crate) fn new(sandbox: &'a Sandbox) -> Self {
        Fs {
            sandbox,
            read_limit: DEFAULT_READ_LIMIT,
            download_limit: DEFAULT_DOWNLOAD_LIMIT,
            timeout: DEFAULT_FS_TIMEOUT,
            progress: None,
        }
    }

    /// The same file system with `bytes` as the most [`Fs::read`] and [`Fs::read_text`]
    /// take from the sandbox (default [`DEFAULT_READ_LIMIT`], 64 MiB). A file
    /// over it fails with [`Error::TooLarge`] after the host has read
    /// `bytes + 1` bytes, no more.
    #[must_use]
    pub fn read_limit(self, bytes: u64) -> Self {
        Fs { read_limit: bytes, ..self }
    }

    /// The same file system with `bytes` as the most [`Fs::download`] puts on the host's
    /// disk (default [`DEFAULT_DOWNLOAD_LIMIT`], 1 GiB). The budget counts the archive's
    /// bytes (file contents and a 512-byte header per entry) and the copies made for hard
    /// links; a sparse file counts at its full size.
    #[must_use]
    pub fn download_limit(self, bytes: u64) -> Self {
        Fs { download_limit: bytes, ..self }
    }

    /// The same file system with `timeout` as the deadline of each call (default
    /// [`DEFAULT_FS_TIMEOUT`], 120 s). Past it, the call's work in the sandbox is stopped
    /// and the call fails with [`Error::ExecutionTimeout`].
    /// Zero times every call out at once; a timeout above
    /// [`MAX_TIMEOUT`](crate::exec::MAX_TIMEOUT) (30 days) saturates at it, `Duration::MAX`
    /// included.
    #[must_use]
    pub fn timeout(self, timeout: Duration) -> Self {
        Fs { timeout: crate::duration::saturate(timeout), ..self }
    }

    /// The same file system with `report` called as [`Fs::upload`] and [`Fs::download`]
    /// move bytes, with a [`TransferProgress`]: the bytes of file contents moved so far
    /// (the same count on every backend: directories, archive headers and skipped links
    /// count nothing), and for an upload the total expected, from a walk of the host tree
    /// made before the transfer starts (a download's total is unknown, `None`).
    ///
    /// `report` is called once when the transfer starts (`bytes` 0), then at most once
    /// every 50 ms while the count moves, then once more with `done: true` when the
    /// transfer has succeeded (not after a failure, a timeout or a drop). It runs on the
    /// thread that polls the call's future (your task, or the calling thread under
    /// [`sandboxio::sync`](crate::sync)), between polls of the transfer: it must return
    /// quickly and never block (a slow callback delays the transfer itself, and the
    /// deadline keeps running). How often the count moves depends on the backend:
    /// `local://` and `docker://` count as the archive streams, the default transfer
    /// (`fake://`, `e2b://`, `modal://`) once per file.
    ///
    /// Without it (the default) a transfer counts nothing, starts no timer and does not
    /// walk the host tree first. The other calls ignore it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// # futures_lite::future::block_on(async {
    /// let sandbox = sandboxio::testing::sbx_fake().sandbox;
    /// let host = std::env::temp_dir().join(format!("sandboxio-progress-{}", std::process::id()));
    /// std::fs::create_dir_all(&host).unwrap();
    /// std::fs::write(host.join("data.bin"), vec![0u8; 300_000]).unwrap();
    /// let last = AtomicU64::new(0);
    /// let report = |p: sandboxio::fs::TransferProgress| {
    ///     last.store(p.bytes, Ordering::Relaxed);
    ///     eprintln!("{} of {:?} bytes", p.bytes, p.total);
    /// };
    /// sandbox.fs().on_progress(&report).upload(&host, "data").await?;
    /// assert_eq!(last.load(Ordering::Relaxed), 300_000);
    /// # std::fs::remove_dir_all(&host).unwrap();
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    #[must_use]
    pub fn on_progress(self, report: &'a (dyn Fn(TransferProgress) + Sync)) -> Self {
        Fs { progress: Some(OnProgress(report)), ..self }
    }

    fn check(self, paths: &[&str]) -> Result<()> {
        self.sandbox.require(Capabilities::FILESYSTEM)?;
        paths.iter().try_for_each(|p| crate::path::validate(p))
    }

    /// Runs one backend operation under this call's deadline: at the deadline the
    /// operation's future is dropped, which stops its work in the sandbox (the SPI's
    /// cancellation rule), so a FIFO or a file with no end can never hold a call forever.
    /// Errors about the sandbox path `written` name it as the caller wrote it.
    async fn bounded<T>(self, written: &str, op: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let timeout = self.timeout;
        let op = async { op.await.map_err(|e| crate::path::as_written(e, written)) };
        futures_lite::future::or(op, async move {
            futures_timer::Delay::new(crate::duration::saturate(timeout)).await;
            Err(Error::ExecutionTimeout {
                timeout,
                partial: Box::new(ExecResult::new(0, "", "").with_status(crate::ExitStatus::Signal(9))),
            })
        })
        .await
    }

    /// One call on the sandbox path `path` ([`Fs::checked`]), recorded in the audit log as
    /// an operation of `kind` with the call's outcome.
    async fn call<T, Fut>(
        self,
        kind: OperationKind,
        path: &str,
        op: impl FnOnce(&'a dyn BackendSandbox) -> Fut,
    ) -> Result<T>
    where
        Fut: std::future::Future<Output = Result<T>>,
    {
        self.sandbox.context().observe(kind, self.checked(path, op)).await
    }

    /// Refuses the call before anything is sent (no filesystem capability, a bad `path`),
    /// then runs `op` on the backend's handle under this call's deadline ([`Fs::bounded`]).
    /// `op` is called only after the checks, so a refused call never reaches the backend.
    async fn checked<T, Fut>(self, path: &str, op: impl FnOnce(&'a dyn BackendSandbox) -> Fut) -> Result<T>
    where
        Fut: std::future::Future<Output = Result<T>>,
    {
        self.check(&[path])?;
        self.bounded(path, op(self.sandbox.backend_handle())).await
    }

    /// Reads a whole file, byte-exact, links followed inside the sandbox. At most the read
    /// limit ([`DEFAULT_READ_LIMIT`], 64 MiB, or [`Fs::read_limit`]) is read: a larger file,
    /// or one with no end (a `/proc` or `/dev` file), fails with
    /// [`Error::TooLarge`](crate::Error::TooLarge). Use [`Fs::download`] for large files.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] (naming the path),
    /// [`Error::IsADirectory`],
    /// [`Error::PermissionDenied`],
    /// [`Error::TooLarge`](crate::Error::TooLarge) over the read limit,
    /// [`Error::ExecutionTimeout`] past the deadline,
    /// [`Error::InvalidInput`] for a bad path or a special file,
    /// [`Error::SandboxGone`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: reading changes nothing, and dropping the future stops the read in the
    /// sandbox.
    ///
    /// # Examples
    ///
    /// ```
    /// use sandboxio::ErrorCode;
    ///
    /// # futures_lite::future::block_on(async {
    /// let sandbox = sandboxio::testing::sbx_fake().sandbox;
    /// sandbox.fs().write("data.bin", vec![0, 1, 255]).await?;
    /// assert_eq!(sandbox.fs().read("data.bin").await?, [0, 1, 255]);
    /// let missing = sandbox.fs().read("nope.txt").await.unwrap_err();
    /// assert_eq!(missing.code(), ErrorCode::NotFound);
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    pub async fn read(&self, path: &str) -> Result<Vec<u8>> {
        let limit = self.read_limit;
        self.call(OperationKind::FsRead, path, |handle| handle.read(path, limit)).await
    }

    /// Reads a whole file as UTF-8 text (bounded as [`Fs::read`]).
    ///
    /// # Errors
    ///
    /// As [`Fs::read`], and [`Error::InvalidInput`] if the file is not
    /// UTF-8.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: reading changes nothing, and dropping the future stops the read in the
    /// sandbox.
    pub async fn read_text(&self, path: &str) -> Result<String> {
        let limit = self.read_limit;
        self.sandbox
            .context()
            .observe(OperationKind::FsRead, async {
                // Decoded inside the observed call: a file that is not UTF-8 is recorded as
                // this call's failure.
                let bytes = self.checked(path, |handle| handle.read(path, limit)).await?;
                String::from_utf8(bytes).map_err(|e| {
                    Error::invalid_input(format!(
                        "{path:?} is not UTF-8 (first bad byte at {})",
                        e.utf8_error().valid_up_to()
                    ))
                })
            })
            .await
    }

    /// Writes a whole file as the sandbox user's own write would, creating parent
    /// directories. A new file gets mode `0o644`; an existing file is written in place and
    /// keeps its mode, owner and hard links; a link is followed inside the sandbox's own
    /// view (never on the host). A new file is either written directly, created
    /// exclusively, or (where the sandbox's supervisor writes it: `local://`, `docker://`'s
    /// default path) written under an exclusive, unguessable temporary name beside it and
    /// renamed into place once complete; either way nothing planted in the sandbox can
    /// divert or block the write (except at the target itself, where the deadline bounds
    /// it as for any other call).
    ///
    /// # Errors
    ///
    /// [`Error::PermissionDenied`] naming the file when the sandbox
    /// user may not write it (or create it), [`Error::IsADirectory`],
    /// [`Error::InvalidInput`] for a bad path or a special file
    /// (FIFO, device, socket) at the target,
    /// [`Error::ExecutionTimeout`] past the deadline,
    /// [`Error::SandboxGone`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future stops the write in the sandbox, and the file
    /// may be partly written (where the supervisor writes it, only an existing file: a new
    /// one appears once complete).
    ///
    /// # Examples
    ///
    /// ```
    /// use sandboxio::Command;
    ///
    /// # futures_lite::future::block_on(async {
    /// let sandbox = sandboxio::testing::sbx_fake().sandbox;
    /// sandbox.fs().write("notes/hello.txt", "hello\n").await?; // creates `notes/`
    /// let out = sandbox.run(Command::new("cat").arg("notes/hello.txt")).await?;
    /// assert_eq!(out.stdout, b"hello\n");
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    pub async fn write(&self, path: &str, data: impl Into<Vec<u8>>) -> Result<()> {
        let data = data.into();
        self.call(OperationKind::FsWrite, path, |handle| handle.write(path, data, None)).await
    }

    /// Copies a host file or directory tree to `path` in the sandbox, keeping permission
    /// bits (as the sandbox user, as `tar -x` would: an existing entry is replaced). Host
    /// links and special files are never followed (they are skipped). Files are streamed:
    /// client memory stays flat whatever their size.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] for a missing host path, the errors of
    /// [`Fs::write`], [`Error::ExecutionTimeout`] past the deadline,
    /// [`Error::Provider`] for host I/O failures.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future kills the unpacking process in the sandbox,
    /// and part of the tree may have been copied.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let sandbox = sandboxio::testing::sbx_fake().sandbox;
    /// let host = std::env::temp_dir().join(format!("sandboxio-upload-{}", std::process::id()));
    /// std::fs::create_dir_all(&host).unwrap();
    /// std::fs::write(host.join("input.csv"), "a,b\n1,2\n").unwrap();
    /// sandbox.fs().upload(&host, "project").await?; // a directory, recursively
    /// assert_eq!(sandbox.fs().read_text("project/input.csv").await?, "a,b\n1,2\n");
    /// # std::fs::remove_dir_all(&host).unwrap();
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    pub async fn upload(&self, host_path: impl AsRef<Path>, path: &str) -> Result<()> {
        let host_path = host_path.as_ref();
        let Some(report) = self.progress else {
            let none = TransferMeter::none();
            return self
                .call(OperationKind::FsUpload, path, |handle| handle.upload(host_path, path, none))
                .await;
        };
        self.call(OperationKind::FsUpload, path, |handle| async move {
            // Walked on a library thread, after the checks (a refused call walks nothing)
            // and within the deadline.
            let root = host_path.to_path_buf();
            let total = crate::runtime::unblock(move || Ok(host_tree_bytes(&root))).await?;
            let meter = TransferMeter::counting();
            reported(handle.upload(host_path, path, meter.clone()), &meter, Some(total), report).await
        })
        .await
    }

    /// Copies a sandbox file or directory tree to `host_path`, streamed (client memory
    /// stays flat). Sandbox links and special files are never followed (they are skipped),
    /// nothing is written outside `host_path` or through a host link, and host
    /// permissions are never loosened: existing host directories and files keep their
    /// mode and owner (an existing file is overwritten in place), new ones get the
    /// sandbox's permission bits masked with `0o755` (never setuid, setgid, sticky, group-
    /// or world-writable). At most the download budget ([`DEFAULT_DOWNLOAD_LIMIT`], 1 GiB,
    /// or [`Fs::download_limit`]) lands on the host's disk.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] for a missing sandbox path,
    /// [`Error::InvalidInput`] for an entry name that would escape or
    /// a host target that is a link, [`Error::TooLarge`] over the
    /// budget or for an archive header over 64 KiB (what this download created is removed
    /// first), [`Error::ExecutionTimeout`] past the deadline,
    /// [`Error::Provider`] for host I/O failures.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future kills the archiving process in the sandbox,
    /// and part of the tree may have been written on the host.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let sandbox = sandboxio::testing::sbx_fake().sandbox;
    /// sandbox.fs().write("out/report.txt", "done\n").await?;
    /// let host = std::env::temp_dir().join(format!("sandboxio-download-{}", std::process::id()));
    /// sandbox.fs().download("out", &host).await?; // a directory, recursively
    /// assert_eq!(std::fs::read_to_string(host.join("report.txt")).unwrap(), "done\n");
    /// # std::fs::remove_dir_all(&host).unwrap();
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    pub async fn download(&self, path: &str, host_path: impl AsRef<Path>) -> Result<()> {
        let host_path = host_path.as_ref();
        let budget = self.download_limit;
        let Some(report) = self.progress else {
            let none = TransferMeter::none();
            return self
                .call(OperationKind::FsDownload, path, |handle| {
                    handle.download(path, host_path, budget, none)
                })
                .await;
        };
        self.call(OperationKind::FsDownload, path, |handle| async move {
            let meter = TransferMeter::counting();
            reported(handle.download(path, host_path, budget, meter.clone()), &meter, None, report).await
        })
        .await
    }

    /// Lists a directory: name, kind, size in bytes and mode of each entry, sorted by name.
    /// The listing the host reads is bounded by [`DEFAULT_READ_LIMIT`] bytes.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`], [`Error::InvalidInput`],
    /// [`Error::TooLarge`] for a listing over that bound,
    /// [`Error::ExecutionTimeout`] past the deadline,
    /// [`Error::SandboxGone`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: listing changes nothing, and dropping the future stops the listing in
    /// the sandbox.
    pub async fn list(&self, path: &str) -> Result<Vec<DirEntry>> {
        let mut entries = self.call(OperationKind::FsList, path, |handle| handle.list(path)).await?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Creates a directory and its parents; an existing directory is fine.
    ///
    /// # Errors
    ///
    /// [`Error::PermissionDenied`], [`Error::InvalidInput`],
    /// [`Error::ExecutionTimeout`] past the deadline,
    /// [`Error::SandboxGone`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: creating a directory again is harmless.
    pub async fn mkdir(&self, path: &str) -> Result<()> {
        self.call(OperationKind::FsMkdir, path, |handle| handle.mkdir(path)).await
    }

    /// Removes a file, or a directory (with its contents when `recursive`).
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`], [`Error::IsADirectory`]
    /// for a non-empty directory without `recursive`, [`Error::InvalidInput`],
    /// [`Error::ExecutionTimeout`] past the deadline,
    /// [`Error::SandboxGone`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: part of a tree may have been removed.
    pub async fn remove(&self, path: &str, recursive: bool) -> Result<()> {
        self.call(OperationKind::FsRemove, path, |handle| handle.remove(path, recursive)).await
    }
}
