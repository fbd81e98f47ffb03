//! Pulling images: the pull policy `create` follows, progress (through `tracing` and an
//! optional callback), and the engine's failures turned into typed errors that name the
//! image and the registry.
//!
//! The engine does the pull (`POST /images/create`); sandboxio follows its JSON progress
//! stream. Dropping the pull's future closes that connection, and the engine cancels the
//! pull. A stream silent for longer than the stall bound fails rather than hangs.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::models::ImageInspect;

use super::credentials::CredentialSources;
use super::reference::ImageRef;
use crate::backends::docker::SCHEME;
use crate::error::{Error, Result};

/// Target of the pull's `tracing` events.
const TARGET: &str = "sandboxio::docker::pull";

/// How long a pull may go without a word from the engine before it fails as
/// [`ImageErrorKind::RegistryDown`]: 120 seconds (a registry that accepts connections but
/// never answers). Change it with
/// [`DockerBackend::with_pull_stall_timeout`](crate::backends::docker::DockerBackend::with_pull_stall_timeout).
pub const PULL_STALL_TIMEOUT: Duration = Duration::from_mins(2);

/// Whether `create` pulls its image (DSN option `pull=never|missing|always`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum PullPolicy {
    /// Never pull: an image not in the engine is [`Error::Configuration`]. The default, so
    /// that tests create from exactly the images they built.
    #[default]
    Never,
    /// Pull when the engine does not have the image (an image pinned by digest counts as
    /// present only with that digest).
    Missing,
    /// Pull at every `create`: the engine fetches only the layers it lacks.
    Always,
}

impl PullPolicy {
    /// Parses `never`, `missing` or `always`.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for anything else.
    pub fn parse(value: &str) -> Result<PullPolicy> {
        match value {
            "never" => Ok(PullPolicy::Never),
            "missing" => Ok(PullPolicy::Missing),
            "always" => Ok(PullPolicy::Always),
            other => Err(Error::configuration(format!(
                "docker:// option `pull` must be never, missing or always, not {other:?}"
            ))),
        }
    }

    /// The DSN spelling: `never`, `missing` or `always`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Never => "never",
            PullPolicy::Missing => "missing",
            PullPolicy::Always => "always",
        }
    }
}

/// Where a pull stands, given to the progress callback after every change the engine
/// reports, and once more at the end (a pull of an image whose layers the engine all had
/// reports only that: every layer done, no bytes). Byte counts are of compressed layer downloads; layers the engine already had
/// count as done with no bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PullProgress {
    /// The image as asked for.
    pub image: String,
    /// The registry it comes from (`host[:port]`, `docker.io` for Docker Hub).
    pub registry: String,
    /// Layers the engine has named so far (the manifest's layers, once it has read it).
    pub layers: usize,
    /// Layers downloaded and unpacked, or already present.
    pub layers_done: usize,
    /// Bytes downloaded so far.
    pub bytes_done: u64,
    /// The sum of the sizes the engine has announced for the layers it downloads.
    pub bytes_total: u64,
}

/// The progress callback, called with every pull's progress.
pub(crate) type Progress = super::callback::Callback<dyn Fn(&PullProgress) + Send + Sync>;

/// An image the engine now has.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PulledImage {
    /// The engine's image id (`sha256:…`).
    pub id: String,
    /// The registry's digest of what was pulled (`name@sha256:…`), when the engine reports
    /// one.
    pub digest: Option<String>,
    /// The progress at the end: layers and bytes.
    pub progress: PullProgress,
}

/// What went wrong with an image, for code that must tell the cases apart: the
/// [`source`](std::error::Error::source) of the [`Error`] a pull (or a `create` that
/// pulls) fails with. Find it with [`ImageError::of`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageError {
    image: String,
    registry: String,
    kind: ImageErrorKind,
    message: String,
}

/// The kinds of [`ImageError`], and the [`Error`] each one is reported as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ImageErrorKind {
    /// The registry has no such repository, tag or digest: [`Error::Configuration`].
    NotFound,
    /// The registry wants credentials, or refused the ones sent: [`Error::Auth`].
    Unauthorized,
    /// The registry answered 429: [`Error::RateLimited`] (retryable).
    RateLimited,
    /// The registry cannot be reached, or stopped answering: [`Error::Connect`]
    /// (retryable).
    RegistryDown,
    /// A layer's content does not match its digest, or does not unpack:
    /// [`Error::Provider`].
    CorruptLayer,
    /// The engine's image does not carry the digest the reference pinned:
    /// [`Error::Provider`].
    DigestMismatch,
    /// A build ([`DockerBackend::build_image`](crate::backends::docker::DockerBackend::build_image)) failed;
    /// the message is the build's own error text: [`Error::Provider`].
    BuildFailed,
    /// Anything else the engine reported: [`Error::Provider`].
    Other,
}

impl ImageErrorKind {
    fn describe(self) -> &'static str {
        match self {
            ImageErrorKind::NotFound => "not found",
            ImageErrorKind::Unauthorized => "unauthorised",
            ImageErrorKind::RateLimited => "rate limited",
            ImageErrorKind::RegistryDown => "registry unreachable",
            ImageErrorKind::CorruptLayer => "corrupt layer",
            ImageErrorKind::DigestMismatch => "digest mismatch",
            ImageErrorKind::BuildFailed => "build failed",
            ImageErrorKind::Other => "pull failed",
        }
    }
}

impl ImageError {
    /// The image as asked for.
    #[must_use]
    pub fn image(&self) -> &str {
        &self.image
    }

    /// The registry (`host[:port]`, `docker.io` for Docker Hub).
    #[must_use]
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// What went wrong.
    #[must_use]
    pub fn kind(&self) -> ImageErrorKind {
        self.kind
    }

    /// The engine's own words.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The [`ImageError`] behind `error`, when it is one.
    #[must_use]
    pub fn of(error: &Error) -> Option<&ImageError> {
        std::error::Error::source(error)?.downcast_ref::<ImageError>()
    }

    pub(crate) fn new(image: &ImageRef, kind: ImageErrorKind, message: impl Into<String>) -> Self {
        ImageError {
            image: image.to_string(),
            registry: image.registry.clone(),
            kind,
            message: message.into(),
        }
    }

    /// The sandboxio error that reports this one (as its source).
    pub(crate) fn into_error(self) -> Error {
        let message = self.to_string();
        let error = match self.kind {
            ImageErrorKind::NotFound => Error::configuration(message),
            ImageErrorKind::Unauthorized => Error::auth(SCHEME, message, None),
            ImageErrorKind::RateLimited => Error::rate_limited(SCHEME, None),
            ImageErrorKind::RegistryDown => Error::connect(SCHEME, message),
            ImageErrorKind::CorruptLayer
            | ImageErrorKind::DigestMismatch
            | ImageErrorKind::BuildFailed
            | ImageErrorKind::Other => Error::provider_message(SCHEME, message),
        };
        error.with_source(self)
    }
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind == ImageErrorKind::BuildFailed {
            // A local build: no registry was involved.
            return write!(f, "image {}: {}: {}", self.image, self.kind.describe(), self.message);
        }
        write!(
            f,
            "image {} from registry {}: {}: {}",
            self.image,
            self.registry,
            self.kind.describe(),
            self.message
        )
    }
}

impl std::error::Error for ImageError {}

/// Sorts the engine's words about a failed pull. Debian's 20.10 engine says, for example,
/// `manifest unknown`, `unauthorized: authentication required`, `no basic auth
/// credentials`, `toomanyrequests: …`, `dial tcp …: connect: connection refused` and
/// `filesystem layer verification failed for digest sha256:…`.
fn classify(status: Option<u16>, message: &str) -> ImageErrorKind {
    let m = message.to_ascii_lowercase();
    let any = |needles: &[&str]| needles.iter().any(|n| m.contains(n));
    if status == Some(429) || any(&["toomanyrequests", "too many requests", "rate limit"]) {
        ImageErrorKind::RateLimited
    } else if any(&[
        "verification failed",
        "digest did not match",
        "unexpected eof",
        "invalid tar header",
        "gzip: invalid",
        "failed to register layer",
        "archive/tar",
    ]) {
        ImageErrorKind::CorruptLayer
    } else if any(&[
        "unauthorized",
        "authentication required",
        "no basic auth credentials",
        "denied: ",
        "incorrect username or password",
    ]) {
        ImageErrorKind::Unauthorized
    } else if status == Some(404)
        || any(&["manifest unknown", "not found", "repository does not exist", "name unknown"])
    {
        ImageErrorKind::NotFound
    } else if any(&[
        "connection refused",
        "no such host",
        "i/o timeout",
        "dial tcp",
        "connection reset",
        "tls handshake timeout",
        "network is unreachable",
        "server misbehaving",
        "eof",
    ]) {
        ImageErrorKind::RegistryDown
    } else {
        ImageErrorKind::Other
    }
}

/// The typed error for a failure bollard reported while pulling `image`.
fn pull_failed(image: &ImageRef, e: BollardError) -> Error {
    let (status, message) = match &e {
        BollardError::DockerResponseServerError { status_code, message } => {
            (Some(*status_code), message.clone())
        }
        BollardError::DockerStreamError { error } => (None, error.clone()),
        // Not the registry: the engine's own connection.
        _ => return crate::backends::docker::client::provider(&format!("pulling image {image}"), e),
    };
    ImageError::new(image, classify(status, &message), message).into_error()
}

/// Follows the engine's per-layer reports.
struct Tracker {
    progress: PullProgress,
    /// Per layer id: (downloaded, announced size, done).
    layers: BTreeMap<String, (u64, u64, bool)>,
    digest: Option<String>,
}

impl Tracker {
    fn new(image: &ImageRef) -> Self {
        Tracker {
            progress: PullProgress {
                image: image.to_string(),
                registry: image.registry.clone(),
                ..Default::default()
            },
            layers: BTreeMap::new(),
            digest: None,
        }
    }

    /// Takes one report; `true` when the progress changed.
    fn update(&mut self, id: Option<&str>, status: &str, current: Option<i64>, total: Option<i64>) -> bool {
        if let Some(digest) = status.strip_prefix("Digest: ") {
            self.digest = Some(digest.trim().to_owned());
            return false;
        }
        let Some(id) = id else { return false };
        let bytes = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok());
        let is_layer_status = matches!(
            status,
            "Pulling fs layer"
                | "Waiting"
                | "Downloading"
                | "Verifying Checksum"
                | "Download complete"
                | "Extracting"
                | "Pull complete"
                | "Already exists"
                | "Retrying"
        ) || status.starts_with("Retrying");
        if !is_layer_status {
            return false;
        }
        let before = self.progress.clone();
        let layer = self.layers.entry(id.to_owned()).or_insert((0, 0, false));
        match status {
            "Downloading" => {
                if let Some(total) = bytes(total) {
                    layer.1 = total;
                }
                if let Some(current) = bytes(current) {
                    layer.0 = current;
                }
            }
            "Verifying Checksum" | "Download complete" | "Extracting" => layer.0 = layer.1.max(layer.0),
            "Pull complete" | "Already exists" => {
                layer.0 = layer.1.max(layer.0);
                layer.2 = true;
            }
            _ => {}
        }
        self.progress.layers = self.layers.len();
        self.progress.layers_done = self.layers.values().filter(|l| l.2).count();
        self.progress.bytes_done = self.layers.values().map(|l| l.0).sum();
        self.progress.bytes_total = self.layers.values().map(|l| l.1).sum();
        if self.progress.layers_done != before.layers_done {
            tracing::info!(target: TARGET, image = %self.progress.image, registry = %self.progress.registry, layer = id, status, layers_done = self.progress.layers_done, layers = self.progress.layers, "layer ready");
        }
        self.progress != before
    }
}

/// What a pull needs from the backend.
pub(crate) struct PullSetup<'a> {
    pub credentials: &'a CredentialSources,
    pub progress: &'a Progress,
    pub stall: Duration,
}

/// Pulls `image` (always: the policy is the caller's business), then inspects what the
/// engine has under that reference.
pub(crate) async fn pull(
    docker: &Docker,
    image: &ImageRef,
    setup: &PullSetup<'_>,
) -> Result<(PulledImage, ImageInspect)> {
    use futures_lite::StreamExt as _;
    let credentials = setup.credentials.for_image(image).await?;
    tracing::info!(
        target: TARGET,
        image = %image,
        registry = %image.registry,
        credentials = credentials.as_ref().map_or("none (anonymous)", |(_, from)| from.as_str()),
        "pulling"
    );
    let options = bollard::query_parameters::CreateImageOptions {
        from_image: Some(image.name()),
        tag: Some(image.tag_or_digest().to_owned()),
        ..Default::default()
    };
    let mut stream = docker.create_image(Some(options), None, credentials.map(|(c, _)| c));
    let mut tracker = Tracker::new(image);
    let started = std::time::Instant::now();
    loop {
        let Ok(next) = tokio::time::timeout(setup.stall, stream.next()).await else {
            let silent = format!("the pull reported nothing for {:?}", setup.stall);
            return Err(ImageError::new(image, ImageErrorKind::RegistryDown, silent).into_error());
        };
        let Some(report) = next else { break };
        let report = report.map_err(|e| pull_failed(image, e))?;
        let status = report.status.as_deref().unwrap_or_default();
        let (current, total) = report.progress_detail.as_ref().map_or((None, None), |p| (p.current, p.total));
        if tracker.update(report.id.as_deref(), status, current, total) {
            tracing::debug!(target: TARGET, image = %image, layers_done = tracker.progress.layers_done, layers = tracker.progress.layers, bytes_done = tracker.progress.bytes_done, bytes_total = tracker.progress.bytes_total, "progress");
            if let Some(callback) = &setup.progress.0 {
                callback(&tracker.progress);
            }
        }
    }
    let inspected = docker.inspect_image(&image.to_string()).await.map_err(|e| {
        ImageError::new(
            image,
            ImageErrorKind::Other,
            format!("the engine reported the pull done but has no such image ({e})"),
        )
        .into_error()
    })?;
    let digests = inspected.repo_digests.clone().unwrap_or_default();
    if let Some(pinned) = &image.digest
        && !digests.iter().any(|d| d.ends_with(&format!("@{pinned}")))
    {
        return Err(ImageError::new(
            image,
            ImageErrorKind::DigestMismatch,
            format!("the engine's image carries {digests:?}"),
        )
        .into_error());
    }
    if tracker.layers.is_empty() {
        // The engine had every layer (it only tagged): no layer was reported.
        let layers = inspected.root_fs.as_ref().and_then(|r| r.layers.as_ref()).map_or(0, Vec::len);
        tracker.progress.layers = layers;
        tracker.progress.layers_done = layers;
    }
    // The final state, always reported once.
    if let Some(callback) = &setup.progress.0 {
        callback(&tracker.progress);
    }
    let name = image.name();
    let digest = tracker
        .digest
        .map(|d| format!("{name}@{d}"))
        .or_else(|| digests.iter().find(|d| d.starts_with(&format!("{name}@"))).cloned());
    tracing::info!(target: TARGET, image = %image, registry = %image.registry, layers = tracker.progress.layers, bytes = tracker.progress.bytes_done, elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX), "pulled");
    let id = inspected.id.clone().unwrap_or_default();
    Ok((PulledImage { id, digest, progress: tracker.progress }, inspected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_never_is_the_default() {
        assert_eq!(PullPolicy::default(), PullPolicy::Never);
        for p in [PullPolicy::Never, PullPolicy::Missing, PullPolicy::Always] {
            assert_eq!(PullPolicy::parse(p.as_str()).unwrap(), p);
        }
        assert_eq!(PullPolicy::parse("sometimes").unwrap_err().code(), crate::ErrorCode::Configuration);
    }

    /// The engine's words as Debian's 20.10 engine said them against a loopback registry.
    #[test]
    fn the_engines_failures_are_sorted() {
        let cases = [
            (
                Some(404),
                "manifest for 127.0.0.1:5711/x/nope:1 not found: manifest unknown: manifest unknown",
                ImageErrorKind::NotFound,
            ),
            (
                Some(500),
                "Head \"http://127.0.0.1:5712/v2/x/manifests/1\": no basic auth credentials",
                ImageErrorKind::Unauthorized,
            ),
            (Some(500), "unauthorized: authentication required", ImageErrorKind::Unauthorized),
            (Some(500), "toomanyrequests: slow down", ImageErrorKind::RateLimited),
            (
                Some(500),
                "Get \"http://127.0.0.1:5799/v2/\": dial tcp 127.0.0.1:5799: connect: connection refused",
                ImageErrorKind::RegistryDown,
            ),
            (
                None,
                "filesystem layer verification failed for digest sha256:bb80",
                ImageErrorKind::CorruptLayer,
            ),
            (Some(500), "something new", ImageErrorKind::Other),
        ];
        for (status, message, kind) in cases {
            assert_eq!(classify(status, message), kind, "{message}");
        }
    }

    #[test]
    fn each_kind_maps_to_its_error_code_and_names_image_and_registry() {
        let image = ImageRef::parse("127.0.0.1:5711/x/y:1").unwrap();
        let cases = [
            (ImageErrorKind::NotFound, crate::ErrorCode::Configuration),
            (ImageErrorKind::Unauthorized, crate::ErrorCode::Auth),
            (ImageErrorKind::RateLimited, crate::ErrorCode::RateLimited),
            (ImageErrorKind::RegistryDown, crate::ErrorCode::Connect),
            (ImageErrorKind::CorruptLayer, crate::ErrorCode::Provider),
        ];
        for (kind, code) in cases {
            let e = ImageError::new(&image, kind, "said").into_error();
            assert_eq!(e.code(), code);
            let typed = ImageError::of(&e).unwrap();
            assert_eq!(
                (typed.kind(), typed.image(), typed.registry()),
                (kind, "127.0.0.1:5711/x/y:1", "127.0.0.1:5711")
            );
            let chain = format!("{e} {}", std::error::Error::source(&e).unwrap());
            assert!(
                chain.contains("127.0.0.1:5711/x/y:1") && chain.contains("registry 127.0.0.1:5711"),
                "{chain}"
            );
        }
    }

    #[test]
    fn progress_counts_layers_and_bytes() {
        let mut t = Tracker::new(&ImageRef::parse("r:1/x:1").unwrap());
        assert!(!t.update(Some("1"), "Pulling from x", None, None));
        assert!(t.update(Some("a"), "Pulling fs layer", None, None));
        assert!(t.update(Some("b"), "Already exists", None, None));
        assert!(t.update(Some("a"), "Downloading", Some(10), Some(100)));
        assert_eq!((t.progress.bytes_done, t.progress.bytes_total, t.progress.layers_done), (10, 100, 1));
        t.update(Some("a"), "Download complete", None, None);
        assert!(t.update(Some("a"), "Pull complete", None, None));
        assert!(!t.update(None, "Digest: sha256:00", None, None));
        assert_eq!(
            (t.progress.layers, t.progress.layers_done, t.progress.bytes_done, t.digest.as_deref()),
            (2, 2, 100, Some("sha256:00"))
        );
    }
}
