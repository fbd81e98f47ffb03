//! `create` and `connect` on `local://`: the workspace and its record, the seccomp filter
//! and sandboxd's binary (once per process), the sandbox's one `bwrap` with sandboxd as its
//! init (`launch.rs`, `session/`), the egress gate under an allowlist, and the handle's
//! [`State`]; or, for `connect`, a session over the sandbox's socket.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::backend::CreateSpec;
use crate::error::{Error, Result};
use crate::policy::NetworkPolicy;
use crate::sandboxd::session::{Identity, Session, egress};

use super::backend::LocalBackend;
use super::dirs::{self, remove_sandbox_dir, run_as};
use super::sandbox::{LocalSandbox, State, keep_egress_while_running, start_ttl_timer};
use super::{PATH, SCHEME, WORKDIR, launch, record, seccomp, session};

impl LocalBackend {
    /// The sandbox's session over `client`: commands run as sandboxd does (the user namespace maps one uid
    /// and one gid, so sandboxd could not switch), with `PATH`, `HOME` and the sandbox's
    /// variables.
    fn open_session(
        id: &str,
        client: crate::sandboxd::client::Client,
        network: Option<&NetworkPolicy>,
        spec: Option<&CreateSpec>,
    ) -> Arc<Session> {
        let identity = Identity { user: Self::sandbox_user(), command_gids: false, switch_user: false };
        let mut env = vec![("PATH".to_owned(), PATH.to_owned()), ("HOME".to_owned(), WORKDIR.to_owned())];
        let mut secrets = Vec::new();
        if matches!(network, Some(NetworkPolicy::Allowlist(_))) {
            // Before the sandbox's own variables, which may set their own proxy.
            env.extend(egress::proxy_env());
        }
        if let Some(spec) = spec {
            env.extend(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
            secrets.extend(spec.secret_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        Arc::new(Session::new(client, SCHEME, id.to_owned(), WORKDIR.to_owned(), identity, env, secrets))
    }

    pub(super) async fn create_sandbox(&self, spec: CreateSpec) -> Result<LocalSandbox> {
        if !self.inner.bwrap.is_file() {
            return Err(launch::spawn_error(&self.inner.bwrap, std::io::ErrorKind::NotFound.into()));
        }
        // Unguessable, and without the owner's pid.
        let id = format!("local-{}", dirs::random_hex());
        let dir = self.inner.root.join(&id);
        let started = Instant::now();
        let timeout = spec.create_timeout;
        let (root, made_dir) = (self.inner.root.clone(), dir.clone());
        let made = crate::runtime::unblock(move || {
            dirs::ensure_private_root(&root)?;
            dirs::make_sandbox_dir(&made_dir)
                .map_err(|e| Error::provider(SCHEME, "cannot create the workspace", e))
        });
        let bounded = futures_lite::future::or(async { Some(made.await) }, async {
            futures_timer::Delay::new(crate::duration::saturate(timeout)).await;
            None
        });
        // A dropped or failed `create()` leaves no directory behind.
        let dir_guard = Undo::new(dir.clone(), |dir: PathBuf| remove_sandbox_dir(&dir));
        match bounded.await {
            // Creation that finished but took longer than allowed is a timeout too.
            Some(made) if started.elapsed() <= timeout => made?,
            _ => return Err(Error::CreateTimeout { timeout }),
        }
        record::write_record(&dir, &spec)?;
        if self.inner.seccomp.get().is_none() {
            let root = self.inner.root.clone();
            let filter = crate::runtime::unblock(move || seccomp::install(&root)).await?;
            drop(self.inner.seccomp.set(filter));
        }
        let root = self.inner.root.clone();
        let sandboxd = crate::runtime::unblock(move || session::installed_binary(&root)).await?;
        let listen = session::bind_socket(&dir)
            .map_err(|e| Error::provider(SCHEME, "cannot make sandboxd's socket", e))?;
        let launch = launch::Launch {
            bwrap: &self.inner.bwrap,
            seccomp: self.inner.seccomp.get().and_then(Option::as_deref),
            run_as: run_as(),
            dir: &dir,
            sandboxd: &sandboxd,
            listen: &listen,
            network: &spec.network,
            ttl: spec.ttl,
        };
        // The gate listens before the sandbox starts: its socket is in the `run` directory
        // bound into it. A failed `create()` drops it (and its socket) here.
        let gate = match &spec.network {
            NetworkPolicy::Allowlist(_) => Some(egress::serve_gate(
                &dir.join("run").join(egress::SOCKET),
                SCHEME,
                &id,
                &spec,
                &self.inner.resolver,
            )?),
            _ => None,
        };
        let left = timeout.saturating_sub(started.elapsed());
        let started = session::start(&launch, left).await?;
        // sandboxd holds the socket now; the host keeps no copy (see `session::start`).
        drop(listen);
        let state = Arc::new(State {
            id: id.clone(),
            dir: dir.clone(),
            metadata: spec.metadata.clone(),
            network: Some(spec.network.clone()),
            config: format!("{spec:?}"),
            expires: crate::duration::after(Instant::now(), spec.ttl),
            expired_early: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            session: Self::open_session(&id, started.client, Some(&spec.network), Some(&spec)),
            link: started.link,
            pid_namespace: launch::pid_namespace(started.sandboxd.pid),
            bwrap: Mutex::new(Some(started.bwrap)),
            sandboxd: started.sandboxd,
            egress: Mutex::new(None),
            ttl: Mutex::new(None),
        });
        // From here a dropped `create()` destroys the sandbox (and its directory).
        let guard = Undo::new(Arc::clone(&state), |state: Arc<State>| {
            let _ = state.destroy("its creation was abandoned");
        });
        dir_guard.disarm();
        if let Some(gate) = gate {
            let started = egress::start_relay(
                &state.session,
                gate,
                launch::SANDBOXD_PATH,
                &format!("{}/{}", launch::RUN_DIR, egress::SOCKET),
            )
            .await?;
            *state.egress.lock().unwrap_or_else(PoisonError::into_inner) = Some(started);
        }
        let recorded = record::set(&dir, "sandboxd", &state.sandboxd.label())
            .and_then(|()| record::set(&dir, "network", &egress::policy_label(&spec.network)));
        recorded.map_err(|e| Error::provider(SCHEME, "cannot record the sandbox", e))?;
        if spec.detached {
            state.session.client().detach().await.map_err(|why| state.session.gone_error(&why))?;
            keep_egress_while_running(&state);
        }
        guard.disarm();
        self.sandboxes().insert(id, Arc::clone(&state));
        start_ttl_timer(&state);
        Ok(LocalSandbox { backend: self.clone(), state })
    }

    pub(super) async fn connect_sandbox(&self, id: &str) -> Result<LocalSandbox> {
        let unknown = || Error::connect(SCHEME, format!("no sandbox {id}"));
        let well_formed = id
            .strip_prefix("local-")
            .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
        if !well_formed {
            return Err(unknown());
        }
        let dir = self.inner.root.join(id);
        let text = record::read(&dir).ok_or_else(unknown)?;
        let gone = |message: &str| Error::SandboxGone { id: id.to_owned(), message: message.to_owned() };
        if record::expired(&text) {
            return Err(gone("its TTL expired"));
        }
        let sandboxd = record::sandboxd(&text).ok_or_else(unknown)?;
        if sandboxd.is_dead_here() != Some(false) {
            return Err(gone("its sandboxd is not running"));
        }
        let (client, link) = session::connect(id, &dir, &sandboxd).await?;
        // Recorded at create (sandboxes from before the record line: unknown).
        let network = record::field(&text, "network").and_then(egress::policy_of_label);
        let ttl_left = record::field(&text, "expires")
            .and_then(|e| e.parse::<u64>().ok())
            .map_or(0, |at| at.saturating_sub(crate::backends::owner::unix_now()));
        let state = Arc::new(State {
            id: id.to_owned(),
            dir,
            metadata: BTreeMap::new(),
            network: network.clone(),
            config: String::new(),
            // The record is the host's, but a corrupt `expires` must not panic `connect`.
            expires: crate::duration::after(Instant::now(), Duration::from_secs(ttl_left)),
            expired_early: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            session: Self::open_session(id, client, network.as_ref(), None),
            link,
            bwrap: Mutex::new(None),
            pid_namespace: launch::pid_namespace(sandboxd.pid),
            sandboxd,
            egress: Mutex::new(None),
            ttl: Mutex::new(None),
        });
        Ok(LocalSandbox { backend: self.clone(), state })
    }
}

/// Undoes part of a `create()` that failed or was dropped (its directory, or its started
/// sandbox): runs `undo` on the value unless disarmed.
struct Undo<T> {
    value: Option<T>,
    undo: fn(T),
}

impl<T> Undo<T> {
    fn new(value: T, undo: fn(T)) -> Self {
        Undo { value: Some(value), undo }
    }

    fn disarm(mut self) {
        self.value = None;
    }
}

impl<T> Drop for Undo<T> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take() {
            (self.undo)(value);
        }
    }
}
