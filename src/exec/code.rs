//! Code cells: [`Code`] to run, the [`CodeContext`] that keeps state across cells, and what a
//! failing or rich cell gives back ([`CodeError`], [`MimeBundle`]).

use std::collections::BTreeMap;
use std::time::Duration;

#[cfg(doc)]
use crate::error::Error;

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
    ///
    /// Any `Duration` is accepted: zero interrupts the cell as soon as it starts, and
    /// anything above [`MAX_TIMEOUT`](crate::MAX_TIMEOUT) (30 days, the longest TTL)
    /// saturates at it, `Duration::MAX` included.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(crate::duration::saturate(timeout));
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
