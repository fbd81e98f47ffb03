//! The one error type every public entry point returns, and its stable codes.
//!
//! Every [`Error`] has a stable [`ErrorCode`] (`SBX-001` …) with a page in
//! `docs/errors/<code>.md`; the page is also the rustdoc of the matching `ErrorCode`
//! variant, so a code without a page does not compile, and a test fails on a page without
//! a code. The provider's own error (bollard, reqwest, tonic, …) is kept as
//! [`std::error::Error::source`], never as a public type. Messages never contain a secret:
//! secret values are [`SecretString`](crate::secret::SecretString)s, which print as `[redacted]`.

use std::fmt;
use std::time::Duration;

use crate::exec::ExecResult;
use crate::policy::{Capabilities, IsolationTier};

/// The boxed provider error kept as an [`Error`]'s source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

macro_rules! error_codes {
    ($( $(#[$meta:meta])* $variant:ident = $code:literal, $page:literal; )*) => {
        /// The stable code of an [`Error`]; each has a page in `docs/errors/`.
        ///
        /// Codes are never reused: a retired code keeps its page with a note.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $( $(#[$meta])* #[doc = include_str!(concat!("../docs/errors/", $page))] $variant, )*
        }

        impl ErrorCode {
            /// Every code, in catalog order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The stable code, for example `"SBX-006"`.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $code,)* }
            }

            /// The catalog page of this code, relative to the repository root.
            #[must_use]
            pub const fn docs_path(self) -> &'static str {
                match self { $(ErrorCode::$variant => concat!("docs/errors/", $page),)* }
            }
        }
    };
}

error_codes! {
    Connect = "SBX-001", "SBX-001.md";
    Auth = "SBX-002", "SBX-002.md";
    Configuration = "SBX-003", "SBX-003.md";
    CapabilityNotSupported = "SBX-004", "SBX-004.md";
    CreateTimeout = "SBX-005", "SBX-005.md";
    ExecutionTimeout = "SBX-006", "SBX-006.md";
    SandboxGone = "SBX-007", "SBX-007.md";
    NetworkPolicyViolation = "SBX-008", "SBX-008.md";
    IsolationUnsatisfied = "SBX-009", "SBX-009.md";
    NotFound = "SBX-010", "SBX-010.md";
    PermissionDenied = "SBX-011", "SBX-011.md";
    IsADirectory = "SBX-012", "SBX-012.md";
    InvalidInput = "SBX-013", "SBX-013.md";
    RateLimited = "SBX-014", "SBX-014.md";
    Provider = "SBX-015", "SBX-015.md";
    TooLarge = "SBX-016", "SBX-016.md";
    ContextLost = "SBX-017", "SBX-017.md";
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every failure sandboxio reports.
///
/// `Display` prints the code first, the way rustc does: `[SBX-006] execution timed out after 1s`.
/// It is one line whatever the fields hold: ids, paths and messages can carry bytes a
/// sandbox or a provider chose, so their control characters (terminal escapes, newlines,
/// bidi overrides) are spelled out as [`text::escape`](crate::text::escape) does; the
/// fields themselves keep the bytes as they came.
/// Match on the variant for its data, or call [`Error::code`] for the stable code.
///
/// Every variant has a constructor (`Error::not_found(path)`, `Error::provider(backend,
/// message, source)`, …), and every variant is `#[non_exhaustive]`: code outside sandboxio
/// builds errors through the constructors and matches variants with `..`, so a field added
/// later breaks nobody.
/// Cancellation is never an `Error`: dropping a future cancels it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The backend could not be reached, or the sandbox id given to `connect` is unknown.
    #[error("[SBX-001] cannot connect to the {b} backend: {m}", b = crate::text::Escaped(.backend), m = crate::text::Escaped(.message))]
    #[non_exhaustive]
    Connect {
        /// The backend's scheme, for example `docker`.
        backend: String,
        /// What failed, naming the socket, address or id.
        message: String,
        /// The provider's error.
        #[source]
        source: Option<BoxError>,
    },
    /// Credentials are missing or were refused.
    #[error("[SBX-002] authentication with the {b} backend failed: {m}", b = crate::text::Escaped(.backend), m = crate::text::Escaped(.message))]
    #[non_exhaustive]
    Auth {
        /// The backend's scheme.
        backend: String,
        /// What is missing (naming the environment variable) or what was refused.
        message: String,
        /// The environment variable that should hold the credential, if any.
        env_var: Option<String>,
        /// The provider's error.
        #[source]
        source: Option<BoxError>,
    },
    /// The DSN, the builder options or the backend setup are inconsistent.
    #[error("[SBX-003] configuration error: {m}", m = crate::text::Escaped(.message))]
    #[non_exhaustive]
    Configuration {
        /// What is wrong, naming the offending part.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// The backend (or this sandbox) does not declare the capability the call needs.
    #[error("[SBX-004] the {b} backend does not support {c}", b = crate::text::Escaped(.backend), c = crate::text::Escaped(.capability))]
    #[non_exhaustive]
    CapabilityNotSupported {
        /// The backend's scheme.
        backend: String,
        /// The capability or typed option that was asked for, for example `STATEFUL_CODE`.
        capability: String,
    },
    /// `create()` did not finish within its create timeout.
    #[error("[SBX-005] sandbox creation timed out after {timeout:?}")]
    #[non_exhaustive]
    CreateTimeout {
        /// The create timeout in effect.
        timeout: Duration,
    },
    /// A command or code cell ran past its timeout; its process tree was killed.
    #[error("[SBX-006] execution timed out after {timeout:?}")]
    #[non_exhaustive]
    ExecutionTimeout {
        /// The timeout in effect.
        timeout: Duration,
        /// What the command wrote before it was killed.
        partial: Box<ExecResult>,
    },
    /// The sandbox no longer exists: it was killed, or its TTL expired.
    #[error("[SBX-007] sandbox {i} is gone: {m}", i = crate::text::Escaped(.id), m = crate::text::Escaped(.message))]
    #[non_exhaustive]
    SandboxGone {
        /// The sandbox id.
        id: String,
        /// Why, when known.
        message: String,
    },
    /// Code in the sandbox tried to reach a destination the network policy forbids.
    #[error("[SBX-008] network policy violation: {m}", m = crate::text::Escaped(.message))]
    #[non_exhaustive]
    NetworkPolicyViolation {
        /// The destination and the policy that refused it.
        message: String,
    },
    /// `require_isolation` asked for a tier above the backend's.
    #[error("[SBX-009] isolation tier {required} required but the {b} backend provides {actual}", b = crate::text::Escaped(.backend))]
    #[non_exhaustive]
    IsolationUnsatisfied {
        /// The backend's scheme.
        backend: String,
        /// The tier asked for.
        required: IsolationTier,
        /// The tier the backend reports.
        actual: IsolationTier,
    },
    /// A path in the sandbox (or on the host, for upload) does not exist.
    #[error("[SBX-010] not found: {p}", p = crate::text::Escaped(.path))]
    #[non_exhaustive]
    NotFound {
        /// The missing path.
        path: String,
    },
    /// The sandbox refused access to a path.
    #[error("[SBX-011] permission denied: {p}", p = crate::text::Escaped(.path))]
    #[non_exhaustive]
    PermissionDenied {
        /// The path.
        path: String,
    },
    /// A file operation met a directory where it needs a file.
    #[error("[SBX-012] is a directory: {p}", p = crate::text::Escaped(.path))]
    #[non_exhaustive]
    IsADirectory {
        /// The path.
        path: String,
    },
    /// An argument is malformed: NUL bytes, `..` in a path, an empty argv, and so on.
    #[error("[SBX-013] invalid input: {m}", m = crate::text::Escaped(.message))]
    #[non_exhaustive]
    InvalidInput {
        /// What is wrong, naming the offending part (secrets redacted).
        message: String,
    },
    /// The provider asked us to slow down.
    #[error("[SBX-014] rate limited by the {b} backend{}", retry_hint(*.retry_after), b = crate::text::Escaped(.backend))]
    #[non_exhaustive]
    RateLimited {
        /// The backend's scheme.
        backend: String,
        /// How long the provider asked us to wait, when it said.
        retry_after: Option<Duration>,
        /// The provider's error.
        #[source]
        source: Option<BoxError>,
    },
    /// What the host would read from the sandbox (a file, a listing, a download) is over
    /// the limit set for it; nothing past the limit was read.
    #[error("[SBX-016] too large: {p} is over the limit of {limit} bytes ({w})", p = crate::text::Escaped(.path), w = crate::text::Escaped(.what))]
    #[non_exhaustive]
    TooLarge {
        /// The sandbox path.
        path: String,
        /// The limit in effect, in bytes.
        limit: u64,
        /// Which limit, and how to raise it (for example `Fs::read_limit`).
        what: String,
    },
    /// A code context's interpreter is gone (its cell killed it, or it was killed), so the
    /// state it held is lost; the context is never silently replaced by a fresh one.
    #[error("[SBX-017] code context {c} is lost: {m}", c = crate::text::Escaped(.context), m = crate::text::Escaped(.message))]
    #[non_exhaustive]
    ContextLost {
        /// The context's id.
        context: String,
        /// What ended its interpreter, when known.
        message: String,
    },
    /// Any other provider failure, with the provider's error as the source.
    #[error("[SBX-015] the {b} backend failed: {m}", b = crate::text::Escaped(.backend), m = crate::text::Escaped(.message))]
    #[non_exhaustive]
    Provider {
        /// The backend's scheme.
        backend: String,
        /// What failed.
        message: String,
        /// The provider's error.
        #[source]
        source: Option<BoxError>,
    },
}

fn retry_hint(retry_after: Option<Duration>) -> String {
    retry_after.map_or_else(String::new, |d| format!("; retry after {d:?}"))
}

impl Error {
    /// The stable code of this error.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Connect { .. } => ErrorCode::Connect,
            Error::Auth { .. } => ErrorCode::Auth,
            Error::Configuration { .. } => ErrorCode::Configuration,
            Error::CapabilityNotSupported { .. } => ErrorCode::CapabilityNotSupported,
            Error::CreateTimeout { .. } => ErrorCode::CreateTimeout,
            Error::ExecutionTimeout { .. } => ErrorCode::ExecutionTimeout,
            Error::SandboxGone { .. } => ErrorCode::SandboxGone,
            Error::NetworkPolicyViolation { .. } => ErrorCode::NetworkPolicyViolation,
            Error::IsolationUnsatisfied { .. } => ErrorCode::IsolationUnsatisfied,
            Error::NotFound { .. } => ErrorCode::NotFound,
            Error::PermissionDenied { .. } => ErrorCode::PermissionDenied,
            Error::IsADirectory { .. } => ErrorCode::IsADirectory,
            Error::InvalidInput { .. } => ErrorCode::InvalidInput,
            Error::RateLimited { .. } => ErrorCode::RateLimited,
            Error::Provider { .. } => ErrorCode::Provider,
            Error::TooLarge { .. } => ErrorCode::TooLarge,
            Error::ContextLost { .. } => ErrorCode::ContextLost,
        }
    }

    /// Whether retrying the same call later may succeed (rate limits, unreachable backends).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::RateLimited { .. } | Error::Connect { .. })
    }

    /// An [`Error::Connect`] for `backend`, with no source (add one with
    /// [`Error::with_source`]).
    pub fn connect(backend: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Connect { backend: backend.into(), message: message.into(), source: None }
    }

    /// An [`Error::Auth`] for `backend`, naming the environment variable that should hold
    /// the credential when there is one; no source (add one with [`Error::with_source`]).
    pub fn auth(backend: impl Into<String>, message: impl Into<String>, env_var: Option<String>) -> Self {
        Error::Auth { backend: backend.into(), message: message.into(), env_var, source: None }
    }

    /// An [`Error::Configuration`] with no source (add one with [`Error::with_source`]).
    pub fn configuration(message: impl Into<String>) -> Self {
        Error::Configuration { message: message.into(), source: None }
    }

    /// An [`Error::CreateTimeout`] after `timeout`, the create timeout in effect.
    #[must_use]
    pub fn create_timeout(timeout: Duration) -> Self {
        Error::CreateTimeout { timeout }
    }

    /// An [`Error::ExecutionTimeout`] after `timeout`, with what the command wrote before
    /// it was killed.
    #[must_use]
    pub fn execution_timeout(timeout: Duration, partial: ExecResult) -> Self {
        Error::ExecutionTimeout { timeout, partial: Box::new(partial) }
    }

    /// An [`Error::ContextLost`] for code context `context`, saying why.
    pub fn context_lost(context: impl Into<String>, message: impl Into<String>) -> Self {
        Error::ContextLost { context: context.into(), message: message.into() }
    }

    /// An [`Error::SandboxGone`] for sandbox `id`, saying why when known.
    pub fn sandbox_gone(id: impl Into<String>, message: impl Into<String>) -> Self {
        Error::SandboxGone { id: id.into(), message: message.into() }
    }

    /// An [`Error::NetworkPolicyViolation`] naming the destination and the policy.
    pub fn network_policy_violation(message: impl Into<String>) -> Self {
        Error::NetworkPolicyViolation { message: message.into() }
    }

    /// An [`Error::IsolationUnsatisfied`]: `required` was asked for, `backend` provides
    /// `actual`.
    pub fn isolation_unsatisfied(
        backend: impl Into<String>,
        required: IsolationTier,
        actual: IsolationTier,
    ) -> Self {
        Error::IsolationUnsatisfied { backend: backend.into(), required, actual }
    }

    /// An [`Error::NotFound`] for `path`, as the caller wrote it.
    pub fn not_found(path: impl Into<String>) -> Self {
        Error::NotFound { path: path.into() }
    }

    /// An [`Error::PermissionDenied`] for `path`, as the caller wrote it.
    pub fn permission_denied(path: impl Into<String>) -> Self {
        Error::PermissionDenied { path: path.into() }
    }

    /// An [`Error::IsADirectory`] for `path`, as the caller wrote it.
    pub fn is_a_directory(path: impl Into<String>) -> Self {
        Error::IsADirectory { path: path.into() }
    }

    /// An [`Error::InvalidInput`].
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Error::InvalidInput { message: message.into() }
    }

    /// An [`Error::RateLimited`] for `backend`, with how long the provider asked to wait
    /// when it said; no source (add one with [`Error::with_source`]).
    pub fn rate_limited(backend: impl Into<String>, retry_after: Option<Duration>) -> Self {
        Error::RateLimited { backend: backend.into(), retry_after, source: None }
    }

    /// An [`Error::TooLarge`]: `path` is over `limit` bytes; `what` names the limit and how
    /// to raise it (for example ``"`Fs::read_limit`"``).
    pub fn too_large(path: impl Into<String>, limit: u64, what: impl Into<String>) -> Self {
        Error::TooLarge { path: path.into(), limit, what: what.into() }
    }

    /// An [`Error::Provider`] for `backend` keeping `source`, the provider's own error, as
    /// the cause.
    pub fn provider(
        backend: impl Into<String>,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Error::Provider { backend: backend.into(), message: message.into(), source: Some(source.into()) }
    }

    /// An [`Error::Provider`] for `backend` with no source: for a failure the adapter
    /// observes itself (a stream that ended early, a reply that never came), where there is
    /// no provider error to keep. Never invent one: `source()` is `None`.
    pub fn provider_message(backend: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Provider { backend: backend.into(), message: message.into(), source: None }
    }

    /// Keeps `source` as the cause of an [`Error::Connect`], [`Error::Auth`],
    /// [`Error::Configuration`], [`Error::RateLimited`] or [`Error::Provider`], replacing
    /// any cause it had. The other variants report what sandboxio or the adapter observed
    /// itself and carry no cause: they are returned unchanged.
    #[must_use]
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        match &mut self {
            Error::Connect { source: slot, .. }
            | Error::Auth { source: slot, .. }
            | Error::Configuration { source: slot, .. }
            | Error::RateLimited { source: slot, .. }
            | Error::Provider { source: slot, .. } => *slot = Some(source.into()),
            _ => {}
        }
        self
    }

    /// The same error again, for a handle that reports one ending every time it is asked
    /// (a stream's `wait`): every field is kept; a provider's cause (the source) is not,
    /// as it cannot be copied, so the copy names it in its message instead.
    pub(crate) fn again(&self) -> Error {
        let cause = |message: &str, source: &Option<BoxError>| match source {
            Some(source) => format!("{message} ({source})"),
            None => message.to_owned(),
        };
        match self {
            Error::Connect { backend, message, source } => Error::connect(backend, cause(message, source)),
            Error::Auth { backend, message, env_var, source } => {
                Error::auth(backend, cause(message, source), env_var.clone())
            }
            Error::Configuration { message, source } => Error::configuration(cause(message, source)),
            Error::CapabilityNotSupported { backend, capability } => Error::unsupported(backend, capability),
            Error::CreateTimeout { timeout } => Error::create_timeout(*timeout),
            Error::ExecutionTimeout { timeout, partial } => {
                Error::ExecutionTimeout { timeout: *timeout, partial: partial.clone() }
            }
            Error::SandboxGone { id, message } => Error::sandbox_gone(id, message),
            Error::NetworkPolicyViolation { message } => Error::network_policy_violation(message),
            Error::IsolationUnsatisfied { backend, required, actual } => {
                Error::isolation_unsatisfied(backend, *required, *actual)
            }
            Error::NotFound { path } => Error::not_found(path),
            Error::PermissionDenied { path } => Error::permission_denied(path),
            Error::IsADirectory { path } => Error::is_a_directory(path),
            Error::InvalidInput { message } => Error::invalid_input(message),
            Error::RateLimited { backend, retry_after, .. } => Error::rate_limited(backend, *retry_after),
            Error::TooLarge { path, limit, what } => Error::too_large(path, *limit, what),
            Error::ContextLost { context, message } => Error::context_lost(context, message),
            Error::Provider { backend, message, source } => {
                Error::provider_message(backend, cause(message, source))
            }
        }
    }

    /// An [`Error::CapabilityNotSupported`] naming `capability`.
    pub fn unsupported(backend: impl Into<String>, capability: impl fmt::Display) -> Self {
        Error::CapabilityNotSupported { backend: backend.into(), capability: capability.to_string() }
    }

    /// An [`Error::CapabilityNotSupported`] for a capability flag, named as in
    /// [`Capabilities`]' documentation (for example `STATEFUL_CODE`).
    pub fn missing_capability(backend: impl Into<String>, capability: Capabilities) -> Self {
        Self::unsupported(backend, capability.names())
    }
}

#[cfg(test)]
mod tests {
    use super::Error;
    use crate::policy::IsolationTier;

    /// Every variant's `Display` is one line without a control character, whatever bytes
    /// its string fields hold, and still shows them (escaped); the fields keep them raw.
    #[test]
    fn display_escapes_every_string_field_of_every_variant() {
        const RAW: &str = "a\x1b]0;pwned\x07\x1b[2J\r\nb\u{9b}c\u{202e}d";
        const SHOWN: &str = r"a\x1b]0;pwned\x07\x1b[2J\r\nb\x9bc\u{202e}d";
        let errors = [
            Error::connect(RAW, RAW),
            Error::auth(RAW, RAW, None),
            Error::configuration(RAW),
            Error::unsupported(RAW, RAW),
            Error::sandbox_gone(RAW, RAW),
            Error::network_policy_violation(RAW),
            Error::isolation_unsatisfied(RAW, IsolationTier::MicroVm, IsolationTier::None),
            Error::not_found(RAW),
            Error::permission_denied(RAW),
            Error::is_a_directory(RAW),
            Error::invalid_input(RAW),
            Error::rate_limited(RAW, None),
            Error::too_large(RAW, 1, RAW),
            Error::context_lost(RAW, RAW),
            Error::provider_message(RAW, RAW),
        ];
        assert_eq!(errors.len(), super::ErrorCode::ALL.len() - 2, "every variant but the two timeouts");
        for e in &errors {
            let shown = e.to_string();
            assert!(!shown.chars().any(char::is_control), "{shown:?}");
            assert!(!shown.contains('\u{202e}'), "{shown:?}");
            assert!(shown.contains(SHOWN), "{:?}: {shown}", e.code());
        }
        let Error::ContextLost { message, .. } = &errors[13] else { unreachable!() };
        assert_eq!(message, RAW, "the field keeps the bytes as they came");
    }
}
