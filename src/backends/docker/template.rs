//! Templates: a base image plus files plus setup commands, run once in a container and
//! committed to an image by the engine, then reused by every `create` that names the
//! template. The image's tag carries a content hash of everything that makes it (the base
//! image's id, the files, the commands, the setup's network), so a changed template, or a
//! changed base, builds afresh, and an unchanged one is found in the engine and reused.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bollard::Docker;
use bollard::models::ContainerConfig;

use super::image_build::BuildLog;
use super::pull::{ImageError, ImageErrorKind};
use super::reference::ImageRef;
use super::template_setup;
use crate::error::{Error, Result};
use crate::policy::ResourceLimits;

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
    /// [`DEFAULT_SETUP_TIMEOUT`]). A timeout above [`MAX_TIMEOUT`](crate::MAX_TIMEOUT)
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

/// Makes sure the engine has `template`'s image: found by its content hash, or set up
/// now. `base` is the engine's view of the base image (already pulled as the policy says).
pub(super) async fn prepare(
    docker: &Docker,
    request: &SetupRequest<'_>,
    base: &bollard::models::ImageInspect,
    locks: &BuildLocks,
) -> Result<PreparedTemplate> {
    let SetupRequest { name, template, .. } = *request;
    template.check(name)?;
    let base_id = base.id.clone().unwrap_or_default();
    let hash = template.hash(&base_id);
    let image = image_tag(name, &hash);
    let lock =
        Arc::clone(locks.lock().unwrap_or_else(PoisonError::into_inner).entry(image.clone()).or_default());
    let _building = lock.lock().await;
    if let Ok(found) = docker.inspect_image(&image).await {
        match trusted(&found, base, &hash) {
            Ok(()) => {
                tracing::info!(target: "sandboxio::docker::template", template = name, image = %image, "cached");
                return Ok(PreparedTemplate { image, id: found.id.unwrap_or_default(), cached: true });
            }
            Err(why) => tracing::warn!(
                target: "sandboxio::docker::template",
                template = name, image = %image,
                "the tag is not this template's image ({why}): setting it up again",
            ),
        }
    }
    let started = std::time::Instant::now();
    let id = set_up(docker, request, base, &image, &hash).await?;
    tracing::info!(target: "sandboxio::docker::template", template = name, image = %image, elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX), "built");
    Ok(PreparedTemplate { image, id, cached: false })
}

/// Whether `found`, the image the template's tag names, is what a setup of this template
/// on `base` committed: it carries the content hash the setup labelled it with, and its
/// layers are the base's plus at most the one a commit adds. A tag re-pointed at another
/// image (one built elsewhere, or from another base, copying the label or not) fails.
/// An image made to pass both checks on purpose (the base, one layer, the label) cannot be
/// told apart; whoever can tag images in the engine controls the engine anyway.
fn trusted(
    found: &bollard::models::ImageInspect,
    base: &bollard::models::ImageInspect,
    hash: &str,
) -> std::result::Result<(), String> {
    let labelled =
        found.config.as_ref().and_then(|c| c.labels.as_ref()).and_then(|l| l.get(TEMPLATE_HASH_LABEL));
    if labelled.map(String::as_str) != Some(hash) {
        return Err(format!("its {TEMPLATE_HASH_LABEL} label is {labelled:?}"));
    }
    let layers = |image: &bollard::models::ImageInspect| {
        image.root_fs.as_ref().and_then(|r| r.layers.clone()).unwrap_or_default()
    };
    let (found, base) = (layers(found), layers(base));
    if !found.starts_with(&base) || found.len() > base.len() + 1 {
        return Err(format!(
            "its {} layers are not the base image's {} plus at most one",
            found.len(),
            base.len()
        ));
    }
    Ok(())
}

/// The repository of every template image.
pub(super) const REPOSITORY: &str = "sandboxio-template";

/// The tag of template `name`'s image with content hash `hash`:
/// `sandboxio-template/<name>:<first 16 hex digits>`.
fn image_tag(name: &str, hash: &str) -> String {
    format!("{REPOSITORY}/{name}:{}", &hash[..16])
}

/// The tag `name`'s image has on the base whose image id is `base_id`.
pub(super) fn current_tag(name: &str, template: &Template, base_id: &str) -> String {
    image_tag(name, &template.hash(base_id))
}

/// What a template's setup needs from its backend.
pub(super) struct SetupRequest<'a> {
    pub name: &'a str,
    pub template: &'a Template,
    /// The backend's OCI runtime (`runsc`): the setup runs under it as sandboxes do.
    pub runtime: Option<String>,
    pub log: &'a BuildLog,
}

/// Runs the setup in a container from the base (`template_setup.rs`: files first, then the
/// commands as root), pauses it, places sandboxd, and commits it as `image`, labelled with
/// `hash`. The container is removed whatever happens.
async fn set_up(
    docker: &Docker,
    request: &SetupRequest<'_>,
    base: &bollard::models::ImageInspect,
    image: &str,
    hash: &str,
) -> Result<String> {
    let SetupRequest { name, template, log, .. } = *request;
    let failed = |message: String| {
        let reference = ImageRef::parse(image).expect("a template tag is a valid reference");
        ImageError::new(&reference, ImageErrorKind::BuildFailed, format!("template {name:?}: {message}"))
            .into_error()
    };
    let base_id = base.id.clone().unwrap_or_default();
    let mut running =
        template_setup::start(docker, name, template, &base_id, request.runtime.clone(), &failed).await?;
    let id = running.id.clone();
    let setup = async {
        tokio::select! {
            finished = running.finish(docker, log) => Ok(finished),
            written = template_setup::watch_disk(docker, &id, template.disk_limit()) => Err(written),
        }
    };
    let Ok(finished) = tokio::time::timeout(template.timeout, setup).await else {
        return Err(failed(format!("the setup ran past its timeout of {:?}", template.timeout)));
    };
    let (status, output) = finished.map_err(|written| {
        Error::too_large(
            "/",
            template.disk_limit(),
            format!(
                "template {name:?}: its setup wrote {written} bytes to its container's file system; raise Template::setup_disk_mib"
            ),
        )
    })?;
    match status {
        Some(0) => {}
        Some(code) => return Err(failed(format!("a setup command exited with {code}; output: {output}"))),
        None => {
            return Err(failed(format!("the setup container ended before the setup did; output: {output}")));
        }
    }
    let mut labels = template_setup::unlabelled();
    labels.insert(TEMPLATE_HASH_LABEL.to_owned(), hash.to_owned());
    // Freeze whatever the setup left running, then place this build's sandboxd as a baked
    // image holds it (`sandboxd_path/baked.rs`): no process can touch the file before the commit, so the
    // image's label may name it, at the base's layers plus the commit's one, and sandboxes
    // from it start as fast as from a baked base. (The base's own label, which the image
    // would inherit, counts the base's layers only, so it never vouches for what the setup,
    // as root, could have changed.)
    docker.pause_container(&running.id).await.map_err(|e| failed(format!("pausing it to commit: {e}")))?;
    let layers = base.root_fs.as_ref().and_then(|r| r.layers.as_ref()).map_or(0, Vec::len) + 1;
    if let Some(sandboxd) = super::sandboxd_id() {
        super::sandboxd_path::place(docker, &running.id).await?;
        labels.insert(super::sandboxd_path::baked::SANDBOXD.to_owned(), format!("{sandboxd}:{layers}"));
    }
    // The base's users as built, beside sandboxd where neither the setup (frozen) nor a
    // sandbox user can write them: the template's sandboxes are resolved against these,
    // never against the /etc/passwd the setup, as root, may have rewritten.
    let (passwd, group) = &running.base_users;
    let archive = super::users::base_archive(passwd.as_deref(), group.as_deref())
        .map_err(|e| Error::provider(super::SCHEME, "archiving the base image's users", e))?;
    super::template_setup::unpack_at_root(docker, &running.id, archive)
        .await
        .map_err(|e| failed(format!("placing the base image's users: {e}")))?;
    // Keep what sandboxes see of the base: its user, entrypoint and command.
    let base_config = base.config.clone().unwrap_or_default();
    if let Some(recorded) = base_user_label(base_config.user.as_deref(), &running.base_users, layers) {
        labels.insert(super::sandboxd_path::baked::USER.to_owned(), recorded);
    }
    let config = ContainerConfig {
        user: Some(base_config.user.clone().filter(|u| !u.is_empty()).unwrap_or_else(|| "0".into())),
        entrypoint: Some(base_config.entrypoint.clone().unwrap_or_default()),
        cmd: base_config.cmd.clone().or_else(|| Some(vec!["sh".into()])),
        labels: Some(labels),
        ..Default::default()
    };
    let (repo, tag) = image.rsplit_once(':').expect("a template tag has a tag");
    let options = bollard::query_parameters::CommitContainerOptions {
        container: Some(running.id.clone()),
        repo: Some(repo.into()),
        tag: Some(tag.into()),
        comment: Some(format!("{}{name}", super::template_prune::COMMENT_PREFIX)),
        // Paused above, and removed (paused) after.
        pause: false,
        ..Default::default()
    };
    let committed =
        docker.commit_container(options, config).await.map_err(|e| failed(format!("committing: {e}")))?;
    Ok(committed.id)
}

/// The [`baked::USER`](super::sandboxd_path::baked::USER) label of a template image with `layers` layers
/// on a base whose configured user is `user` and whose files are `base_users`: how the base
/// resolves that user, so a create needs no archive read. None for no user, a `name:group`
/// (the label names a bare name), or one the base does not resolve (the create then fails
/// reading the files, with the reason).
fn base_user_label(
    user: Option<&str>,
    (passwd, group): &(Option<Vec<u8>>, Option<Vec<u8>>),
    layers: usize,
) -> Option<String> {
    let user = user.filter(|u| !u.is_empty() && !u.contains(':'))?;
    let text = |b: &Option<Vec<u8>>| b.as_deref().map(|b| String::from_utf8_lossy(b).into_owned());
    let source = super::users::Source::TemplateBase;
    let resolved =
        super::users::resolve(user, text(passwd).as_deref(), text(group).as_deref(), source).ok()?;
    Some(format!("{user}:{}:{}:{}:{layers}", resolved.uid, resolved.gid, resolved.home))
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
    fn the_base_user_label_records_only_what_the_base_resolves_without_root() {
        let files = (Some(b"root:x:0:0::/root:/bin/sh\nsbx:x:1000:1001::/home/sbx:/bin/sh\n".to_vec()), None);
        assert_eq!(base_user_label(Some("sbx"), &files, 4).as_deref(), Some("sbx:1000:1001:/home/sbx:4"));
        let baked = super::super::sandboxd_path::baked::Baked::read(
            &[(super::super::sandboxd_path::baked::USER.to_owned(), "sbx:1000:1001:/home/sbx:4".to_owned())]
                .into(),
            4,
            None,
        );
        assert_eq!(baked.user("sbx").map(|r| r.uid), Some(1000));
        for user in [None, Some(""), Some("sbx:sbx"), Some("nobody-here")] {
            assert_eq!(base_user_label(user, &files, 4), None, "{user:?}");
        }
        let remapped = (Some(b"sbx:x:0:0::/root:/bin/sh\n".to_vec()), None);
        assert_eq!(base_user_label(Some("sbx"), &remapped, 4), None, "an unasked-for root");
    }

    #[test]
    fn the_base_users_archive_holds_both_files_owned_by_the_supervisor() {
        let archive = super::super::users::base_archive(Some(b"p"), None).unwrap();
        let mut archive = tar::Archive::new(archive.as_slice());
        let entries: Vec<(String, u32, u64, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().display().to_string(),
                    h.mode().unwrap(),
                    h.uid().unwrap(),
                    h.size().unwrap(),
                )
            })
            .collect();
        let id = u64::from(super::super::SUPERVISOR_ID);
        assert_eq!(
            entries,
            [
                (".sandboxio/".to_owned(), 0o555, id, 0),
                (".sandboxio/base-passwd".to_owned(), 0o444, id, 1),
                (".sandboxio/base-group".to_owned(), 0o444, id, 0),
            ]
        );
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
