//! A gate listening on a Unix socket: the way out that a backend binds into one sandbox.
//!
//! The gate runs on its own runtime in sandboxio's process (two worker threads named
//! `sandboxio-egress`, started with the first gate), so it serves the sandbox whatever
//! executor the caller uses, or none. Dropping the [`GateServer`] stops it: the listener and
//! every connection it relays end, and the socket file is removed. A sandbox whose gate is
//! gone has no way out at all (fails closed).
//!
//! Code in the sandbox can reach the socket directly, without the relay and its limit, so the
//! gate bounds what it holds in this process itself: at most [`Gate::max_connections`]
//! connections are served at once (each holds one or two descriptors and a bounded buffer);
//! one more is answered `503` and closed at once. A failed `accept` (this process out of
//! descriptors, say) is waited out, never the end of the gate.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::gate::{Event, Gate};
use super::handover::{self, Opening};

fn runtime() -> io::Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            raise_descriptor_limit();
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("sandboxio-egress")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| io::Error::other(format!("cannot start the egress runtime: {e}")))
}

/// The most the soft descriptor limit is raised to.
const DESCRIPTOR_LIMIT: u64 = 1 << 20;

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (at most [`DESCRIPTOR_LIMIT`]),
/// once, when the first gate starts: a gate holds up to two descriptors per connection it
/// serves, [`MAX_CONNECTIONS`](super::gate::MAX_CONNECTIONS) at once, so the common soft
/// default of 1024 would let the code of two sandboxes use up their owner's descriptors. Go's
/// runtime raises it at every program's start for the same reason. A limit that cannot be
/// raised is left as it is.
fn raise_descriptor_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    let wanted = limit.maximum.unwrap_or(DESCRIPTOR_LIMIT).min(DESCRIPTOR_LIMIT);
    if limit.current.is_some_and(|current| current < wanted) {
        let before = limit.current;
        limit.current = Some(wanted);
        match setrlimit(Resource::Nofile, limit) {
            Ok(()) => {
                tracing::debug!(target: "sandboxio::egress", ?before, wanted, "raised the soft descriptor limit");
            }
            Err(e) => {
                tracing::debug!(target: "sandboxio::egress", error = %e, "cannot raise the soft descriptor limit");
            }
        }
    }
}

/// A running gate; dropping it stops the gate and removes its socket.
#[derive(Debug)]
pub(crate) struct GateServer {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl GateServer {
    /// Binds a Unix socket at `path` (which must not exist), open to every uid (the
    /// directory around it decides who can reach it), and serves `gate` on it.
    ///
    /// # Errors
    ///
    /// The runtime or the socket could not be set up.
    pub(crate) fn start(path: &Path, gate: Gate) -> io::Result<GateServer> {
        let rt = runtime()?;
        let listener = {
            let _entered = rt.enter();
            UnixListener::bind(path)?
        };
        // The sandbox's user may be another uid than this process's (a root caller's
        // sandboxes run as an unprivileged one): the socket itself lets anyone connect.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        let slots = Arc::new(Semaphore::new(gate.max_connections));
        let gate = Arc::new(gate);
        let task = rt.spawn(async move {
            // The connections live in the set, so aborting this task ends them too.
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => match Arc::clone(&slots).try_acquire_owned() {
                            Ok(slot) => {
                                let gate = Arc::clone(&gate);
                                connections.spawn(async move {
                                    gate.serve_socket(stream).await;
                                    drop(slot);
                                });
                            }
                            Err(_) => refuse_busy(&stream, &gate),
                        },
                        Err(e) => {
                            // Out of descriptors, most likely: retry once some are closed.
                            tracing::warn!(target: "sandboxio::egress", error = %e, "the egress gate could not accept");
                            tokio::time::sleep(ACCEPT_RETRY).await;
                        }
                    },
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok(GateServer { path: path.to_owned(), task })
    }
}

/// How long the gate waits after a failed `accept` before it accepts again.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Answers a connection over the limit with `503`, without waiting (a client that does not
/// read gets nothing), and closes it; reported as any refusal is. A client handed over by the
/// relay gets the answer when its hand-over has arrived by then; one still on its way is
/// closed without it.
fn refuse_busy(stream: &UnixStream, gate: &Gate) {
    let limit = gate.max_connections;
    let body = format!("sandboxio egress gate: {limit} connections are open, the most it serves at once\n");
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nX-Sandboxio-Egress: refused; reason=too-many-connections\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    match handover::open_now(stream) {
        Some(Ok(Opening::HandedOver(client))) => {
            let _ = client.try_write(response.as_bytes());
        }
        _ => {
            let _ = stream.try_write(response.as_bytes());
        }
    }
    (gate.events)(Event::Refused {
        host: String::new(),
        port: 0,
        reason: "too-many-connections",
        detail: format!("{limit} connections are open"),
    });
}

impl Drop for GateServer {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}
