//! Which way commands reach a `docker://` sandbox: sandboxd (`sandboxd_path/`) or the
//! engine's exec API (`exec_api/`).

use crate::error::{Error, Result};

/// Which way commands reach a `docker://` sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ExecPath {
    /// sandboxd as the container's main process, over its attach stream (the default,
    /// when this build embeds sandboxd): about a millisecond per command, exact exit
    /// statuses (a signal death is [`ExitStatus::Signal`](crate::ExitStatus)), and
    /// out-of-memory kills reported.
    #[default]
    Sandboxd,
    /// One engine exec per command, under a shell wrapper (tens of milliseconds per
    /// command; a signal death reads as exit code 128 + n). The fallback for builds
    /// without sandboxd, and forcible with the DSN option `exec=api`.
    ExecApi,
}

impl ExecPath {
    /// The DSN option value and label value: `sandboxd` or `api`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ExecPath::Sandboxd => "sandboxd",
            ExecPath::ExecApi => "api",
        }
    }

    /// The path a DSN option value names.
    pub(crate) fn parse(value: &str) -> Result<ExecPath> {
        match value {
            "sandboxd" => Ok(ExecPath::Sandboxd),
            "api" => Ok(ExecPath::ExecApi),
            _ => Err(Error::configuration("docker:// option `exec` must be sandboxd or api")),
        }
    }
}
