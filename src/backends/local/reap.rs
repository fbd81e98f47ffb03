//! `list` and `reap` on `local://`: every sandbox recorded under the workspace root (this
//! host's, whichever process created it), judged by the record beside each workspace.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

use super::backend::LocalBackend;
use super::dirs::remove_sandbox_dir;
use super::{SCHEME, record, session};

impl LocalBackend {
    /// Removes the local sandboxes past their TTL and, with
    /// [`ReapOptions::owner_dead`](crate::inventory::ReapOptions::owner_dead), the owned
    /// (not detached) sandboxes whose owner process on this host is gone: kills their
    /// sandboxd if it still runs (normally it ended with its owner's session, or at its
    /// TTL), then removes their directory. Judged by the record written beside each
    /// workspace (owner pid *and* start time), so a running process never loses its
    /// sandboxes to another's sweep, and a detached sandbox is kept until its TTL. With
    /// [`ReapOptions::dry_run`](crate::inventory::ReapOptions::dry_run) it removes nothing and reports
    /// what it would remove; with [`ReapOptions::labels`](crate::inventory::ReapOptions::labels) it
    /// looks only at the sandboxes so labelled.
    ///
    /// # Errors
    ///
    /// [`Error::Provider`] when the workspace root cannot be
    /// read. A workspace that vanishes meanwhile is not an error.
    ///
    /// # Cancel safety
    ///
    /// The sweep runs on a library thread and completes even if the future is dropped.
    pub async fn reap(&self, options: crate::inventory::ReapOptions) -> Result<crate::inventory::ReapReport> {
        let root = self.inner.root.clone();
        let live: Vec<String> = self.sandboxes().keys().cloned().collect();
        crate::runtime::unblock(move || {
            let mut report = crate::inventory::ReapReport::default();
            let entries = match std::fs::read_dir(&root) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
                Err(e) => return Err(Error::provider(SCHEME, "cannot read the workspace root", e)),
            };
            for entry in entries.flatten() {
                let id = entry.file_name().to_string_lossy().into_owned();
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                let text = record::read(&entry.path());
                if text.as_deref().is_some_and(|t| !record::info(&id, t).has_labels(&options.labels)) {
                    continue;
                }
                if !is_dir || live.contains(&id) || !record::sweepable(&entry.path(), options.owner_dead) {
                    report.kept += usize::from(is_dir);
                    continue;
                }
                if options.dry_run {
                    report.removed.push(id);
                    continue;
                }
                if let Some(sandboxd) = text.as_deref().and_then(record::sandboxd) {
                    session::kill(&sandboxd);
                    session::wait_gone(&sandboxd);
                }
                remove_sandbox_dir(&entry.path());
                if !entry.path().exists() {
                    report.removed.push(id);
                }
            }
            Ok(report)
        })
        .await
    }

    /// Every sandbox recorded under the workspace root (this host's, whichever process
    /// created it) whose labels hold every pair of `labels`.
    pub(super) async fn list_recorded(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<crate::inventory::SandboxInfo>> {
        let root = self.inner.root.clone();
        let labels = labels.clone();
        crate::runtime::unblock(move || {
            let entries = match std::fs::read_dir(&root) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(Error::provider(SCHEME, "cannot read the workspace root", e)),
            };
            let mut listed: Vec<crate::inventory::SandboxInfo> = entries
                .flatten()
                .filter_map(|entry| {
                    let id = entry.file_name().to_string_lossy().into_owned();
                    Some(record::info(&id, &record::read(&entry.path())?))
                })
                .filter(|info| info.has_labels(&labels))
                .collect();
            listed.sort_by(|a, b| a.id.cmp(&b.id));
            Ok(listed)
        })
        .await
    }

    /// [`LocalBackend::reap`] for synchronous callers (blocks the calling thread).
    ///
    /// # Errors
    ///
    /// As [`LocalBackend::reap`].
    pub fn reap_blocking(
        &self,
        options: crate::inventory::ReapOptions,
    ) -> Result<crate::inventory::ReapReport> {
        futures_lite::future::block_on(self.reap(options))
    }
}
