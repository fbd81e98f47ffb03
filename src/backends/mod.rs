//! First-party backends, each behind its Cargo feature.

pub mod capabilities;
/// What the backends whose clients need tokio share: their private runtime and the
/// consumer's half of a pumped stream.
#[cfg(any(feature = "docker", feature = "e2b", feature = "modal"))]
pub(crate) mod common;
/// The errors and bounds of file operations, alike on every path that does them.
#[cfg(any(feature = "local", feature = "docker", feature = "modal"))]
pub(crate) mod file_errors;
/// File operations as `sh` scripts, for the paths with no sandboxd to ask.
#[cfg(any(feature = "docker", feature = "modal"))]
pub(crate) mod file_scripts;
#[cfg(any(feature = "local", feature = "docker"))]
pub(crate) mod owner;
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
