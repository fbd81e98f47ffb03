//! `docker://` over sandboxd: the container's main process is sandboxd, spoken to over the
//! container's attach stream (a `connect`ed handle: over an exec of sandboxd, a session of
//! its own). See `docs/adr/0006-sandboxd.md`.
//!
//! - **Placing it**: before the start, the embedded binary is copied to [`SANDBOXD_PATH`]
//!   through the engine's archive API, owned by [`SUPERVISOR_ID`](super::SUPERVISOR_ID) with mode `0555` in
//!   a directory of the same owner and mode: a sandbox user (root included: commands hold no
//!   capability) can neither write nor replace the file, nor add to its directory. An image
//!   that holds this very binary there ([`baked`]) gets no copy. A root user can rename an
//!   uploaded directory away and put another in its place (overlayfs refuses to rename one
//!   that an image layer holds); that only matters to a later `connect`, which starts the
//!   binary at that path (the running sandboxd is not its file).
//! - **The owner link**: the owner attaches to the container before starting it; the
//!   container is `StdinOnce`, so when that connection ends (the owner closed it, or died)
//!   the engine closes sandboxd's stdin, and sandboxd kills everything and exits, which
//!   ends the container (auto-removed). `detach` tells sandboxd first, which then waits for
//!   its TTL (`--ttl-ms`) instead.
//! - **Privileges**: sandboxd runs as root with `CAP_SETUID`, `CAP_SETGID` and `CAP_KILL`
//!   only (to run each command as the sandbox's user with a gid of its own, and to end
//!   them), under `no-new-privileges`; every command runs with no capability at all.
//!
//! This folder: [`place`] (the binary into a created container), [`link`] (an attach or
//! exec connection joined to a session), [`baked`] (images that hold the binary already),
//! [`egress`] (the allowlist's gate directory), and here how a sandbox starts, how a
//! `connect`ed handle joins one, and the operations that go through the session
//! ([`Session`](crate::sandboxd::session::Session)).

pub(super) mod baked;
pub(super) mod egress;
mod link;
mod place;
mod sandbox;

use std::path::PathBuf;
use std::sync::{Arc, PoisonError};

use crate::backend::{BackendExecStream, TransferMeter};
use crate::egress::server::GateServer;
use crate::error::{Error, Result};
use crate::sandboxd::session::{Identity, Session, transfer};
use crate::transfer::StartStream;

use super::SCHEME;
use super::client::provider;
use super::sandbox::Shared;

pub(super) use baked::Baked;
pub(super) use link::Link;
pub(super) use place::{SANDBOXD_DIR, SANDBOXD_PATH, available, place};
pub(super) use sandbox::SandboxdSandbox;

/// The environment commands start with: the image's variables (`K=V`, as the engine
/// reports them), the sandbox's over them.
pub(super) fn merged_env(image: &[String], sandbox: &[(String, String)]) -> Vec<String> {
    let mut env: Vec<String> = image.to_vec();
    for (k, v) in sandbox {
        env.retain(|kv| kv.split_once('=').map_or(kv.as_str(), |(name, _)| name) != k);
        env.push(format!("{k}={v}"));
    }
    env
}

/// `NAME`/value pairs of `K=V` strings, with `PATH` and `HOME` added when missing (as the
/// engine adds them to every exec).
fn env_pairs(env: &[String], home: &str) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> =
        env.iter().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    if !pairs.iter().any(|(k, _)| k == "PATH") {
        pairs.push(("PATH".into(), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()));
    }
    if !pairs.iter().any(|(k, _)| k == "HOME") {
        pairs.push(("HOME".into(), home.to_owned()));
    }
    pairs
}

/// Starts a created sandboxd container: places sandboxd (unless the image holds this very
/// binary), resolves its user against `users` (unless the image recorded it; either way
/// refusing an unasked-for root), attaches the owner link,
/// starts it, sets up the handle's session, and under an allowlist starts the relay to
/// `gate` (which the handle then holds). With `detached`, detaches at once.
pub(super) async fn start(
    shared: &Arc<Shared>,
    env: Vec<String>,
    detached: bool,
    (baked, users): (&Baked, super::users::Source),
    gate: Option<(GateServer, egress::GateDir)>,
) -> Result<()> {
    let docker = &shared.docker;
    let spec = super::users::user_spec(shared.user.as_deref());
    let recorded = baked.user(spec);
    // The owner link exists before the container starts: sandboxd's stdin is this attach
    // connection from its first instant, so an owner dying at any point after the start
    // request leaves a sandboxd that reads end-of-file and ends the container.
    // Three requests the engine answers independently: made at once.
    let (placed, user, attached) = tokio::join!(
        async { if baked.sandboxd { Ok(()) } else { place(docker, &shared.id).await } },
        async {
            match recorded {
                Some(user) => super::users::vet(spec, user, users),
                None => super::users::resolve_user(docker, &shared.id, shared.user.as_deref(), users).await,
            }
        },
        docker.attach_container(&shared.id, Some(super::owner_link::owner_attach())),
    );
    placed?;
    let user = user?;
    let bollard::container::AttachContainerResults { output, input } =
        attached.map_err(|e| provider("attaching to the container", e))?;
    let (link, client) = link::join(input, output, (user.uid, user.gid))?;
    docker.start_container(&shared.id, None).await.map_err(|e| provider("starting the container", e))?;
    link::greet(&client, &link).await?;
    *shared.sandboxd_link.lock().unwrap_or_else(PoisonError::into_inner) = Some(link);
    set_up(shared, client, &user, &env).await?;
    if let Some((server, dir)) = gate {
        let session = shared.session().expect("set up above");
        let relay = crate::sandboxd::session::egress::start_relay(
            session,
            server,
            SANDBOXD_PATH,
            &egress::socket_inside(),
        )
        .await?;
        *shared.egress.lock().unwrap_or_else(PoisonError::into_inner) = Some((relay, dir));
    }
    if detached {
        // The session stays, for this handle's commands; sandboxd outlives it.
        detach(shared.session().expect("set up above")).await?;
        super::sandbox::mark_detached(shared).await?;
        egress::keep_while_running(shared);
    }
    Ok(())
}

/// Joins a running sandboxd container with a session of this handle's own (an exec of
/// sandboxd), its user resolved against `users`: `connect`.
pub(super) async fn join_running(
    shared: &Arc<Shared>,
    env: Vec<String>,
    users: super::users::Source,
) -> Result<()> {
    let user = super::users::resolve_user(&shared.docker, &shared.id, shared.user.as_deref(), users).await?;
    let (link, client) = link::exec_session(&shared.docker, &shared.id, (user.uid, user.gid)).await?;
    *shared.sandboxd_link.lock().unwrap_or_else(PoisonError::into_inner) = Some(link);
    set_up(shared, client, &user, &env).await
}

/// Makes the handle's session and learns what the image offers.
async fn set_up(
    shared: &Arc<Shared>,
    client: crate::sandboxd::client::Client,
    user: &super::users::Resolved,
    env: &[String],
) -> Result<()> {
    let identity = Identity { user: (user.uid, user.gid), command_gids: true, switch_user: true };
    let session = Session::new(
        client,
        SCHEME,
        shared.id.clone(),
        shared.workdir.clone(),
        identity,
        env_pairs(env, &user.home),
        shared.secret_env.clone(),
    );
    let session = Arc::new(session);
    let _ = shared.session.set(Arc::clone(&session));
    let _ = shared.resolved.set((user.uid, user.gid));
    shared.root_user.store(user.uid == 0, std::sync::atomic::Ordering::Release);
    // Code cells keep their error records in /tmp/.sandboxio (see `sandboxd/session/code.rs`); `python3`
    // decides `RUN_CODE`. An image without `sh` has neither (the probe exits 127).
    let probe = crate::exec::Command::new("sh").arg("-c").arg(
        "mkdir -p /tmp/.sandboxio 2>/dev/null; command -v python3 >/dev/null 2>&1 && echo python; exit 0",
    );
    let said = session.run(&probe, false).await?;
    let python = said.success() && said.stdout_lossy().lines().any(|l| l == "python");
    shared.python.store(python, std::sync::atomic::Ordering::Release);
    Ok(())
}

/// Tells sandboxd to outlive this session (until its TTL).
pub(super) async fn detach(session: &Session) -> Result<()> {
    session.client().detach().await.map_err(|why| session.gone_error(&why))
}

/// Starts sandboxio's own commands (the archive scripts) through the session, without the
/// sandbox's secrets.
fn starter(session: &Arc<Session>) -> impl StartStream + '_ {
    move |command| session.stream_piped(&command, false).map(|s| Box::new(s) as Box<dyn BackendExecStream>)
}

/// `upload` through the session: one tar stream into `tar -x` in the sandbox.
pub(super) async fn upload(
    session: Arc<Session>,
    host_path: PathBuf,
    path: String,
    meter: TransferMeter,
) -> Result<()> {
    session.check_alive()?;
    let abs = session.absolute(&path);
    if abs == "/" {
        return Err(Error::invalid_input("upload needs a target path below /"));
    }
    transfer::upload(starter(&session), SCHEME, &host_path, &abs, "/", meter).await
}

/// `download` through the session: one tar stream from `tar -c` in the sandbox.
pub(super) async fn download(
    session: Arc<Session>,
    path: String,
    (host_path, budget): (PathBuf, u64),
    meter: TransferMeter,
) -> Result<()> {
    session.check_alive()?;
    let abs = session.absolute(&path);
    if abs == "/" {
        return Err(Error::invalid_input("download needs a source path below /"));
    }
    // sandboxd sends output only within the host's credit: no pacing needed.
    transfer::download(starter(&session), SCHEME, (&abs, "/"), &host_path, budget, false, meter).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_env_overrides_the_image_env_and_path_and_home_are_always_set() {
        let env = merged_env(
            &["PATH=/p".into(), "A=1".into()],
            &[("A".into(), "2".into()), ("B".into(), "x=y".into())],
        );
        assert_eq!(env, ["PATH=/p", "A=2", "B=x=y"]);
        let pairs = env_pairs(&env, "/home/u");
        assert_eq!(pairs[0], ("PATH".to_owned(), "/p".to_owned()));
        assert_eq!(pairs[2], ("B".to_owned(), "x=y".to_owned()));
        assert_eq!(pairs[3], ("HOME".to_owned(), "/home/u".to_owned()));
        assert!(env_pairs(&[], "/").iter().any(|(k, v)| k == "PATH" && v.contains("/usr/bin")));
    }
}
