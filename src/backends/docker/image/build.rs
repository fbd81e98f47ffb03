//! Building an image from a context directory: the context goes to the engine as a tar
//! stream, written on a blocking thread into a 64 KiB pipe while the request reads it (the
//! client's memory stays flat whatever the context's size), `.dockerignore` honoured; the
//! build's log comes back line by line (`tracing` and an optional callback), and a failed
//! build fails with the build's own error text.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use bollard::Docker;
use bollard::auth::DockerCredentials;

use super::dockerignore::Ignore;
use super::pull::{ImageError, ImageErrorKind};
use crate::backends::docker::SCHEME;
use crate::error::{Error, Result};

/// Target of the build log's `tracing` events.
const TARGET: &str = "sandboxio::docker::build";

/// The pipe between the archive thread and the request: what the client holds of the
/// context at any moment.
const PIPE_BYTES: usize = 64 * 1024;

/// The build-log callback, called with each line.
pub(crate) type BuildLog = super::callback::Callback<dyn Fn(&str) + Send + Sync>;

/// An image a build made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BuiltImage {
    /// The engine's image id (`sha256:…`).
    pub id: String,
    /// The tag it was given.
    pub tag: String,
}

/// What a build is given.
pub(crate) struct BuildRequest {
    pub context: PathBuf,
    pub dockerfile: String,
    pub tag: String,
    /// Credentials for the registries of `FROM` images, by registry.
    pub credentials: HashMap<String, DockerCredentials>,
}

/// Checks the request before anything is sent: the context is a directory and the
/// Dockerfile a file inside it, named by a relative path.
fn check(request: &BuildRequest) -> Result<()> {
    if !request.context.is_dir() {
        return Err(Error::configuration(format!(
            "the build context {} is not a directory",
            request.context.display()
        )));
    }
    let relative = Path::new(&request.dockerfile);
    if request.dockerfile.is_empty() || !relative.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(Error::configuration(format!(
            "the Dockerfile {:?} must be a relative path inside the context, without `..`",
            request.dockerfile
        )));
    }
    if !request.context.join(relative).is_file() {
        return Err(Error::configuration(format!(
            "no Dockerfile {:?} in the build context {}",
            request.dockerfile,
            request.context.display()
        )));
    }
    super::reference::ImageRef::parse(&request.tag).map(|_| ())
}

/// Builds `request.tag`, sending its context as a tar stream and passing each line of
/// the build's log to `log` (and `tracing`).
pub(crate) async fn build(docker: &Docker, request: BuildRequest, log: &BuildLog) -> Result<BuiltImage> {
    use futures_lite::StreamExt as _;
    check(&request)?;
    let (reader, writer) = tokio::io::simplex(PIPE_BYTES);
    let (context, dockerfile) = (request.context.clone(), request.dockerfile.clone());
    let archive = tokio::task::spawn_blocking(move || write_context(&context, &dockerfile, writer));
    let body = bollard::body_try_stream(tokio_util::io::ReaderStream::with_capacity(reader, PIPE_BYTES));
    let options = bollard::query_parameters::BuildImageOptions {
        dockerfile: request.dockerfile.clone(),
        t: Some(request.tag.clone()),
        rm: true,
        forcerm: true,
        ..Default::default()
    };
    let credentials = (!request.credentials.is_empty()).then(|| request.credentials.clone());
    let mut stream = docker.build_image(options, credentials, Some(body));
    let mut partial = String::new();
    let emit = |line: &str| {
        // What the build printed (its Dockerfile is not necessarily trusted) reaches logs escaped.
        tracing::info!(target: TARGET, tag = %request.tag, "{}", crate::text::Escaped(line));
        if let Some(callback) = &log.0 {
            callback(line);
        }
    };
    let mut failure = None;
    while let Some(report) = stream.next().await {
        match report {
            Ok(report) => {
                for text in [report.stream, report.status].into_iter().flatten() {
                    partial.push_str(&text);
                    while let Some(end) = partial.find('\n') {
                        let line: String = partial.drain(..=end).collect();
                        emit(line.trim_end());
                    }
                }
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if !partial.trim().is_empty() {
        emit(partial.trim_end());
    }
    drop(stream);
    let archived =
        archive.await.map_err(|e| Error::provider(SCHEME, "the context archive task panicked", e))?;
    // A host error explains a broken upload better than what the engine said of it.
    archived?;
    if let Some(e) = failure {
        return Err(build_failed(&request.tag, e));
    }
    let inspected = docker.inspect_image(&request.tag).await.map_err(|e| {
        crate::backends::docker::client::provider(&format!("inspecting the built image {}", request.tag), e)
    })?;
    Ok(BuiltImage { id: inspected.id.unwrap_or_default(), tag: request.tag })
}

/// The error for a failed build: the build's own text, typed as
/// [`ImageErrorKind::BuildFailed`] (a failure the engine reports in the log stream) or the
/// engine's failure otherwise.
fn build_failed(tag: &str, e: bollard::errors::Error) -> Error {
    let text = match &e {
        bollard::errors::Error::DockerStreamError { error } => error.clone(),
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        _ => return crate::backends::docker::client::provider(&format!("building {tag}"), e),
    };
    let image = super::reference::ImageRef::parse(tag).expect("checked before the build");
    ImageError::new(&image, ImageErrorKind::BuildFailed, text).into_error()
}

/// Writes the context under `root` as a tar archive into `writer`: `.dockerignore`'s
/// exclusions left out (never the Dockerfile or `.dockerignore` itself, which the engine
/// needs), entries in name order, links stored as links (never followed), special files
/// skipped.
fn write_context(
    root: &Path,
    dockerfile: &str,
    writer: tokio::io::WriteHalf<tokio::io::SimplexStream>,
) -> Result<()> {
    let host_error = |path: &Path, e: std::io::Error| {
        Error::provider(SCHEME, format!("reading the build context at {}", path.display()), e)
    };
    let ignore = match std::fs::read_to_string(root.join(".dockerignore")) {
        Ok(text) => Ignore::parse(&text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ignore::default(),
        Err(e) => return Err(host_error(&root.join(".dockerignore"), e)),
    };
    let keep =
        |relative: &str| relative == dockerfile || relative == ".dockerignore" || !ignore.excludes(relative);
    let mut builder = tar::Builder::new(tokio_util::io::SyncIoBridge::new(writer));
    builder.follow_symlinks(false);
    let mut pending = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = pending.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| host_error(&dir, e))?
            .collect::<std::io::Result<_>>()
            .map_err(|e| host_error(&dir, e))?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries.into_iter().rev() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                return Err(Error::configuration(format!(
                    "a name in the build context {} is not UTF-8",
                    dir.display()
                )));
            };
            let relative = if prefix.is_empty() { name.to_owned() } else { format!("{prefix}/{name}") };
            let path = entry.path();
            let kind = entry.file_type().map_err(|e| host_error(&path, e))?;
            if kind.is_dir() {
                // An excluded directory is still walked when an exception may re-include
                // something under it; it is archived only when kept itself.
                if keep(&relative) {
                    builder.append_path_with_name(&path, &relative).map_err(|e| host_error(&path, e))?;
                }
                if keep(&relative) || ignore.has_exceptions() {
                    pending.push((path, relative));
                }
            } else if kind.is_file() && keep(&relative) {
                append_file(&mut builder, &path, &relative).map_err(|e| host_error(&path, e))?;
            } else if kind.is_symlink() && keep(&relative) {
                builder.append_path_with_name(&path, &relative).map_err(|e| host_error(&path, e))?;
            }
        }
    }
    let mut writer = builder.into_inner().map_err(|e| host_error(root, e))?;
    std::io::Write::flush(&mut writer).map_err(|e| host_error(root, e))?;
    writer.shutdown().map_err(|e| host_error(root, e))
}

/// Appends the regular file at `path` as a plain entry, streamed from the file: never as a
/// GNU sparse entry (which the `tar` crate writes for sparse files, and the engine's
/// unpacker refuses with "unhandled tar header type 83").
///
/// The walk saw a regular file, but the context may change under it: the file is opened
/// without following a link and without waiting on a FIFO, and refused unless what was
/// opened is a regular file (a name swapped for a link to a host file, say
/// `/root/.ssh/id_ed25519`, was read and sent to the engine; one swapped for a FIFO hung the
/// build). Exactly the size in the header is sent, cut or padded with zeros: a file that grew
/// while read wrote its extra bytes where the next header belongs, which the engine then
/// read as entries of the writer's choosing.
fn append_file<W: std::io::Write>(
    builder: &mut tar::Builder<W>,
    path: &Path,
    name: &str,
) -> std::io::Result<()> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "it stopped being a regular file while the context was read",
        ));
    }
    let mut header = tar::Header::new_gnu();
    header.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(meta.len());
    let exact = file.take(meta.len()).chain(std::io::repeat(0)).take(meta.len());
    builder.append_data(&mut header, name, exact)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sbx-build-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("src/deep")).unwrap();
        std::fs::create_dir_all(dir.join("target/debug")).unwrap();
        std::fs::write(dir.join("Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::write(dir.join("src/main.rs"), "fn main() {}").unwrap();
        std::fs::write(dir.join("src/deep/notes.log"), "x").unwrap();
        std::fs::write(dir.join("src/deep/keep.log"), "x").unwrap();
        std::fs::write(dir.join("target/debug/big"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("link")).unwrap();
        dir
    }

    /// The archive's entry names, as the engine would unpack them.
    fn archived(root: &Path, dockerfile: &str) -> Vec<String> {
        let (mut reader, writer) = tokio::io::simplex(PIPE_BYTES);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (root, dockerfile) = (root.to_path_buf(), dockerfile.to_owned());
            let task = tokio::task::spawn_blocking(move || write_context(&root, &dockerfile, writer));
            let mut bytes = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut reader, &mut bytes).await.unwrap();
            task.await.unwrap().unwrap();
            let mut archive = tar::Archive::new(&bytes[..]);
            let mut names: Vec<String> = archive
                .entries()
                .unwrap()
                .map(|e| e.unwrap().path().unwrap().display().to_string())
                .collect();
            names.sort();
            names
        })
    }

    #[test]
    fn the_context_honours_dockerignore_and_keeps_links_as_links() {
        let dir = context("ignore");
        std::fs::write(dir.join(".dockerignore"), "target\n**/*.log\n!src/deep/keep.log\nDockerfile\n")
            .unwrap();
        let names = archived(&dir, "Dockerfile");
        assert_eq!(
            names,
            [".dockerignore", "Dockerfile", "link", "src", "src/deep", "src/deep/keep.log", "src/main.rs"],
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn without_dockerignore_everything_is_sent() {
        let dir = context("all");
        let names = archived(&dir, "Dockerfile");
        assert!(
            names.contains(&"target/debug/big".to_owned())
                && names.contains(&"src/deep/notes.log".to_owned()),
            "{names:?}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn requests_are_checked_before_anything_is_sent() {
        let dir = context("check");
        let request = |dockerfile: &str, tag: &str| BuildRequest {
            context: dir.clone(),
            dockerfile: dockerfile.into(),
            tag: tag.into(),
            credentials: HashMap::new(),
        };
        check(&request("Dockerfile", "sbx/x:1")).unwrap();
        for (dockerfile, tag) in [
            ("../Dockerfile", "sbx/x:1"),
            ("/etc/passwd", "sbx/x:1"),
            ("Nope", "sbx/x:1"),
            ("Dockerfile", "bad tag"),
        ] {
            assert_eq!(
                check(&request(dockerfile, tag)).unwrap_err().code(),
                crate::ErrorCode::Configuration,
                "{dockerfile} {tag}"
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// One file appended by `append_file`, then a marker file: the archive's entries as
    /// `(name, size, data)`, or the error.
    fn append_then_marker(path: &Path) -> std::io::Result<Vec<(String, u64, Vec<u8>)>> {
        use std::io::Read as _;
        let mut builder = tar::Builder::new(Vec::new());
        append_file(&mut builder, path, "entry")?;
        let mut header = tar::Header::new_gnu();
        header.set_size(6);
        builder.append_data(&mut header, "marker", &b"marker"[..])?;
        let bytes = builder.into_inner()?;
        let mut archive = tar::Archive::new(&bytes[..]);
        let mut entries = Vec::new();
        for entry in archive.entries()? {
            let mut entry = entry?;
            let (name, size) = (entry.path()?.display().to_string(), entry.header().size()?);
            let mut data = Vec::new();
            entry.read_to_end(&mut data)?;
            entries.push((name, size, data));
        }
        Ok(entries)
    }

    /// A name the walk saw as a regular file may be swapped before it is opened (the
    /// context is a directory others may write): a link to a host file is not read through,
    /// a FIFO does not hang the build, and a file whose content outgrows its size (here a
    /// `/proc` file, size 0 and content the kernel makes, as a log file growing mid-read)
    /// cannot write entries of its own into the archive. Positive control: a plain file is
    /// archived, byte for byte.
    #[test]
    fn a_file_swapped_or_growing_mid_walk_sends_nothing_it_should_not() {
        let dir = context("swap");
        std::fs::write(dir.join("plain"), "plain content").unwrap();
        let entries = append_then_marker(&dir.join("plain")).unwrap();
        assert_eq!(
            entries,
            [("entry".into(), 13, b"plain content".to_vec()), ("marker".into(), 6, b"marker".to_vec())]
        );

        let secret = dir.join("host-secret");
        std::fs::write(&secret, "host secret").unwrap();
        std::os::unix::fs::symlink(&secret, dir.join("swapped")).unwrap();
        let read = append_then_marker(&dir.join("swapped"));
        assert!(read.is_err(), "a link swapped in was read through: {read:?}");

        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(append_then_marker(&fifo).map(|_| ())));
        let opened = rx.recv_timeout(std::time::Duration::from_secs(5));
        assert!(matches!(opened, Ok(Err(_))), "a FIFO swapped in: {opened:?}");

        let status = Path::new("/proc/self/status");
        assert_eq!(std::fs::metadata(status).unwrap().len(), 0);
        let entries = append_then_marker(status).unwrap();
        let names: Vec<&str> = entries.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["entry", "marker"], "{entries:?}");
        assert_eq!((entries[0].1, entries[0].2.len()), (0, 0));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
