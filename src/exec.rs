//! What runs in a sandbox and what comes back: [`Command`], [`ExecResult`], [`OutputChunk`],
//! [`Code`], [`CodeResult`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::secret::SecretString;

/// The per-stream output cap a [`Command`] gets unless it sets one: 16 MiB.
pub const DEFAULT_OUTPUT_LIMIT: usize = 16 * 1024 * 1024;

/// The longest single argument or environment string a [`Command`] may carry, in bytes,
/// counting its terminating NUL (an environment string is `NAME=value`): 131072, Linux's
/// `MAX_ARG_STRLEN` (32 pages of 4 KiB). `execve(2)` refuses a longer one with `E2BIG`
/// whatever the stack limit, so [`Command::validate`] refuses it first, with
/// [`Error::InvalidInput`](crate::Error::InvalidInput), on every backend.
pub const MAX_ARG_STRLEN: usize = 128 * 1024;

/// The most a [`Command`]'s argv and its own environment may hold together, in bytes: 1 MiB,
/// counting each string with its NUL and one 8-byte pointer per string, as the kernel
/// counts them against `ARG_MAX`.
///
/// Linux allows a quarter of the stack limit (2 MiB under the usual 8 MiB stack, never less
/// than 128 KiB), shared with the sandbox-wide environment and whatever argv and
/// environment the backend itself adds around the command (a launcher, an exec wrapper).
/// Half of the usual budget leaves room for those, so an argument list under this budget
/// reaches the process on every backend sandboxio ships; [`Command::validate`] refuses a
/// larger one with [`Error::InvalidInput`](crate::Error::InvalidInput) before
/// anything starts, on every backend, rather than letting each fail its own way. Send
/// bulk data through [`Command::stdin`] or a file instead.
pub const MAX_ARG_TOTAL: usize = 1024 * 1024;

/// A command to run in a sandbox.
///
/// It is an argv, not a shell line: `Command::new("python3").arg("-c").arg(src)` passes `src`
/// as one argument, with no shell to re-split or expand it. [`Command::shell`] is the explicit
/// shell form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    secret_env: Vec<(String, SecretString)>,
    cwd: Option<String>,
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
    output_limit: usize,
}

impl Command {
    /// A command running `program` with no arguments yet.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use sandboxio::Command;
    ///
    /// // argv, never a shell: the `;` and `$HOME` reach `echo` as they are.
    /// let cmd = Command::new("echo").arg("a; echo $HOME").env("LANG", "C").timeout(Duration::from_secs(5));
    /// # futures_lite::future::block_on(async {
    /// let out = sandboxio::testing::sbx_fake().sandbox.run(cmd).await?;
    /// assert_eq!(out.stdout, b"a; echo $HOME\n");
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    pub fn new(program: impl Into<String>) -> Self {
        Command {
            argv: vec![program.into()],
            env: Vec::new(),
            secret_env: Vec::new(),
            cwd: None,
            stdin: None,
            timeout: None,
            output_limit: DEFAULT_OUTPUT_LIMIT,
        }
    }

    /// `/bin/sh -c script`: the script is interpreted by the sandbox's POSIX shell.
    pub fn shell(script: impl Into<String>) -> Self {
        Command::new("/bin/sh").arg("-c").arg(script)
    }

    /// Appends one argument, passed verbatim.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.argv.push(arg.into());
        self
    }

    /// Appends several arguments, each passed verbatim.
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.argv.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for this command (on top of the sandbox's).
    #[must_use]
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Sets a secret environment variable for this command only. Its value never reaches a
    /// log, audit record, label or error message, and no other command of the sandbox can
    /// read it: backends that cannot guarantee that do not declare
    /// [`Capabilities::COMMAND_SECRETS`](crate::Capabilities::COMMAND_SECRETS), and there
    /// `run` and `stream` refuse the command with
    /// [`Error::CapabilityNotSupported`](crate::Error::CapabilityNotSupported)
    /// before anything starts. A sandbox-wide secret (the builder's `secret_env`) works
    /// on every backend; every command of that sandbox sees it.
    #[must_use]
    pub fn secret_env(mut self, name: impl Into<String>, value: impl Into<SecretString>) -> Self {
        self.secret_env.push((name.into(), value.into()));
        self
    }

    /// The working directory; relative paths resolve against the sandbox's default one
    /// (`/workspace` on `local://` and `fake://`; on `docker://` the image's `WORKDIR`,
    /// `/workspace` in sandboxio's images, or `/` when the image sets none).
    ///
    /// A directory that does not exist fails the call with
    /// [`Error::NotFound`](crate::Error::NotFound), naming `dir` as given here.
    /// `local://` also refuses any directory outside `/workspace` (its only writable
    /// tree; `/tmp` is private to each command) with
    /// [`Error::PermissionDenied`](crate::Error::PermissionDenied), naming `dir`
    /// the same way; `docker://` and `fake://` take any existing directory.
    #[must_use]
    pub fn cwd(mut self, dir: impl Into<String>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Bytes written to the command's stdin, followed by end-of-file.
    #[must_use]
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(data.into());
        self
    }

    /// How long the command may run. When it elapses the whole process tree is killed and
    /// `run` returns [`Error::ExecutionTimeout`] with the partial output. Without one, the
    /// command is bounded only by the sandbox's TTL.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Cap, in bytes, on the output kept per stream (stdout and stderr each). Output beyond
    /// it is drained and dropped, and [`ExecResult::truncated`] is set. Default
    /// [`DEFAULT_OUTPUT_LIMIT`].
    #[must_use]
    pub fn output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes;
        self
    }

    /// The argv, program first.
    #[must_use]
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// The plain environment variables, in the order given.
    #[must_use]
    pub fn env_vars(&self) -> &[(String, String)] {
        &self.env
    }

    /// The secret environment variables, in the order given.
    #[must_use]
    pub fn secret_env_vars(&self) -> &[(String, SecretString)] {
        &self.secret_env
    }

    /// The working directory, if set.
    #[must_use]
    pub fn working_dir(&self) -> Option<&str> {
        self.cwd.as_deref()
    }

    /// The stdin bytes, if set.
    #[must_use]
    pub fn stdin_bytes(&self) -> Option<&[u8]> {
        self.stdin.as_deref()
    }

    /// The timeout, if set.
    #[must_use]
    pub fn timeout_duration(&self) -> Option<Duration> {
        self.timeout
    }

    /// The per-stream output cap in bytes.
    #[must_use]
    pub fn output_limit_bytes(&self) -> usize {
        self.output_limit
    }

    /// Checks the command before anything is sent to a backend.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) for an empty argv or
    /// program, a NUL byte in an argument, env name or value, or cwd, an env name that is
    /// empty or contains `=`, an argument or `NAME=value` environment string longer than
    /// [`MAX_ARG_STRLEN`] (with its NUL), or an argv and environment that together exceed
    /// [`MAX_ARG_TOTAL`]: what `execve(2)` would refuse with `E2BIG`. The message names the
    /// part and its size; values are not quoted in size errors, and secret values are
    /// redacted.
    pub fn validate(&self) -> Result<()> {
        match self.argv.first() {
            None => return Err(Error::invalid_input("empty argv: a command needs a program")),
            Some(p) if p.is_empty() => {
                return Err(Error::invalid_input("empty program name in argv[0]"));
            }
            _ => {}
        }
        for (i, a) in self.argv.iter().enumerate() {
            if a.contains('\0') {
                return Err(Error::invalid_input(format!("NUL byte in argv[{i}] ({a:?})")));
            }
        }
        let names = self.env.iter().map(|(n, _)| n).chain(self.secret_env.iter().map(|(n, _)| n));
        for name in names {
            validate_env_name(name)?;
        }
        for (n, v) in &self.env {
            if v.contains('\0') {
                return Err(Error::invalid_input(format!("NUL byte in the value of env var {n:?}")));
            }
        }
        for (n, v) in &self.secret_env {
            if v.expose_secret().contains('\0') {
                return Err(Error::invalid_input(format!(
                    "NUL byte in the value of secret env var {n:?} (value redacted)"
                )));
            }
        }
        if let Some(cwd) = &self.cwd {
            crate::path::validate(cwd)?;
        }
        self.validate_sizes()
    }

    /// The `execve(2)` size limits: each string (with its NUL) at most [`MAX_ARG_STRLEN`],
    /// all of them (with their NULs and pointers) at most [`MAX_ARG_TOTAL`].
    fn validate_sizes(&self) -> Result<()> {
        const POINTER: usize = 8;
        let too_long = |what: String, len: usize| {
            Error::invalid_input(format!(
                "{what} is {len} bytes with its NUL; the kernel refuses any argument or environment \
                 string over {MAX_ARG_STRLEN} bytes (MAX_ARG_STRLEN): pass bulk data through stdin or a file"
            ))
        };
        let mut total = 0usize;
        for (i, a) in self.argv.iter().enumerate() {
            let len = a.len() + 1;
            if len > MAX_ARG_STRLEN {
                return Err(too_long(format!("argv[{i}]"), len));
            }
            total = total.saturating_add(len + POINTER);
        }
        let env = self.env.iter().map(|(n, v)| (n, v.len(), false));
        let secret = self.secret_env.iter().map(|(n, v)| (n, v.expose_secret().len(), true));
        for (name, value_len, is_secret) in env.chain(secret) {
            // `NAME=value` and its NUL.
            let len = name.len() + 1 + value_len + 1;
            if len > MAX_ARG_STRLEN {
                let kind = if is_secret { "secret env var" } else { "env var" };
                return Err(too_long(format!("{kind} {name:?} (NAME=value)"), len));
            }
            total = total.saturating_add(len + POINTER);
        }
        if total > MAX_ARG_TOTAL {
            return Err(Error::invalid_input(format!(
                "argv and environment take {total} bytes (strings, NULs and pointers); sandboxio \
                 refuses more than {MAX_ARG_TOTAL} (MAX_ARG_TOTAL), within what the kernel allows \
                 (ARG_MAX) on every backend: pass bulk data through stdin or a file"
            )));
        }
        Ok(())
    }
}

/// Checks an environment variable name: non-empty, no `=`, no NUL.
///
/// # Errors
///
/// [`Error::InvalidInput`](crate::Error::InvalidInput) naming the variable.
pub fn validate_env_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid_input("empty env var name"));
    }
    if name.contains('=') {
        return Err(Error::invalid_input(format!("env var name {name:?} contains '='")));
    }
    if name.contains('\0') {
        return Err(Error::invalid_input(format!("NUL byte in env var name {name:?}")));
    }
    Ok(())
}

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
    /// Whether the output was delivered through an [`ExecStream`](crate::ExecStream), in which
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
    /// then do not declare [`Capabilities::LIMIT_MEMORY`](crate::Capabilities).
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

    /// The same result marked as truncated (or not).
    #[must_use]
    pub fn with_truncated(mut self, truncated: bool) -> Self {
        self.truncated = truncated;
        self
    }

    /// The same result marked as ended by the out-of-memory killer (or not); see
    /// [`ExecResult::oom_killed`].
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

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A piece of a streamed command's output. Chunks of one stream arrive in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// The stream it came from.
    pub stream: StreamKind,
    /// The bytes, exactly as written.
    pub data: Vec<u8>,
}

/// A code cell to run with [`Sandbox::run_code`](crate::Sandbox::run_code).
/// `&str` and `String` convert into one with the default language, Python.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code {
    source: String,
    language: String,
    context: Option<String>,
    timeout: Option<Duration>,
}

impl Code {
    /// A Python cell running `source`.
    pub fn new(source: impl Into<String>) -> Self {
        Code { source: source.into(), language: "python".to_owned(), context: None, timeout: None }
    }

    /// Another language, by its kernel name (`"python"`, `"javascript"`, …).
    #[must_use]
    pub fn language(mut self, language: impl Into<String>) -> Self {
        self.language = language.into();
        self
    }

    /// Runs the cell in `context`, where state from earlier cells is kept (needs
    /// [`Capabilities::STATEFUL_CODE`](crate::Capabilities::STATEFUL_CODE)).
    #[must_use]
    pub fn in_context(mut self, context: &CodeContext) -> Self {
        self.context = Some(context.id.clone());
        self
    }

    /// How long the cell may run before it is interrupted with
    /// [`Error::ExecutionTimeout`].
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The source text.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The language name.
    #[must_use]
    pub fn language_name(&self) -> &str {
        &self.language
    }

    /// The context id, if the cell runs in one.
    #[must_use]
    pub fn context_id(&self) -> Option<&str> {
        self.context.as_deref()
    }

    /// The timeout, if set.
    #[must_use]
    pub fn timeout_duration(&self) -> Option<Duration> {
        self.timeout
    }
}

impl From<&str> for Code {
    fn from(source: &str) -> Self {
        Code::new(source)
    }
}

impl From<String> for Code {
    fn from(source: String) -> Self {
        Code::new(source)
    }
}

/// A code context: an interpreter whose state lasts across cells
/// ([`Sandbox::create_context`](crate::Sandbox::create_context)).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CodeContext {
    /// The backend's id of the context.
    pub id: String,
    /// Its language.
    pub language: String,
}

/// A rich result of a code cell: the same value in several MIME types
/// (`text/plain`, `text/html`, `image/png`, …), each as raw bytes (PNG data is decoded, not
/// base64).
pub type MimeBundle = BTreeMap<String, Vec<u8>>;

/// The structured error of a cell that failed to compile or raised.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CodeError {
    /// The exception class, for example `ZeroDivisionError` or `SyntaxError`.
    pub name: String,
    /// The exception's message.
    pub value: String,
    /// The traceback, one entry per line.
    pub traceback: Vec<String>,
}

impl CodeError {
    /// An error named `name` with message `value` and no traceback.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        CodeError { name: name.into(), value: value.into(), traceback: Vec::new() }
    }

    /// The same error with a traceback.
    #[must_use]
    pub fn with_traceback(mut self, traceback: Vec<String>) -> Self {
        self.traceback = traceback;
        self
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
    /// [`Capabilities::RICH_OUTPUTS`](crate::Capabilities::RICH_OUTPUTS).
    pub results: Vec<MimeBundle>,
    /// The syntax or runtime error, if the cell failed, with its traceback. Backends that run
    /// one interpreter per cell (`local://`, `docker://`) also leave the traceback in
    /// `stderr`, where Python prints it; kernel-based ones may not.
    pub error: Option<CodeError>,
    /// Wall time of the cell.
    pub duration: Duration,
    /// Whether the out-of-memory killer killed the cell's interpreter or a process it
    /// started; as [`ExecResult::oom_killed`].
    pub oom_killed: bool,
}

impl CodeResult {
    /// A result with exit `code` and the given output.
    pub fn new(code: i32, stdout: impl Into<Vec<u8>>, stderr: impl Into<Vec<u8>>) -> Self {
        CodeResult {
            status: ExitStatus::Code(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
            results: Vec::new(),
            error: None,
            duration: Duration::ZERO,
            oom_killed: false,
        }
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

    /// The same result with another duration.
    #[must_use]
    pub fn with_duration(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    /// The same result with another status.
    #[must_use]
    pub fn with_status(mut self, status: ExitStatus) -> Self {
        self.status = status;
        self
    }

    /// The same result marked as ended by the out-of-memory killer (or not); see
    /// [`CodeResult::oom_killed`].
    #[must_use]
    pub fn with_oom_killed(mut self, oom_killed: bool) -> Self {
        self.oom_killed = oom_killed;
        self
    }

    /// Whether the cell ran without error.
    #[must_use]
    pub fn success(&self) -> bool {
        self.status.success() && self.error.is_none()
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
        }
    }
}
