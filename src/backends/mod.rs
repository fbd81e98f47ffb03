//! First-party backends, each behind its Cargo feature.

/// The sandboxd side of a sandbox (sandboxd runs in `docker://` containers and `local://`
/// sandboxes).
#[cfg(any(feature = "local", feature = "docker"))]
pub(crate) mod agent;
pub mod capabilities;
/// `run_code` on `docker://`'s exec-API path (sandboxd's runner does it elsewhere).
#[cfg(feature = "docker")]
pub(crate) mod code_runner;
#[cfg(any(feature = "local", feature = "docker", feature = "modal"))]
pub(crate) mod fs_scripts;
#[cfg(any(feature = "local", feature = "docker"))]
pub(crate) mod owner;
/// A private tokio runtime for the backends whose clients need tokio.
#[cfg(any(feature = "e2b", feature = "modal"))]
pub(crate) mod pgroup;
#[cfg(any(feature = "docker", feature = "e2b", feature = "modal"))]
pub(crate) mod portal;
#[cfg(any(feature = "docker", feature = "e2b", feature = "modal"))]
pub(crate) mod pumped;
#[cfg(any(feature = "local", feature = "docker"))]
pub(crate) mod script_fs;

#[cfg(feature = "local")]
#[cfg_attr(docsrs, doc(cfg(feature = "local")))]
pub mod local;

#[cfg(feature = "docker")]
#[cfg_attr(docsrs, doc(cfg(feature = "docker")))]
pub mod docker;

#[cfg(feature = "e2b")]
#[cfg_attr(docsrs, doc(cfg(feature = "e2b")))]
pub mod e2b;

#[cfg(feature = "modal")]
#[cfg_attr(docsrs, doc(cfg(feature = "modal")))]
pub mod modal;

#[cfg(any(feature = "local", feature = "docker"))]
mod reap_types {
    /// What a backend's sweep (`DockerBackend::reap`, `LocalBackend::reap`) removes besides
    /// expired sandboxes.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct ReapOptions {
        /// Also remove owned (not detached) sandboxes whose owner process on this host is
        /// gone. Judged by the owner's pid *and* start time, so a running test process never
        /// loses its sandboxes to a parallel one's sweep. Default: `false`.
        pub owner_dead: bool,
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
    }

    /// What a sweep found and did.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct ReapReport {
        /// Ids of the sandboxes removed.
        pub removed: Vec<String>,
        /// How many sandboxes were left in place.
        pub kept: usize,
    }
}
#[cfg(any(feature = "local", feature = "docker"))]
pub use reap_types::{ReapOptions, ReapReport};
