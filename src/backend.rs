//! The adapter interface: what a backend implements so that [`Sandbox`](crate::Sandbox) can
//! drive it.
//!
//! A third-party crate implements [`Backend`] (what can be created) and [`BackendSandbox`]
//! (one live sandbox), optionally [`BackendExecStream`] (one streamed process) and
//! [`BackendCodeStream`] (one streamed code cell, most easily through [`CellStream`]), and registers
//! its DSN scheme with [`crate::dsn::register_scheme`]. Both traits are
//! object-safe; async methods return [`BoxFuture`]s so any executor can poll them.
//!
//! The core validates inputs (argv, env, paths), checks declared capabilities, policy and
//! isolation before calling in, and writes the audit records; the backend does the work and
//! maps its provider's errors into [`Error`], keeping the provider error as the
//! source. Rules every backend follows (the contract suite checks them):
//!
//! 1. Never silently no-op: what cannot be honoured raises.
//! 2. Never fake a capability: declare only what the provider really does.
//! 3. Never block the caller's executor: blocking calls run on your own threads.
//! 4. Propagate [`CreateSpec::metadata`] to provider-native labels.
//! 5. Apply policy and limits before user code can run, or raise.
//! 6. Dropping any returned future must leave nothing behind (see each method's
//!    *Cancellation* note).

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::audit::AuditConfig;
use crate::error::{Error, Result};
use crate::exec::{Code, CodeContext, CodeResult, Command, ExecResult, OutputChunk};
use crate::fs::DirEntry;
use crate::policy::{Capabilities, IsolationTier, NetworkEnforcement, NetworkPolicy, ResourceLimits};
use crate::secret::SecretString;

/// The backend named in the refusals of [`BackendSandbox`]'s default methods, which do not
/// know their scheme; [`Sandbox`](crate::Sandbox) puts the scheme in its place before the
/// caller sees the error (it read "the this backend backend does not support `RUN_CODE`").
pub(crate) const UNNAMED_BACKEND: &str = "this backend";

mod blocking;
mod blocking_stream;
pub(crate) mod cell_stream;

pub use crate::error::BoxError;
pub use crate::transfer::TransferMeter;
pub use blocking::{Blocking, CancelToken, run_blocking};
pub use blocking_stream::{BlockingChunks, blocking_chunks};
pub use cell_stream::{CellStream, ChunkSink, OutputBudget, collect_cell};

/// A boxed, sendable future, the return type of the async adapter methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The typed backend options a builder can set. A backend lists the ones it understands in
/// [`Backend::supports_option`]; any other one set by the caller makes `create()` fail with
/// [`Error::CapabilityNotSupported`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendOption {
    /// A container image (Docker).
    Image,
    /// A provider template (E2B, Modal).
    Template,
}

impl fmt::Display for BackendOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendOption::Image => "typed option `image`",
            BackendOption::Template => "typed option `template`",
        })
    }
}

/// Everything a backend needs to create a sandbox, already validated by the core.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CreateSpec {
    /// The egress policy to apply before user code runs.
    pub network: NetworkPolicy,
    /// Resource limits; only those whose capability the backend declares reach it.
    pub limits: ResourceLimits,
    /// Environment variables for every process.
    pub env: Vec<(String, String)>,
    /// Secret environment variables: pass them to each process, never store them where the
    /// provider shows its configuration (labels, `docker inspect`).
    pub secret_env: Vec<(String, SecretString)>,
    /// The user's metadata: propagate it to provider-native labels.
    pub metadata: BTreeMap<String, String>,
    /// How long the sandbox may live; enforce it on the provider side where possible.
    pub ttl: Duration,
    /// How long creation may take before [`Error::CreateTimeout`].
    pub create_timeout: Duration,
    /// Whether the sandbox outlives its owner process (until its TTL).
    pub detached: bool,
    /// `Some` when the caller chose a container image.
    pub image: Option<String>,
    /// `Some` when the caller chose a provider template.
    pub template: Option<String>,
    /// The sandbox's audit sinks (the builder's and the backend's), for records the backend
    /// makes itself while the sandbox lives: the egress gate's decisions
    /// ([`OperationKind::Egress`](crate::audit::OperationKind::Egress)).
    pub audit: AuditConfig,
}

impl CreateSpec {
    /// A spec with `network` and the library defaults for everything else (no limits, no
    /// env, no metadata, [`DEFAULT_TTL`](crate::builder::DEFAULT_TTL),
    /// [`DEFAULT_CREATE_TIMEOUT`](crate::builder::DEFAULT_CREATE_TIMEOUT), owned, no typed options).
    /// For adapter unit tests and benchmarks; `SandboxBuilder::create` builds the real one.
    #[must_use]
    pub fn new(network: NetworkPolicy) -> Self {
        CreateSpec {
            network,
            limits: ResourceLimits::default(),
            env: Vec::new(),
            secret_env: Vec::new(),
            metadata: BTreeMap::new(),
            ttl: crate::builder::DEFAULT_TTL,
            create_timeout: crate::builder::DEFAULT_CREATE_TIMEOUT,
            detached: false,
            image: None,
            audit: AuditConfig::new(),
            template: None,
        }
    }
}

/// Whether a kill did anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KillOutcome {
    /// The sandbox was running and is now destroyed.
    Killed,
    /// It was already gone; nothing was done.
    AlreadyGone,
}

/// A kind of sandbox provider: what it can do and how to create or reach its sandboxes.
pub trait Backend: Send + Sync + fmt::Debug + 'static {
    /// The DSN scheme, for example `"docker"`. Used in errors, audit records and spans.
    fn scheme(&self) -> &str;

    /// The capabilities every sandbox of this backend has (a sandbox may narrow them).
    fn capabilities(&self) -> Capabilities;

    /// The isolation tier. The default, [`IsolationTier::Unknown`], satisfies no
    /// `require_isolation`.
    fn isolation(&self) -> IsolationTier {
        IsolationTier::Unknown
    }

    /// Whether the backend understands a typed builder option. Default: none.
    fn supports_option(&self, option: BackendOption) -> bool {
        let _ = option;
        false
    }

    /// The audit sinks the backend was constructed with; every sandbox it creates writes
    /// to them as well as to the builder's. Default: none.
    fn audit(&self) -> AuditConfig {
        AuditConfig::new()
    }

    /// Creates a sandbox.
    ///
    /// Cancellation: if the returned future is dropped, no sandbox may be left behind. Run
    /// the provisioning on a task you own, and destroy the sandbox if the result can no
    /// longer be delivered.
    fn create(&self, spec: CreateSpec) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>>;

    /// Attaches to an existing sandbox without owning it. Called only when the backend
    /// declares [`Capabilities::CONNECT`]. An unknown id is [`Error::Connect`].
    fn connect(&self, id: &str) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
        let _ = id;
        Box::pin(async { Err(Error::unsupported(self.scheme(), "CONNECT")) })
    }

    /// The sandboxes of this backend that the caller can see (on this host, this engine,
    /// this account) whose labels hold every pair of `labels`, past their TTL or not.
    /// The default refuses with [`Error::CapabilityNotSupported`]: a backend that cannot
    /// enumerate its sandboxes says so rather than returning an empty list.
    fn list(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> BoxFuture<'_, Result<Vec<crate::inventory::SandboxInfo>>> {
        let _ = labels;
        let scheme = self.scheme().to_owned();
        Box::pin(async move { Err(Error::unsupported(scheme, "listing sandboxes")) })
    }

    /// Removes this backend's sandboxes past their TTL and, with
    /// [`ReapOptions::owner_dead`](crate::inventory::ReapOptions::owner_dead), the owned ones whose
    /// owner process on this host is gone; with
    /// [`ReapOptions::dry_run`](crate::inventory::ReapOptions::dry_run), only reports them. The
    /// default refuses with [`Error::CapabilityNotSupported`].
    fn reap(
        &self,
        options: crate::inventory::ReapOptions,
    ) -> BoxFuture<'_, Result<crate::inventory::ReapReport>> {
        let _ = options;
        let scheme = self.scheme().to_owned();
        Box::pin(async move { Err(Error::unsupported(scheme, "reaping sandboxes")) })
    }
}

/// One live sandbox of a backend.
///
/// Methods for undeclared capabilities keep their defaults, which return
/// [`Error::CapabilityNotSupported`]; the core never calls them when the capability is
/// undeclared, so the defaults only guard direct callers. Paths given to the file methods
/// are validated (no NUL, no `..`) but may be relative: resolve them against the same
/// working directory `run` uses.
pub trait BackendSandbox: Send + Sync + fmt::Debug {
    /// The sandbox id, as `Sandbox::connect` takes it.
    fn id(&self) -> &str;

    /// This sandbox's capabilities: the backend's, possibly narrowed (an image without
    /// `python3` has no `RUN_CODE`).
    fn capabilities(&self) -> Capabilities;

    /// Why this sandbox lacks `capability` when its backend declares it, in a few words the
    /// caller's [`Error::CapabilityNotSupported`] carries (`docker://`: "its image has no
    /// python3 ..."). The default says nothing more.
    fn narrowed_because(&self, capability: Capabilities) -> Option<String> {
        let _ = capability;
        None
    }

    /// The network policy in effect, when the backend knows it (a connected handle may not).
    fn network_policy(&self) -> Option<NetworkPolicy> {
        None
    }

    /// How that policy is enforced, when the backend knows it (see
    /// [`NetworkEnforcement`]). The default says nothing: a backend reports only what it does.
    fn network_enforcement(&self) -> Option<NetworkEnforcement> {
        None
    }

    /// The metadata recorded with the sandbox, as the provider reports it.
    fn metadata(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    /// Runs a command to completion. A non-zero exit is `Ok`. On timeout, kill the whole
    /// process tree and return [`Error::ExecutionTimeout`] with the partial output.
    ///
    /// Cancellation: if the returned future is dropped, the process must be killed.
    fn run(&self, command: Command) -> BoxFuture<'_, Result<ExecResult>> {
        let _ = command;
        Box::pin(async { Err(Error::unsupported(UNNAMED_BACKEND, "RUN")) })
    }

    /// Starts a command and returns its stream at once; the remote start may finish in the
    /// background. Dropping the returned stream must terminate the process.
    ///
    /// # Errors
    ///
    /// Errors found before any remote work starts.
    fn stream(&self, command: Command) -> Result<Box<dyn BackendExecStream>> {
        let _ = command;
        Err(Error::unsupported(UNNAMED_BACKEND, "STREAM"))
    }

    /// Runs a code cell (in `code.context_id()` when set).
    ///
    /// Cancellation: if the returned future is dropped, the cell must be interrupted.
    fn run_code(&self, code: Code) -> BoxFuture<'_, Result<CodeResult>> {
        let _ = code;
        Box::pin(async { Err(Error::unsupported(UNNAMED_BACKEND, "RUN_CODE")) })
    }

    /// Runs a code cell like [`BackendSandbox::run_code`] and returns its output as it is
    /// printed, at once; the cell may start in the background. Every backend that declares
    /// [`Capabilities::RUN_CODE`] must stream cells: a chunk is delivered when the cell
    /// prints it, not when the cell ends (the contract suite checks the order).
    /// [`CellStream`] turns a cell written as a future into such a stream, and
    /// [`collect_cell`] turns the stream back into [`BackendSandbox::run_code`]'s result, so
    /// one code path serves both.
    ///
    /// The default refuses with [`Error::CapabilityNotSupported`] (`RUN_CODE (streamed)`):
    /// a backend that cannot deliver output while its cell runs says so rather than
    /// delivering everything at the end as if it had streamed.
    ///
    /// Cancellation: dropping the returned stream must interrupt the cell as dropping
    /// [`BackendSandbox::run_code`]'s future does.
    ///
    /// # Errors
    ///
    /// Errors found before any remote work starts; later ones end the stream
    /// ([`CellEvent::Ended`]).
    fn run_code_stream(&self, code: Code) -> Result<Box<dyn BackendCodeStream>> {
        let _ = code;
        Err(Error::unsupported(UNNAMED_BACKEND, "RUN_CODE (streamed)"))
    }

    /// Creates a code context for `language`.
    fn create_context(&self, language: &str) -> BoxFuture<'_, Result<CodeContext>> {
        let _ = language;
        Box::pin(async { Err(Error::unsupported(UNNAMED_BACKEND, "STATEFUL_CODE")) })
    }

    /// Interrupts the cell running in context `context_id` (a `KeyboardInterrupt` in
    /// Python; the context keeps its state). No cell running: nothing happens. Called only
    /// when [`Capabilities::STATEFUL_CODE`] is declared.
    fn interrupt(&self, context_id: &str) -> BoxFuture<'_, Result<()>> {
        let _ = context_id;
        Box::pin(async { Err(Error::unsupported(UNNAMED_BACKEND, "STATEFUL_CODE")) })
    }

    /// Reads a whole file of at most `limit` bytes, links followed inside the sandbox.
    ///
    /// A file with more than `limit` bytes (or with no end, such as a `/proc` file) is
    /// [`Error::TooLarge`]: stop reading from the sandbox after `limit + 1` bytes, never
    /// hold more than that, and stop the process that produced them.
    ///
    /// Cancellation: if the returned future is dropped, the in-sandbox process must be
    /// killed (the core drops it at the operation's deadline).
    fn read(&self, path: &str, limit: u64) -> BoxFuture<'_, Result<Vec<u8>>> {
        let _ = (path, limit);
        Box::pin(async { Err(Error::unsupported(UNNAMED_BACKEND, "FILESYSTEM")) })
    }

    /// Writes a whole file as the sandbox user's own write would: parent directories are
    /// created; an existing file is truncated and written in place (it keeps its mode,
    /// owner and hard links; a link is followed inside the sandbox's own view); a file the
    /// sandbox user cannot write is [`Error::PermissionDenied`] naming it; a directory is
    /// [`Error::IsADirectory`]; a special file (FIFO, device, socket) is
    /// [`Error::InvalidInput`]. `mode` is the permission bits of a file the write creates
    /// (`None`: `0o644`); an existing file's mode is never changed. Never write through a
    /// temporary name another process could predict or plant.
    ///
    /// Cancellation: if the returned future is dropped, the in-sandbox process must be
    /// killed; the file may be partly written.
    fn write(&self, path: &str, data: Vec<u8>, mode: Option<u32>) -> BoxFuture<'_, Result<()>> {
        let _ = (path, data, mode);
        Box::pin(async { Err(Error::unsupported(UNNAMED_BACKEND, "FILESYSTEM")) })
    }

    /// Lists a directory. Bound what is read from the sandbox (the core's contract:
    /// [`DEFAULT_READ_LIMIT`](crate::fs::DEFAULT_READ_LIMIT) bytes of listing at most, else
    /// [`Error::TooLarge`]).
    fn list(&self, path: &str) -> BoxFuture<'_, Result<Vec<DirEntry>>> {
        let _ = path;
        Box::pin(async { Err(Error::unsupported(UNNAMED_BACKEND, "FILESYSTEM")) })
    }

    /// Creates a directory and its parents; an existing directory is not an error.
    fn mkdir(&self, path: &str) -> BoxFuture<'_, Result<()>> {
        let _ = path;
        Box::pin(async { Err(Error::unsupported(UNNAMED_BACKEND, "FILESYSTEM")) })
    }

    /// Removes a file, or a directory (its contents too when `recursive`).
    fn remove(&self, path: &str, recursive: bool) -> BoxFuture<'_, Result<()>> {
        let _ = (path, recursive);
        Box::pin(async { Err(Error::unsupported(UNNAMED_BACKEND, "FILESYSTEM")) })
    }

    /// Copies a host file or directory tree into the sandbox. The default walks the host
    /// tree (never following links) and calls [`BackendSandbox::mkdir`] and
    /// [`BackendSandbox::write`] file by file (so it holds one file in memory at a time);
    /// override it with a bulk transfer (a tar stream, see
    /// [`crate::backends`]' adapters) that keeps client memory flat whatever the size.
    ///
    /// Count the bytes of host file contents sent into `meter` as they go
    /// ([`TransferMeter::add`]; directories, headers and skipped links count nothing):
    /// it feeds the caller's [`Fs::on_progress`](crate::fs::Fs::on_progress). The default
    /// counts each file once it is written.
    fn upload<'a>(
        &'a self,
        host_path: &'a Path,
        path: &'a str,
        meter: TransferMeter,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(crate::transfer::upload_via_primitives(self, host_path, path, meter))
    }

    /// Copies a sandbox file or directory tree to the host, putting at most `budget` bytes
    /// on the host's disk (else [`Error::TooLarge`], with what this download wrote removed).
    /// Rules: nothing is written outside `host_path` nor through a host link; sandbox links
    /// and special files are skipped; existing host directories and files keep their
    /// permissions and owner; new ones get the sandbox's permission bits without
    /// setuid, setgid, sticky or group/world write. The default walks the sandbox tree
    /// with [`BackendSandbox::list`] and [`BackendSandbox::read`] (each file bounded by
    /// what is left of the budget).
    ///
    /// Count the bytes of file contents written on the host into `meter` as they land
    /// ([`TransferMeter::add`]), a hard-link copy included: it feeds the caller's
    /// [`Fs::on_progress`](crate::fs::Fs::on_progress). The default counts each file once it
    /// is on disk.
    fn download<'a>(
        &'a self,
        path: &'a str,
        host_path: &'a Path,
        budget: u64,
        meter: TransferMeter,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(crate::transfer::download_via_primitives(self, path, (host_path, budget), meter))
    }

    /// Destroys the sandbox. Idempotent: a second call returns
    /// [`KillOutcome::AlreadyGone`]. Must work from any thread with no ambient runtime (the
    /// library calls it from `Drop` teardown).
    fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>>;

    /// Lets go of ownership: after this, the sandbox lives until its TTL even if the owner
    /// process dies. Called only when [`Capabilities::DETACH`] is declared.
    fn detach(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Err(Error::unsupported(UNNAMED_BACKEND, "DETACH")) })
    }

    /// Moves the end of the sandbox's life to `ttl` from now (which may shorten it).
    /// Called only when [`Capabilities::EXTEND_TTL`] is declared, with `ttl` already
    /// checked to be non-zero and at most [`MAX_TTL`](crate::builder::MAX_TTL).
    fn extend_ttl(&self, ttl: Duration) -> BoxFuture<'_, Result<()>> {
        let _ = ttl;
        Box::pin(async { Err(Error::unsupported(UNNAMED_BACKEND, "EXTEND_TTL")) })
    }
}

/// What a streamed code cell delivers next.
#[derive(Debug)]
#[non_exhaustive]
pub enum CellEvent {
    /// A chunk of what the cell printed, as it printed it.
    Output(OutputChunk),
    /// The cell ended: its result, with `stdout` and `stderr` empty and
    /// [`CodeResult::streamed`] set (the output went through [`CellEvent::Output`]), or the
    /// error that ended it (an [`Error::ExecutionTimeout`]'s partial output is empty for
    /// the same reason). Nothing follows it.
    Ended(Result<CodeResult>),
}

/// One streamed code cell, from [`BackendSandbox::run_code_stream`]. Dropping it before the
/// cell ended must interrupt the cell.
pub trait BackendCodeStream: Send + fmt::Debug {
    /// The next event: output chunks in the order printed (per stream), then exactly one
    /// [`CellEvent::Ended`]. The core never polls again after `Ended`.
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<CellEvent>;

    /// The budget the cell's rich results are kept within, which [`collect_cell`] shares
    /// for the output it keeps ([`CellStream`] has one). The default, `None`, gives the
    /// collected output a budget of its own
    /// ([`DEFAULT_CELL_OUTPUT_LIMIT`](crate::exec::DEFAULT_CELL_OUTPUT_LIMIT)); the stream then
    /// bounds its results itself.
    fn output_budget(&self) -> Option<OutputBudget> {
        None
    }
}

/// One streamed process. Dropping it must terminate the process.
pub trait BackendExecStream: Send + fmt::Debug {
    /// The next output chunk, `None` once both streams are closed.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>>;

    /// Writes to the process's stdin (needs [`Capabilities::STDIN`]).
    fn write_stdin<'a>(&'a mut self, data: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        let _ = data;
        Box::pin(async { Err(Error::unsupported(UNNAMED_BACKEND, "STDIN")) })
    }

    /// Closes the process's stdin, delivering end-of-file.
    fn close_stdin(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Err(Error::unsupported(UNNAMED_BACKEND, "STDIN")) })
    }

    /// Drains what output is left (discarding it) and returns how the process ended. The
    /// core calls it at most once.
    fn wait(&mut self) -> BoxFuture<'_, Result<ExecResult>>;

    /// Kills the process (and its process tree) if it is still running.
    fn terminate(&mut self) -> BoxFuture<'_, Result<()>>;
}
