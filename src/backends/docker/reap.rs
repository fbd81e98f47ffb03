//! The sweep: find sandboxio's containers by label and remove the ones nobody should keep.

use std::collections::HashMap;

use bollard::Docker;
use bollard::models::ContainerSummary;
use bollard::query_parameters::ListContainersOptions;

use crate::backends::{ReapOptions, ReapReport};
use crate::error::Result;

use super::client::{provider, status};
use super::labels::{self, Owner};

/// Every sandboxio container of the engine (all states), or only those in `state`.
async fn list_managed(docker: &Docker, state: Option<&str>) -> Result<Vec<ContainerSummary>> {
    let mut filters = HashMap::from([("label".to_owned(), vec![format!("{}=true", labels::MANAGED)])]);
    if let Some(state) = state {
        filters.insert("status".to_owned(), vec![state.to_owned()]);
    }
    docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .map_err(|e| provider("listing sandboxio containers", e))
}

pub(super) async fn reap(docker: &Docker, options: ReapOptions) -> Result<ReapReport> {
    let listed = list_managed(docker, None).await?;
    let now = labels::unix_now();
    let mut report = ReapReport::default();
    for container in listed {
        let Some(id) = container.id else { continue };
        let tags = container.labels.unwrap_or_default();
        let expired =
            tags.get(labels::EXPIRES).and_then(|e| e.parse::<u64>().ok()).is_none_or(|at| at <= now);
        let detached = tags.get(labels::DETACHED).is_some_and(|d| d == "true")
            || container
                .names
                .unwrap_or_default()
                .iter()
                .any(|n| n.trim_start_matches('/').starts_with(super::DETACHED_NAME_PREFIX));
        let orphaned = options.owner_dead
            && !detached
            && tags.get(labels::OWNER).and_then(|o| Owner::parse(o)).and_then(|o| o.is_dead_here())
                == Some(true);
        if !(expired || orphaned) {
            report.kept += 1;
            continue;
        }
        match docker.remove_container(&id, Some(super::force_remove())).await {
            Ok(()) => report.removed.push(id),
            Err(e) if matches!(status(&e), Some(404 | 409)) => {}
            Err(e) => return Err(provider("removing a container", e)),
        }
    }
    Ok(report)
}

/// Removes the containers that never started and whose owner on this host is dead: an
/// owner that died between its create and start requests leaves one (no process, only its
/// writable layer). A live owner's container, still between the two requests, is kept, and
/// so is any created in the last 5 seconds (another tool's `docker run` of a container so
/// labelled is between its own two requests).
pub(super) async fn sweep_unstarted(docker: &Docker) -> Result<usize> {
    let listed = list_managed(docker, Some("created")).await?;
    let mut removed = 0;
    for container in listed {
        let Some(id) = container.id else { continue };
        let tags = container.labels.unwrap_or_default();
        let dead = tags.get(labels::OWNER).and_then(|o| Owner::parse(o)).and_then(|o| o.is_dead_here());
        let settled = container
            .created
            .and_then(|c| u64::try_from(c).ok())
            .is_some_and(|c| c + 5 <= labels::unix_now());
        if dead == Some(true)
            && settled
            && docker.remove_container(&id, Some(super::force_remove())).await.is_ok()
        {
            removed += 1;
        }
    }
    Ok(removed)
}
