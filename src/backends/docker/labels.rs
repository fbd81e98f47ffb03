//! The labels every sandboxio container carries, and who owns it.
//!
//! Labels make orphans findable (`docker ps --filter label=io.sandboxio.managed=true`) and
//! let [`DockerBackend::reap`](super::DockerBackend::reap) judge them: `expires` says when the TTL ends, `owner` names the
//! host, process id and process start time of the program that created it, so a dead
//! owner is told apart from a live one whose pid was reused.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

pub(super) use crate::backends::owner::{Owner, unix_now};

use crate::error::{Error, Result};

/// Set to `true` on every container sandboxio creates.
pub const MANAGED: &str = "io.sandboxio.managed";
/// The creating process's session: `<host>-<pid>-<start>`.
pub const SESSION: &str = "io.sandboxio.session";
/// The owner identity, `<host>:<pid>:<start ticks>`.
pub const OWNER: &str = "io.sandboxio.owner";
/// When the TTL ends, in Unix seconds.
pub const EXPIRES: &str = "io.sandboxio.expires";
/// `true` when the sandbox outlives its owner (until its TTL).
pub const DETACHED: &str = "io.sandboxio.detached";
/// The user commands run as (empty: the image's root).
pub const USER: &str = "io.sandboxio.user";
/// Which files the sandbox's user is resolved against, at create and at `connect`:
/// `image` (the image's own `/etc/passwd` and `/etc/group`) or `template-base` (a template
/// image's copies of its base image's, which its setup cannot change).
pub const USERS: &str = "io.sandboxio.users";
/// How commands reach it: `sandboxd` (sandboxd as its main process) or `api` (the exec
/// API); see [`ExecPath`](super::ExecPath).
pub const EXEC_PATH: &str = "io.sandboxio.exec";
/// Its network policy: `deny-all`, `allow-all`, or the allowlist's entries separated by
/// spaces (a `connect`ed handle reports it).
pub const NETWORK: &str = "io.sandboxio.network";
/// The sandboxio version that created it.
pub const VERSION: &str = "io.sandboxio.version";
/// The prefix reserved for sandboxio's own labels; user metadata may not use it.
pub const RESERVED_PREFIX: &str = "io.sandboxio.";

/// The labels of a new container: sandboxio's, then the user's metadata.
///
/// # Errors
///
/// [`Error::InvalidInput`] when a metadata key uses the reserved `io.sandboxio.` prefix.
pub(super) fn for_new(
    metadata: &BTreeMap<String, String>,
    ttl: Duration,
    detached: bool,
) -> Result<HashMap<String, String>> {
    let owner = Owner::current();
    let mut labels = HashMap::new();
    for (k, v) in metadata {
        if k.starts_with(RESERVED_PREFIX) {
            return Err(Error::invalid_input(format!(
                "metadata key {k:?} uses the prefix {RESERVED_PREFIX:?}, which sandboxio reserves for its own labels"
            )));
        }
        labels.insert(k.clone(), v.clone());
    }
    labels.insert(MANAGED.into(), "true".into());
    labels.insert(SESSION.into(), format!("{}-{}-{}", owner.host, owner.pid, owner.start));
    labels.insert(OWNER.into(), owner.label());
    labels.insert(EXPIRES.into(), unix_now().saturating_add(ttl.as_secs()).to_string());
    labels.insert(DETACHED.into(), detached.to_string());
    labels.insert(VERSION.into(), env!("CARGO_PKG_VERSION").into());
    Ok(labels)
}

/// The user's metadata out of a container's labels (sandboxio's own removed).
pub(super) fn metadata_of(labels: &HashMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| !k.starts_with(RESERVED_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_round_trips_and_is_alive() {
        let me = Owner::current();
        assert_eq!(Owner::parse(&me.label()).as_ref(), Some(me));
        assert_eq!(me.is_dead_here(), Some(false));
        let gone = Owner { pid: u32::MAX - 1, ..me.clone() };
        assert_eq!(gone.is_dead_here(), Some(true));
        let elsewhere = Owner { host: "another-host".into(), ..me.clone() };
        assert_eq!(elsewhere.is_dead_here(), None);
    }

    #[test]
    fn reserved_metadata_is_refused() {
        let mut meta = BTreeMap::new();
        meta.insert("io.sandboxio.owner".to_owned(), "me".to_owned());
        assert_eq!(
            for_new(&meta, Duration::from_secs(1), false).unwrap_err().code(),
            crate::ErrorCode::InvalidInput
        );
    }
}
