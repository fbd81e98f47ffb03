//! What runs in a sandbox and what comes back: [`Command`], [`ExecResult`], [`OutputChunk`],
//! [`Code`], [`CodeResult`].

mod chunk;
mod code;
mod command;
mod result;

pub use chunk::{OutputChunk, StreamKind};
#[cfg(test)]
#[cfg_attr(
    not(any(feature = "local", feature = "docker", feature = "e2b")),
    allow(unused_imports, reason = "its tests are in the backends with code cells")
)]
pub(crate) use code::MAX_TRACEBACK_LINES;
#[cfg_attr(
    not(any(feature = "local", feature = "docker", feature = "e2b")),
    allow(dead_code, unused_imports, reason = "used by the backends with code cells: local, docker, e2b")
)]
pub(crate) use code::traceback_of;
pub use code::{Code, CodeContext, CodeError, DEFAULT_CELL_OUTPUT_LIMIT, MimeBundle};
pub use command::{Command, DEFAULT_OUTPUT_LIMIT, MAX_ARG_STRLEN, MAX_ARG_TOTAL, validate_env_name};
pub use result::{CodeResult, ExecResult, ExitStatus};
