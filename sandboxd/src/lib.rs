//! sandboxd: the supervisor sandboxio runs inside every sandbox, and the wire protocol it speaks.
//!
//! The protocol lives in [`proto`], a file `sandboxio` compiles too, so both ends read and write
//! frames with the same code. `docs/adr/0006-sandboxd.md` records the design.

#![deny(missing_docs)]

pub mod proto;
