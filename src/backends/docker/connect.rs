//! `connect` on `docker://`: a new handle to a running sandboxio container, checked to be
//! a sandbox (not a template's setup) and joined on the exec path its label records.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::policy::NetworkPolicy;

use super::backend::{DockerBackend, Inner};
use super::client::{self, provider};
use super::create::userns_remapped;
use super::exec_path::ExecPath;
use super::sandbox::Shared;
use super::template::TEMPLATE_SETUP_LABEL;
use super::{SCHEME, exec_api, labels, sandboxd_path, users};

/// A handle's state for the running sandbox `id`, set up on its exec path.
pub(super) async fn connect(inner: Arc<Inner>, id: String) -> Result<Arc<Shared>> {
    let docker = DockerBackend::client(&inner).await?;
    let inspected = docker.inspect_container(&id, None).await.map_err(|e| match client::status(&e) {
        Some(404) => Error::Connect {
            backend: SCHEME.into(),
            message: format!("no sandbox {id}"),
            source: Some(Box::new(e)),
        },
        _ => provider("inspecting the container", e),
    })?;
    let config = inspected.config.unwrap_or_default();
    let labels = config.labels.unwrap_or_default();
    if labels.get(labels::MANAGED).map(String::as_str) != Some("true") {
        return Err(Error::connect(SCHEME, format!("container {id} is not a sandboxio sandbox")));
    }
    if labels.get(TEMPLATE_SETUP_LABEL).is_some_and(|t| !t.is_empty()) {
        // Listed and reaped as a sandbox, but its commands run as root with capabilities:
        // no handle to it is given out.
        return Err(Error::connect(SCHEME, format!("container {id} is a template's setup, not a sandbox")));
    }
    if inspected.state.and_then(|s| s.running) != Some(true) {
        return Err(Error::SandboxGone { id, message: "its container is not running".into() });
    }
    let runsc = inspected.host_config.as_ref().and_then(|h| h.runtime.as_deref()) == Some("runsc");
    // Recorded at create; containers from before the label: judged by their network mode.
    let network = labels
        .get(labels::NETWORK)
        .and_then(|l| crate::sandboxd::session::egress::policy_of_label(l))
        .or_else(|| {
            inspected
                .host_config
                .and_then(|h| h.network_mode)
                .map(|mode| if mode == "none" { NetworkPolicy::DenyAll } else { NetworkPolicy::AllowAll })
        });
    let host_view = !runsc && !userns_remapped(&inner, &docker).await?;
    let shared = Shared::new(
        docker,
        inspected.id.unwrap_or(id),
        labels.get(labels::USER).filter(|u| !u.is_empty()).cloned(),
        config.working_dir.filter(|w| w.starts_with('/')).unwrap_or_else(|| "/".to_owned()),
        Vec::new(),
        network,
        labels::metadata_of(&labels),
    );
    shared.host_view.store(host_view, Ordering::Release);
    let users = users::Source::of_label(labels.get(labels::USERS).map(String::as_str));
    if labels.get(labels::EXEC_PATH).map(String::as_str) == Some(ExecPath::Sandboxd.as_str()) {
        sandboxd_path::join_running(&shared, config.env.unwrap_or_default(), users).await?;
        return Ok(shared);
    }
    exec_api::join_running(&shared, config.image.as_deref().unwrap_or_default(), users).await?;
    Ok(shared)
}
