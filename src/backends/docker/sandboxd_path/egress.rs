//! `docker://` under [`NetworkPolicy::allowlist`](crate::NetworkPolicy::allowlist), on the
//! sandboxd path only: the container has no network (`network_mode: none`, loopback only),
//! and its one way out is the egress gate this process serves on a Unix socket in a host
//! directory of the sandbox's own, bind-mounted read-only at [`MOUNT`]. sandboxd's relay
//! listens on the container's loopback and carries each connection to that socket
//! (`sandboxd::session::egress`, shared with `local://`).
//!
//! The exec-API path has no sandboxd to relay, and gVisor (`runsc`) does not connect to a
//! host's Unix socket unless started with `--host-uds`, which sandboxio cannot check: both
//! leave `NETWORK_ALLOWLIST` undeclared, so an allowlist is refused at `create()`.
//!
//! The gate lives in the process that created the sandbox (see `sandboxd::session::egress`):
//! a detached container outlives that process, its way out does not (it fails closed).

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use bollard::models::{Mount, MountType};

use crate::error::{Error, Result};
use crate::sandboxd::session::egress::SOCKET;

use crate::backends::docker::SCHEME;

/// Where the gate's directory is mounted in the container.
pub(crate) const MOUNT: &str = "/run/sandboxio-egress";

/// The gate socket's path inside the container.
pub(crate) fn socket_inside() -> String {
    format!("{MOUNT}/{SOCKET}")
}

/// A sandbox's gate directory on the host: `$TMPDIR/sandboxio-egress-<uid>/<container
/// name>`, removed when dropped (after the gate, which removes its socket, is gone).
#[derive(Debug)]
pub(crate) struct GateDir {
    path: PathBuf,
}

impl GateDir {
    /// Makes the directory for the container named `name`.
    ///
    /// The parent is this user's alone (0700, checked to be a directory this uid owns, so
    /// another host user cannot have prepared it); the sandbox's directory is 0711, so the
    /// sandbox's user (any uid, with no capability) can reach the socket inside through the
    /// mount, and nobody can list it.
    ///
    /// # Errors
    ///
    /// [`Error::Provider`] when either cannot be made or the parent is not this user's.
    pub(crate) fn create(name: &str) -> Result<GateDir> {
        // This process's uid: the owner of its `/proc/self`.
        let uid = std::fs::metadata("/proc/self")
            .map_err(|e| Error::provider(SCHEME, "cannot read /proc/self", e))?
            .uid();
        let parent = std::env::temp_dir().join(format!("sandboxio-egress-{uid}"));
        let fail = |what: &str, e: std::io::Error| {
            Error::provider(SCHEME, format!("cannot make the egress gate's {what}"), e)
        };
        match std::fs::DirBuilder::new().mode(0o700).create(&parent) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail("directory", e)),
        }
        let meta = std::fs::symlink_metadata(&parent).map_err(|e| fail("directory", e))?;
        if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
            return Err(Error::provider_message(
                SCHEME,
                format!(
                    "{} is not a directory of uid {uid} closed to others: it cannot hold egress gates",
                    parent.display()
                ),
            ));
        }
        let path = parent.join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&path).map_err(|e| fail("sandbox directory", e))?;
        let dir = GateDir { path };
        // Set after creation: the umask would have narrowed a mode given to `create`.
        std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o711))
            .map_err(|e| fail("sandbox directory", e))?;
        Ok(dir)
    }

    /// The gate's socket in it.
    pub(crate) fn socket(&self) -> PathBuf {
        self.path.join(SOCKET)
    }

    /// The read-only bind mount that puts it at [`MOUNT`] in the container.
    pub(crate) fn mount(&self) -> Mount {
        mount_of(&self.path)
    }
}

/// The read-only bind mount of `host` at [`MOUNT`] (a pure function, for tests).
fn mount_of(host: &Path) -> Mount {
    Mount {
        target: Some(MOUNT.to_owned()),
        source: Some(host.to_string_lossy().into_owned()),
        typ: Some(MountType::BIND),
        read_only: Some(true),
        ..Default::default()
    }
}

impl Drop for GateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.socket());
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// The gate directory of a new sandbox under an allowlist (`None` under any other policy),
/// made before the container named `name` exists: it is bind-mounted into it. A failed
/// `create()` drops it.
///
/// # Errors
///
/// [`Error::CapabilityNotSupported`] when `backend` cannot relay (exec-API path, gVisor);
/// [`Error::Provider`] when the directory cannot be made.
pub(crate) fn gate_dir(
    policy: &crate::NetworkPolicy,
    backend: &crate::backends::docker::DockerBackend,
    name: &str,
) -> Result<Option<GateDir>> {
    use crate::backend::Backend as _;
    if !matches!(policy, crate::NetworkPolicy::Allowlist(_)) {
        return Ok(None);
    }
    if !backend.capabilities().contains(crate::policy::Capabilities::NETWORK_ALLOWLIST) {
        return Err(Error::missing_capability(SCHEME, crate::policy::Capabilities::NETWORK_ALLOWLIST));
    }
    GateDir::create(name).map(Some)
}

/// The variables of a new container: the proxy's (when it has a gate), then the sandbox's,
/// which may set their own proxy.
pub(crate) fn sandbox_env(gated: bool, sandbox: &[(String, String)]) -> Vec<(String, String)> {
    let mut env = Vec::new();
    if gated {
        env.extend(crate::sandboxd::session::egress::proxy_env());
    }
    env.extend(sandbox.iter().cloned());
    env
}

/// Keeps a detached sandbox's way out for as long as its container runs (until its TTL or a
/// kill through any handle) or this process lives, whichever ends first: the handle that
/// created it may go, but its relay is a command of that handle's sandboxd session, so the
/// handle's state is held until the engine says the container stopped. Nothing is held for
/// a sandbox without a gate. Call on the Docker runtime.
pub(crate) fn keep_while_running(shared: &std::sync::Arc<crate::backends::docker::sandbox::Shared>) {
    if shared.egress.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_none() {
        return;
    }
    let held = std::sync::Arc::clone(shared);
    tokio::spawn(async move {
        use futures_lite::StreamExt as _;
        let mut waiting = held.docker.wait_container(&held.id, None);
        if let Some(Err(e)) = waiting.next().await {
            // Gone already (404), or the engine cannot say: the gate closes either way.
            tracing::debug!(target: "sandboxio::egress", sandbox = %held.id, error = %e, "egress gate closed");
        }
        drop(held);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_directory_is_mounted_read_only_where_the_relay_looks() {
        let mount = mount_of(Path::new("/tmp/sandboxio-egress-0/sandboxio-abc"));
        assert_eq!(mount.target.as_deref(), Some("/run/sandboxio-egress"));
        assert_eq!(mount.source.as_deref(), Some("/tmp/sandboxio-egress-0/sandboxio-abc"));
        assert_eq!(mount.typ, Some(MountType::BIND));
        assert_eq!(mount.read_only, Some(true));
        assert_eq!(socket_inside(), "/run/sandboxio-egress/egress.sock");
    }

    #[test]
    fn a_gate_directory_is_reachable_but_not_listable_and_goes_when_dropped() {
        let dir = GateDir::create(&format!("test-{}", std::process::id())).unwrap();
        let path = dir.path.clone();
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o711);
        let parent = std::fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777;
        assert_eq!(parent, 0o700);
        drop(dir);
        assert!(!path.exists());
    }
}
