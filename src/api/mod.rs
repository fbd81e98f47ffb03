//! The async API, re-exported at the crate root (the blocking twin in [`crate::sync`] is
//! generated from it). It assumes no particular runtime: every
//! future here can be polled by tokio, smol or any other executor.

pub(crate) mod builder;
pub(crate) mod code_stream;
pub(crate) mod fs;
pub(crate) mod lines;
pub(crate) mod op;
pub(crate) mod sandbox;
pub(crate) mod stream;
