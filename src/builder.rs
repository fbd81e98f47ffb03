//! What [`SandboxBuilder`](crate::SandboxBuilder) works with besides its setters: the
//! typestate markers ([`state`]), the values that name a backend ([`IntoBackend`]), and the
//! defaults and bounds of a sandbox's durations ([`DEFAULT_TTL`], [`MAX_TTL`],
//! [`DEFAULT_CREATE_TIMEOUT`]).

pub use crate::api::builder::{DEFAULT_CREATE_TIMEOUT, DEFAULT_TTL, IntoBackend, MAX_TTL, state};
