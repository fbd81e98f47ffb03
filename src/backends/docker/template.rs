//! Templates: a base image plus files plus setup commands, run once in a container and
//! committed to an image by the engine, then reused by every `create` that names the
//! template. The image's tag carries a content hash of everything that makes it (the base
//! image's id, the files, the commands, the setup's network), so a changed template, or a
//! changed base, builds afresh, and an unchanged one is found in the engine and reused.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerConfig, ContainerCreateBody, HostConfig};

use super::image_build::BuildLog;
use super::pull::{ImageError, ImageErrorKind};
use super::reference::ImageRef;
use super::{RemoveOnDrop, SCHEME, client::provider, unique_suffix};
use crate::error::{Error, Result};

/// The image label holding a template image's full content hash.
pub const TEMPLATE_HASH_LABEL: &str = "io.sandboxio.template.hash";

/// How long a template's setup may run when its [`Template::setup_timeout`] is not set:
/// 10 minutes.
pub const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_mins(10);

/// The most of a failed setup's output kept in its error: 4 KiB (the end of it).
const OUTPUT_TAIL: usize = 4096;

/// A reusable sandbox setup for `docker://`: a base image, files written into it, and shell
/// commands run once, in order, as root; the result committed to an image that `create`
/// starts from. Register it with
/// [`DockerBackend::with_template`](super::DockerBackend::with_template) and name it with
/// the builder's `.template(name)`.
///
/// The image keeps the base's user, working directory, entrypoint and command, so
/// sandboxes run as the base image's user. Files are written as root (owner 0:0) with mode
/// `0644` unless given one; a setup command can `chown` them.
#[derive(Clone)]
pub struct Template {
    base: String,
    files: Vec<(String, Vec<u8>, u32)>,
    setup: Vec<String>,
    network: bool,
    timeout: Duration,
}

impl fmt::Debug for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let files: Vec<_> = self.files.iter().map(|(path, data, mode)| (path, data.len(), mode)).collect();
        f.debug_struct("Template")
            .field("base", &self.base)
            .field("files (path, bytes, mode)", &files)
            .field("setup", &self.setup)
            .field("network", &self.network)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Template {
    /// A template on `base_image` (pulled by the backend's pull policy), with no files or
    /// commands yet.
    pub fn new(base_image: impl Into<String>) -> Self {
        Template {
            base: base_image.into(),
            files: Vec::new(),
            setup: Vec::new(),
            network: false,
            timeout: DEFAULT_SETUP_TIMEOUT,
        }
    }

    /// Writes `contents` at the absolute path `path` (mode `0644`), before the setup runs.
    #[must_use]
    pub fn file(self, path: impl Into<String>, contents: impl Into<Vec<u8>>) -> Self {
        self.file_with_mode(path, contents, 0o644)
    }

    /// Writes `contents` at the absolute path `path` with permission bits `mode` (for
    /// example `0o755`), before the setup runs.
    #[must_use]
    pub fn file_with_mode(
        mut self,
        path: impl Into<String>,
        contents: impl Into<Vec<u8>>,
        mode: u32,
    ) -> Self {
        self.files.push((path.into(), contents.into(), mode & 0o7777));
        self
    }

    /// Adds a shell command (`sh -c`) to the setup; commands run in order, as root, and the
    /// first that fails fails the template.
    #[must_use]
    pub fn run(mut self, command: impl Into<String>) -> Self {
        self.setup.push(command.into());
        self
    }

    /// Whether the setup has the network (the engine's default bridge): off by default.
    /// Sandboxes started from the template follow their own policy whatever this says.
    #[must_use]
    pub fn setup_network(mut self, allow: bool) -> Self {
        self.network = allow;
        self
    }

    /// How long the setup may run before it is killed and the template fails (default
    /// [`DEFAULT_SETUP_TIMEOUT`]).
    #[must_use]
    pub fn setup_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The base image.
    #[must_use]
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The content hash (64 hex digits) of this template on a base whose image id is
    /// `base_id`.
    fn hash(&self, base_id: &str) -> String {
        let mut bytes = Vec::new();
        let mut field = |data: &[u8]| {
            bytes.extend_from_slice(&(data.len() as u64).to_le_bytes());
            bytes.extend_from_slice(data);
        };
        field(b"sandboxio-template-1");
        field(base_id.as_bytes());
        for (path, data, mode) in &self.files {
            field(b"file");
            field(path.as_bytes());
            field(&mode.to_le_bytes());
            field(data);
        }
        for command in &self.setup {
            field(b"run");
            field(command.as_bytes());
        }
        field(if self.network { b"network" } else { b"no-network" });
        crate::sandboxd::sha256::hex_digest(&bytes)
    }

    fn check(&self, name: &str) -> Result<()> {
        if name.is_empty()
            || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
        {
            return Err(Error::configuration(format!(
                "template name {name:?} must be non-empty lower-case letters, digits, `-`, `_` or `.`"
            )));
        }
        for (path, _, _) in &self.files {
            if !path.starts_with('/')
                || path.split('/').any(|s| s == "..")
                || path.contains('\0')
                || path == "/"
            {
                return Err(Error::configuration(format!(
                    "template {name:?}: file path {path:?} must be absolute, below /, without `..`"
                )));
            }
        }
        Ok(())
    }
}

/// A template's image, ready in the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PreparedTemplate {
    /// Its tag, `sandboxio-template/<name>:<first 16 hex digits of the content hash>`.
    pub image: String,
    /// The engine's image id.
    pub id: String,
    /// Whether the engine already had it (no setup ran).
    pub cached: bool,
}

/// The templates registered on a backend, by name.
pub(super) type Templates = HashMap<String, Template>;

/// Makes sure the engine has `template`'s image: found by its content hash, or set up
/// now. `base` is the engine's view of the base image (already pulled as the policy says).
pub(super) async fn prepare(
    docker: &Docker,
    name: &str,
    template: &Template,
    base: &bollard::models::ImageInspect,
    log: &BuildLog,
) -> Result<PreparedTemplate> {
    template.check(name)?;
    let base_id = base.id.clone().unwrap_or_default();
    let hash = template.hash(&base_id);
    let image = format!("sandboxio-template/{name}:{}", &hash[..16]);
    if let Ok(found) = docker.inspect_image(&image).await {
        let labelled =
            found.config.as_ref().and_then(|c| c.labels.as_ref()).and_then(|l| l.get(TEMPLATE_HASH_LABEL));
        if labelled == Some(&hash) {
            tracing::info!(target: "sandboxio::docker::template", template = name, image = %image, "cached");
            return Ok(PreparedTemplate { image, id: found.id.unwrap_or_default(), cached: true });
        }
    }
    let started = std::time::Instant::now();
    let id = set_up(docker, name, template, base, &image, &hash, log).await?;
    tracing::info!(target: "sandboxio::docker::template", template = name, image = %image, elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX), "built");
    Ok(PreparedTemplate { image, id, cached: false })
}

/// Runs the setup in a fresh container from the base (files first, then the commands as
/// root) and commits it as `image`, labelled with `hash`. The container is removed
/// whatever happens.
async fn set_up(
    docker: &Docker,
    name: &str,
    template: &Template,
    base: &bollard::models::ImageInspect,
    image: &str,
    hash: &str,
    log: &BuildLog,
) -> Result<String> {
    use futures_lite::StreamExt as _;
    let failed = |message: String| {
        let reference = ImageRef::parse(image).expect("a template tag is a valid reference");
        ImageError::new(&reference, ImageErrorKind::BuildFailed, format!("template {name:?}: {message}"))
            .into_error()
    };
    let base_config = base.config.clone().unwrap_or_default();
    let script = std::iter::once("set -e".to_owned())
        .chain(template.setup.iter().cloned())
        .collect::<Vec<_>>()
        .join("\n");
    let body = ContainerCreateBody {
        image: base.id.clone(),
        cmd: Some(vec!["sh".into(), "-c".into(), script]),
        entrypoint: Some(Vec::new()),
        user: Some("0".into()),
        host_config: Some(HostConfig {
            network_mode: Some(if template.network { "bridge" } else { "none" }.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let options = bollard::query_parameters::CreateContainerOptions {
        name: Some(format!("sandboxio-template-setup-{name}-{}", unique_suffix())),
        platform: String::new(),
    };
    let made = docker
        .create_container(Some(options), body)
        .await
        .map_err(|e| provider("creating the template's setup container", e))?;
    let _guard = RemoveOnDrop { docker: docker.clone(), id: Some(made.id.clone()) };
    if !template.files.is_empty() {
        let archive = files_archive(&template.files)
            .map_err(|e| Error::provider(SCHEME, "archiving the template's files", e))?;
        let options =
            bollard::query_parameters::UploadToContainerOptions { path: "/".into(), ..Default::default() };
        docker
            .upload_to_container(&made.id, Some(options), bollard::body_full(archive.into()))
            .await
            .map_err(|e| failed(format!("writing its files: {e}")))?;
    }
    docker.start_container(&made.id, None).await.map_err(|e| failed(format!("starting its setup: {e}")))?;
    let waited = tokio::time::timeout(template.timeout, docker.wait_container(&made.id, None).next()).await;
    let output = setup_output(docker, &made.id, log).await;
    let code = match waited {
        Err(_) => {
            return Err(failed(format!(
                "the setup ran past its timeout of {:?}; output: {output}",
                template.timeout
            )));
        }
        Ok(Some(Ok(done))) => done.status_code,
        // The engine reports a non-zero exit as an error of the wait stream.
        Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. }))) => code,
        Ok(Some(Err(e))) => return Err(provider("waiting for the template's setup", e)),
        Ok(None) => return Err(failed("the engine ended the wait without an exit code".into())),
    };
    if code != 0 {
        return Err(failed(format!("a setup command exited with {code}; output: {output}")));
    }
    // Keep what sandboxes see of the base: its user, entrypoint and command.
    let config = ContainerConfig {
        user: Some(base_config.user.clone().filter(|u| !u.is_empty()).unwrap_or_else(|| "0".into())),
        entrypoint: Some(base_config.entrypoint.clone().unwrap_or_default()),
        cmd: base_config.cmd.clone().or_else(|| Some(vec!["sh".into()])),
        labels: Some(HashMap::from([(TEMPLATE_HASH_LABEL.to_owned(), hash.to_owned())])),
        ..Default::default()
    };
    let (repo, tag) = image.rsplit_once(':').expect("a template tag has a tag");
    let options = bollard::query_parameters::CommitContainerOptions {
        container: Some(made.id.clone()),
        repo: Some(repo.into()),
        tag: Some(tag.into()),
        comment: Some(format!("sandboxio template {name}")),
        pause: false,
        ..Default::default()
    };
    let committed =
        docker.commit_container(options, config).await.map_err(|e| failed(format!("committing: {e}")))?;
    Ok(committed.id)
}

/// The setup's output (both streams), each line passed to the build log and `tracing` as
/// it is read, and its last [`OUTPUT_TAIL`] bytes returned for an error message (never more
/// held: a setup may print a lot).
async fn setup_output(docker: &Docker, id: &str, log: &BuildLog) -> String {
    use futures_lite::StreamExt as _;
    let options = bollard::query_parameters::LogsOptions { stdout: true, stderr: true, ..Default::default() };
    let mut logs = docker.logs(id, Some(options));
    let (mut partial, mut tail) = (Vec::new(), Vec::new());
    let emit = |line: &[u8]| {
        let line = String::from_utf8_lossy(line);
        tracing::info!(target: "sandboxio::docker::template", "{line}");
        if let Some(callback) = &log.0 {
            callback(&line);
        }
    };
    while let Some(Ok(frame)) = logs.next().await {
        let bytes = frame.into_bytes();
        tail.extend_from_slice(&bytes);
        tail.drain(..tail.len().saturating_sub(OUTPUT_TAIL));
        partial.extend_from_slice(&bytes);
        while let Some(end) = partial.iter().position(|&b| b == b'\n') {
            emit(&partial[..end]);
            partial.drain(..=end);
        }
    }
    if !partial.is_empty() {
        emit(&partial);
    }
    String::from_utf8_lossy(&tail).trim().to_owned()
}

/// The template's files as a tar archive (owner 0:0), for the engine's archive API on a
/// container that has not started.
fn files_archive(files: &[(String, Vec<u8>, u32)]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, data, mode) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(*mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, path.trim_start_matches('/'), &data[..])?;
    }
    builder.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_covers_base_files_commands_and_network() {
        let t = Template::new("b").file("/a", "1").run("true");
        let h = t.hash("sha256:base");
        assert_eq!(h.len(), 64);
        assert_eq!(h, t.clone().hash("sha256:base"), "not deterministic");
        for other in [
            t.hash("sha256:other-base"),
            t.clone().file("/b", "2").hash("sha256:base"),
            Template::new("b").file("/a", "2").run("true").hash("sha256:base"),
            Template::new("b").file_with_mode("/a", "1", 0o755).run("true").hash("sha256:base"),
            t.clone().run("false").hash("sha256:base"),
            t.clone().setup_network(true).hash("sha256:base"),
        ] {
            assert_ne!(h, other);
        }
    }

    #[test]
    fn names_and_paths_are_checked() {
        let t = Template::new("b");
        t.check("py-data_1.0").unwrap();
        for bad in ["", "Upper", "a/b", "a:b"] {
            assert_eq!(t.check(bad).unwrap_err().code(), crate::ErrorCode::Configuration, "{bad}");
        }
        for path in ["relative", "/a/../etc", "/"] {
            let e = Template::new("b").file(path, "x").check("ok").unwrap_err();
            assert_eq!(e.code(), crate::ErrorCode::Configuration, "{path}");
        }
    }

    #[test]
    fn debug_shows_file_sizes_not_contents() {
        let text = format!("{:?}", Template::new("b").file("/etc/app.conf", "contents-canary"));
        assert!(!text.contains("contents-canary") && text.contains("/etc/app.conf"), "{text}");
    }
}
