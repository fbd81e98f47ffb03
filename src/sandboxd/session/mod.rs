//! A sandbox's session with its sandboxd, shared by every backend that runs it
//! (`docker://` and `local://`): commands, streams and file operations over one
//! [`Client`] connection. A backend provides the connection (how it reaches sandboxd: a
//! container's attach stream, a `bwrap` child's pipes) and the sandbox's identity; this
//! module turns sandboxio's operations into protocol requests and sandboxd's answers into
//! sandboxio's results and errors.
//!
//! Every command runs under its own shepherd in sandboxd (`sandboxd/src/shepherd.rs`), so
//! its end, a timeout, a kill or a dropped stream ends everything it started: the host
//! only has to say so (`Signal`, or dropping the request). Nothing here starts a process on
//! the host.

mod code;
#[cfg(feature = "egress")]
pub(crate) mod egress;
mod fs;
mod stream;
pub(crate) mod transfer;

use std::sync::OnceLock;

pub(crate) use crate::backend::cell_stream::Collected;
use crate::error::{Error, Result};
use crate::exec::{Command, ExecResult, OutputChunk};
use crate::sandboxd::client::Client;
use crate::sandboxd::proto::{Spawn, StdinMode};
use crate::secret::SecretString;

pub(crate) use stream::SessionExecStream;

/// The gids commands run with when the backend gives each command a group of its own: far
/// above any group an image defines, below runc's limit (2^31 - 1).
pub(crate) const COMMAND_GIDS: std::ops::Range<u32> = 1_000_000_000..2_000_000_000;

/// Who a sandbox's commands run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The sandbox user's uid and primary gid (file operations run as these).
    pub user: (u32, u32),
    /// Give each command a fresh gid from [`COMMAND_GIDS`] as its only group: the kernel
    /// then refuses `ptrace` and `/proc/<pid>/environ` between commands, so one command's
    /// secrets are out of the others' reach. Needs a sandboxd that may set any gid (root
    /// in a container); a user namespace that maps one gid cannot.
    pub command_gids: bool,
    /// Ask sandboxd to run each command as [`Identity::user`] (sandboxd is root in a
    /// container). `false`: sandboxd already is the user and holds no capability to change
    /// identity (in a user namespace that maps one uid), and commands run as it does.
    pub switch_user: bool,
}

/// One sandbox's sandboxd session and what every request needs.
pub(crate) struct Session {
    client: Client,
    scheme: &'static str,
    id: String,
    workdir: String,
    identity: Identity,
    /// `NAME=value` every command starts with (the image's and the sandbox's variables).
    env: Vec<(String, String)>,
    /// Sandbox-wide secrets, added to every command's environment.
    secret_env: Vec<(String, SecretString)>,
    /// Why the backend ended the sandbox itself, when it did (what `SandboxGone` says).
    gone: OnceLock<String>,
    /// Code contexts: one runner each.
    contexts: code::Contexts,
    /// The runners of contexts with a cell running, for `interrupt`.
    interrupts: std::sync::Mutex<std::collections::HashMap<String, crate::sandboxd::client::CmdInput>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("scheme", &self.scheme)
            .field("id", &self.id)
            .field("workdir", &self.workdir)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// A session over `client` (greeted already) for sandbox `id`.
    pub(crate) fn new(
        client: Client,
        scheme: &'static str,
        id: String,
        workdir: String,
        identity: Identity,
        env: Vec<(String, String)>,
        secret_env: Vec<(String, SecretString)>,
    ) -> Session {
        Session {
            client,
            scheme,
            id,
            workdir,
            identity,
            env,
            secret_env,
            gone: OnceLock::new(),
            contexts: code::Contexts::default(),
            interrupts: std::sync::Mutex::default(),
        }
    }

    /// The session, for the backend's own requests (detach, ping).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Records why the backend is about to end the sandbox (kept: the first reason wins).
    pub(crate) fn set_gone(&self, why: impl Into<String>) {
        let _ = self.gone.set(why.into());
    }

    /// The error for a session that ended (`why`, unless the backend said why first).
    pub(crate) fn gone_error(&self, why: &str) -> Error {
        let message = self.gone.get().cloned().unwrap_or_else(|| format!("its supervisor is gone ({why})"));
        Error::SandboxGone { id: self.id.clone(), message }
    }

    /// `Err(SandboxGone)` once the session has ended.
    pub(crate) fn check_alive(&self) -> Result<()> {
        match (self.gone.get(), self.client.ended()) {
            (None, None) => Ok(()),
            (_, why) => Err(self.gone_error(why.as_deref().unwrap_or("ended"))),
        }
    }

    /// The absolute path of `path` in the sandbox.
    pub(crate) fn absolute(&self, path: &str) -> String {
        crate::path::resolve(&self.workdir, path)
    }

    fn command_user(&self) -> (u32, u32) {
        let (uid, gid) = self.identity.user;
        if !self.identity.command_gids {
            return (uid, gid);
        }
        let span = u64::from(COMMAND_GIDS.end - COMMAND_GIDS.start);
        (uid, COMMAND_GIDS.start + u32::try_from(random_u64() % span).unwrap_or(0))
    }

    /// The `Spawn` request of `command`, in the sandbox's working directory unless it names
    /// one, with the sandbox's variables and secrets under its own.
    fn spawn_spec(&self, command: &Command, stdin: StdinMode, secrets: bool) -> Spawn {
        let bytes = |s: &str| s.as_bytes().to_vec();
        let mut env: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut set = |name: &str, value: &[u8]| {
            env.retain(|(k, _)| k != name.as_bytes());
            env.push((bytes(name), value.to_vec()));
        };
        for (k, v) in &self.env {
            set(k, v.as_bytes());
        }
        for (k, v) in command.env_vars() {
            set(k, v.as_bytes());
        }
        let mut secret_pairs = Vec::new();
        if secrets {
            for (k, v) in self.secret_env.iter().chain(command.secret_env_vars()) {
                env.retain(|(name, _)| name != k.as_bytes());
                secret_pairs.retain(|(name, _): &(Vec<u8>, Vec<u8>)| name != k.as_bytes());
                secret_pairs.push((bytes(k), bytes(v.expose_secret())));
            }
        }
        Spawn {
            argv: command.argv().iter().map(|a| bytes(a)).collect(),
            env,
            secrets: secret_pairs,
            cwd: Some(bytes(&self.absolute(command.working_dir().unwrap_or(".")))),
            stdin,
            user: self.identity.switch_user.then(|| self.command_user()),
            control: false,
            undumpable: false,
        }
    }

    /// Starts `command` and returns its stream at once. `secrets`: give it the sandbox's
    /// and its own secrets (user commands; sandboxio's own file scripts get none).
    ///
    /// # Errors
    ///
    /// [`Error::SandboxGone`] when the session has ended.
    pub(crate) fn stream(
        self: &std::sync::Arc<Self>,
        command: &Command,
        secrets: bool,
    ) -> Result<SessionExecStream> {
        self.check_alive()?;
        let stdin = if command.stdin_bytes().is_some() { StdinMode::Pipe } else { StdinMode::Null };
        self.stream_with(command, stdin, secrets)
    }

    /// [`Session::stream`] with stdin piped for the caller to feed.
    ///
    /// # Errors
    ///
    /// As [`Session::stream`].
    pub(crate) fn stream_piped(
        self: &std::sync::Arc<Self>,
        command: &Command,
        secrets: bool,
    ) -> Result<SessionExecStream> {
        self.check_alive()?;
        self.stream_with(command, StdinMode::Pipe, secrets)
    }

    fn stream_with(
        self: &std::sync::Arc<Self>,
        command: &Command,
        stdin: StdinMode,
        secrets: bool,
    ) -> Result<SessionExecStream> {
        let spec = self.spawn_spec(command, stdin, secrets);
        let cmd = self.client.spawn(spec).map_err(|why| self.gone_error(&why))?;
        Ok(SessionExecStream::new(std::sync::Arc::clone(self), cmd, command))
    }

    /// Runs `command` to completion with its stdin, timeout and output cap.
    ///
    /// # Errors
    ///
    /// [`Error::ExecutionTimeout`] (with what it wrote before), [`Error::NotFound`] for a
    /// missing working directory, [`Error::SandboxGone`] when the session ends first.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the command and everything it started.
    pub(crate) async fn run(
        self: &std::sync::Arc<Self>,
        command: &Command,
        secrets: bool,
    ) -> Result<ExecResult> {
        let started = std::time::Instant::now();
        let mut stream = self.stream(command, secrets)?;
        let input = stream.input();
        let stdin = command.stdin_bytes().map(<[u8]>::to_vec);
        let feed = async move {
            if let (Some(data), Some(input)) = (stdin, input) {
                // A command that exits without reading all its stdin is not an error.
                let _ = input.write_stdin(&data).await;
                let _ = input.close_stdin();
            }
        };
        let mut out = Collected::new(command.output_limit_bytes());
        let collect = async {
            loop {
                match std::future::poll_fn(|cx| stream.poll_next_chunk(cx)).await {
                    Some(Ok(OutputChunk { stream: kind, data })) => out.push(kind, &data),
                    Some(Err(e)) => return Err(e),
                    None => return stream.finish(),
                }
            }
        };
        let ((), ended) = futures_lite::future::zip(feed, collect).await;
        let mut result = |status| {
            ExecResult::new(0, std::mem::take(&mut out.stdout), std::mem::take(&mut out.stderr))
                .with_status(status)
                .with_truncated(out.truncated)
                .with_duration(started.elapsed())
        };
        match ended {
            Ok((status, oom_killed)) => Ok(result(status).with_oom_killed(oom_killed)),
            Err(Error::ExecutionTimeout { timeout, partial }) => {
                Err(Error::ExecutionTimeout { timeout, partial: Box::new(result(partial.status)) })
            }
            Err(e) => Err(e),
        }
    }
}

/// 64 random bits from the kernel; the clock and a counter where `/dev/urandom` cannot be
/// read (a gid then is only unlikely to repeat, not unguessable).
fn random_u64() -> u64 {
    use std::io::Read as _;
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).is_ok() {
        return u64::from_le_bytes(bytes);
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let nanos = u64::try_from(now.as_nanos() & u128::from(u64::MAX)).unwrap_or(0);
    nanos ^ COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed).rotate_left(32)
}
