//! [`Command`]: the argv, environment and limits of one process, and the checks every
//! backend relies on before anything starts.

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
    /// [`Capabilities::COMMAND_SECRETS`](crate::policy::Capabilities::COMMAND_SECRETS), and there
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
    ///
    /// Any `Duration` is accepted: zero times the command out as soon as it starts, and
    /// anything above [`MAX_TIMEOUT`](crate::exec::MAX_TIMEOUT) (30 days, the longest TTL)
    /// saturates at it, `Duration::MAX` included.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(crate::duration::saturate(timeout));
        self
    }

    /// Cap, in bytes, on the output kept per stream (stdout and stderr each). Output beyond
    /// it is drained and dropped, and
    /// [`ExecResult::truncated`](crate::ExecResult::truncated) is set. Default
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
