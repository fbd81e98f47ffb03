//! [`Facade`]: which of sandboxio's two APIs the contract tests drive, and the suite's
//! internal wrappers that let one test body run through either.
//!
//! Each wrapper is an enum over an async handle and its blocking twin in
//! [`crate::sync`], with `async` methods that either await the async call or make the
//! blocking one. A test runs on its own thread under the suite's executor, so a blocking
//! call inside it only blocks that test. Under [`Facade::Blocking`] no sandbox operation of
//! a test goes through the async API: creating (builder setters included), running,
//! streaming (stdin, iteration through `Iterator::next`, dropping), code cells (streamed too),
//! contexts,
//! files, kill, close, detach and connect all call `sandboxio::sync`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::Backend;
use crate::builder::state::{
    LimitsNotChosen, LimitsSet, LimitsUnset, NetworkChosen, NetworkNotChosen, NetworkSet, NetworkUnset,
};
use crate::{
    Code, CodeResult, Command, ExecResult, NetworkPolicy, ResourceLimits, Result,
    exec::{CodeContext, OutputChunk},
    fs::DirEntry,
    policy::IsolationTier,
    secret::SecretString,
    sync,
};

/// Which API the contract tests drive ([`ContractSuite::facade`](super::ContractSuite::facade)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Facade {
    /// The async API at the crate root, each test's future run by the suite's executor.
    /// The default.
    #[default]
    Async,
    /// The blocking facade, [`sandboxio::sync`](crate::sync): every operation a test
    /// performs on a sandbox (the builder and `create()`, `run`, `stream` with its stdin,
    /// iteration and drop, `run_code`, `create_context`, every `fs()` call, `kill`,
    /// `close`, `detach`, `connect`, `shutdown`) is the blocking call. Tests of async-only
    /// behaviour (cancellation by dropping a future at its k-th poll) are reported `n/a`
    /// with the reason, and listed in the summary; they never pass.
    Blocking,
}

impl Facade {
    /// `sandboxio::runtime::shutdown` or `sandboxio::sync::shutdown`.
    pub(crate) async fn shutdown(self, deadline: Duration) -> usize {
        match self {
            Facade::Async => crate::runtime::shutdown(deadline).await,
            Facade::Blocking => sync::shutdown(deadline),
        }
    }

    /// `Sandbox::connect_with` or `sync::Sandbox::connect_with`.
    pub(crate) async fn connect(self, backend: Arc<dyn Backend>, id: &str) -> Result<AnySandbox> {
        match self {
            Facade::Async => crate::Sandbox::connect_with(backend, id).await.map(AnySandbox::Async),
            Facade::Blocking => sync::Sandbox::connect_with(backend, id).map(AnySandbox::Blocking),
        }
    }

    /// `Sandbox::builder_with` or `sync::Sandbox::builder_with`.
    /// `Sandbox::list_with` or `sync::Sandbox::list_with`.
    pub(crate) async fn list(
        self,
        backend: Arc<dyn Backend>,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> Result<Vec<crate::inventory::SandboxInfo>> {
        match self {
            Facade::Async => crate::Sandbox::list_with(backend, labels).await,
            Facade::Blocking => sync::Sandbox::list_with(backend, labels),
        }
    }

    pub(crate) fn builder(self, backend: Arc<dyn Backend>) -> AnyBuilder {
        match self {
            Facade::Async => AnyBuilder::Async(crate::Sandbox::builder_with(backend)),
            Facade::Blocking => AnyBuilder::Blocking(sync::Sandbox::builder_with(backend)),
        }
    }
}

/// A [`crate::SandboxBuilder`] or a [`sync::SandboxBuilder`], with the same typestate.
#[derive(Debug)]
pub(crate) enum AnyBuilder<N = NetworkUnset, L = LimitsUnset> {
    Async(crate::SandboxBuilder<N, L>),
    Blocking(sync::SandboxBuilder<N, L>),
}

/// Setters that keep the builder's state: the same call on either builder.
macro_rules! setters {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        pub(crate) fn $name(self, $($arg: $ty),*) -> Self {
            match self {
                AnyBuilder::Async(b) => AnyBuilder::Async(b.$name($($arg),*)),
                AnyBuilder::Blocking(b) => AnyBuilder::Blocking(b.$name($($arg),*)),
            }
        }
    )*};
}

impl<N, L> AnyBuilder<N, L> {
    setters! {
        require_isolation(tier: IsolationTier);
        metadata(key: impl Into<String>, value: impl Into<String>);
        env(name: impl Into<String>, value: impl Into<String>);
        secret_env(name: impl Into<String>, value: impl Into<SecretString>);
        ttl(ttl: Duration);
        create_timeout(timeout: Duration);
        detached(detached: bool);
        teardown_grace(grace: Duration);
        image(image: impl Into<String>);
        template(template: impl Into<String>);
    }

    pub(crate) fn network(self, policy: NetworkPolicy) -> AnyBuilder<NetworkSet, L>
    where
        N: NetworkNotChosen,
    {
        match self {
            AnyBuilder::Async(b) => AnyBuilder::Async(b.network(policy)),
            AnyBuilder::Blocking(b) => AnyBuilder::Blocking(b.network(policy)),
        }
    }

    pub(crate) fn limits(self, limits: ResourceLimits) -> AnyBuilder<N, LimitsSet>
    where
        L: LimitsNotChosen,
    {
        match self {
            AnyBuilder::Async(b) => AnyBuilder::Async(b.limits(limits)),
            AnyBuilder::Blocking(b) => AnyBuilder::Blocking(b.limits(limits)),
        }
    }

    pub(crate) async fn create(self) -> Result<AnySandbox>
    where
        N: NetworkChosen,
    {
        match self {
            AnyBuilder::Async(b) => b.create().await.map(AnySandbox::Async),
            AnyBuilder::Blocking(b) => b.create().map(AnySandbox::Blocking),
        }
    }
}

impl AnyBuilder {
    /// Passes the builder through a hook typed on the async builder (the public
    /// [`Probes::configure`](super::Probes::configure)), which only sets options.
    pub(crate) fn configure(
        self,
        hook: impl FnOnce(crate::SandboxBuilder) -> crate::SandboxBuilder,
    ) -> AnyBuilder {
        match self {
            AnyBuilder::Async(b) => AnyBuilder::Async(hook(b)),
            AnyBuilder::Blocking(b) => AnyBuilder::Blocking(sync::SandboxBuilder::from(hook(b.inner))),
        }
    }
}

/// A [`crate::Sandbox`] or a [`sync::Sandbox`].
pub(crate) enum AnySandbox {
    Async(crate::Sandbox),
    Blocking(sync::Sandbox),
}

impl std::fmt::Debug for AnySandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnySandbox::Async(s) => s.fmt(f),
            AnySandbox::Blocking(s) => s.fmt(f),
        }
    }
}

impl AnySandbox {
    pub(crate) fn id(&self) -> &str {
        match self {
            AnySandbox::Async(s) => s.id(),
            AnySandbox::Blocking(s) => s.id(),
        }
    }

    pub(crate) fn is_owner(&self) -> bool {
        match self {
            AnySandbox::Async(s) => s.is_owner(),
            AnySandbox::Blocking(s) => s.is_owner(),
        }
    }

    pub(crate) fn network_policy(&self) -> Option<&crate::NetworkPolicy> {
        match self {
            AnySandbox::Async(s) => s.network_policy(),
            AnySandbox::Blocking(s) => s.network_policy(),
        }
    }

    pub(crate) fn network_enforcement(&self) -> Option<crate::policy::NetworkEnforcement> {
        match self {
            AnySandbox::Async(s) => s.network_enforcement(),
            AnySandbox::Blocking(s) => s.network_enforcement(),
        }
    }

    pub(crate) async fn run(&self, command: Command) -> Result<ExecResult> {
        match self {
            AnySandbox::Async(s) => s.run(command).await,
            AnySandbox::Blocking(s) => s.run(command),
        }
    }

    pub(crate) fn stream(&self, command: Command) -> Result<AnyStream> {
        match self {
            AnySandbox::Async(s) => s.stream(command).map(AnyStream::Async),
            AnySandbox::Blocking(s) => s.stream(command).map(AnyStream::Blocking),
        }
    }

    pub(crate) async fn run_code(&self, code: impl Into<Code>) -> Result<CodeResult> {
        match self {
            AnySandbox::Async(s) => s.run_code(code).await,
            AnySandbox::Blocking(s) => s.run_code(code),
        }
    }

    pub(crate) fn run_code_stream(&self, code: impl Into<Code>) -> Result<AnyCodeStream> {
        match self {
            AnySandbox::Async(s) => s.run_code_stream(code).map(AnyCodeStream::Async),
            AnySandbox::Blocking(s) => s.run_code_stream(code).map(AnyCodeStream::Blocking),
        }
    }

    pub(crate) async fn create_context(&self, language: &str) -> Result<CodeContext> {
        match self {
            AnySandbox::Async(s) => s.create_context(language).await,
            AnySandbox::Blocking(s) => s.create_context(language),
        }
    }

    pub(crate) fn fs(&self) -> AnyFs<'_> {
        match self {
            AnySandbox::Async(s) => AnyFs::Async(s.fs()),
            AnySandbox::Blocking(s) => AnyFs::Blocking(s.fs()),
        }
    }

    pub(crate) async fn kill(&self) -> Result<()> {
        match self {
            AnySandbox::Async(s) => s.kill().await,
            AnySandbox::Blocking(s) => s.kill(),
        }
    }

    pub(crate) async fn close(self) -> Result<()> {
        match self {
            AnySandbox::Async(s) => s.close().await,
            AnySandbox::Blocking(s) => s.close(),
        }
    }

    pub(crate) async fn detach(self) -> Result<String> {
        match self {
            AnySandbox::Async(s) => s.detach().await,
            AnySandbox::Blocking(s) => s.detach(),
        }
    }

    pub(crate) async fn extend_ttl(&self, ttl: Duration) -> Result<()> {
        match self {
            AnySandbox::Async(s) => s.extend_ttl(ttl).await,
            AnySandbox::Blocking(s) => s.extend_ttl(ttl),
        }
    }
}

/// A [`crate::exec::ExecStream`] or a [`sync::ExecStream`] (an [`Iterator`]).
pub(crate) enum AnyStream {
    Async(crate::exec::ExecStream),
    Blocking(sync::ExecStream),
}

impl AnyStream {
    /// The next chunk: `next_chunk().await`, or `Iterator::next` on the blocking stream.
    pub(crate) async fn next_chunk(&mut self) -> Option<Result<OutputChunk>> {
        match self {
            AnyStream::Async(s) => s.next_chunk().await,
            AnyStream::Blocking(s) => s.next(),
        }
    }

    pub(crate) async fn write_stdin(&mut self, data: impl AsRef<[u8]>) -> Result<()> {
        match self {
            AnyStream::Async(s) => s.write_stdin(data).await,
            AnyStream::Blocking(s) => s.write_stdin(data),
        }
    }

    pub(crate) async fn close_stdin(&mut self) -> Result<()> {
        match self {
            AnyStream::Async(s) => s.close_stdin().await,
            AnyStream::Blocking(s) => s.close_stdin(),
        }
    }

    pub(crate) async fn wait(&mut self) -> Result<ExecResult> {
        match self {
            AnyStream::Async(s) => s.wait().await,
            AnyStream::Blocking(s) => s.wait(),
        }
    }
}

/// A [`crate::exec::CodeStream`] or a [`sync::CodeStream`] (an [`Iterator`]).
pub(crate) enum AnyCodeStream {
    Async(crate::exec::CodeStream),
    Blocking(sync::CodeStream),
}

impl AnyCodeStream {
    /// The next chunk: `next_chunk().await`, or `Iterator::next` on the blocking stream.
    pub(crate) async fn next_chunk(&mut self) -> Option<Result<OutputChunk>> {
        match self {
            AnyCodeStream::Async(s) => s.next_chunk().await,
            AnyCodeStream::Blocking(s) => s.next(),
        }
    }

    pub(crate) async fn wait(&mut self) -> Result<CodeResult> {
        match self {
            AnyCodeStream::Async(s) => s.wait().await,
            AnyCodeStream::Blocking(s) => s.wait(),
        }
    }
}

/// A [`crate::fs::Fs`] or a [`sync::Fs`].
#[derive(Clone, Copy)]
pub(crate) enum AnyFs<'a> {
    Async(crate::fs::Fs<'a>),
    Blocking(sync::Fs<'a>),
}

impl AnyFs<'_> {
    /// The same file system with another read limit (`Fs::read_limit`).
    pub(crate) fn read_limit(self, bytes: u64) -> Self {
        match self {
            AnyFs::Async(fs) => AnyFs::Async(fs.read_limit(bytes)),
            AnyFs::Blocking(fs) => AnyFs::Blocking(fs.read_limit(bytes)),
        }
    }

    /// The same file system with another download budget (`Fs::download_limit`).
    pub(crate) fn download_limit(self, bytes: u64) -> Self {
        match self {
            AnyFs::Async(fs) => AnyFs::Async(fs.download_limit(bytes)),
            AnyFs::Blocking(fs) => AnyFs::Blocking(fs.download_limit(bytes)),
        }
    }

    pub(crate) async fn read(&self, path: &str) -> Result<Vec<u8>> {
        match self {
            AnyFs::Async(fs) => fs.read(path).await,
            AnyFs::Blocking(fs) => fs.read(path),
        }
    }

    pub(crate) async fn read_text(&self, path: &str) -> Result<String> {
        match self {
            AnyFs::Async(fs) => fs.read_text(path).await,
            AnyFs::Blocking(fs) => fs.read_text(path),
        }
    }

    pub(crate) async fn write(&self, path: &str, data: impl Into<Vec<u8>>) -> Result<()> {
        match self {
            AnyFs::Async(fs) => fs.write(path, data).await,
            AnyFs::Blocking(fs) => fs.write(path, data),
        }
    }

    pub(crate) async fn upload(&self, host_path: impl AsRef<Path>, path: &str) -> Result<()> {
        match self {
            AnyFs::Async(fs) => fs.upload(host_path, path).await,
            AnyFs::Blocking(fs) => fs.upload(host_path, path),
        }
    }

    pub(crate) async fn download(&self, path: &str, host_path: impl AsRef<Path>) -> Result<()> {
        match self {
            AnyFs::Async(fs) => fs.download(path, host_path).await,
            AnyFs::Blocking(fs) => fs.download(path, host_path),
        }
    }

    pub(crate) async fn list(&self, path: &str) -> Result<Vec<DirEntry>> {
        match self {
            AnyFs::Async(fs) => fs.list(path).await,
            AnyFs::Blocking(fs) => fs.list(path),
        }
    }

    pub(crate) async fn mkdir(&self, path: &str) -> Result<()> {
        match self {
            AnyFs::Async(fs) => fs.mkdir(path).await,
            AnyFs::Blocking(fs) => fs.mkdir(path),
        }
    }

    pub(crate) async fn remove(&self, path: &str, recursive: bool) -> Result<()> {
        match self {
            AnyFs::Async(fs) => fs.remove(path, recursive).await,
            AnyFs::Blocking(fs) => fs.remove(path, recursive),
        }
    }
}
