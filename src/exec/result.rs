//! What a finished process or cell gives back: [`ExitStatus`], [`ExecResult`], [`CodeResult`].

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use super::code::{CodeError, MimeBundle};

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// A signal (for example 9, `SIGKILL`) ended it.
    Signal(i32),
}

impl ExitStatus {
    /// Whether it exited with code 0.
    #[must_use]
    pub fn success(self) -> bool {
        self == ExitStatus::Code(0)
    }

    /// The exit code, if it exited normally.
    #[must_use]
    pub fn code(self) -> Option<i32> {
        match self {
            ExitStatus::Code(c) => Some(c),
            ExitStatus::Signal(_) => None,
        }
    }

    /// The signal number, if a signal ended it.
    #[must_use]
    pub fn signal(self) -> Option<i32> {
        match self {
            ExitStatus::Signal(s) => Some(s),
            ExitStatus::Code(_) => None,
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exit code {c}"),
            ExitStatus::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

/// The outcome of a finished command. A non-zero exit is data, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExecResult {
    /// How the process ended.
    pub status: ExitStatus,
    /// Everything written to stdout (up to the output cap), byte-exact.
    pub stdout: Vec<u8>,
    /// Everything written to stderr (up to the output cap), byte-exact.
    pub stderr: Vec<u8>,
    /// Whether output beyond the cap was dropped.
    pub truncated: bool,
    /// Whether the output was delivered through an [`ExecStream`](crate::exec::ExecStream), in which
    /// case `stdout` and `stderr` are empty here.
    pub streamed: bool,
    /// Wall time from start to exit.
    pub duration: Duration,
    /// Whether the kernel's out-of-memory killer killed a process of this command (the
    /// sandbox's memory limit, [`ResourceLimits::memory_mib`](crate::ResourceLimits),
    /// was reached). It is taken from what the backend observes (a cgroup's `oom_kill`
    /// count, the provider's report), never guessed from the status. When the command's
    /// main process was the one killed, [`ExecResult::status`] is
    /// [`ExitStatus::Signal`]`(9)`; when a child was, the status is whatever the main
    /// process made of it (a shell exits 137). `false` on backends that cannot tell, which
    /// then do not declare [`Capabilities::LIMIT_MEMORY`](crate::policy::Capabilities).
    pub oom_killed: bool,
}

impl ExecResult {
    /// A result with exit `code` and the given output, as the fake's scripted responses take
    /// it: `ExecResult::new(0, "2.2.1\n", "")`.
    pub fn new(code: i32, stdout: impl Into<Vec<u8>>, stderr: impl Into<Vec<u8>>) -> Self {
        ExecResult {
            status: ExitStatus::Code(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
            truncated: false,
            streamed: false,
            duration: Duration::ZERO,
            oom_killed: false,
        }
    }

    /// The same result marked as truncated (or not).
    #[must_use]
    pub fn with_truncated(mut self, truncated: bool) -> Self {
        self.truncated = truncated;
        self
    }

    /// The exit code, if the process exited normally.
    #[must_use]
    pub fn exit_code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Whether it exited with code 0.
    #[must_use]
    pub fn success(&self) -> bool {
        self.status.success()
    }
}

/// The outcome of a code cell. A failing cell is data: `status` is non-zero and `error` says
/// why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CodeResult {
    /// Zero when the cell ran without raising.
    pub status: ExitStatus,
    /// What the cell printed to stdout.
    pub stdout: Vec<u8>,
    /// What the cell printed to stderr.
    pub stderr: Vec<u8>,
    /// Rich results, only from backends declaring
    /// [`Capabilities::RICH_OUTPUTS`](crate::policy::Capabilities::RICH_OUTPUTS).
    pub results: Vec<MimeBundle>,
    /// The syntax or runtime error, if the cell failed, with its traceback. Where a cell runs
    /// in a one-shot interpreter (`docker://` with `exec=api`) the traceback is also in
    /// `stderr`, where Python prints it; sandboxd's runner (`local://`, `docker://`'s default
    /// path) and kernel-based backends report it here only.
    pub error: Option<CodeError>,
    /// Wall time of the cell.
    pub duration: Duration,
    /// Whether the out-of-memory killer killed the cell's interpreter or a process it
    /// started; as [`ExecResult::oom_killed`].
    pub oom_killed: bool,
    /// Whether the output was delivered through a [`CodeStream`](crate::exec::CodeStream), in
    /// which case `stdout` and `stderr` are empty here.
    pub streamed: bool,
    /// Whether the host dropped some of the cell's output or rich results to stay within
    /// the cell's budget ([`Code::output_limit`](crate::Code::output_limit), 8 MiB by
    /// default): what is here of each (the rich results, stdout, stderr) is what came
    /// first, up to the first part dropped.
    pub truncated: bool,
}

impl CodeResult {
    /// A result with exit `code` and the given output.
    pub fn new(code: i32, stdout: impl Into<Vec<u8>>, stderr: impl Into<Vec<u8>>) -> Self {
        ExecResult::new(code, stdout, stderr).into()
    }

    /// The same result with a rich result appended.
    #[must_use]
    pub fn with_result(mut self, bundle: MimeBundle) -> Self {
        self.results.push(bundle);
        self
    }

    /// The same result with a structured error (and status 1 if it was 0).
    #[must_use]
    pub fn with_error(mut self, error: CodeError) -> Self {
        if self.status.success() {
            self.status = ExitStatus::Code(1);
        }
        self.error = Some(error);
        self
    }

    /// Whether the cell ran without error.
    #[must_use]
    pub fn success(&self) -> bool {
        self.status.success() && self.error.is_none()
    }
}

impl From<ExecResult> for CodeResult {
    fn from(r: ExecResult) -> Self {
        CodeResult {
            status: r.status,
            stdout: r.stdout,
            stderr: r.stderr,
            results: Vec::new(),
            error: None,
            duration: r.duration,
            oom_killed: r.oom_killed,
            streamed: r.streamed,
            truncated: r.truncated,
        }
    }
}

/// The setters and text views [`ExecResult`] and [`CodeResult`] share, written once: both
/// carry the same `status`, `stdout`, `stderr`, `duration`, `oom_killed` and `streamed` fields, and a
/// fix to one must reach the other.
macro_rules! shared_outcome_methods {
    ($outcome:ident) => {
        impl $outcome {
            /// The same result with another status.
            #[must_use]
            pub fn with_status(mut self, status: ExitStatus) -> Self {
                self.status = status;
                self
            }

            /// The same result with another duration.
            #[must_use]
            pub fn with_duration(mut self, duration: Duration) -> Self {
                self.duration = duration;
                self
            }

            #[doc = concat!(
                        "The same result marked as ended by the out-of-memory killer (or not); see\n[`",
                        stringify!($outcome),
                        "::oom_killed`]."
                    )]
            #[must_use]
            pub fn with_oom_killed(mut self, oom_killed: bool) -> Self {
                self.oom_killed = oom_killed;
                self
            }

            /// The same result marked as streamed, with its output removed.
            #[must_use]
            pub fn into_streamed(mut self) -> Self {
                self.streamed = true;
                self.stdout.clear();
                self.stderr.clear();
                self
            }

            /// stdout as text, invalid UTF-8 replaced by U+FFFD.
            #[must_use]
            pub fn stdout_lossy(&self) -> Cow<'_, str> {
                String::from_utf8_lossy(&self.stdout)
            }

            /// stderr as text, invalid UTF-8 replaced by U+FFFD.
            #[must_use]
            pub fn stderr_lossy(&self) -> Cow<'_, str> {
                String::from_utf8_lossy(&self.stderr)
            }
        }
    };
}

shared_outcome_methods!(ExecResult);
shared_outcome_methods!(CodeResult);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_result_starts_as_the_exec_result_of_the_same_output() {
        let code = CodeResult::new(3, "out", "err");
        assert_eq!(code, CodeResult::from(ExecResult::new(3, "out", "err")));
        assert_eq!(
            (code.status, code.duration, code.oom_killed),
            (ExitStatus::Code(3), Duration::ZERO, false)
        );
        assert!(code.results.is_empty() && code.error.is_none());
    }

    #[test]
    fn the_shared_setters_and_views_act_alike_on_both_outcomes() {
        let ten = Duration::from_millis(10);
        let exec = ExecResult::new(0, b"a\xff".to_vec(), "b")
            .with_status(ExitStatus::Signal(9))
            .with_duration(ten)
            .with_oom_killed(true);
        let code = CodeResult::new(0, b"a\xff".to_vec(), "b")
            .with_status(ExitStatus::Signal(9))
            .with_duration(ten)
            .with_oom_killed(true);
        assert_eq!((exec.status, exec.duration, exec.oom_killed), (ExitStatus::Signal(9), ten, true));
        assert_eq!((code.status, code.duration, code.oom_killed), (exec.status, ten, true));
        assert_eq!((exec.stdout_lossy(), exec.stderr_lossy()), ("a\u{fffd}".into(), "b".into()));
        assert_eq!((code.stdout_lossy(), code.stderr_lossy()), (exec.stdout_lossy(), exec.stderr_lossy()));
    }
}
