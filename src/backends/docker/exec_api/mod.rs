//! The exec-API path of `docker://` ([`ExecPath::ExecApi`](super::ExecPath::ExecApi)):
//! PID 1 is a shell that arms the TTL and reads the owner link; every command, file
//! operation and code cell is an engine exec under a wrapper that marks it with a gid of
//! its own ([`exec`]), streamed ([`stream`]), files as `sh` scripts ([`fs`]), code as one
//! `python3` per cell ([`code`], [`code_runner`]). This module starts such a container,
//! joins one (`connect`), and is its [`BackendSandbox`].

mod code;
mod code_runner;
mod exec;
mod fs;
mod stream;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use crate::backend::{
    BackendCodeStream, BackendExecStream, BackendSandbox, BoxFuture, KillOutcome, TransferMeter, collect_cell,
};
use crate::error::{Error, Result};
use crate::exec::{Code, CodeContext, CodeResult, Command, ExecResult};
use crate::fs::DirEntry;
use crate::policy::{Capabilities, NetworkPolicy};

use super::SCHEME;
use super::client::provider;
use super::container::SUPERVISOR_ID;
use super::owner_link;
use super::sandbox::{Shared, kill_detached, mark_detached, on_rt};
use super::sandboxd_path::Baked;
use super::users;

pub(super) use exec::GID_RANGE;

/// Starts a created exec-API container: resolves its user against a template's base files
/// (unless the image recorded it), attaches the owner link, starts it, checks the image
/// can host a sandbox, and with `detached` detaches at once.
pub(super) async fn start(
    shared: &Arc<Shared>,
    image: &str,
    (baked, users): (&Baked, users::Source),
    detached: bool,
) -> Result<()> {
    if users == users::Source::TemplateBase {
        // Every exec, the first included, runs as the numbers the base's files give: the
        // engine would otherwise look the name up in the template's own /etc/passwd.
        let spec = users::user_spec(shared.user.as_deref());
        let resolved = match baked.user(spec) {
            Some(recorded) => users::vet(spec, recorded, users)?,
            None => users::resolve_user(&shared.docker, &shared.id, shared.user.as_deref(), users).await?,
        };
        let _ = shared.resolved.set((resolved.uid, resolved.gid));
    }
    // The owner link exists before the container starts: PID 1's stdin is this attach
    // connection from its first instant, so an owner dying at any point after the start
    // request leaves a PID 1 that reads end-of-file and ends the container.
    let bollard::container::AttachContainerResults { output, input } = shared
        .docker
        .attach_container(&shared.id, Some(owner_link::owner_attach()))
        .await
        .map_err(|e| provider("attaching to the container", e))?;
    shared
        .docker
        .start_container(&shared.id, None)
        .await
        .map_err(|e| provider("starting the container", e))?;
    // Hold the link from here on: failing below drops it, and the guard removes the
    // container. (PID 1 says nothing at start: the engine may attach its output a moment
    // after the start, so the readiness check is an exec.)
    *shared.owner_link.lock().unwrap_or_else(PoisonError::into_inner) =
        Some(owner_link::spawn_link(input, output));
    prepare(shared, image, users).await?;
    if detached {
        owner_link::send_detach(shared).await?;
        shared.release_link();
        mark_detached(shared).await?;
    }
    Ok(())
}

/// Joins a running exec-API container (`connect`): its user resolved against `users`, then
/// the same checks as at `create`.
pub(super) async fn join_running(shared: &Arc<Shared>, image: &str, users: users::Source) -> Result<()> {
    if users == users::Source::TemplateBase {
        let resolved = users::resolve_user(&shared.docker, &shared.id, shared.user.as_deref(), users).await?;
        let _ = shared.resolved.set((resolved.uid, resolved.gid));
    }
    prepare(shared, image, users).await
}

fn setup_failed(image: &str, stderr: &[u8]) -> Error {
    Error::configuration(format!(
        "image {image:?} cannot host a sandbox: it needs sh, sleep, mkdir, chmod and a writable /tmp ({})",
        String::from_utf8_lossy(stderr).trim()
    ))
}

/// Checks that the image runs a sandbox user's `sh` as a uid the user may have (root only
/// when asked for, [`users::refuse_unasked_root`]; `users` names the files it was resolved
/// against) and finds out whether it has `python3`.
async fn prepare(shared: &Arc<Shared>, image: &str, users: users::Source) -> Result<()> {
    let (code, stdout, stderr) = exec::run_raw(shared, &["sh", "-c", PREPARE]).await?;
    if code != 0 {
        return Err(setup_failed(image, &stderr));
    }
    let said = String::from_utf8_lossy(&stdout);
    shared.python.store(said.lines().any(|l| l == "python"), Ordering::Release);
    // Without `id`, assume root: the cautious side (see `Shared::root_user`).
    let number =
        |key: &str| said.lines().find_map(|l| l.strip_prefix(key)).and_then(|u| u.trim().parse::<u32>().ok());
    let (uid, gid) = (number("uid="), number("gid="));
    if uid == Some(SUPERVISOR_ID) || gid == Some(SUPERVISOR_ID) {
        return Err(Error::configuration(format!(
            "the sandbox user of image {image:?} has uid {SUPERVISOR_ID}, sandboxio's own supervisor id in docker:// containers; choose another user"
        )));
    }
    if let Some(uid) = uid {
        users::refuse_unasked_root(users::user_spec(shared.user.as_deref()), uid, users)?;
    }
    shared.root_user.store(uid.is_none_or(|u| u == 0), Ordering::Release);
    // From here on every exec runs as the numbers: a root user that maps its name to the
    // supervisor's uid in /etc/passwd would otherwise become it at the next exec.
    // (An image without `id` keeps the name, and its user counts as root.)
    if let (Some(uid), Some(gid)) = (uid, gid) {
        let _ = shared.resolved.set((uid, gid));
    }
    Ok(())
}

/// Waits (5 s at most) for PID 1 to have prepared `/tmp/.sandboxio`, then prints the sandbox
/// user's uid and whether the image has `python3`.
const PREPARE: &str = r"i=0; while [ ! -d /tmp/.sandboxio ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
echo uid=$(id -u); echo gid=$(id -g); command -v python3 >/dev/null 2>&1 && echo python; exit 0";

/// One exec-API sandbox handle.
#[derive(Debug)]
pub(super) struct ExecApiSandbox {
    shared: Arc<Shared>,
}

impl ExecApiSandbox {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        ExecApiSandbox { shared }
    }
}

impl BackendSandbox for ExecApiSandbox {
    fn id(&self) -> &str {
        &self.shared.id
    }

    fn capabilities(&self) -> Capabilities {
        // Code contexts and rich results need sandboxd's runner.
        self.shared.capabilities(false)
    }

    fn narrowed_because(&self, capability: Capabilities) -> Option<String> {
        self.shared.narrowed_because(capability, false)
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
        on_rt(&self.shared, move |shared| exec::run(shared, command))
    }

    fn run_code(&self, code: Code) -> BoxFuture<'_, Result<CodeResult>> {
        let stream = self.run_code_stream(code);
        Box::pin(async move { collect_cell(stream?).await })
    }

    fn run_code_stream(&self, code: Code) -> Result<Box<dyn BackendCodeStream>> {
        self.shared.check_alive()?;
        Ok(Box::new(code::run_code_stream(&self.shared, &code)?))
    }

    fn create_context(&self, _language: &str) -> BoxFuture<'_, Result<CodeContext>> {
        Box::pin(async { Err(Error::missing_capability(SCHEME, Capabilities::STATEFUL_CODE)) })
    }

    fn interrupt(&self, _context_id: &str) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Err(Error::missing_capability(SCHEME, Capabilities::STATEFUL_CODE)) })
    }

    fn stream(&self, command: Command) -> Result<Box<dyn BackendExecStream>> {
        self.shared.check_alive()?;
        Ok(Box::new(stream::DockerExecStream::start(&self.shared, command)))
    }

    fn read(&self, path: &str, limit: u64) -> BoxFuture<'_, Result<Vec<u8>>> {
        let path = path.to_owned();
        on_rt(&self.shared, move |shared| async move { fs::read(&shared, &path, limit).await })
    }

    fn write(&self, path: &str, data: Vec<u8>, mode: Option<u32>) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        on_rt(&self.shared, move |shared| async move { fs::write(&shared, &path, data, mode).await })
    }

    fn list(&self, path: &str) -> BoxFuture<'_, Result<Vec<DirEntry>>> {
        let path = path.to_owned();
        on_rt(&self.shared, move |shared| async move { fs::list(&shared, &path).await })
    }

    fn mkdir(&self, path: &str) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        on_rt(&self.shared, move |shared| async move { fs::mkdir(&shared, &path).await })
    }

    fn remove(&self, path: &str, recursive: bool) -> BoxFuture<'_, Result<()>> {
        let path = path.to_owned();
        on_rt(&self.shared, move |shared| async move { fs::remove(&shared, &path, recursive).await })
    }

    fn upload<'a>(
        &'a self,
        host_path: &'a std::path::Path,
        path: &'a str,
        meter: TransferMeter,
    ) -> BoxFuture<'a, Result<()>> {
        let (host_path, path) = (host_path.to_path_buf(), path.to_owned());
        on_rt(&self.shared, move |shared| async move { fs::upload(&shared, host_path, &path, &meter).await })
    }

    fn download<'a>(
        &'a self,
        path: &'a str,
        host_path: &'a std::path::Path,
        budget: u64,
        meter: TransferMeter,
    ) -> BoxFuture<'a, Result<()>> {
        let (host_path, path) = (host_path.to_path_buf(), path.to_owned());
        on_rt(&self.shared, move |shared| async move {
            fs::download(&shared, &path, host_path, budget, meter).await
        })
    }

    fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
        kill_detached(&self.shared)
    }

    fn detach(&self) -> BoxFuture<'_, Result<()>> {
        on_rt(&self.shared, move |shared| async move {
            shared.check_alive()?;
            // Tell PID 1 first: releasing the link while it waits for the owner would end it.
            owner_link::send_detach(&shared).await?;
            shared.release_link();
            mark_detached(&shared).await
        })
    }
}
