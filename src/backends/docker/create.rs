//! `create` on `docker://`: the image (pulled, or a template's, set up), then the container
//! (made from [`container_body`], its gate serving under an allowlist), started on its exec
//! path (`sandboxd_path::start` or `exec_api::start`), all of it on the Docker runtime and
//! bounded by the create timeout; a container whose creation never reaches the caller is
//! removed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bollard::Docker;
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};

use crate::backend::{BackendSandbox, CreateSpec};
use crate::error::{Error, Result};

use super::backend::{DockerBackend, Inner, sandboxd_id};
use super::client::provider;
use super::container::{Setup, container_body};
use super::exec_path::ExecPath;
use super::sandbox::{Shared, unique_suffix};
use super::{SCHEME, exec_api, image, labels, reap, rt, sandbox, sandboxd_path, template, users};

/// Creates a sandbox from `spec` (see the module docs).
pub(super) async fn create(inner: Arc<Inner>, spec: CreateSpec) -> Result<Box<dyn BackendSandbox>> {
    let timeout = spec.create_timeout;
    let provision = async move {
        // The image (a pull, a template's setup) first, as a task the caller's
        // future owns: dropping it cancels the pull, and nothing exists yet to
        // clean up.
        let (image, inspected) = match (&spec.template, &spec.image) {
            (Some(_), Some(_)) => {
                return Err(Error::configuration(
                    "name an image or a template, not both: a docker:// template brings its own image",
                ));
            }
            (Some(name), None) => {
                let (inner, name) = (Arc::clone(&inner), name.clone());
                let (prepared, inspected) =
                    rt::spawn(async move { template::prepare_named(&inner, &name).await }).await?;
                // The container is made from the id the cache checks passed, not
                // from a tag that could be re-pointed before the create.
                (prepared.id, inspected)
            }
            (None, image) => {
                let image = image.clone().unwrap_or_else(|| inner.image.clone());
                if image.trim().is_empty() {
                    return Err(Error::configuration(
                        "the Docker image name is empty; name one, for example sandboxio/python:2",
                    ));
                }
                (image.clone(), rt::spawn(image::resolve_image(Arc::clone(&inner), image)).await?)
            }
        };
        // Creation runs to its end on the Docker runtime whatever the caller does:
        // an engine request cut off mid-flight could still create a container nobody
        // knows about. A result nobody receives (timeout, dropped future) is
        // dropped, and dropping a `Created` removes its container.
        let (deliver, delivered) = tokio::sync::oneshot::channel::<Result<Created>>();
        rt::detach(async move {
            let _ = deliver.send(create_container(inner, spec, image, inspected).await);
        });
        delivered.await.unwrap_or_else(|_| {
            Err(Error::provider_message(
                SCHEME,
                "the Docker runtime dropped the creation before it had a result",
            ))
        })
    };
    let timed = futures_lite::future::or(async { Some(provision.await) }, async {
        futures_timer::Delay::new(crate::duration::saturate(timeout)).await;
        None
    });
    match timed.await {
        Some(created) => {
            let shared = created?.claim();
            Ok(sandbox::handle(shared))
        }
        None => Err(Error::CreateTimeout { timeout }),
    }
}

/// Removes a container whose creation did not reach the caller (failed, timed out, or the
/// caller went away), unless claimed.
pub(super) struct RemoveOnDrop {
    pub(super) docker: Docker,
    pub(super) id: Option<String>,
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let docker = self.docker.clone();
            rt::detach(async move {
                let _ = docker.remove_container(&id, Some(force_remove())).await;
            });
        }
    }
}

pub(super) fn force_remove() -> RemoveContainerOptions {
    RemoveContainerOptions { force: true, v: true, link: false }
}

/// A created sandbox travelling back to the caller: removed if it never arrives.
struct Created {
    shared: Option<Arc<Shared>>,
    guard: RemoveOnDrop,
}

impl Created {
    fn claim(mut self) -> Arc<Shared> {
        self.guard.id = None;
        self.shared.take().expect("claimed once")
    }
}

/// Makes, starts and sets up the container of a sandbox from `image` (the engine's view of
/// it: `inspected`), on the Docker runtime.
async fn create_container(
    inner: Arc<Inner>,
    spec: CreateSpec,
    image: String,
    inspected: bollard::models::ImageInspect,
) -> Result<Created> {
    let docker = DockerBackend::client(&inner).await?;
    if !inner.swept.swap(true, Ordering::AcqRel) {
        // Containers of owners that died between their create and start requests never
        // run; remove them, off this creation's path.
        let docker = docker.clone();
        tokio::spawn(async move {
            let _ = reap::sweep_unstarted(&docker).await;
        });
    }
    if let Some(runtime) = &inner.runtime {
        // Fail closed: never fall back to runc when a stronger runtime was asked for.
        let info = docker.info().await.map_err(|e| provider("reading the engine's runtimes", e))?;
        if !info.runtimes.unwrap_or_default().contains_key(runtime) {
            return Err(Error::configuration(format!(
                "the Docker engine has no runtime {runtime:?}; register it in /etc/docker/daemon.json (\"runtimes\") and reload dockerd"
            )));
        }
    }
    let remapped = userns_remapped(&inner, &docker).await?;
    let image_config = inspected.config.unwrap_or_default();
    let layers = inspected.root_fs.as_ref().and_then(|r| r.layers.as_ref()).map_or(0, Vec::len);
    let baked = sandboxd_path::Baked::read(
        image_config.labels.as_ref().unwrap_or(&HashMap::new()),
        layers,
        sandboxd_id().as_deref(),
    );
    let user = inner.user.clone().or_else(|| image_config.user.filter(|u| !u.is_empty()));
    // A template's image holds files its setup (root) could rewrite, /etc/passwd among
    // them: its sandboxes' user is resolved against the base image's files instead.
    let users = if spec.template.is_some() { users::Source::TemplateBase } else { users::Source::Image };
    let workdir = image_config.working_dir.filter(|w| w.starts_with('/')).unwrap_or_else(|| "/".to_owned());
    let backend = DockerBackend { inner: Arc::clone(&inner) };
    let path = backend.exec_path();
    let name = format!("sandboxio-{}", unique_suffix());
    let gate_dir = sandboxd_path::egress::gate_dir(&spec.network, &backend, &name)?;
    let env = sandboxd_path::egress::sandbox_env(gate_dir.is_some(), &spec.env);
    let labels = labels::for_new(&spec.metadata, spec.ttl, spec.detached)?;
    let body = container_body(
        &spec,
        &Setup {
            image: &image,
            user: user.as_deref(),
            users,
            workdir: &workdir,
            runtime: inner.runtime.clone(),
            path,
        },
        &env,
        gate_dir.as_ref().map(sandboxd_path::egress::GateDir::mount),
        labels,
    )?;
    let made = docker
        .create_container(Some(CreateContainerOptions { name: Some(name), platform: String::new() }), body)
        .await
        .map_err(|e| provider("creating the container", e))?;
    let guard = RemoveOnDrop { docker: docker.clone(), id: Some(made.id.clone()) };
    // The gate listens in its directory (already mounted) before the container starts.
    let gate = match gate_dir {
        Some(dir) => Some((
            crate::sandboxd::session::egress::serve_gate(
                &dir.socket(),
                SCHEME,
                &made.id,
                &spec,
                &inner.resolver,
            )?,
            dir,
        )),
        None => None,
    };
    let host_view = inner.runtime.as_deref() != Some("runsc") && !remapped;
    let shared = Shared::new(
        docker.clone(),
        made.id.clone(),
        user,
        workdir,
        spec.secret_env.clone(),
        Some(spec.network.clone()),
        spec.metadata.clone(),
    );
    shared.host_view.store(host_view, Ordering::Release);
    if path == ExecPath::Sandboxd {
        let env = sandboxd_path::merged_env(image_config.env.as_deref().unwrap_or_default(), &env);
        sandboxd_path::start(&shared, env, spec.detached, (&baked, users), gate).await?;
        return Ok(Created { shared: Some(shared), guard });
    }
    exec_api::start(&shared, &image, (&baked, users), spec.detached).await?;
    Ok(Created { shared: Some(shared), guard })
}

/// Whether the engine runs containers in remapped user namespaces (`userns-remap`), where
/// the gids its host sees are shifted: asked once per engine in the process.
pub(super) async fn userns_remapped(inner: &Inner, docker: &Docker) -> Result<bool> {
    inner
        .engine
        .remapped
        .get_or_try_init(|| async {
            let info =
                docker.info().await.map_err(|e| provider("reading the engine's security options", e))?;
            Ok(info.security_options.unwrap_or_default().iter().any(|o| o.contains("name=userns")))
        })
        .await
        .copied()
}
