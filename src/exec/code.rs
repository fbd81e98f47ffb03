//! Code cells: [`Code`] to run, the [`CodeContext`] that keeps state across cells, and what a
//! failing or rich cell gives back ([`CodeError`], [`MimeBundle`]).

use std::collections::BTreeMap;
use std::time::Duration;

#[cfg(doc)]
use crate::error::Error;

/// The most bytes the host keeps of a cell unless its [`Code::output_limit`] says otherwise:
/// 8 MiB of stdout, stderr and rich results together. A cell then costs the host at most
/// about three times that: what is kept, the transport's own window (8 MiB on sandboxd) and
/// the copy a [`CodeStream::wait`](crate::exec::CodeStream::wait) hands out, which keeps a
/// flooding cell's host under 64 MiB.
pub const DEFAULT_CELL_OUTPUT_LIMIT: usize = 8 * 1024 * 1024;

/// A code cell to run with [`Sandbox::run_code`](crate::Sandbox::run_code).
/// `&str` and `String` convert into one with the default language, Python.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code {
    source: String,
    language: String,
    context: Option<String>,
    timeout: Option<Duration>,
    output_limit: usize,
}

impl Code {
    /// A Python cell running `source`.
    pub fn new(source: impl Into<String>) -> Self {
        Code {
            source: source.into(),
            language: "python".to_owned(),
            context: None,
            timeout: None,
            output_limit: DEFAULT_CELL_OUTPUT_LIMIT,
        }
    }

    /// Another language, by its kernel name (`"python"`, `"javascript"`, …).
    #[must_use]
    pub fn language(mut self, language: impl Into<String>) -> Self {
        self.language = language.into();
        self
    }

    /// Runs the cell in `context`, where state from earlier cells is kept (needs
    /// [`Capabilities::STATEFUL_CODE`](crate::policy::Capabilities::STATEFUL_CODE)).
    #[must_use]
    pub fn in_context(mut self, context: &CodeContext) -> Self {
        self.context = Some(context.id.clone());
        self
    }

    /// How long the cell may run before it is interrupted with
    /// [`Error::ExecutionTimeout`].
    ///
    /// Any `Duration` is accepted: zero interrupts the cell as soon as it starts, and
    /// anything above [`MAX_TIMEOUT`](crate::exec::MAX_TIMEOUT) (30 days, the longest TTL)
    /// saturates at it, `Duration::MAX` included.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(crate::duration::saturate(timeout));
        self
    }

    /// The most bytes the host keeps of this cell, in bytes: its rich results (every
    /// `display()` and its value, counted with a small fixed overhead per result and per
    /// MIME type) and, for [`Sandbox::run_code`](crate::Sandbox::run_code), its stdout and
    /// stderr, together. Default [`DEFAULT_CELL_OUTPUT_LIMIT`] (8 MiB).
    ///
    /// The budget is enforced as the bytes arrive: what does not fit is read from the
    /// sandbox and dropped (a rich result that does not fit is dropped whole, and no later
    /// one is kept; a stream keeps what fitted of the chunk that did not, and nothing after
    /// it), the cell runs on to its end, its context keeps its state, and the result is
    /// marked [`CodeResult::truncated`](crate::CodeResult::truncated). The cell's error
    /// is kept whatever the budget, up to 1 MiB. A [`CodeStream`](crate::exec::CodeStream)'s
    /// chunks are the reader's, not counted here: only its results are.
    #[must_use]
    pub fn output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes;
        self
    }

    /// The output budget, in bytes ([`Code::output_limit`]).
    #[must_use]
    pub fn output_limit_bytes(&self) -> usize {
        self.output_limit
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
    /// The traceback, one entry per line, for the first 4096 lines; any lines past those
    /// are kept in the last entry, joined with `\n` (a sandbox-made error of a million
    /// one-byte lines is one string, not a million).
    pub traceback: Vec<String>,
}

/// The most traceback lines a [`CodeError`] read from a sandbox keeps as entries of their own.
#[cfg_attr(
    not(any(feature = "local", feature = "docker", feature = "e2b")),
    allow(dead_code, unused_imports, reason = "used by the backends with code cells: local, docker, e2b")
)]
pub(crate) const MAX_TRACEBACK_LINES: usize = 4096;

/// `lines` as a traceback of at most [`MAX_TRACEBACK_LINES`] entries: the lines past the
/// last entry are joined into it with `\n`, so no byte is dropped. Why: each entry costs a
/// `String` (24 bytes and an allocation); a runner's 1 MiB error record of 524,000 two-byte
/// lines took the host 30 MiB as entries, and `sandboxio mcp` from 26 to 87 MiB.
#[cfg_attr(
    not(any(feature = "local", feature = "docker", feature = "e2b")),
    allow(dead_code, unused_imports, reason = "used by the backends with code cells: local, docker, e2b")
)]
pub(crate) fn traceback_of<S: AsRef<str>>(lines: impl IntoIterator<Item = S>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in lines {
        let line = line.as_ref();
        let full = out.len() == MAX_TRACEBACK_LINES;
        match out.last_mut() {
            Some(last) if full => {
                last.push('\n');
                last.push_str(line);
            }
            _ => out.push(line.to_owned()),
        }
    }
    out
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
