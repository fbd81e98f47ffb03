//! `docker://` over sandboxd: the container's main process is sandboxd, spoken to over the
//! container's attach stream (a `connect`ed handle: over an exec of sandboxd, a session of
//! its own). See `docs/adr/0006-sandboxd.md`.
//!
//! - **Placing it**: before the start, the embedded binary is copied to [`SANDBOXD_PATH`]
//!   through the engine's archive API, owned by [`super::SUPERVISOR_ID`] with mode `0555` in
//!   a directory of the same owner and mode: a sandbox user (root included: commands hold no
//!   capability) can neither write nor replace the file, nor add to its directory. An image
//!   that holds this very binary there (`baked.rs`) gets no copy. A root user can rename an
//!   uploaded directory away and put another in its place (overlayfs refuses to rename one
//!   that an image layer holds); that only matters to a later `connect`, which starts the
//!   binary at that path (the running sandboxd is not its file).
//! - **The owner link**: the owner attaches to the container before starting it; the
//!   container is `StdinOnce`, so when that connection ends (the owner closed it, or died)
//!   the engine closes sandboxd's stdin, and sandboxd kills everything and exits, which
//!   ends the container (auto-removed). `detach` tells sandboxd first, which then waits for
//!   its TTL (`--ttl-ms`) instead.
//! - **Privileges**: sandboxd runs as root with `CAP_SETUID`, `CAP_SETGID` and `CAP_KILL`
//!   only (to run each command as the sandbox's user with a gid of its own, and to end
//!   them), under `no-new-privileges`; every command runs with no capability at all.

use std::io;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::OnceLock;
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use futures_lite::StreamExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use crate::error::{Error, Result};
use crate::sandboxd::client::Client;

use super::SCHEME;
use super::client::provider;

/// The directory sandboxd is placed in, in every container of the sandboxd path.
pub(super) const SANDBOXD_DIR: &str = "/.sandboxio";

/// The path of sandboxd in the container.
pub(super) const SANDBOXD_PATH: &str = "/.sandboxio/sandboxd";

/// How long sandboxd may take to answer `Hello` after the container started.
const HELLO_TIMEOUT: Duration = Duration::from_secs(20);

/// The most bytes of sandboxd's own stderr kept for an error message.
const DIAGNOSTICS_LIMIT: usize = 4096;

/// Which way commands reach a `docker://` sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ExecPath {
    /// sandboxd as the container's main process, over its attach stream (the default,
    /// when this build embeds sandboxd): about a millisecond per command, exact exit
    /// statuses (a signal death is [`ExitStatus::Signal`](crate::ExitStatus)), and
    /// out-of-memory kills reported.
    #[default]
    Sandboxd,
    /// One engine exec per command, under a shell wrapper (tens of milliseconds per
    /// command; a signal death reads as exit code 128 + n). The fallback for builds
    /// without sandboxd, and forcible with the DSN option `exec=api`.
    ExecApi,
}

impl ExecPath {
    /// The DSN option value and label value: `sandboxd` or `api`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ExecPath::Sandboxd => "sandboxd",
            ExecPath::ExecApi => "api",
        }
    }

    /// The path a DSN option value names.
    pub(super) fn parse(value: &str) -> Result<ExecPath> {
        match value {
            "sandboxd" => Ok(ExecPath::Sandboxd),
            "api" => Ok(ExecPath::ExecApi),
            _ => Err(Error::configuration("docker:// option `exec` must be sandboxd or api")),
        }
    }
}

/// The archive that places sandboxd (see the module docs), built once per process; `None`
/// when this build has no sandboxd.
fn archive() -> Option<&'static [u8]> {
    static ARCHIVE: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    ARCHIVE
        .get_or_init(|| {
            let binary = crate::sandboxd::BINARY?;
            let mut builder = tar::Builder::new(Vec::new());
            let name = SANDBOXD_DIR.trim_start_matches('/');
            let entry = |kind: tar::EntryType, size: usize| {
                let mut header = tar::Header::new_gnu();
                header.set_entry_type(kind);
                header.set_size(size as u64);
                header.set_mode(0o555);
                header.set_uid(u64::from(super::SUPERVISOR_ID));
                header.set_gid(u64::from(super::SUPERVISOR_ID));
                header.set_mtime(0);
                header
            };
            let mut dir = entry(tar::EntryType::Directory, 0);
            builder.append_data(&mut dir, format!("{name}/"), io::empty()).ok()?;
            let mut file = entry(tar::EntryType::Regular, binary.len());
            builder.append_data(&mut file, format!("{name}/sandboxd"), binary).ok()?;
            builder.into_inner().ok()
        })
        .as_deref()
}

/// Whether this build can run sandboxd in containers.
pub(super) fn available() -> bool {
    archive().is_some()
}

/// Copies sandboxd into the created (not yet started) container `id`.
pub(super) async fn place(docker: &Docker, id: &str) -> Result<()> {
    let Some(archive) = archive() else {
        return Err(Error::provider_message(SCHEME, "this build of sandboxio has no sandboxd"));
    };
    let options =
        bollard::query_parameters::UploadToContainerOptions { path: "/".into(), ..Default::default() };
    docker
        .upload_to_container(id, Some(options), bollard::body_full(bytes::Bytes::from_static(archive)))
        .await
        .map_err(|e| provider("placing sandboxd in the container", e))
}

/// Reads a small file (at most 1 MiB) of container `id` through the archive API: `None`
/// when it does not exist.
pub(super) async fn read_small_file(docker: &Docker, id: &str, path: &str) -> Result<Option<Vec<u8>>> {
    const LIMIT: usize = 1024 * 1024;
    let options = bollard::query_parameters::DownloadFromContainerOptions { path: path.into() };
    let mut stream = docker.download_from_container(id, Some(options));
    let mut archive = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => {
                archive.extend_from_slice(&bytes);
                if archive.len() > LIMIT + 64 * 1024 {
                    return Err(Error::provider_message(
                        SCHEME,
                        format!("{path} in the container is over 1 MiB"),
                    ));
                }
            }
            Err(e) if super::client::status(&e) == Some(404) => return Ok(None),
            Err(e) => return Err(provider(&format!("reading {path} from the container"), e)),
        }
    }
    let mut entries = tar::Archive::new(archive.as_slice());
    let mut entries =
        entries.entries().map_err(|e| Error::provider(SCHEME, format!("the archive of {path}"), e))?;
    let Some(entry) = entries.next() else { return Ok(None) };
    let mut entry = entry.map_err(|e| Error::provider(SCHEME, format!("the archive of {path}"), e))?;
    if entry.header().entry_type() != tar::EntryType::Regular {
        return Ok(None);
    }
    let mut data = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(&mut entry, LIMIT as u64), &mut data)
        .map_err(|e| Error::provider(SCHEME, format!("the archive of {path}"), e))?;
    Ok(Some(data))
}

/// The user the engine would run a command as when asked for `user`: root when none is set.
pub(super) fn user_spec(user: Option<&str>) -> &str {
    user.filter(|u| !u.is_empty()).unwrap_or("0")
}

/// The sandbox user's uid, gid and home directory in container `id`, as the engine would
/// resolve `user` (`name`, `uid`, `name:group`, `uid:gid`; none: root) from the `passwd`
/// and `group` files of `source` in the container (a plain image's own, or a template
/// image's copies of its base's), refusing an unasked-for root ([`super::users::vet`]).
pub(super) async fn resolve_user(
    docker: &Docker,
    id: &str,
    user: Option<&str>,
    source: super::users::Source,
) -> Result<super::users::Resolved> {
    let spec = user_spec(user);
    let numeric = spec.split(':').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let (passwd_path, group_path) = source.paths();
    let passwd = read_small_file(docker, id, passwd_path).await?;
    let group =
        if spec.contains(':') && !numeric { read_small_file(docker, id, group_path).await? } else { None };
    let text =
        |b: &Option<Vec<u8>>| b.as_deref().map(String::from_utf8_lossy).map(std::borrow::Cow::into_owned);
    super::users::resolve(spec, text(&passwd).as_deref(), text(&group).as_deref(), source)
}

/// The host end of a sandboxd session carried by an attach or exec connection: the
/// session's input is a socket pair whose other end a task on the Docker runtime pumps into
/// the connection; its output comes through a [`Chunks`] channel. Dropping it (or
/// [`Link::close`]) ends the session's input, which sandboxd reads as its owner leaving.
#[derive(Debug)]
pub(super) struct Link {
    host: UnixStream,
    /// What sandboxd wrote to its stderr (bounded), for error messages.
    diagnostics: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Link {
    /// Ends the session's input (idempotent).
    pub(super) fn close(&self) {
        let _ = self.host.shutdown(std::net::Shutdown::Write);
    }

    /// What sandboxd said on its stderr, for an error message.
    pub(super) fn diagnostics(&self) -> String {
        let said = self.diagnostics.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&said).trim().to_owned()
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.close();
    }
}

type Output =
    Pin<Box<dyn futures_core::Stream<Item = std::result::Result<LogOutput, bollard::errors::Error>> + Send>>;

/// How many chunks of sandboxd's output wait between the connection and the session's
/// reader thread (each one read of the engine's stream, at most 32 KiB as the engine frames
/// them): the pump waits while they are all taken, so the engine's stream stops too.
const CHUNKS_QUEUED: usize = 32;

/// sandboxd's output as the session's reader thread reads it: the chunks bollard decoded,
/// handed over as they are (no socket hop, no copy but the one into the reader's buffer).
/// End-of-file once the pump has stopped and every chunk is read.
struct Chunks {
    queue: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    current: bytes::Bytes,
}

impl io::Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            // Called on the reader thread only, never on the runtime (blocking_recv panics there).
            match self.queue.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// Joins an attach or exec connection to a session: sandboxd's stdout goes to the client's
/// reader thread through [`Chunks`], the client's writes to the host end of a socket pair
/// go to sandboxd's stdin, sandboxd's stderr is kept (bounded). Runs on the Docker runtime.
/// Returns the link and a client on it (`Hello` sent, not yet answered).
pub(super) fn join(
    mut input: Pin<Box<dyn AsyncWrite + Send>>,
    mut output: Output,
    user: (u32, u32),
) -> Result<(Link, Client)> {
    let io_error = |e: io::Error| Error::provider(SCHEME, "joining sandboxd's stream", e);
    let (host, ours) = UnixStream::pair().map_err(io_error)?;
    ours.set_nonblocking(true).map_err(io_error)?;
    let mut from_host = tokio::net::UnixStream::from_std(ours).map_err(io_error)?;
    let (to_reader, queue) = tokio::sync::mpsc::channel(CHUNKS_QUEUED);
    let diagnostics = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = std::sync::Arc::clone(&diagnostics);
    tokio::spawn(async move {
        while let Some(Ok(frame)) = output.next().await {
            match frame {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    // The reader is gone only when the session is over.
                    if to_reader.send(message).await.is_err() {
                        break;
                    }
                }
                LogOutput::StdErr { message } => {
                    let mut said = kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let room = DIAGNOSTICS_LIMIT.saturating_sub(said.len());
                    said.extend_from_slice(&message[..message.len().min(room)]);
                }
                LogOutput::StdIn { .. } => {}
            }
        }
        // sandboxd's output ended (it exited, or the container is gone): dropping the sender,
        // the client reads end-of-file and ends every command with `Gone`.
    });
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from_host.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if input.write_all(&buf[..n]).await.is_err() || input.flush().await.is_err() {
                        break;
                    }
                }
            }
        }
        // The host closed its end: close sandboxd's stdin (the engine passes the
        // half-close on; the container is `StdinOnce`).
        let _ = input.shutdown().await;
    });
    let read = Chunks { queue, current: bytes::Bytes::new() };
    let write = host.try_clone().map_err(io_error)?;
    let client = Client::start(read, write, Some(user)).map_err(io_error)?;
    Ok((Link { host, diagnostics }, client))
}

/// Waits for sandboxd's answer to `Hello` (at most [`HELLO_TIMEOUT`]).
///
/// # Errors
///
/// [`Error::Provider`] naming what sandboxd said when it did not answer.
pub(super) async fn greet(client: &Client, link: &Link) -> Result<()> {
    let answered = tokio::time::timeout(HELLO_TIMEOUT, client.hello()).await;
    let why = match answered {
        Ok(Ok(_pid)) => return Ok(()),
        Ok(Err(why)) => why,
        Err(_) => format!("no answer within {} s", HELLO_TIMEOUT.as_secs()),
    };
    // Let the stderr pump catch up with what sandboxd said before it ended.
    tokio::time::sleep(Duration::from_millis(50)).await;
    Err(Error::provider_message(
        SCHEME,
        format!("sandboxd did not start in the container: {why}; it said: {:?}", link.diagnostics()),
    ))
}

/// Starts a new sandboxd session in running container `id` through an exec (a
/// `connect`ed handle's own session): its commands end when this session does.
pub(super) async fn exec_session(docker: &Docker, id: &str, user: (u32, u32)) -> Result<(Link, Client)> {
    let config = bollard::models::ExecConfig {
        cmd: Some(vec![SANDBOXD_PATH.to_owned()]),
        user: Some("0:0".into()),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        ..Default::default()
    };
    let created = docker
        .create_exec(id, config)
        .await
        .map_err(|e| super::client::sandbox_error(id, "starting a sandboxd session", e))?;
    let options = bollard::exec::StartExecOptions { detach: false, tty: false, output_capacity: None };
    let started = docker
        .start_exec(&created.id, Some(options))
        .await
        .map_err(|e| super::client::sandbox_error(id, "starting a sandboxd session", e))?;
    let bollard::exec::StartExecResults::Attached { output, input } = started else {
        return Err(Error::provider_message(SCHEME, "the engine started sandboxd's exec detached"));
    };
    let (link, client) = join(input, output, user)?;
    greet(&client, &link).await?;
    Ok((link, client))
}
