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

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::backend::BackendSandbox;
use crate::error::{Error, Result};
use crate::fs::FileKind;
use crate::runtime::unblock;

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

#[cfg(unix)]
fn mode_of(meta: &fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o777
}

#[cfg(not(unix))]
fn mode_of(meta: &fs::Metadata) -> u32 {
    if meta.permissions().readonly() { 0o444 } else { 0o644 }
}

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

    /// Makes `dir` a directory on the host, never through a link. An existing directory is
    /// left exactly as it is (its mode and owner are the host's business); a new one gets
    /// `mode` masked with [`NEW_MODE_MASK`], and always owner-accessible.
    pub(crate) fn dir(&mut self, dir: &Path, mode: u32) -> Result<()> {
        self.no_links_below_root(dir)?;
        match fs::symlink_metadata(dir) {
            Ok(meta) if meta.file_type().is_symlink() => Err(Error::invalid_input(format!(
                "host target {} is a symlink; download never writes through links",
                dir.display()
            ))),
            Ok(meta) if meta.is_dir() => Ok(()),
            Ok(_) => Err(Error::invalid_input(format!(
                "host target {} exists and is not a directory",
                dir.display()
            ))),
            Err(_) => {
                if let Some(parent) = dir.parent() {
                    self.ancestors(parent)?;
                }
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
        self.no_links_below_root(file)?;
        match fs::symlink_metadata(file) {
            Ok(meta) if meta.file_type().is_symlink() => Err(Error::invalid_input(format!(
                "host target {} is a symlink; download never writes through links",
                file.display()
            ))),
            Ok(meta) if meta.is_file() => {
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
            Ok(_) => Err(Error::invalid_input(format!(
                "host target {} exists and is not a regular file",
                file.display()
            ))),
            Err(_) => {
                if let Some(parent) = file.parent() {
                    self.ancestors(parent)?;
                }
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
    fn created_file(&self, path: &Path) -> bool {
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

fn join(base: &str, rel: &str) -> String {
    if rel.is_empty() { base.to_owned() } else { format!("{}/{rel}", base.trim_end_matches('/')) }
}

/// Reads the host tree at `root` without following links, into `(relative path, is_dir,
/// mode)`; contents are read later, one file at a time.
fn collect_host(root: &Path, rel: &str, out: &mut Vec<(String, bool, u32)>) -> Result<()> {
    let meta = fs::symlink_metadata(root).map_err(|e| host_error(root, e))?;
    if meta.file_type().is_symlink() {
        tracing::debug!(path = %root.display(), "upload skips a host symlink");
        return Ok(());
    }
    if meta.is_dir() {
        out.push((rel.to_owned(), true, mode_of(&meta)));
        let mut names: Vec<_> = fs::read_dir(root)
            .map_err(|e| host_error(root, e))?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect::<io::Result<_>>()
            .map_err(|e| host_error(root, e))?;
        names.sort();
        for name in names {
            let Some(name_str) = name.to_str() else {
                return Err(Error::invalid_input(format!(
                    "host file name {} under {} is not UTF-8",
                    name.display(),
                    root.display()
                )));
            };
            let child_rel = if rel.is_empty() { name_str.to_owned() } else { format!("{rel}/{name_str}") };
            collect_host(&root.join(&name), &child_rel, out)?;
        }
    } else if meta.is_file() {
        out.push((rel.to_owned(), false, mode_of(&meta)));
    }
    Ok(())
}

/// The default upload: the host tree walked without following links, then
/// [`BackendSandbox::mkdir`] and [`BackendSandbox::write`] per entry, holding one file in
/// memory at a time.
pub(crate) async fn upload_via_primitives<S: BackendSandbox + ?Sized>(
    sandbox: &S,
    host_path: &Path,
    path: &str,
) -> Result<()> {
    let root = host_path.to_path_buf();
    let items = unblock(move || {
        let mut items = Vec::new();
        collect_host(&root, "", &mut items).map(|()| items)
    })
    .await?;
    if items.is_empty() {
        return Err(Error::invalid_input(format!(
            "host path {} is a symlink or special file; upload never follows links",
            host_path.display()
        )));
    }
    for (rel, dir, mode) in items {
        if dir {
            sandbox.mkdir(&join(path, &rel)).await?;
        } else {
            let file = if rel.is_empty() { host_path.to_path_buf() } else { host_path.join(&rel) };
            let data = unblock(move || read_host_file(&file)).await?;
            sandbox.write(&join(path, &rel), data, Some(mode)).await?;
        }
    }
    Ok(())
}

/// Reads a host file for upload, never through a link (a link swapped in since the walk is
/// refused).
fn read_host_file(file: &Path) -> Result<Vec<u8>> {
    use io::Read as _;
    let meta = fs::symlink_metadata(file).map_err(|e| host_error(file, e))?;
    if !meta.is_file() {
        return Err(Error::invalid_input(format!("{} changed while uploading", file.display())));
    }
    let mut opened = fs::File::open(file).map_err(|e| host_error(file, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let now = opened.metadata().map_err(|e| host_error(file, e))?;
        if (now.dev(), now.ino()) != (meta.dev(), meta.ino()) {
            return Err(Error::invalid_input(format!("{} changed while uploading", file.display())));
        }
    }
    let mut data = Vec::new();
    opened.read_to_end(&mut data).map_err(|e| host_error(file, e))?;
    Ok(data)
}

/// A name listed by the sandbox, accepted only if it is one plain path component.
fn safe_component(name: &str) -> Result<&str> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(Error::invalid_input(format!(
            "the sandbox listed an entry named {name:?}, which would escape the host target"
        )));
    }
    Ok(name)
}

/// Charges `bytes` against the budget of a download of `abs`.
fn charge(used: &mut u64, bytes: u64, budget: u64, abs: &str) -> Result<()> {
    *used = used.saturating_add(bytes);
    if *used > budget { Err(over_budget(abs, budget)) } else { Ok(()) }
}

/// The default download: the sandbox tree walked with [`BackendSandbox::list`] and
/// [`BackendSandbox::read`], each read bounded by what is left of `budget` (512 bytes are
/// charged per entry, as an archive would).
pub(crate) async fn download_via_primitives<S: BackendSandbox + ?Sized>(
    sandbox: &S,
    path: &str,
    host_path: &Path,
    budget: u64,
) -> Result<()> {
    // Is `path` a directory? Listing its parent tells the kind without following links.
    let trimmed = path.trim_end_matches('/');
    let (parent, name) = match trimmed.rsplit_once('/') {
        Some((p, n)) => (if p.is_empty() { "/" } else { p }, n),
        None => (".", trimmed),
    };
    let (kind, mode) = if name.is_empty() || name == "." {
        (FileKind::Dir, 0o755)
    } else {
        let entries = sandbox.list(parent).await?;
        entries
            .into_iter()
            .find(|e| e.name == name)
            .map(|e| (e.kind, e.mode))
            .ok_or_else(|| Error::NotFound { path: path.to_owned() })?
    };
    let mut used = 0u64;
    let mut writer = HostWriter::new(host_path);
    match kind {
        FileKind::Dir => {
            charge(&mut used, 512, budget, path)?;
            let host = host_path.to_path_buf();
            writer = unblock(move || writer.dir(&host, mode).map(|()| writer)).await?;
            let mut stack = vec![(path.to_owned(), host_path.to_path_buf())];
            while let Some((dir, host_dir)) = stack.pop() {
                for entry in sandbox.list(&dir).await? {
                    let component = safe_component(&entry.name)?;
                    let child = join(&dir, component);
                    let host_child = host_dir.join(component);
                    match entry.kind {
                        FileKind::Dir => {
                            charge(&mut used, 512, budget, path)?;
                            let host = host_child.clone();
                            let mode = entry.mode;
                            writer = unblock(move || writer.dir(&host, mode).map(|()| writer)).await?;
                            stack.push((child, host_child));
                        }
                        FileKind::File => {
                            charge(&mut used, 512, budget, path)?;
                            let left = budget - used;
                            let data = sandbox.read(&child, left).await.map_err(|e| match e {
                                Error::TooLarge { .. } => over_budget(path, budget),
                                other => other,
                            })?;
                            charge(&mut used, data.len() as u64, budget, path)?;
                            writer = unblock(move || {
                                write_whole(&mut writer, &host_child, &data, entry.mode).map(|()| writer)
                            })
                            .await?;
                        }
                        FileKind::Symlink | FileKind::Other => {
                            tracing::debug!(path = %child, "download skips a sandbox link or special file");
                        }
                    }
                }
            }
        }
        FileKind::File => {
            charge(&mut used, 512, budget, path)?;
            let data = sandbox.read(path, budget - used).await.map_err(|e| match e {
                Error::TooLarge { .. } => over_budget(path, budget),
                other => other,
            })?;
            let host = host_path.to_path_buf();
            writer = unblock(move || write_whole(&mut writer, &host, &data, mode).map(|()| writer)).await?;
        }
        FileKind::Symlink | FileKind::Other => {
            return Err(Error::invalid_input(format!(
                "sandbox path {path:?} is a link or special file; download never follows links"
            )));
        }
    }
    writer.keep();
    Ok(())
}

fn write_whole(writer: &mut HostWriter, file: &Path, data: &[u8], mode: u32) -> Result<()> {
    use io::Write as _;
    let mut out = writer.file(file, mode)?;
    out.write_all(data).map_err(|e| host_error(file, e))
}

#[cfg(feature = "docker")]
pub(crate) use archive::Unpacker;
#[cfg(feature = "docker")]
pub(crate) use archive::append_host_tree;
#[cfg(feature = "local")]
pub(crate) use archive::{download_via_stream, exec_via_stream, upload_via_stream};

/// Tar streams between the host and a sandbox: built from the host tree file by file, and
/// unpacked as they arrive by a parser that never holds more than one header (at most
/// [`MAX_ARCHIVE_HEADER`](crate::fs::MAX_ARCHIVE_HEADER) bytes) and never writes more than
/// the download budget.
#[cfg(any(feature = "local", feature = "docker"))]
mod archive {
    use std::fs;
    use std::io::{self, Read, Write as _};
    use std::path::{Component, Path, PathBuf};

    use super::{HostWriter, host_error, over_budget};
    #[cfg(feature = "local")]
    use crate::backend::BackendSandbox;
    use crate::error::{Error, Result};
    use crate::fs::MAX_ARCHIVE_HEADER;

    /// A reader that yields exactly `left` bytes or fails: a host file that shrinks or
    /// grows while it is archived never corrupts the archive.
    struct Exactly<R> {
        inner: io::Take<R>,
        left: u64,
    }

    impl<R: Read> Read for Exactly<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.inner.read(buf)?;
            if n == 0 && self.left > 0 && !buf.is_empty() {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the file shrank while uploading"));
            }
            self.left -= n as u64;
            Ok(n)
        }
    }

    /// Appends the host tree at `host` to `builder` under the archive name `name`, never
    /// following links (a host link or special file is skipped), files streamed from disk
    /// (so an upload holds one buffer, whatever the size).
    pub(crate) fn append_host_tree<W: io::Write>(
        builder: &mut tar::Builder<W>,
        host: &Path,
        name: &str,
        backend: &str,
    ) -> Result<()> {
        use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
        let meta = fs::symlink_metadata(host).map_err(|e| host_error(host, e))?;
        let mut header = tar::Header::new_gnu();
        header.set_mode(meta.permissions().mode() & 0o777);
        header.set_mtime(meta.mtime().try_into().unwrap_or(0));
        let tar_err = |e| Error::provider(backend, format!("archiving {}", host.display()), e);
        if meta.is_dir() {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_size(0);
            builder.append_data(&mut header, format!("{name}/"), io::empty()).map_err(tar_err)?;
            let mut names: Vec<std::ffi::OsString> = fs::read_dir(host)
                .map_err(|e| host_error(host, e))?
                .map(|entry| entry.map(|e| e.file_name()))
                .collect::<io::Result<_>>()
                .map_err(|e| host_error(host, e))?;
            names.sort();
            for child in names {
                let Some(child_name) = child.to_str() else {
                    return Err(Error::invalid_input(format!(
                        "host file name {} is not UTF-8",
                        child.display()
                    )));
                };
                append_host_tree(builder, &host.join(&child), &format!("{name}/{child_name}"), backend)?;
            }
        } else if meta.is_file() {
            // Never through a link, and never blocking on a FIFO swapped in after the check.
            let file = fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(host)
                .map_err(|e| host_error(host, e))?;
            // The file opened must be the one checked: a link swapped in between is refused.
            let opened = file.metadata().map_err(|e| host_error(host, e))?;
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

    /// Set when the operation that started a thread-side transfer is dropped: the thread
    /// then stops at its next step and drops the exec stream, which kills the process.
    #[cfg(feature = "local")]
    #[derive(Clone, Default)]
    struct Cancel(std::sync::Arc<(std::sync::atomic::AtomicBool, event_listener::Event)>);

    #[cfg(feature = "local")]
    impl Cancel {
        fn cancelled(&self) -> bool {
            self.0.0.load(std::sync::atomic::Ordering::Acquire)
        }

        /// Runs `fut` to completion on this thread unless the operation is cancelled first.
        fn run<T>(&self, fut: impl std::future::Future<Output = Result<T>>) -> Result<T> {
            let gone = || Error::provider_message("host", "the operation was cancelled");
            futures_lite::future::block_on(futures_lite::future::or(fut, async {
                loop {
                    if self.cancelled() {
                        return Err(gone());
                    }
                    let listener = self.0.1.listen();
                    if self.cancelled() {
                        return Err(gone());
                    }
                    listener.await;
                }
            }))
        }
    }

    /// Cancels its [`Cancel`] when dropped (the operation's future went away, or ended).
    #[cfg(feature = "local")]
    struct CancelOnDrop(Cancel);

    #[cfg(feature = "local")]
    impl Drop for CancelOnDrop {
        fn drop(&mut self) {
            self.0.0.0.store(true, std::sync::atomic::Ordering::Release);
            self.0.0.1.notify(usize::MAX);
        }
    }

    /// How much is written to a stream's stdin at once.
    #[cfg(feature = "local")]
    const CHUNK: usize = 256 * 1024;

    /// The next chunk of `stream`, `None` at its end.
    #[cfg(feature = "local")]
    async fn next_chunk(
        stream: &mut Box<dyn crate::backend::BackendExecStream>,
    ) -> Result<Option<crate::exec::OutputChunk>> {
        std::future::poll_fn(|cx| stream.poll_chunk(cx)).await.transpose()
    }

    /// Drains what a stream has left, keeping at most `stdout_cap` bytes of stdout (more
    /// ends the drain at once, `true` returned: the caller drops the stream, which kills
    /// the process) and [`STDERR_LIMIT`](crate::backends::fs_scripts::STDERR_LIMIT) of stderr.
    #[cfg(feature = "local")]
    async fn drain(
        stream: &mut Box<dyn crate::backend::BackendExecStream>,
        stdout_cap: u64,
        out: &mut Vec<u8>,
        err: &mut Vec<u8>,
    ) -> Result<bool> {
        use crate::backends::fs_scripts::STDERR_LIMIT;
        while let Some(chunk) = next_chunk(stream).await? {
            if chunk.stream == crate::exec::StreamKind::Stdout {
                let room = usize::try_from(stdout_cap.saturating_add(1))
                    .unwrap_or(usize::MAX)
                    .saturating_sub(out.len());
                out.extend_from_slice(&chunk.data[..chunk.data.len().min(room)]);
                if out.len() as u64 > stdout_cap {
                    return Ok(true);
                }
            } else {
                let room = STDERR_LIMIT.saturating_sub(err.len());
                err.extend_from_slice(&chunk.data[..chunk.data.len().min(room)]);
            }
        }
        Ok(false)
    }

    /// Runs `command` through `sandbox`'s exec stream: `stdin` written in chunks (a process
    /// that exits without reading it all is not an error: its exit says what happened),
    /// stdout kept up to `stdout_cap` bytes and stderr up to 64 KiB. Past `stdout_cap + 1`
    /// bytes the stream is dropped at once, killing the process, and the exit is `-1`.
    /// Dropping the returned future drops the stream too.
    #[cfg(feature = "local")]
    pub(crate) async fn exec_via_stream<S: BackendSandbox + ?Sized>(
        sandbox: &S,
        command: crate::exec::Command,
        stdin: Option<Vec<u8>>,
        stdout_cap: u64,
    ) -> Result<(i64, Vec<u8>, Vec<u8>)> {
        let mut stream = sandbox.stream(command)?;
        if let Some(data) = stdin {
            for chunk in data.chunks(CHUNK) {
                if stream.write_stdin(chunk).await.is_err() {
                    break;
                }
            }
        }
        let _ = stream.close_stdin().await;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        if drain(&mut stream, stdout_cap, &mut out, &mut err).await? {
            return Ok((-1, out, err));
        }
        let ran = stream.wait().await?;
        Ok((ran.exit_code().map_or(-1, i64::from), out, err))
    }

    /// Writes to a stream's stdin in [`CHUNK`]s, from a thread that drives the stream.
    #[cfg(feature = "local")]
    struct StdinSink<'a> {
        stream: &'a mut Box<dyn crate::backend::BackendExecStream>,
        buf: Vec<u8>,
        cancel: &'a Cancel,
    }

    #[cfg(feature = "local")]
    impl StdinSink<'_> {
        fn send(&mut self) -> io::Result<()> {
            if self.buf.is_empty() {
                return Ok(());
            }
            let (stream, buf) = (&mut *self.stream, &self.buf);
            self.cancel.run(stream.write_stdin(buf)).map_err(io::Error::other)?;
            self.buf.clear();
            Ok(())
        }
    }

    #[cfg(feature = "local")]
    impl io::Write for StdinSink<'_> {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            let n = data.len().min(CHUNK - self.buf.len());
            self.buf.extend_from_slice(&data[..n]);
            if self.buf.len() == CHUNK {
                self.send()?;
            }
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            self.send()
        }
    }

    /// `upload` as one tar stream into [`UNTAR`](crate::backends::fs_scripts::UNTAR) run
    /// through `sandbox`'s exec stream: the archive is built from the host tree on a
    /// library thread, one [`CHUNK`] at a time, so client memory stays flat whatever the
    /// size. `dir` is where the archive is extracted, `name` its root entry's name.
    #[cfg(feature = "local")]
    pub(crate) async fn upload_via_stream<S: BackendSandbox + ?Sized>(
        sandbox: &S,
        backend: &'static str,
        host_path: &Path,
        abs: &str,
        dir: &str,
        name: &str,
    ) -> Result<()> {
        use crate::backends::fs_scripts::{UNTAR, exec_failure};
        let meta = fs::symlink_metadata(host_path).map_err(|e| host_error(host_path, e))?;
        if !(meta.is_dir() || meta.is_file()) {
            return Err(Error::invalid_input(format!(
                "host path {} is a symlink or special file; upload never follows links",
                host_path.display()
            )));
        }
        let command = crate::exec::Command::new("/bin/sh").arg("-c").arg(UNTAR).arg("sandboxio-fs").arg(dir);
        let mut stream = sandbox.stream(command)?;
        let cancel = Cancel::default();
        let _on_drop = CancelOnDrop(cancel.clone());
        let (host, name, abs) = (host_path.to_path_buf(), name.to_owned(), abs.to_owned());
        crate::runtime::unblock(move || {
            let archived = {
                let sink = StdinSink { stream: &mut stream, buf: Vec::with_capacity(CHUNK), cancel: &cancel };
                let mut builder = tar::Builder::new(sink);
                let appended = append_host_tree(&mut builder, &host, &name, backend);
                // Whatever happened, the archive ends and stdin closes: `tar -x` must see
                // end-of-file, or it waits for more until the deadline.
                let finished = builder.into_inner().and_then(|mut sink| io::Write::flush(&mut sink));
                appended.and(finished.map_err(|e| Error::provider(backend, "sending the archive", e)))
            };
            if cancel.cancelled() {
                return archived;
            }
            let _ = cancel.run(stream.close_stdin());
            let (mut out, mut err) = (Vec::new(), Vec::new());
            cancel.run(drain(&mut stream, 64 * 1024, &mut out, &mut err))?;
            let ran = cancel.run(stream.wait())?;
            // A host error explains a broken upload better than what `tar` said of it.
            archived?;
            if ran.success() { Ok(()) } else { Err(exec_failure(backend, &abs, &err)) }
        })
        .await
    }

    /// `download` as one tar stream from [`TAR_PACED`](crate::backends::fs_scripts::TAR_PACED)
    /// run through `sandbox`'s exec stream, unpacked by an [`Unpacker`] on a library thread
    /// as it arrives, asking for each next chunk only once the last is on disk (client
    /// memory stays flat even over a transport that queues without limit; the host's disk
    /// is bounded by `budget`).
    #[cfg(feature = "local")]
    pub(crate) async fn download_via_stream<S: BackendSandbox + ?Sized>(
        sandbox: &S,
        backend: &'static str,
        abs: &str,
        dir: &str,
        name: &str,
        host_path: &Path,
        budget: u64,
    ) -> Result<()> {
        use crate::backends::fs_scripts::{PACE_CHUNK, STDERR_LIMIT, TAR_PACED, exec_failure};
        /// How many chunks may be in flight: what the host asks for ahead of what it wrote.
        const WINDOW: usize = 4;
        let command = crate::exec::Command::new("/bin/sh")
            .arg("-c")
            .arg(TAR_PACED)
            .arg("sandboxio-fs")
            .arg(dir)
            .arg(name);
        let mut stream = sandbox.stream(command)?;
        let cancel = Cancel::default();
        let _on_drop = CancelOnDrop(cancel.clone());
        let (host, abs) = (host_path.to_path_buf(), abs.to_owned());
        crate::runtime::unblock(move || {
            // Asks for the first chunks; each chunk unpacked asks for one more, so at most
            // WINDOW chunks are ever queued on the host, however fast the sandbox writes.
            // (A script that has ended refuses the ask: that is not an error.)
            let _ = cancel.run(stream.write_stdin(&[b'\n'; WINDOW]));
            let mut unpacker = Unpacker::new(backend, &abs, &host, budget);
            let mut err = Vec::new();
            let mut since_ask = 0u64;
            // An error here returns at once: the stream is dropped (killing `tar`) and the
            // unpacker removes what it created.
            while let Some(chunk) = cancel.run(next_chunk(&mut stream))? {
                if chunk.stream == crate::exec::StreamKind::Stdout {
                    unpacker.push(&chunk.data)?;
                    since_ask += chunk.data.len() as u64;
                    while since_ask >= PACE_CHUNK {
                        since_ask -= PACE_CHUNK;
                        let _ = cancel.run(stream.write_stdin(b"\n"));
                    }
                } else {
                    let room = STDERR_LIMIT.saturating_sub(err.len());
                    err.extend_from_slice(&chunk.data[..chunk.data.len().min(room)]);
                }
            }
            let ran = cancel.run(stream.wait())?;
            match ran.exit_code() {
                Some(0) => unpacker.finish(),
                Some(3) => Err(Error::NotFound { path: abs }),
                _ => Err(exec_failure(backend, &abs, &err)),
            }
        })
        .await
    }

    /// Where the parser is in the archive.
    enum State {
        /// Collecting a 512-byte header block.
        Header,
        /// Collecting an extension entry (a GNU long name or link, a pax record).
        Extension { kind: u8, left: u64, pad: u64, data: Vec<u8> },
        /// Copying (or skipping, with `None`) an entry's contents.
        Body { out: Option<(fs::File, PathBuf)>, left: u64, pad: u64 },
        /// Past the end-of-archive block: what follows is padding, counted and dropped.
        Trailer { seen: u64 },
    }

    /// Unpacks a tar stream of sandbox path `abs` into `host` as it arrives (push-based,
    /// so any transport can feed it). Every entry name must stay under the archive's
    /// first entry (no `..`, no absolute name); links and special files are skipped; hard
    /// links are copies of a file this download created; every byte pushed, and every
    /// byte a hard-link copy writes, is charged to `budget`, checked *before* an entry is
    /// written from its header's size, so an entry over the budget writes nothing.
    pub(crate) struct Unpacker {
        abs: String,
        host: PathBuf,
        budget: u64,
        used: u64,
        state: State,
        block: Vec<u8>,
        root: Option<PathBuf>,
        long_name: Option<Vec<u8>>,
        long_link: Option<Vec<u8>>,
        writer: HostWriter,
        backend: &'static str,
    }

    fn malformed(backend: &str, abs: &str, why: &str) -> Error {
        Error::provider_message(backend, format!("the archive of {abs}: {why}"))
    }

    /// The most padding accepted after the end-of-archive block.
    const MAX_TRAILER: u64 = 1024 * 1024;

    fn padding(size: u64) -> u64 {
        (512 - size % 512) % 512
    }

    /// Only plain components: nothing that could leave the target.
    fn plain(name: &Path) -> bool {
        name.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    }

    fn path_of(bytes: &[u8]) -> PathBuf {
        use std::os::unix::ffi::OsStrExt as _;
        let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
        PathBuf::from(std::ffi::OsStr::from_bytes(&bytes[..end]))
    }

    impl Unpacker {
        pub(crate) fn new(backend: &'static str, abs: &str, host: &Path, budget: u64) -> Self {
            Unpacker {
                abs: abs.to_owned(),
                host: host.to_path_buf(),
                budget,
                used: 0,
                state: State::Header,
                block: Vec::with_capacity(512),
                root: None,
                long_name: None,
                long_link: None,
                writer: HostWriter::new(host),
                backend,
            }
        }

        fn charge(&mut self, bytes: u64) -> Result<()> {
            super::charge(&mut self.used, bytes, self.budget, &self.abs)
        }

        /// Feeds the next bytes of the archive.
        pub(crate) fn push(&mut self, mut data: &[u8]) -> Result<()> {
            while !data.is_empty() {
                let before = data.len();
                match &mut self.state {
                    State::Header => {
                        let n = (512 - self.block.len()).min(data.len());
                        self.block.extend_from_slice(&data[..n]);
                        data = &data[n..];
                        if self.block.len() == 512 {
                            let block = std::mem::replace(&mut self.block, Vec::with_capacity(512));
                            self.header(&block)?;
                        }
                    }
                    State::Extension { left, pad, data: kept, .. } => {
                        let take = usize::try_from((*left).min(data.len() as u64)).unwrap_or(data.len());
                        kept.extend_from_slice(&data[..take]);
                        *left -= take as u64;
                        data = &data[take..];
                        let skip = usize::try_from((*pad).min(data.len() as u64)).unwrap_or(data.len());
                        *pad -= skip as u64;
                        data = &data[skip..];
                        if *left == 0 && *pad == 0 {
                            let State::Extension { kind, data: kept, .. } =
                                std::mem::replace(&mut self.state, State::Header)
                            else {
                                unreachable!("matched above")
                            };
                            self.extension(kind, &kept)?;
                        }
                    }
                    State::Body { out, left, pad } => {
                        let take = usize::try_from((*left).min(data.len() as u64)).unwrap_or(data.len());
                        if let Some((file, path)) = out {
                            file.write_all(&data[..take]).map_err(|e| host_error(path, e))?;
                        }
                        *left -= take as u64;
                        data = &data[take..];
                        let skip = usize::try_from((*pad).min(data.len() as u64)).unwrap_or(data.len());
                        *pad -= skip as u64;
                        data = &data[skip..];
                        if *left == 0 && *pad == 0 {
                            self.state = State::Header;
                        }
                    }
                    State::Trailer { seen } => {
                        // `tar` pads to its record size (10 KiB for GNU tar); more is junk.
                        *seen += data.len() as u64;
                        if *seen > MAX_TRAILER {
                            return Err(malformed(
                                self.backend,
                                &self.abs,
                                "junk after the end of the archive",
                            ));
                        }
                        data = &[];
                    }
                }
                self.charge((before - data.len()) as u64)?;
            }
            Ok(())
        }

        fn extension(&mut self, kind: u8, data: &[u8]) -> Result<()> {
            match kind {
                b'L' => self.long_name = Some(data.to_vec()),
                b'K' => self.long_link = Some(data.to_vec()),
                b'x' => {
                    // Records `<len> <key>=<value>\n`; only the names matter here.
                    let mut rest = data;
                    while !rest.is_empty() {
                        let bad = || malformed(self.backend, &self.abs, "a malformed pax record");
                        let space = rest.iter().position(|b| *b == b' ').ok_or_else(bad)?;
                        let len: usize = std::str::from_utf8(&rest[..space])
                            .ok()
                            .and_then(|s| s.parse().ok())
                            .ok_or_else(bad)?;
                        if len <= space + 1 || len > rest.len() {
                            return Err(bad());
                        }
                        let record = &rest[space + 1..len - 1];
                        rest = &rest[len..];
                        if let Some(value) = record.strip_prefix(b"path=") {
                            self.long_name = Some(value.to_vec());
                        } else if let Some(value) = record.strip_prefix(b"linkpath=") {
                            self.long_link = Some(value.to_vec());
                        }
                    }
                }
                _ => {} // a global pax header: nothing here needs it
            }
            Ok(())
        }

        fn header(&mut self, block: &[u8]) -> Result<()> {
            if block.iter().all(|b| *b == 0) {
                self.state = State::Trailer { seen: 0 };
                return Ok(());
            }
            let header = tar::Header::from_byte_slice(block);
            let stored =
                header.cksum().map_err(|_| malformed(self.backend, &self.abs, "a bad checksum field"))?;
            let sum: u32 = block
                .iter()
                .enumerate()
                .map(|(i, b)| if (148..156).contains(&i) { u32::from(b' ') } else { u32::from(*b) })
                .sum();
            if sum != stored {
                return Err(malformed(self.backend, &self.abs, "a header with a wrong checksum"));
            }
            let size =
                header.entry_size().map_err(|_| malformed(self.backend, &self.abs, "a bad size field"))?;
            let pad = padding(size);
            let kind = header.entry_type().as_byte();
            if matches!(kind, b'L' | b'K' | b'x' | b'g') {
                if size > MAX_ARCHIVE_HEADER {
                    return Err(Error::TooLarge {
                        path: self.abs.clone(),
                        limit: MAX_ARCHIVE_HEADER,
                        what: "the size of one archive header from the sandbox (a long name or pax record)"
                            .to_owned(),
                    });
                }
                self.state = State::Extension { kind, left: size, pad, data: Vec::new() };
                return self.settle();
            }
            if matches!(kind, b'S' | b'V' | b'M' | b'N' | b'D') {
                return Err(malformed(self.backend, &self.abs, "a GNU sparse, volume or dump entry"));
            }
            // Checked from the header, before anything of the entry is written: an entry over
            // the budget writes nothing.
            if self.used.saturating_add(512).saturating_add(size).saturating_add(pad) > self.budget {
                return Err(over_budget(&self.abs, self.budget));
            }
            let name = match self.long_name.take() {
                Some(bytes) => path_of(&bytes),
                None => path_of(&header.path_bytes()),
            };
            let link = match self.long_link.take() {
                Some(bytes) => Some(path_of(&bytes)),
                None => header.link_name_bytes().map(|b| path_of(&b)),
            };
            if !plain(&name) {
                return Err(Error::invalid_input(format!(
                    "the archive of {} holds an entry named {}, which would escape the host target",
                    self.abs,
                    name.display()
                )));
            }
            let rel = match &self.root {
                None => {
                    self.root = Some(name.clone());
                    PathBuf::new()
                }
                Some(root) => match name.strip_prefix(root) {
                    Ok(rel) => rel.to_path_buf(),
                    Err(_) => {
                        return Err(Error::invalid_input(format!(
                            "the archive of {} holds {} outside its root {}",
                            self.abs,
                            name.display(),
                            root.display()
                        )));
                    }
                },
            };
            let target = if rel.as_os_str().is_empty() { self.host.clone() } else { self.host.join(&rel) };
            let mode = header.mode().unwrap_or(0o644);
            let mut out = None;
            match kind {
                b'5' => self.writer.dir(&target, mode)?,
                b'0' | b'\0' | b'7' => out = Some((self.writer.file(&target, mode)?, target)),
                b'1' => self.hard_link(link.as_deref(), &target, mode, &name)?,
                _ if rel.as_os_str().is_empty() => {
                    return Err(Error::invalid_input(format!(
                        "sandbox path {:?} is a link or special file; download never follows links",
                        self.abs
                    )));
                }
                _ => tracing::debug!(entry = ?name, "download skips a sandbox link or special file"),
            }
            self.state = State::Body { out, left: size, pad };
            self.settle()
        }

        /// A state with nothing left to read ends at once.
        fn settle(&mut self) -> Result<()> {
            match &self.state {
                State::Body { left: 0, pad: 0, .. } => self.state = State::Header,
                State::Extension { left: 0, pad: 0, .. } => {
                    let State::Extension { kind, data, .. } =
                        std::mem::replace(&mut self.state, State::Header)
                    else {
                        unreachable!("matched above")
                    };
                    self.extension(kind, &data)?;
                }
                _ => {}
            }
            Ok(())
        }

        /// A second name of a file this download already wrote: a copy of it, charged to
        /// the budget (a file with 200 names costs 200 times its size, and is refused
        /// when that is over the budget).
        fn hard_link(&mut self, link: Option<&Path>, target: &Path, mode: u32, name: &Path) -> Result<()> {
            let source = link
                .filter(|l| plain(l))
                .and_then(|l| self.root.as_ref().and_then(|r| l.strip_prefix(r).ok()))
                .map(|rel| if rel.as_os_str().is_empty() { self.host.clone() } else { self.host.join(rel) })
                .filter(|src| self.writer.created_file(src));
            let Some(src) = source else {
                tracing::debug!(entry = ?name, "download skips a hard link to a file it did not write");
                return Ok(());
            };
            let meta = fs::symlink_metadata(&src).map_err(|e| host_error(&src, e))?;
            if !meta.is_file() {
                return Ok(());
            }
            self.charge(meta.len())?;
            let mut from = fs::File::open(&src).map_err(|e| host_error(&src, e))?;
            let mut to = self.writer.file(target, mode)?;
            io::copy(&mut (&mut from).take(meta.len()), &mut to).map_err(|e| host_error(target, e))?;
            Ok(())
        }

        /// Ends the archive: it must not stop inside an entry, and must hold the path.
        pub(crate) fn finish(mut self) -> Result<()> {
            match self.state {
                State::Header if self.block.is_empty() => {}
                State::Trailer { .. } => {}
                _ => return Err(malformed(self.backend, &self.abs, "the archive was cut short")),
            }
            if self.root.is_none() {
                return Err(Error::NotFound { path: self.abs.clone() });
            }
            self.writer.keep();
            Ok(())
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn scratch(name: &str) -> PathBuf {
            let dir = std::env::temp_dir().join(format!("sbx-unpacker-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            dir
        }

        fn entry(builder: &mut tar::Builder<Vec<u8>>, name: &str, kind: tar::EntryType, data: &[u8]) {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(kind);
            header.set_size(data.len() as u64);
            header.set_mode(0o4777);
            builder.append_data(&mut header, name, data).unwrap();
        }

        fn unpack_in(tar: &[u8], host: &Path, budget: u64, chunk: usize) -> Result<()> {
            let mut unpacker = Unpacker::new("test", "/w/out", host, budget);
            for piece in tar.chunks(chunk) {
                unpacker.push(piece)?;
            }
            unpacker.finish()
        }

        #[test]
        fn unpacks_in_any_chunking_and_masks_new_modes() {
            use std::os::unix::fs::PermissionsExt as _;
            let mut builder = tar::Builder::new(Vec::new());
            entry(&mut builder, "out/", tar::EntryType::Directory, b"");
            let long = format!("out/{}", "n".repeat(150));
            entry(&mut builder, &long, tar::EntryType::Regular, b"long name");
            entry(&mut builder, "out/a", tar::EntryType::Regular, &[7u8; 1000]);
            let tar = builder.into_inner().unwrap();
            for chunk in [1, 7, 512, 513, 100_000] {
                let dir = scratch(&format!("ok{chunk}"));
                unpack_in(&tar, &dir.join("o"), 1 << 20, chunk).unwrap();
                assert_eq!(fs::read(dir.join("o").join("n".repeat(150))).unwrap(), b"long name");
                assert_eq!(fs::read(dir.join("o/a")).unwrap(), vec![7u8; 1000]);
                let mode = fs::metadata(dir.join("o/a")).unwrap().permissions().mode() & 0o7777;
                assert_eq!(mode & !0o755, 0, "{mode:o}");
                let _ = fs::remove_dir_all(dir);
            }
        }

        #[test]
        fn a_huge_long_name_header_is_too_large_before_it_is_read() {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::GNULongName);
            header.set_size(3 << 30);
            header.as_gnu_mut().unwrap().name[..13].copy_from_slice(b"././@LongLink");
            header.set_cksum();
            let dir = scratch("longname");
            let mut unpacker = Unpacker::new("test", "/w/out", &dir.join("o"), 1 << 40);
            let err = unpacker.push(header.as_bytes()).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::TooLarge, "{err}");
            let _ = fs::remove_dir_all(dir);
        }

        #[test]
        fn over_budget_writes_nothing_and_removes_what_it_created() {
            let mut builder = tar::Builder::new(Vec::new());
            entry(&mut builder, "out/", tar::EntryType::Directory, b"");
            entry(&mut builder, "out/small", tar::EntryType::Regular, b"x");
            entry(&mut builder, "out/big", tar::EntryType::Regular, &vec![0u8; 100_000]);
            let tar = builder.into_inner().unwrap();
            let dir = scratch("budget");
            let err = unpack_in(&tar, &dir.join("o"), 50_000, 4096).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::TooLarge, "{err}");
            assert!(!dir.join("o").exists(), "what the download created is removed");
            let _ = fs::remove_dir_all(dir);
        }

        #[test]
        fn hard_links_are_charged_copies() {
            let mut builder = tar::Builder::new(Vec::new());
            entry(&mut builder, "out/", tar::EntryType::Directory, b"");
            entry(&mut builder, "out/f", tar::EntryType::Regular, &[1u8; 10_000]);
            for i in 0..20 {
                let mut header = tar::Header::new_gnu();
                header.set_entry_type(tar::EntryType::Link);
                header.set_size(0);
                builder.append_link(&mut header, format!("out/l{i}"), "out/f").unwrap();
            }
            let tar = builder.into_inner().unwrap();
            let dir = scratch("links");
            let err = unpack_in(&tar, &dir.join("o"), 100_000, 4096).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::TooLarge, "{err}");
            let dir2 = scratch("links-ok");
            unpack_in(&tar, &dir2.join("o"), 1 << 20, 4096).unwrap();
            assert_eq!(fs::read(dir2.join("o/l19")).unwrap(), vec![1u8; 10_000]);
            let _ = fs::remove_dir_all(dir);
            let _ = fs::remove_dir_all(dir2);
        }

        #[test]
        fn a_host_link_in_the_target_is_never_written_through() {
            let dir = scratch("hostlink");
            let outside = dir.join("outside");
            fs::create_dir_all(&outside).unwrap();
            fs::write(outside.join("passwd"), "host").unwrap();
            fs::create_dir_all(dir.join("o")).unwrap();
            std::os::unix::fs::symlink(&outside, dir.join("o/sub")).unwrap();
            let mut builder = tar::Builder::new(Vec::new());
            entry(&mut builder, "out/", tar::EntryType::Directory, b"");
            // No entry for `out/sub/`: straight to a file below it.
            entry(&mut builder, "out/sub/passwd", tar::EntryType::Regular, b"evil");
            entry(&mut builder, "out/sub/new", tar::EntryType::Regular, b"evil");
            let tar = builder.into_inner().unwrap();
            let err = unpack_in(&tar, &dir.join("o"), 1 << 20, 512).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidInput, "{err}");
            assert_eq!(fs::read_to_string(outside.join("passwd")).unwrap(), "host");
            assert!(!outside.join("new").exists());
            let _ = fs::remove_dir_all(dir);
        }

        #[test]
        fn junk_after_the_end_of_the_archive_is_bounded() {
            let mut builder = tar::Builder::new(Vec::new());
            entry(&mut builder, "out", tar::EntryType::Regular, b"x");
            let mut tar = builder.into_inner().unwrap();
            tar.extend(std::iter::repeat_n(0u8, 2 << 20));
            let dir = scratch("junk");
            assert!(unpack_in(&tar, &dir.join("o"), 1 << 30, 65536).is_err());
            let _ = fs::remove_dir_all(dir);
        }

        #[test]
        fn escaping_names_and_cut_archives_are_refused() {
            for hostile in ["out/../../escaped", "/etc/escaped", "other/escaped"] {
                let mut builder = tar::Builder::new(Vec::new());
                entry(&mut builder, "out/", tar::EntryType::Directory, b"");
                let mut header = tar::Header::new_gnu();
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(1);
                let bytes = hostile.as_bytes();
                header.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
                header.set_cksum();
                builder.append(&header, &b"x"[..]).unwrap();
                let tar = builder.into_inner().unwrap();
                let dir = scratch("escape");
                let err = unpack_in(&tar, &dir.join("o"), 1 << 20, 512).unwrap_err();
                assert_eq!(err.code(), crate::ErrorCode::InvalidInput, "{hostile}: {err}");
                assert!(!dir.join("escaped").exists());
                let _ = fs::remove_dir_all(dir);
            }
            let mut builder = tar::Builder::new(Vec::new());
            entry(&mut builder, "out", tar::EntryType::Regular, &[1u8; 2000]);
            let tar = builder.into_inner().unwrap();
            let dir = scratch("cut");
            assert!(unpack_in(&tar[..1200], &dir.join("o"), 1 << 20, 512).is_err());
            assert!(!dir.join("o").exists());
            let _ = fs::remove_dir_all(dir);
        }
    }
}
