//! What listing and reaping report, whatever the backend: [`SandboxInfo`] for one sandbox a
//! backend can see, [`ReapOptions`] and [`ReapReport`] for a sweep. The calls are
//! [`Sandbox::list`](crate::Sandbox::list) and [`Sandbox::reap`](crate::Sandbox::reap) (a
//! DSN) or their `_with` twins (a backend value); backends implement
//! [`Backend::list`](crate::backend::Backend::list) and
//! [`Backend::reap`](crate::backend::Backend::reap).

use std::collections::BTreeMap;
use std::time::Duration;

/// One sandbox a backend can see, as [`Sandbox::list`](crate::Sandbox::list) reports it.
/// What a provider does not record is `None` (never guessed).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SandboxInfo {
    /// The id, as [`Sandbox::connect`](crate::Sandbox::connect) takes it.
    pub id: String,
    /// The backend's DSN scheme, for example `"docker"`.
    pub backend: String,
    /// How long ago it was created, at the time of listing (whole seconds on backends
    /// that record Unix seconds).
    pub age: Option<Duration>,
    /// How long until its TTL ends, at the time of listing; `Some(Duration::ZERO)` once it
    /// is past (a sweep removes it).
    pub ttl_left: Option<Duration>,
    /// Whether the process that created it is still running: `None` when the backend has no
    /// owner process (the fake) or the owner is on another host.
    pub owner_alive: Option<bool>,
    /// Whether it outlives its owner until its TTL (`detached(true)`, `Sandbox::detach`):
    /// `None` when the provider does not record it.
    pub detached: Option<bool>,
    /// The user's metadata (`SandboxBuilder::metadata`), sandboxio's own labels left out.
    /// Those are `docker://`'s, under the prefix `io.sandboxio.` it reserves
    /// (`io.sandboxio.managed`, `.session`, `.owner`, `.expires`, `.detached`, `.version`,
    /// `.exec`, `.network`, `.user`; a metadata key with that prefix is refused with
    /// `InvalidInput`); `local://` keeps its bookkeeping out of labels, and `e2b://`,
    /// `modal://` and `fake://` add none, so theirs are the metadata as given. A
    /// third-party adapter that writes keys of its own among its provider's labels strips
    /// them here the same way.
    pub labels: BTreeMap<String, String>,
}

impl SandboxInfo {
    /// A sandbox `id` of `backend` about which nothing else is known yet; set the public
    /// fields that the provider records.
    #[must_use]
    pub fn new(id: impl Into<String>, backend: impl Into<String>) -> Self {
        SandboxInfo {
            id: id.into(),
            backend: backend.into(),
            age: None,
            ttl_left: None,
            owner_alive: None,
            detached: None,
            labels: BTreeMap::new(),
        }
    }

    /// Whether its labels hold every pair of `wanted` (an empty `wanted` matches all).
    #[must_use]
    pub fn has_labels(&self, wanted: &BTreeMap<String, String>) -> bool {
        wanted.iter().all(|(k, v)| self.labels.get(k) == Some(v))
    }
}

/// What a sweep ([`Sandbox::reap`](crate::Sandbox::reap)) removes besides expired
/// sandboxes, which sandboxes it looks at, and whether it removes anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReapOptions {
    /// Also remove owned (not detached) sandboxes whose owner process on this host is
    /// gone. Judged by the owner's pid *and* start time, so a running test process never
    /// loses its sandboxes to a parallel one's sweep. Default: `false`.
    pub owner_dead: bool,
    /// Remove nothing: report in [`ReapReport::removed`] what would be removed. Default:
    /// `false`.
    pub dry_run: bool,
    /// Look only at sandboxes whose labels hold every pair (user metadata,
    /// `SandboxBuilder::metadata`); the others are neither removed nor counted. Default:
    /// empty, every sandboxio sandbox of the backend.
    pub labels: BTreeMap<String, String>,
}

impl ReapOptions {
    /// Expired sandboxes only.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Also the owned sandboxes of dead owner processes on this host.
    #[must_use]
    pub fn owner_dead(mut self, yes: bool) -> Self {
        self.owner_dead = yes;
        self
    }

    /// Report what would be removed without removing it.
    #[must_use]
    pub fn dry_run(mut self, yes: bool) -> Self {
        self.dry_run = yes;
        self
    }

    /// Look only at sandboxes labelled `key=value` (call again for more pairs, all of which
    /// must match): on a shared host or engine, a sweep of one's own sandboxes.
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }
}

/// What a sweep found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReapReport {
    /// Ids of the sandboxes removed (with [`ReapOptions::dry_run`]: that would be removed).
    pub removed: Vec<String>,
    /// How many sandboxes were left in place (with a dry run, not counting `removed`).
    pub kept: usize,
}
