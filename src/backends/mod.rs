//! First-party backends, each behind its Cargo feature.

pub mod capabilities;
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
#[cfg(any(feature = "e2b", feature = "modal"))]
pub(crate) mod remote;

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
