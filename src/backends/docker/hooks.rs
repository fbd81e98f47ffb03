//! [`DockerBackend`]'s test hooks, behind the `contract` feature: what the contract suite's
//! probes ask of the provider side (a container's labels, as the engine reports them), for
//! this crate's tests and adapters that stand on `docker://`. Code that uses `docker://` as
//! a product needs none of them.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Result;

use super::DockerBackend;
use super::client::sandbox_error;
use super::rt;

#[cfg_attr(docsrs, doc(cfg(feature = "contract")))]
impl DockerBackend {
    /// The labels of a container (sandboxio's `io.sandboxio.*` ones and the user's metadata),
    /// as the engine reports them (the contract suite's `labels` probe).
    ///
    /// # Errors
    ///
    /// As [`DockerBackend::reap`], and [`Error::SandboxGone`](crate::Error::SandboxGone)
    /// for a container that no longer exists.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn container_labels(&self, id: &str) -> Result<HashMap<String, String>> {
        let (inner, id) = (Arc::clone(&self.inner), id.to_owned());
        rt::spawn(async move {
            let docker = DockerBackend::client(&inner).await?;
            let inspected =
                docker.inspect_container(&id, None).await.map_err(|e| sandbox_error(&id, "inspecting", e))?;
            Ok(inspected.config.and_then(|c| c.labels).unwrap_or_default())
        })
        .await
    }
}
