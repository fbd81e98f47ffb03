//! What runs in a sandbox and what comes back, beyond the types a first program names at
//! the crate root ([`Command`], [`ExecResult`], [`ExitStatus`], [`Code`], [`CodeResult`]):
//! streamed output ([`ExecStream`], [`OutputChunk`], [`StreamKind`], [`ExecLines`],
//! [`OutputLine`]), code cells ([`CodeContext`], [`CodeStream`], [`CodeError`],
//! [`MimeBundle`]), and the limits commands and cells run under.

mod chunk;
pub(crate) mod code;
pub(crate) mod command;
pub(crate) mod result;

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
pub use code::{CodeContext, CodeError, DEFAULT_CELL_OUTPUT_LIMIT, MimeBundle};
pub use command::{DEFAULT_OUTPUT_LIMIT, MAX_ARG_STRLEN, MAX_ARG_TOTAL};
// Exported at the crate root, their one public path; the crate names them here too.
pub(crate) use code::Code;
pub(crate) use command::{Command, validate_env_name};
pub(crate) use result::{CodeResult, ExecResult, ExitStatus};

pub use crate::api::code_stream::CodeStream;
pub use crate::api::lines::{DEFAULT_MAX_LINE, ExecLines, OutputLine};
pub use crate::api::stream::ExecStream;
pub use crate::duration::MAX_TIMEOUT;
