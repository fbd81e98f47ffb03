//! Templates: a base image plus files plus setup commands, run once in a container and
//! committed to an image by the engine, then reused by every `create` that names the
//! template. The image's tag carries a content hash of everything that makes it (the base
//! image's id, the files, the commands, the setup's network), so a changed template, or a
//! changed base, builds afresh, and an unchanged one is found in the engine and reused.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod prepare;
pub(super) mod prune;
pub(super) mod setup;

use super::backend::{DockerBackend, Inner};
use super::client::provider;
use super::{image, rt};
use crate::error::{Error, Result};

use crate::policy::ResourceLimits;
pub(super) use prepare::{REPOSITORY, SetupRequest, current_tag, prepare};
pub use prune::PrunedTemplates;
pub use setup::TEMPLATE_SETUP_LABEL;

/// The image label holding a template image's full content hash.
pub const TEMPLATE_HASH_LABEL: &str = "io.sandboxio.template.hash";

/// How long a template's setup may run when its [`Template::setup_timeout`] is not set:
/// 10 minutes.
pub const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_mins(10);

/// The memory limit of a template's setup when [`Template::setup_limits`] gives none:
/// 4096 MiB, with no swap (a sandbox gets no memory limit by default, but a setup runs
/// install scripts as root with nobody watching).
pub const DEFAULT_SETUP_MEMORY_MIB: u64 = 4096;

/// How much a template's setup may write to its container's file system (the layer its
/// commit becomes) when [`Template::setup_disk_mib`] is not set: 10240 MiB.
pub const DEFAULT_SETUP_DISK_MIB: u64 = 10240;

/// A reusable sandbox setup for `docker://`: a base image, files written into it, and shell
/// commands run once, in order, as root; the result committed to an image that `create`
/// starts from. Register it with
/// [`DockerBackend::with_template`](super::DockerBackend::with_template) and name it with
/// the builder's `.template(name)`.
///
/// The image keeps the base's user, working directory, entrypoint and command, so
/// sandboxes run as the base image's user, and a sandbox's user (the base's, or the one
/// given with `user=`) is resolved against the base image's `/etc/passwd` and `/etc/group`
/// as built, never against the ones the setup may have rewritten: a user the setup adds is
/// named by numbers (`user=1001:1001`), and one that resolves to uid 0 without asking for
/// root is refused. It holds this build's sandboxd (placed after
/// the setup, the file and its label as `scripts/build-images` bakes them), so its
/// sandboxes start as from sandboxio's own images. Files are written as root (owner 0:0) with mode
/// `0644` unless given one; a setup command can `chown` them.
///
/// The setup container is a sandbox in every way but its user: it carries the sandbox
/// labels (so [`Sandbox::list`](crate::Sandbox::list), [`Sandbox::reap`](crate::Sandbox::reap)
/// and `sandboxio ls`/`reap` see it, labelled `io.sandboxio.template.setup=<name>`), a TTL of
/// the setup timeout, the pids limit (and the memory and CPU limits of
/// [`Template::setup_limits`]), `no-new-privileges`, no network unless
/// [`Template::setup_network`], and an owner link: when the process that runs the setup
/// ends, however it ends, the container ends within seconds and the engine removes it.
/// **The setup commands run as root, with the engine's default capabilities**, because
/// installing packages needs them: a setup can do anything root in a container can, so
/// give a template only commands you would run in a `RUN` line of your own Dockerfile. It
/// cannot stop the owner link (the container's PID 1, which ignores signals sent from
/// inside); it can kill the setup's own timer, in which case the host's setup timeout and
/// `reap` (the TTL label) remain.
#[derive(Clone)]
pub struct Template {
    base: String,
    files: Vec<(String, Vec<u8>, u32)>,
    setup: Vec<String>,
    network: bool,
    timeout: Duration,
    limits: ResourceLimits,
    disk_mib: u64,
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
            .field("limits", &self.limits)
            .field("disk_mib", &self.disk_mib)
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
            limits: ResourceLimits::default(),
            disk_mib: DEFAULT_SETUP_DISK_MIB,
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

    /// Whether the setup has the network (the engine's default bridge, as
    /// [`NetworkPolicy::allow_all`](crate::NetworkPolicy::allow_all)): off by default
    /// (deny-all, loopback only). An allowlist is not offered: the egress gate's relay is
    /// sandboxd, which a setup container does not run. Sandboxes started from the template
    /// follow their own policy whatever this says.
    #[must_use]
    pub fn setup_network(mut self, allow: bool) -> Self {
        self.network = allow;
        self
    }

    /// How long the setup may run before it is killed and the template fails (default
    /// [`DEFAULT_SETUP_TIMEOUT`]). A timeout above [`MAX_TIMEOUT`](crate::exec::MAX_TIMEOUT)
    /// (30 days) saturates at it, `Duration::MAX` included; zero fails the setup at once.
    #[must_use]
    pub fn setup_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = crate::duration::saturate(timeout);
        self
    }

    /// Limits for the setup container: CPU when given, memory
    /// [`DEFAULT_SETUP_MEMORY_MIB`] unless `limits.memory_mib` says otherwise (no swap), and
    /// at most [`DEFAULT_PIDS_LIMIT`](super::DEFAULT_PIDS_LIMIT) processes unless
    /// `limits.pids` says otherwise, as for a sandbox. A setup killed for memory fails the
    /// template (its command's exit status, 137, in the error). Not part of the content
    /// hash (they do not change what the setup makes, only whether it fits).
    #[must_use]
    pub fn setup_limits(mut self, limits: ResourceLimits) -> Self {
        self.limits = limits;
        self
    }

    /// How much the setup may write to its container's file system, in MiB (default
    /// [`DEFAULT_SETUP_DISK_MIB`]): the engine's size of the container's writable layer
    /// (apparent sizes of the files written, a hard-linked file once), checked every
    /// second while the setup runs, so a setup may pass it by what it writes in about a
    /// second before it is stopped. Over it, the setup is removed and the template fails
    /// with [`Error::TooLarge`]. Not part of the content hash.
    #[must_use]
    pub fn setup_disk_mib(mut self, mib: u64) -> Self {
        self.disk_mib = mib;
        self
    }

    /// The base image.
    #[must_use]
    pub fn base(&self) -> &str {
        &self.base
    }

    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(super) fn network(&self) -> bool {
        self.network
    }

    pub(super) fn commands(&self) -> &[String] {
        &self.setup
    }

    pub(super) fn files(&self) -> &[(String, Vec<u8>, u32)] {
        &self.files
    }

    /// The setup container's limits: the caller's, with [`DEFAULT_SETUP_MEMORY_MIB`] when
    /// they give no memory limit.
    pub(super) fn limits(&self) -> ResourceLimits {
        ResourceLimits {
            memory_mib: self.limits.memory_mib.or(Some(DEFAULT_SETUP_MEMORY_MIB)),
            ..self.limits
        }
    }

    /// [`Template::setup_disk_mib`] in bytes.
    pub(super) fn disk_limit(&self) -> u64 {
        self.disk_mib.saturating_mul(1024 * 1024)
    }

    /// The content hash (64 hex digits) of this template on a base whose image id is
    /// `base_id`.
    fn hash(&self, base_id: &str) -> String {
        let mut bytes = Vec::new();
        let mut field = |data: &[u8]| {
            bytes.extend_from_slice(&(data.len() as u64).to_le_bytes());
            bytes.extend_from_slice(data);
        };
        // Version 2: images set up before the setup's status came from the engine (a
        // setup could forge it) are not trusted, and are set up again. Version 3: nor are
        // images without their base's users (`users.rs`), whose sandboxes would be resolved
        // against the /etc/passwd the setup could rewrite.
        field(b"sandboxio-template-3");
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

/// One lock per template image tag, per engine: two `create`s of one process that find the
/// same template uncached make one setup, the second waiting for the first and then finding
/// its image. (Processes do not share it: two of them each set up, and both commits carry
/// the same content, so the tag ends on one of two equal images.)
pub(super) type BuildLocks = Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>;

impl DockerBackend {
    /// Makes sure the engine has the image of the template registered as `name`: found by
    /// its content hash (the base image's id, the files, the commands, the setup's network),
    /// or set up now (the base pulled as the pull policy says, the files written, the
    /// commands run once as root, the container committed and removed).
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for an unknown template, a bad name or file path, or a base
    /// image the engine lacks under [`PullPolicy::Never`](super::PullPolicy::Never); the pull errors of
    /// [`DockerBackend::pull`] for the base; [`Error::Provider`] when a setup command
    /// fails or runs past [`Template::setup_timeout`] (the message ends with the setup's
    /// output, an [`ImageError`](super::ImageError) of kind [`ImageErrorKind::BuildFailed`](super::ImageErrorKind::BuildFailed) as the source);
    /// [`Error::Connect`] when the engine cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops at the next engine request; the setup container is
    /// removed in the background, and no image is committed.
    pub async fn prepare_template(&self, name: &str) -> Result<PreparedTemplate> {
        let (inner, name) = (Arc::clone(&self.inner), name.to_owned());
        rt::spawn(async move { Ok(prepare_named(&inner, &name).await?.0) }).await
    }

    /// [`DockerBackend::prepare_template`] for synchronous callers (blocks the calling
    /// thread).
    ///
    /// # Errors
    ///
    /// As [`DockerBackend::prepare_template`].
    pub fn prepare_template_blocking(&self, name: &str) -> Result<PreparedTemplate> {
        futures_lite::future::block_on(self.prepare_template(name))
    }

    /// Removes the old images of the templates registered on this backend: every image
    /// tagged `sandboxio-template/<name>:…` for a registered `name` but the current one
    /// (the one its content hash names today), and the untagged images left when two
    /// processes set up one template at once. For a template whose base image is not in the
    /// engine, nothing of that name is removed (which image is current cannot be told). An
    /// image a container still uses (a live sandbox, or a stopped container) is kept, and
    /// reported so. Images of template names this backend does not know are left alone.
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] when the engine cannot be reached; [`Error::Provider`] when
    /// listing or removing fails otherwise.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops between removals; a removal already sent completes on the
    /// engine.
    pub async fn prune_templates(&self) -> Result<PrunedTemplates> {
        let inner = Arc::clone(&self.inner);
        rt::spawn(async move { prune::prune(&DockerBackend::client(&inner).await?, &inner.templates).await })
            .await
    }

    /// [`DockerBackend::prune_templates`] for synchronous callers (blocks the calling
    /// thread).
    ///
    /// # Errors
    ///
    /// As [`DockerBackend::prune_templates`].
    pub fn prune_templates_blocking(&self) -> Result<PrunedTemplates> {
        futures_lite::future::block_on(self.prune_templates())
    }
}

/// The template registered as `name`, its image ready in the engine, and the engine's view
/// of that image.
pub(super) async fn prepare_named(
    inner: &Arc<Inner>,
    name: &str,
) -> Result<(PreparedTemplate, bollard::models::ImageInspect)> {
    let Some(template) = inner.templates.get(name) else {
        let mut known: Vec<_> = inner.templates.keys().collect();
        known.sort();
        return Err(Error::configuration(format!(
            "no docker:// template {name:?}; this backend knows {known:?}"
        )));
    };
    let base = image::resolve_image(Arc::clone(inner), template.base().to_owned()).await?;
    let docker = DockerBackend::client(inner).await?;
    let request = SetupRequest { name, template, runtime: inner.runtime.clone(), log: &inner.build_log };
    let prepared = prepare(&docker, &request, &base, &inner.engine.template_builds).await?;
    // By id: the tag may be re-pointed meanwhile; the id is the image the checks passed.
    let inspected = docker
        .inspect_image(&prepared.id)
        .await
        .map_err(|e| provider(&format!("inspecting the template image {}", prepared.image), e))?;
    Ok((prepared, inspected))
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
    fn the_setup_has_default_memory_and_disk_limits_the_caller_can_change() {
        let t = Template::new("b");
        assert_eq!(t.limits().memory_mib, Some(DEFAULT_SETUP_MEMORY_MIB));
        assert_eq!(t.disk_limit(), DEFAULT_SETUP_DISK_MIB << 20);
        let t = t.setup_limits(ResourceLimits::new().memory_mib(64)).setup_disk_mib(u64::MAX);
        assert_eq!((t.limits().memory_mib, t.disk_limit()), (Some(64), u64::MAX));
    }

    #[test]
    fn debug_shows_file_sizes_not_contents() {
        let text = format!("{:?}", Template::new("b").file("/etc/app.conf", "contents-canary"));
        assert!(!text.contains("contents-canary") && text.contains("/etc/app.conf"), "{text}");
    }
}
