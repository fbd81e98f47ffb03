//! Proc-macros for `sandboxio`.
//!
//! The generator of the blocking facade (`sandboxio::sync`) lands here with the
//! blocking-facade work; until then this crate only reserves its place in the workspace.
