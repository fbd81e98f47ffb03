//! First-party backends, each behind its Cargo feature.

#[cfg(any(feature = "local", feature = "docker"))]
pub(crate) mod code_runner;

#[cfg(feature = "local")]
#[cfg_attr(docsrs, doc(cfg(feature = "local")))]
pub mod local;

#[cfg(feature = "docker")]
#[cfg_attr(docsrs, doc(cfg(feature = "docker")))]
pub mod docker;
