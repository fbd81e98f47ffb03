//! The [`BackendSandbox`] of a sandboxd container: every command, stream, code cell and
//! file operation is a request on the handle's [`Session`]; only `kill` and `detach` go
//! to the engine.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::backend::{
    BackendCodeStream, BackendExecStream, BackendSandbox, BoxFuture, KillOutcome, TransferMeter, collect_cell,
};
use crate::error::{Error, Result};
use crate::exec::{Code, CodeContext, CodeResult, Command, ExecResult};
use crate::fs::DirEntry;
use crate::policy::{Capabilities, NetworkPolicy};
use crate::sandboxd::session::Session;

use crate::backends::docker::sandbox::{Shared, kill_detached, mark_detached, on_rt};

/// One sandboxd sandbox handle: its state and its session. The session's requests need no
/// runtime, so they run in the caller's future (no hop to the Docker runtime).
#[derive(Debug)]
pub(crate) struct SandboxdSandbox {
    shared: Arc<Shared>,
    session: Arc<Session>,
}

impl SandboxdSandbox {
    pub(crate) fn new(shared: Arc<Shared>, session: Arc<Session>) -> Self {
        SandboxdSandbox { shared, session }
    }

    /// The absolute path of `path` in the sandbox.
    fn at(&self, path: &str) -> String {
        crate::path::resolve(&self.shared.workdir, path)
    }
}

impl BackendSandbox for SandboxdSandbox {
    fn id(&self) -> &str {
        &self.shared.id
    }

    fn capabilities(&self) -> Capabilities {
        self.shared.capabilities(true)
    }

    fn narrowed_because(&self, capability: Capabilities) -> Option<String> {
        self.shared.narrowed_because(capability, true)
    }

    fn network_policy(&self) -> Option<NetworkPolicy> {
        self.shared.network.clone()
    }

    fn network_enforcement(&self) -> Option<crate::policy::NetworkEnforcement> {
        self.shared.network_enforcement()
    }

    fn metadata(&self) -> BTreeMap<String, String> {
        self.shared.metadata.clone()
    }

    fn run(&self, command: Command) -> BoxFuture<'_, Result<ExecResult>> {
        let session = Arc::clone(&self.session);
        Box::pin(async move { session.run(&command, true).await })
    }

    fn run_code(&self, code: Code) -> BoxFuture<'_, Result<CodeResult>> {
        let stream = self.run_code_stream(code);
        Box::pin(async move { collect_cell(stream?).await })
    }

    fn run_code_stream(&self, code: Code) -> Result<Box<dyn BackendCodeStream>> {
        self.shared.check_alive()?;
        Ok(Box::new(self.session.run_code_stream(code)?))
    }

    fn create_context(&self, language: &str) -> BoxFuture<'_, Result<CodeContext>> {
        let (session, language) = (Arc::clone(&self.session), language.to_owned());
        Box::pin(async move { session.create_context(&language).await })
    }

    fn interrupt(&self, context_id: &str) -> BoxFuture<'_, Result<()>> {
        let result = self.session.interrupt(context_id);
        Box::pin(async move { result })
    }

    fn stream(&self, command: Command) -> Result<Box<dyn BackendExecStream>> {
        self.shared.check_alive()?;
        Ok(Box::new(self.session.stream_piped(&command, true)?))
    }

    fn read(&self, path: &str, limit: u64) -> BoxFuture<'_, Result<Vec<u8>>> {
        let abs = self.at(path);
        Box::pin(async move {
            self.shared.check_alive()?;
            self.session.read_file(&abs, limit).await
        })
    }

    fn write(&self, path: &str, data: Vec<u8>, mode: Option<u32>) -> BoxFuture<'_, Result<()>> {
        let abs = self.at(path);
        Box::pin(async move {
            if abs == "/" {
                return Err(Error::IsADirectory { path: abs });
            }
            self.shared.check_alive()?;
            self.session.write_file(&abs, &data, mode).await
        })
    }

    fn list(&self, path: &str) -> BoxFuture<'_, Result<Vec<DirEntry>>> {
        let abs = self.at(path);
        Box::pin(async move {
            self.shared.check_alive()?;
            self.session.list_dir(&abs).await
        })
    }

    fn mkdir(&self, path: &str) -> BoxFuture<'_, Result<()>> {
        let abs = self.at(path);
        Box::pin(async move {
            self.shared.check_alive()?;
            self.session.make_dir(&abs).await
        })
    }

    fn remove(&self, path: &str, recursive: bool) -> BoxFuture<'_, Result<()>> {
        let abs = self.at(path);
        Box::pin(async move {
            if abs == "/" || abs == self.shared.workdir {
                return Err(Error::PermissionDenied { path: abs });
            }
            self.shared.check_alive()?;
            self.session.remove_path(&abs, recursive).await
        })
    }

    fn upload<'a>(
        &'a self,
        host_path: &'a std::path::Path,
        path: &'a str,
        meter: TransferMeter,
    ) -> BoxFuture<'a, Result<()>> {
        let (host_path, path) = (host_path.to_path_buf(), path.to_owned());
        Box::pin(super::upload(Arc::clone(&self.session), host_path, path, meter))
    }

    fn download<'a>(
        &'a self,
        path: &'a str,
        host_path: &'a std::path::Path,
        budget: u64,
        meter: TransferMeter,
    ) -> BoxFuture<'a, Result<()>> {
        let (host_path, path) = (host_path.to_path_buf(), path.to_owned());
        Box::pin(super::download(Arc::clone(&self.session), path, (host_path, budget), meter))
    }

    fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
        kill_detached(&self.shared)
    }

    fn detach(&self) -> BoxFuture<'_, Result<()>> {
        let session = Arc::clone(&self.session);
        on_rt(&self.shared, move |shared| async move {
            shared.check_alive()?;
            // The session stays: this handle keeps working, and sandboxd now outlives it
            // (its end ends only this handle's commands).
            super::detach(&session).await?;
            mark_detached(&shared).await?;
            super::egress::keep_while_running(&shared);
            Ok(())
        })
    }
}
