//! Nothing here: the crate exists for its test, `tests/ui.rs` (see `Cargo.toml`).
