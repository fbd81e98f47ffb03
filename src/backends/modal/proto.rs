//! The prost messages and tonic clients generated at build time from the trimmed protocol in
//! `proto/modal/` (see `build.rs`; the upstream commit is named in each `.proto` file).

#![allow(
    missing_docs,
    clippy::pedantic,
    clippy::derive_partial_eq_without_eq,
    clippy::doc_markdown,
    reason = "generated code"
)]

/// `modal.client`: the control plane (`ModalClient`).
pub(crate) mod client {
    include!(concat!(env!("OUT_DIR"), "/modal.client.rs"));
}

/// `modal.task_command_router`: the per-task command router (`TaskCommandRouter`).
pub(crate) mod router {
    include!(concat!(env!("OUT_DIR"), "/modal.task_command_router.rs"));
}
