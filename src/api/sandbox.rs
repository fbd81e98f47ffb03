//! [`Sandbox`]: a live sandbox and everything that runs in it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::audit::{OperationKind, Outcome};
use crate::backend::{Backend, BackendSandbox, KillOutcome};
use crate::error::{Error, Result};
use crate::exec::{Code, CodeContext, CodeResult, Command, ExecResult};
use crate::inventory::{ReapOptions, ReapReport, SandboxInfo};
use crate::policy::{Capabilities, IsolationTier, NetworkPolicy};
use crate::runtime::{TeardownReport, spawn_teardown};

use super::builder::{IntoBackend, SandboxBuilder};
use super::code_stream::CodeStream;
use super::fs::Fs;
use super::op::OpContext;
use super::stream::ExecStream;

/// A live sandbox.
///
/// The handle returned by `create()` owns the sandbox: [`Sandbox::close`] destroys it and
/// waits; dropping the handle without closing hands the teardown to a library thread (it
/// never blocks and never panics; [`shutdown`](crate::runtime::shutdown) waits for it). A handle from
/// [`Sandbox::connect`], or one given up with [`Sandbox::detach`], does not own the sandbox.
///
/// Methods take `&self`, so one sandbox can run several commands at once.
pub struct Sandbox {
    backend: Arc<dyn Backend>,
    handle: Arc<dyn BackendSandbox>,
    ctx: OpContext,
    owned: bool,
    killed: AtomicBool,
    teardown_grace: Option<std::time::Duration>,
}

impl fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sandbox")
            .field("id", &self.id())
            .field("backend", &self.backend.scheme())
            .field("owned", &self.owned)
            .field("policy", &self.ctx.policy)
            .finish_non_exhaustive()
    }
}

#[sandboxio_macros::blocking_facade]
impl Sandbox {
    /// A builder for a sandbox on the backend named by `dsn` (`"fake://"`, `"docker://"`, …).
    /// Does no I/O.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`]: a malformed DSN, an
    /// unknown scheme, a scheme whose Cargo feature is off, or a bad DSN option.
    ///
    /// # Examples
    ///
    /// ```
    /// use sandboxio::{NetworkPolicy, Sandbox};
    ///
    /// # futures_lite::future::block_on(async {
    /// let sandbox = Sandbox::builder("fake://")?
    ///     .network(NetworkPolicy::deny_all()) // required before `create()`
    ///     .create()
    ///     .await?;
    /// assert_eq!(sandbox.backend(), "fake");
    /// sandbox.close().await?;
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    pub fn builder(dsn: &str) -> Result<SandboxBuilder> {
        Ok(SandboxBuilder::new(crate::dsn::resolve(dsn)?))
    }

    /// What the backend named by `dsn` can offer, before any sandbox exists. Does no I/O.
    ///
    /// An upper bound: a created sandbox's own [`Sandbox::capabilities`] can be narrower
    /// (for example a `docker://` image without `python3` has no `RUN_CODE`). The sets of
    /// the first-party backends are also constants in
    /// [`backends::capabilities`](crate::backends::capabilities), which need no feature.
    ///
    /// ```
    /// use sandboxio::{Sandbox, policy::Capabilities};
    /// let caps = Sandbox::capabilities_of("fake://")?;
    /// assert!(caps.contains(Capabilities::RUN | Capabilities::FILESYSTEM));
    /// # Ok::<(), sandboxio::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`], as
    /// [`Sandbox::builder`]: a malformed DSN, an unknown scheme, a scheme whose Cargo
    /// feature is off in this build (naming the feature), or a bad DSN option.
    pub fn capabilities_of(dsn: &str) -> Result<Capabilities> {
        Ok(crate::dsn::resolve(dsn)?.capabilities())
    }

    /// A builder for a sandbox on a backend value built in code (a
    /// [`FakeBackend`](crate::testing::FakeBackend), a third-party adapter). Does no I/O.
    pub fn builder_with(backend: impl IntoBackend) -> SandboxBuilder {
        SandboxBuilder::new(backend.into_backend())
    }

    /// Attaches to an existing sandbox by id, without owning it: dropping or closing this
    /// handle does not destroy it (call [`Sandbox::kill`] to do that).
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for a bad DSN,
    /// [`Error::CapabilityNotSupported`] if the backend lacks
    /// `CONNECT`, [`Error::Connect`] for an unknown id.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: connecting creates nothing.
    pub async fn connect(dsn: &str, id: &str) -> Result<Sandbox> {
        let backend = crate::dsn::resolve(dsn)?;
        Self::connect_with(backend, id).await
    }

    /// [`Sandbox::connect`] on a backend value built in code.
    ///
    /// # Errors
    ///
    /// As [`Sandbox::connect`], without the DSN errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: connecting creates nothing.
    pub async fn connect_with(backend: impl IntoBackend, id: &str) -> Result<Sandbox> {
        let backend = backend.into_backend();
        let ctx = OpContext {
            backend: Arc::from(backend.scheme()),
            sandbox_id: Some(Arc::from(id)),
            audit: backend.audit(),
            metadata: Arc::new(BTreeMap::new()),
            policy: None,
        };
        let attach = async {
            if !backend.capabilities().contains(Capabilities::CONNECT) {
                return Err(Error::missing_capability(backend.scheme(), Capabilities::CONNECT));
            }
            if id.is_empty() || id.contains('\0') {
                return Err(Error::invalid_input(format!("sandbox id {id:?} is empty or holds a NUL byte")));
            }
            backend.connect(id).await
        };
        let handle = ctx.observe(OperationKind::Connect, attach).await?;
        let ctx = OpContext { metadata: Arc::new(handle.metadata()), policy: handle.network_policy(), ..ctx };
        Ok(Sandbox::from_parts(backend, handle, ctx, false))
    }

    /// The sandboxes of the backend named by `dsn` that this caller can see (this host's
    /// `local://` workspaces, the engine's `docker://` containers, the account's `e2b://`
    /// sandboxes) whose labels hold every pair of `labels` (empty: all of them), including
    /// those past their TTL that no sweep has removed yet. Does not connect to any sandbox.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for a bad DSN; [`Error::CapabilityNotSupported`] when the
    /// backend cannot enumerate its sandboxes; [`Error::Connect`], [`Error::Auth`] or
    /// [`Error::Provider`] when the provider cannot be asked.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: listing changes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use sandboxio::{NetworkPolicy, Sandbox, testing::FakeBackend};
    ///
    /// # futures_lite::future::block_on(async {
    /// let backend = FakeBackend::new();
    /// let sandbox = Sandbox::builder_with(backend.clone())
    ///     .network(NetworkPolicy::deny_all())
    ///     .metadata("team", "search")
    ///     .create()
    ///     .await?;
    /// let wanted = BTreeMap::from([("team".to_owned(), "search".to_owned())]);
    /// let listed = Sandbox::list_with(backend, &wanted).await?;
    /// assert_eq!(listed[0].id, sandbox.id());
    /// # sandbox.close().await })?;
    /// # Ok::<(), sandboxio::Error>(())
    /// ```
    pub async fn list(dsn: &str, labels: &BTreeMap<String, String>) -> Result<Vec<SandboxInfo>> {
        let backend = crate::dsn::resolve(dsn)?;
        Self::list_with(backend, labels).await
    }

    /// [`Sandbox::list`] on a backend value built in code.
    ///
    /// # Errors
    ///
    /// As [`Sandbox::list`], without the DSN errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: listing changes nothing.
    pub async fn list_with(
        backend: impl IntoBackend,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<SandboxInfo>> {
        let backend = backend.into_backend();
        let mut listed = backend.list(labels).await?;
        // The provider filters; checking again keeps a misread filter from widening it.
        listed.retain(|info| info.has_labels(labels));
        Ok(listed)
    }

    /// Sweeps the backend named by `dsn`: removes its sandboxes past their TTL and, with
    /// [`ReapOptions::owner_dead`], the owned (not detached) ones whose owner process on
    /// this host is gone; with [`ReapOptions::dry_run`], removes nothing and reports what it
    /// would remove. A running process never loses its sandboxes to another's sweep.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for a bad DSN; [`Error::CapabilityNotSupported`] when the
    /// backend cannot sweep; [`Error::Connect`] or [`Error::Provider`] when the provider
    /// cannot be listed. A sandbox that vanishes meanwhile is not an error.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the sweep between removals; a removal already started
    /// completes.
    pub async fn reap(dsn: &str, options: ReapOptions) -> Result<ReapReport> {
        let backend = crate::dsn::resolve(dsn)?;
        Self::reap_with(backend, options).await
    }

    /// [`Sandbox::reap`] on a backend value built in code.
    ///
    /// # Errors
    ///
    /// As [`Sandbox::reap`], without the DSN errors.
    ///
    /// # Cancel safety
    ///
    /// As [`Sandbox::reap`].
    pub async fn reap_with(backend: impl IntoBackend, options: ReapOptions) -> Result<ReapReport> {
        backend.into_backend().reap(options).await
    }

    pub(crate) fn from_parts(
        backend: Arc<dyn Backend>,
        handle: Box<dyn BackendSandbox>,
        mut ctx: OpContext,
        owned: bool,
    ) -> Self {
        ctx.sandbox_id = Some(Arc::from(handle.id()));
        Sandbox {
            backend,
            handle: Arc::from(handle),
            ctx,
            owned,
            killed: AtomicBool::new(false),
            teardown_grace: None,
        }
    }

    /// The sandbox id, as [`Sandbox::connect`] takes it.
    #[must_use]
    pub fn id(&self) -> &str {
        self.handle.id()
    }

    /// The backend's DSN scheme, for example `"fake"`.
    #[must_use]
    pub fn backend(&self) -> &str {
        self.backend.scheme()
    }

    /// What this sandbox can do: the backend's declared capabilities, possibly narrowed
    /// after create (an image without `python3` has no `RUN_CODE`).
    #[must_use]
    pub fn capabilities(&self) -> Capabilities {
        self.handle.capabilities()
    }

    /// The backend's isolation tier.
    #[must_use]
    pub fn isolation(&self) -> IsolationTier {
        self.backend.isolation()
    }

    /// The network policy in effect (`None` on a connected handle whose backend does not
    /// report it).
    #[must_use]
    pub fn network_policy(&self) -> Option<&NetworkPolicy> {
        self.ctx.policy.as_ref()
    }

    /// How the network policy is enforced: the mechanisms that decide, whether DNS is
    /// reachable from inside, whether UDP can leave, and whether domain fronting could pass
    /// an allowlist. `None` when the backend does not say (a connected handle that does not
    /// know its policy, a third-party backend that does not report it).
    ///
    /// # Examples
    ///
    /// ```
    /// use sandboxio::{NetworkPolicy, Sandbox, policy::EgressMechanism};
    ///
    /// # futures_lite::future::block_on(async {
    /// let sandbox = sandboxio::testing::sbx_fake().sandbox;
    /// let enforcement = sandbox.network_enforcement().expect("the fake reports it");
    /// assert_eq!(enforcement.mechanisms, [EgressMechanism::Simulated]);
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    #[must_use]
    pub fn network_enforcement(&self) -> Option<crate::policy::NetworkEnforcement> {
        self.handle.network_enforcement()
    }

    /// The metadata labels of the sandbox.
    #[must_use]
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.ctx.metadata
    }

    /// Whether this handle owns the sandbox (destroys it on close or drop).
    #[must_use]
    pub fn is_owner(&self) -> bool {
        self.owned
    }

    pub(crate) fn with_teardown_grace(mut self, grace: Option<std::time::Duration>) -> Self {
        self.teardown_grace = grace;
        self
    }

    pub(crate) fn context(&self) -> &OpContext {
        &self.ctx
    }

    pub(crate) fn backend_handle(&self) -> &dyn BackendSandbox {
        &*self.handle
    }

    /// Refuses a command-level secret where the backend cannot keep it from the sandbox's
    /// other commands (it would sit in a `/proc/<pid>/environ` they can read).
    fn require_command_secrets(&self, command: &Command) -> Result<()> {
        if command.secret_env_vars().is_empty() {
            Ok(())
        } else {
            self.require(Capabilities::COMMAND_SECRETS)
        }
    }

    pub(crate) fn require(&self, capability: Capabilities) -> Result<()> {
        if self.capabilities().contains(capability) {
            return Ok(());
        }
        // A capability the backend has and this sandbox lost says why, when it can.
        match self.handle.narrowed_because(capability) {
            Some(why) => Err(Error::unsupported(
                self.backend.scheme(),
                format!("{} in this sandbox ({why})", capability.names()),
            )),
            None => Err(Error::missing_capability(self.backend.scheme(), capability)),
        }
    }

    /// Runs a command to completion and returns its exit status and output. A non-zero
    /// exit is `Ok`; look at [`ExecResult::status`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a malformed command, including an
    /// argument list the kernel would refuse (see [`Command::validate`]; nothing runs),
    /// [`Error::CapabilityNotSupported`] without `RUN`, or for a
    /// command with [`Command::secret_env`] without `COMMAND_SECRETS` (nothing runs),
    /// [`Error::ExecutionTimeout`] (with the partial output; the
    /// process tree is killed), [`Error::SandboxGone`] when the
    /// sandbox is gone before the call or dies while the command runs (killed through any
    /// handle, expired), [`Error::Provider`].
    ///
    /// A command killed by a signal is `Ok`, with [`ExitStatus::Signal`](crate::ExitStatus)
    /// (never an exit code of 128 + n); one killed for exceeding the memory limit also has
    /// [`ExecResult::oom_killed`] set.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the command's process tree; the sandbox lives on.
    ///
    /// # Examples
    ///
    /// ```
    /// use sandboxio::{Command, ExitStatus};
    ///
    /// # futures_lite::future::block_on(async {
    /// let sandbox = sandboxio::testing::sbx_fake().sandbox;
    /// let out = sandbox.run(Command::new("echo").arg("hello")).await?;
    /// assert_eq!(out.stdout, b"hello\n");
    /// // A failing command is data, not an error.
    /// let failed = sandbox.run(Command::shell("echo oops >&2; exit 3")).await?;
    /// assert_eq!(failed.status, ExitStatus::Code(3));
    /// assert_eq!(failed.stderr, b"oops\n");
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    pub async fn run(&self, command: Command) -> Result<ExecResult> {
        self.ctx
            .observe(OperationKind::Run, async {
                command.validate()?;
                self.require(Capabilities::RUN)?;
                self.require_command_secrets(&command)?;
                let cwd = command.working_dir().map(str::to_owned);
                let result = self.handle.run(command).await;
                result.map_err(|e| cwd_as_written(e, cwd.as_deref()))
            })
            .await
    }

    /// Starts a command and returns its output as a stream, at once: this is not an async
    /// method, and the stream is not a future (it cannot be `.await`ed).
    ///
    /// # Errors
    ///
    /// Returned before any remote work starts:
    /// [`Error::CapabilityNotSupported`] without `STREAM`, or for a
    /// command with [`Command::secret_env`] without `COMMAND_SECRETS`;
    /// [`Error::InvalidInput`] for a malformed command (see
    /// [`Command::validate`]). Later failures arrive as stream items; a sandbox that dies
    /// while the command runs ends the stream with one `Err(SandboxGone)` item (see
    /// [`ExecStream`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::StreamExt;
    /// use sandboxio::{Command, exec::StreamKind};
    ///
    /// # futures_lite::future::block_on(async {
    /// let sandbox = sandboxio::testing::sbx_fake().sandbox;
    /// let mut stream = sandbox.stream(Command::shell("echo one; echo two"))?; // no `.await`
    /// let mut stdout = Vec::new();
    /// while let Some(chunk) = stream.next().await {
    ///     let chunk = chunk?;
    ///     if chunk.stream == StreamKind::Stdout {
    ///         stdout.extend_from_slice(&chunk.data);
    ///     }
    /// }
    /// assert_eq!(stdout, b"one\ntwo\n");
    /// assert!(stream.wait().await?.status.success());
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    pub fn stream(&self, command: Command) -> Result<ExecStream> {
        let guard = self.ctx.start(OperationKind::Stream);
        let started = (|| {
            command.validate()?;
            self.require(Capabilities::STREAM)?;
            self.require_command_secrets(&command)?;
            let cwd = command.working_dir().map(str::to_owned);
            self.handle.stream(command).map_err(|e| cwd_as_written(e, cwd.as_deref()))
        })();
        match started {
            Ok(inner) => {
                // The stream writes the one record of this call when it ends.
                guard.disarm();
                Ok(ExecStream::new(inner, self.capabilities(), self.ctx.clone()))
            }
            Err(e) => {
                let e = self.ctx.named(e);
                guard.finish(Outcome::Error(e.code()));
                Err(e)
            }
        }
    }

    /// Runs a code cell (Python unless [`Code::language`] says otherwise). A cell that fails
    /// to compile or raises is `Ok`, with a non-zero status and [`CodeResult::error`].
    ///
    /// # Errors
    ///
    /// [`Error::CapabilityNotSupported`] without `RUN_CODE`, or with a
    /// context but without `STATEFUL_CODE`; [`Error::ExecutionTimeout`];
    /// [`Error::SandboxGone`]; [`Error::Provider`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future interrupts the cell: a cell in a context kills that context's
    /// interpreter where the backend keeps one (the context is then lost, and says so).
    /// [`Sandbox::run_code_stream`] gives the output as the cell prints it.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let sandbox = sandboxio::testing::sbx_fake().sandbox;
    /// let ok = sandbox.run_code("print(6 * 7)").await?;
    /// assert_eq!(ok.stdout, b"42\n");
    /// // An exception in the cell is data: a non-zero status and a structured error.
    /// let failed = sandbox.run_code("1 / 0").await?;
    /// assert!(!failed.status.success());
    /// assert_eq!(failed.error.map(|e| e.name).as_deref(), Some("ZeroDivisionError"));
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    pub async fn run_code(&self, code: impl Into<Code>) -> Result<CodeResult> {
        let code = code.into();
        self.ctx
            .observe(OperationKind::RunCode, async {
                self.require(Capabilities::RUN_CODE)?;
                if code.context_id().is_some() {
                    self.require(Capabilities::STATEFUL_CODE)?;
                }
                let mut result = self.handle.run_code(code).await?;
                if !self.capabilities().contains(Capabilities::RICH_OUTPUTS) {
                    result.results.clear();
                }
                Ok(result)
            })
            .await
    }

    /// Runs a code cell as [`Sandbox::run_code`] does, and returns its output as the cell
    /// prints it, at once: this is not an async method, and the stream is not a future.
    /// Chunks are [`OutputChunk`](crate::exec::OutputChunk)s, as [`Sandbox::stream`]'s;
    /// [`CodeStream::wait`] then gives the [`CodeResult`] without the output (see
    /// [`CodeStream`]). Dropping the stream interrupts the cell as dropping `run_code`'s
    /// future does (a context's interpreter is killed and the context is lost).
    ///
    /// # Errors
    ///
    /// Returned before any remote work starts:
    /// [`Error::CapabilityNotSupported`] without `RUN_CODE`, or with a context but without
    /// `STATEFUL_CODE`, or from a third-party backend that cannot stream cells
    /// (`RUN_CODE (streamed)`); [`Error::SandboxGone`] when the sandbox is known to be
    /// gone. Later failures arrive as the stream's one `Err` item (see
    /// [`CodeStream::next_chunk`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::StreamExt;
    ///
    /// # futures_lite::future::block_on(async {
    /// let sandbox = sandboxio::testing::sbx_fake().sandbox;
    /// let mut cell = sandbox.run_code_stream("print('one')\nprint('two')\n1 / 0")?; // no `.await`
    /// let mut printed = Vec::new();
    /// while let Some(chunk) = cell.next().await {
    ///     printed.extend_from_slice(&chunk?.data);
    /// }
    /// assert_eq!(printed, b"one\ntwo\n");
    /// // The result carries the status and the error; the output came as chunks.
    /// let result = cell.wait().await?;
    /// assert_eq!(result.error.map(|e| e.name).as_deref(), Some("ZeroDivisionError"));
    /// assert!(result.streamed && result.stdout.is_empty());
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    pub fn run_code_stream(&self, code: impl Into<Code>) -> Result<CodeStream> {
        let code = code.into();
        let guard = self.ctx.start(OperationKind::RunCodeStream);
        let started = (|| {
            self.require(Capabilities::RUN_CODE)?;
            if code.context_id().is_some() {
                self.require(Capabilities::STATEFUL_CODE)?;
            }
            self.handle.run_code_stream(code)
        })();
        match started {
            Ok(inner) => {
                // The stream writes the one record of this call when it ends.
                guard.disarm();
                let rich = self.capabilities().contains(Capabilities::RICH_OUTPUTS);
                Ok(CodeStream::new(inner, rich, self.ctx.clone()))
            }
            Err(e) => {
                let e = self.ctx.named(e);
                guard.finish(Outcome::Error(e.code()));
                Err(e)
            }
        }
    }

    /// Creates a code context for `language` (`"python"`): state set by one cell is seen by
    /// the next cell run [`in`](Code::in_context) it.
    ///
    /// # Errors
    ///
    /// [`Error::CapabilityNotSupported`] without `STATEFUL_CODE`
    /// (sandboxio never emulates contexts), [`Error::SandboxGone`],
    /// [`Error::Provider`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a context abandoned half-made is released with the sandbox.
    pub async fn create_context(&self, language: &str) -> Result<CodeContext> {
        self.ctx
            .observe(OperationKind::CreateContext, async {
                self.require(Capabilities::STATEFUL_CODE)?;
                self.handle.create_context(language).await
            })
            .await
    }

    /// Interrupts the cell running in `context`: Python raises `KeyboardInterrupt` in it,
    /// and the context keeps its state (the interrupted cell's `run_code` returns with that
    /// error). With no cell running, nothing happens.
    ///
    /// # Errors
    ///
    /// [`Error::CapabilityNotSupported`] without `STATEFUL_CODE`;
    /// [`Error::NotFound`] for a context this sandbox does not have;
    /// [`Error::ContextLost`]; [`Error::SandboxGone`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the interrupt is sent at once or not at all.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let sandbox = sandboxio::testing::sbx_fake().sandbox;
    /// let ctx = sandbox.create_context("python").await?;
    /// sandbox.interrupt(&ctx).await?; // no cell is running: nothing happens
    /// # Ok::<(), sandboxio::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn interrupt(&self, context: &CodeContext) -> Result<()> {
        self.ctx
            .observe(OperationKind::Interrupt, async {
                self.require(Capabilities::STATEFUL_CODE)?;
                self.handle.interrupt(&context.id).await
            })
            .await
    }

    /// The sandbox's file system.
    #[must_use]
    pub fn fs(&self) -> Fs<'_> {
        Fs::new(self)
    }

    /// Destroys the sandbox now, whoever owns it. Idempotent: a second call does nothing
    /// and is recorded as a no-op. Works from synchronous code too (`Drop` tears down in
    /// the background; [`crate::runtime::shutdown`] waits for that).
    ///
    /// # Errors
    ///
    /// [`Error::Provider`] or [`Error::Connect`]
    /// if the backend could not destroy it.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the kill may or may not have happened; calling `kill` again
    /// is always safe, and an owned handle's drop still tears the sandbox down.
    ///
    /// # Examples
    ///
    /// ```
    /// use sandboxio::{Command, ErrorCode};
    ///
    /// # futures_lite::future::block_on(async {
    /// let sandbox = sandboxio::testing::sbx_fake().sandbox;
    /// sandbox.kill().await?;
    /// sandbox.kill().await?; // idempotent
    /// let err = sandbox.run(Command::new("true")).await.unwrap_err();
    /// assert_eq!(err.code(), ErrorCode::SandboxGone);
    /// # Ok::<(), sandboxio::Error>(()) }).unwrap();
    /// ```
    pub async fn kill(&self) -> Result<()> {
        self.ctx
            .observe_with(OperationKind::Kill, self.handle.kill(), |o| match o {
                KillOutcome::Killed => Outcome::Ok,
                KillOutcome::AlreadyGone => Outcome::NoOp,
            })
            .await?;
        self.killed.store(true, Ordering::Release);
        Ok(())
    }

    /// Destroys the sandbox and waits for the teardown to finish, consuming the handle. On
    /// a handle that does not own the sandbox (from `connect`), it only lets go of the
    /// handle.
    ///
    /// # Errors
    ///
    /// As [`Sandbox::kill`]. If it fails, the library still tears the sandbox down in the
    /// background.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the teardown goes on in the background.
    pub async fn close(self) -> Result<()> {
        let owned = self.owned;
        let result = self
            .ctx
            .observe(OperationKind::Close, async {
                if owned { self.handle.kill().await.map(drop) } else { Ok(()) }
            })
            .await;
        if result.is_ok() {
            self.killed.store(true, Ordering::Release);
        }
        result
    }

    /// Gives up ownership: the sandbox now lives until its TTL even if this process dies.
    /// Returns the id, for [`Sandbox::connect`] later.
    ///
    /// # Errors
    ///
    /// [`Error::CapabilityNotSupported`] without `DETACH` (the handle
    /// is then dropped as usual, tearing an owned sandbox down);
    /// [`Error::SandboxGone`].
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before the backend confirmed, the owned sandbox is torn down
    /// as on drop.
    pub async fn detach(mut self) -> Result<String> {
        let handle = Arc::clone(&self.handle);
        let caps = self.capabilities();
        let scheme = self.backend.scheme().to_owned();
        self.ctx
            .observe(OperationKind::Detach, async move {
                if !caps.contains(Capabilities::DETACH) {
                    return Err(Error::missing_capability(scheme, Capabilities::DETACH));
                }
                handle.detach().await
            })
            .await?;
        self.owned = false;
        Ok(self.id().to_owned())
    }

    /// Moves the end of the sandbox's life to `ttl` from now, on the provider's side, so
    /// that it holds for a detached sandbox and for other handles too. It may shorten the
    /// TTL as well as lengthen it. An owned sandbox still ends with its owner.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a zero `ttl` or one above [`MAX_TTL`](crate::builder::MAX_TTL);
    /// [`Error::CapabilityNotSupported`] without `EXTEND_TTL` (a backend whose TTL is fixed
    /// when the sandbox starts); [`Error::SandboxGone`] once it is killed or expired;
    /// [`Error::Provider`] when the provider refuses.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the new TTL may or may not be in effect; calling it again
    /// is safe.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # futures_lite::future::block_on(async {
    /// // A fake with every capability (`sbx_fake()` is docker-like: no EXTEND_TTL).
    /// let sandbox = sandboxio::testing::sbx_fake_like("fake").sandbox;
    /// sandbox.extend_ttl(Duration::from_hours(1)).await?;
    /// # sandbox.close().await })?;
    /// # Ok::<(), sandboxio::Error>(())
    /// ```
    pub async fn extend_ttl(&self, ttl: Duration) -> Result<()> {
        let handle = Arc::clone(&self.handle);
        let caps = self.capabilities();
        let scheme = self.backend.scheme().to_owned();
        self.ctx
            .observe(OperationKind::ExtendTtl, async move {
                if !caps.contains(Capabilities::EXTEND_TTL) {
                    return Err(Error::missing_capability(scheme, Capabilities::EXTEND_TTL));
                }
                super::builder::check_ttl(ttl)?;
                handle.extend_ttl(ttl).await
            })
            .await
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if !self.owned || self.killed.load(Ordering::Acquire) {
            return;
        }
        tracing::debug!(sandbox_id = %self.id(), backend = %self.backend.scheme(), "sandbox dropped without close(); tearing it down in the background");
        let handle = Arc::clone(&self.handle);
        let report = TeardownReport {
            audit: self.ctx.audit.clone(),
            template: self.ctx.record_template(OperationKind::DropTeardown),
        };
        spawn_teardown(
            async move {
                match handle.kill().await {
                    Ok(KillOutcome::Killed) => Outcome::Ok,
                    Ok(KillOutcome::AlreadyGone) => Outcome::NoOp,
                    Err(e) => Outcome::Error(e.code()),
                }
            },
            report,
            self.teardown_grace,
        );
    }
}

/// A working-directory error (`NotFound`, `PermissionDenied`) naming the directory as
/// [`Command::cwd`] was given it, whatever form the backend reported.
fn cwd_as_written(e: Error, cwd: Option<&str>) -> Error {
    match cwd {
        Some(cwd) => crate::path::as_written(e, cwd),
        None => e,
    }
}
