//! Images for `docker://`: pulls ([`pull`], with registry [`credentials`] and parsed
//! [`reference`]s), builds from a context directory ([`build`], honouring its
//! [`dockerignore`]), and the engine's view of the image a `create` starts from
//! ([`resolve_image`]). The caller's progress and log callbacks are kept as [`callback`]s.

pub(super) mod build;
pub(super) mod callback;
pub(super) mod credentials;
mod dockerignore;
pub(super) mod pull;
pub(super) mod reference;

use std::sync::Arc;

use crate::error::{Error, Result};

use super::backend::{DockerBackend, Inner};
use super::client::{self, provider};
use super::rt;

pub use build::BuiltImage;
pub use credentials::{CREDENTIAL_HELPER_TIMEOUT, RegistryAuth};
pub use pull::{ImageError, ImageErrorKind, PULL_STALL_TIMEOUT, PullPolicy, PullProgress, PulledImage};

impl DockerBackend {
    /// Pulls `image` (`[registry/]repository[:tag][@sha256:digest]`) into the engine now,
    /// whatever the pull policy, with this backend's credentials and progress callback. A
    /// reference pinned by digest gets exactly that manifest, and the engine's image is
    /// checked to carry the digest.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for a malformed reference or an image the registry does not
    /// have; [`Error::Auth`] when the registry refuses; [`Error::RateLimited`];
    /// [`Error::Connect`] when the registry or the engine cannot be reached, or the pull
    /// reports nothing for the stall timeout; [`Error::Provider`] for a corrupt layer, a
    /// digest mismatch or another engine failure. Registry failures carry an
    /// [`ImageError`] (image, registry, [`ImageErrorKind`]) as their source.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future closes the engine connection, and the engine cancels the pull;
    /// layers already downloaded stay in the engine.
    pub async fn pull(&self, image: &str) -> Result<PulledImage> {
        let inner = Arc::clone(&self.inner);
        let image = reference::ImageRef::parse(image)?;
        rt::spawn(async move {
            let docker = DockerBackend::client(&inner).await?;
            Ok(pull::pull(&docker, &image, &inner.pull_setup()).await?.0)
        })
        .await
    }

    /// [`DockerBackend::pull`] for synchronous callers (blocks the calling thread).
    ///
    /// # Errors
    ///
    /// As [`DockerBackend::pull`].
    pub fn pull_blocking(&self, image: &str) -> Result<PulledImage> {
        futures_lite::future::block_on(self.pull(image))
    }

    /// Builds the image `tag` from the directory `context_dir` with the Dockerfile at
    /// `dockerfile` (a path relative to the context, usually `"Dockerfile"`), on the
    /// engine's classic builder. The context is sent as a tar stream through a 64 KiB pipe
    /// (the client's memory stays flat whatever its size), without what the context's
    /// `.dockerignore` excludes (the Dockerfile and `.dockerignore` themselves are always
    /// sent); links are sent as links. The build's log streams line by line to
    /// [`DockerBackend::with_build_log`]'s callback and to `tracing`. `FROM` images are
    /// pulled by the engine with the backend's typed credentials
    /// ([`DockerBackend::with_registry_auth`]).
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] when the context is not a directory, the Dockerfile is not a
    /// file inside it (or names `..`), or the tag is malformed; [`Error::Provider`] when the
    /// build fails, with the build's own error text (for example `The command '/bin/sh -c
    /// exit 3' returned a non-zero code: 3`) and an [`ImageError`] of kind
    /// [`ImageErrorKind::BuildFailed`] as its source, or when the context cannot be read;
    /// [`Error::Connect`] when the engine cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future closes the engine connection, which stops the build; the
    /// engine removes its intermediate containers (`forcerm`).
    pub async fn build_image(
        &self,
        context_dir: impl AsRef<std::path::Path>,
        dockerfile: &str,
        tag: &str,
    ) -> Result<BuiltImage> {
        let inner = Arc::clone(&self.inner);
        let request = build::BuildRequest {
            context: context_dir.as_ref().to_path_buf(),
            dockerfile: dockerfile.to_owned(),
            tag: tag.to_owned(),
            credentials: self.inner.credentials.typed_for_build(),
        };
        rt::spawn(async move {
            let docker = DockerBackend::client(&inner).await?;
            build::build(&docker, request, &inner.build_log).await
        })
        .await
    }

    /// [`DockerBackend::build_image`] for synchronous callers (blocks the calling thread).
    ///
    /// # Errors
    ///
    /// As [`DockerBackend::build_image`].
    pub fn build_image_blocking(
        &self,
        context_dir: impl AsRef<std::path::Path>,
        dockerfile: &str,
        tag: &str,
    ) -> Result<BuiltImage> {
        futures_lite::future::block_on(self.build_image(context_dir, dockerfile, tag))
    }
}

impl Inner {
    /// What a pull needs of the backend: credentials, progress callback, stall timeout.
    pub(super) fn pull_setup(&self) -> pull::PullSetup<'_> {
        pull::PullSetup { credentials: &self.credentials, progress: &self.progress, stall: self.pull_stall }
    }
}

/// The engine's view of `image`, pulled first when the policy says so.
pub(super) async fn resolve_image(inner: Arc<Inner>, image: String) -> Result<bollard::models::ImageInspect> {
    let docker = DockerBackend::client(&inner).await?;
    if inner.pull == PullPolicy::Always {
        let reference = reference::ImageRef::parse(&image)?;
        return Ok(pull::pull(&docker, &reference, &inner.pull_setup()).await?.1);
    }
    match docker.inspect_image(&image).await {
        Ok(inspected) => Ok(inspected),
        Err(e) if client::status(&e) == Some(404) && inner.pull == PullPolicy::Missing => {
            let reference = reference::ImageRef::parse(&image)?;
            Ok(pull::pull(&docker, &reference, &inner.pull_setup()).await?.1)
        }
        Err(e) => Err(match client::status(&e) {
            Some(404) => Error::Configuration {
                message: format!(
                    "image {image:?} is not in the Docker engine and the pull policy is never; pull it (DSN option pull=missing, or DockerBackend::with_pull), build it (scripts/build-images builds sandboxio's) or load it first"
                ),
                source: Some(Box::new(e)),
            },
            _ => provider("inspecting the image", e),
        }),
    }
}
