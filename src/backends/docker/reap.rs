//! The sweep and the listing: find sandboxio's containers by label, describe them, and
//! remove the ones nobody should keep.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bollard::Docker;
use bollard::models::ContainerSummary;
use bollard::query_parameters::ListContainersOptions;

use crate::error::Result;
use crate::inventory::SandboxInfo;
use crate::inventory::{ReapOptions, ReapReport};

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

pub(super) async fn reap(docker: &Docker, options: &ReapOptions) -> Result<ReapReport> {
    let listed = list_managed(docker, None).await?;
    let now = labels::unix_now();
    let mut report = ReapReport::default();
    for container in listed {
        let Some(id) = container.id else { continue };
        let tags = container.labels.unwrap_or_default();
        if !options
            .labels
            .iter()
            .all(|(k, v)| !k.starts_with(labels::RESERVED_PREFIX) && tags.get(k) == Some(v))
        {
            continue;
        }
        let expired =
            tags.get(labels::EXPIRES).and_then(|e| e.parse::<u64>().ok()).is_none_or(|at| at <= now);
        let detached = tags.get(labels::DETACHED).is_some_and(|d| d == "true")
            || container
                .names
                .unwrap_or_default()
                .iter()
                .any(|n| n.trim_start_matches('/').starts_with(super::sandbox::DETACHED_NAME_PREFIX));
        let orphaned = options.owner_dead
            && !detached
            && tags.get(labels::OWNER).and_then(|o| Owner::parse(o)).and_then(|o| o.is_dead_here())
                == Some(true);
        if !(expired || orphaned) {
            report.kept += 1;
            continue;
        }
        if options.dry_run {
            report.removed.push(id);
            continue;
        }
        match docker.remove_container(&id, Some(super::create::force_remove())).await {
            Ok(()) => report.removed.push(id),
            Err(e) if matches!(status(&e), Some(404 | 409)) => {}
            Err(e) => return Err(provider("removing a container", e)),
        }
    }
    Ok(report)
}

/// Every sandboxio container of the engine (all states) whose user labels hold every pair
/// of `wanted`.
pub(super) async fn list(docker: &Docker, wanted: &BTreeMap<String, String>) -> Result<Vec<SandboxInfo>> {
    let now = labels::unix_now();
    let mut listed: Vec<SandboxInfo> = list_managed(docker, None)
        .await?
        .into_iter()
        .filter_map(|container| {
            let tags = container.labels.unwrap_or_default();
            let seconds = |name| tags.get(name).and_then(|v: &String| v.parse::<u64>().ok());
            let mut info = SandboxInfo::new(container.id?, super::SCHEME);
            info.age = container
                .created
                .and_then(|c| u64::try_from(c).ok())
                .map(|at| Duration::from_secs(now.saturating_sub(at)));
            info.ttl_left = seconds(labels::EXPIRES).map(|at| Duration::from_secs(at.saturating_sub(now)));
            info.owner_alive = tags
                .get(labels::OWNER)
                .and_then(|o| Owner::parse(o))
                .and_then(|o| o.is_dead_here())
                .map(|d| !d);
            info.detached = tags.get(labels::DETACHED).map(|d| d == "true");
            info.labels = labels::metadata_of(&tags);
            Some(info)
        })
        .filter(|info| info.has_labels(wanted))
        .collect();
    listed.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(listed)
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
            && docker.remove_container(&id, Some(super::create::force_remove())).await.is_ok()
        {
            removed += 1;
        }
    }
    Ok(removed)
}
