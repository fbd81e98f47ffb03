//! `local://`: a sandbox built from Linux namespaces with `bwrap` (bubblewrap), one `bwrap`
//! per sandbox with sandboxd as its init. Feature `local`.
//!
//! `create` starts the sandbox's one `bwrap` (`launch.rs`): fresh user, mount, PID, network,
//! IPC and UTS namespaces, the host's `/usr` read-only, a private `/tmp`, a read-only
//! `/proc`, the sandbox's own `/etc/passwd` and `/etc/group`, the sandbox's workspace (a
//! host directory) at `/workspace`, its working directory, and a read-only root. Its
//! program is sandboxd (`crate::sandboxd`, written once per process to a file bound
//! read-only into every sandbox, `session/binary.rs`), the init of the sandbox's PID namespace,
//! spoken to over bwrap's stdin and stdout (`session/`). sandboxd is no host daemon: it
//! lives inside the sandbox and ends with it. Every `run`, `stream`, code cell and file
//! operation is a request on that session (`sandboxd::session`): a command's end, timeout, kill or
//! dropped stream ends everything it started (even after `setsid` or a double fork), its
//! environment, secrets included, travels in frames and never reaches a host process's
//! environment or argv, and its exit status is exact (a signal death is
//! [`ExitStatus::Signal`](crate::ExitStatus)).
//!
//! **Lifetime.** The session is the owner link: when the owner closes it (`close()`,
//! `kill()`, the last handle dropped) or dies, even by `SIGKILL`, sandboxd kills every
//! process of the sandbox and exits, and bwrap with it. `kill()` also kills sandboxd itself
//! (its PID namespace's init: everything in it dies with it). `detach()` tells sandboxd to
//! outlive the owner until the sandbox's TTL (`--ttl-ms`); `connect(id)` reaches it from
//! another process of the same host user through sandboxd's socket in the sandbox's host
//! directory, which only that user can enter and which is not in the sandbox's filesystem
//! (see `session/`: code inside cannot open a session of its own).
//!
//! A root caller's sandboxes run as the dedicated host uid [`ROOT_CALLER_SANDBOX_UID`],
//! never as the host's uid 0. The network is a namespace with only loopback unless the
//! policy is allow-all; under an allowlist its one way out is the egress gate. The whole
//! sandbox, sandboxd included, runs under a seccomp filter (x86-64 and aarch64: kernel
//! keyrings, BPF, perf, modules, mounts, file handles and the like fail with `EPERM`), with `no_new_privs`, with every capability dropped, and cannot
//! create nested user namespaces (`--disable-userns`). File operations reach only the
//! workspace: any other path is [`Error::PermissionDenied`](crate::Error::PermissionDenied). See
//! `docs/adr/0004-local-backend.md` for the choices and their limits.
//!
//! Declared capabilities: `RUN`, `RUN_CODE`, `STATEFUL_CODE` and `RICH_OUTPUTS` (sandboxd's
//! runner on the host's `/usr/bin/python3` and its packages: one interpreter per code
//! context, results by MIME type; a host without it declares none of the three), `STREAM`,
//! `STDIN`, `FILESYSTEM`, `NETWORK_DENY`, `NETWORK_ALLOWLIST` (an egress gate in the owner's
//! process, reached through a relay inside: `egress.rs`), `CONNECT`, `DETACH`. Isolation tier:
//! [`IsolationTier::Process`](crate::policy::IsolationTier::Process). Not declared (and so refused): command-scoped secrets (the
//! user namespace maps one uid and one gid, so every command of a sandbox is the same user
//! and can read another's `/proc/<pid>/environ`) and resource limits.

//!
//! # Layout
//!
//! `backend.rs` (the backend value and [`Backend`](crate::backend::Backend)), `create.rs`
//! (create and connect), `sandbox.rs` (a handle and its state), `reap.rs` (list and
//! reap), `launch.rs` (the `bwrap` command line), `session/` (sandboxd's binary, the link
//! and socket), `reactor.rs`, `seccomp.rs`, `dirs.rs`, `record.rs`, `fs.rs`, and
//! `hooks.rs` (the test hooks the contract suite's probes use, feature `contract`).

mod backend;
mod create;
mod dirs;
mod fs;
#[cfg(feature = "contract")]
mod hooks;
mod launch;
mod reactor;
mod reap;
mod record;
mod sandbox;
mod seccomp;
mod session;

use std::time::Duration;

pub use backend::LocalBackend;

const SCHEME: &str = "local";

/// The path of the workspace inside every local sandbox.
pub const WORKDIR: &str = "/workspace";

/// The host uid and gid a root caller's sandboxes run as: never the host's uid 0 (whose
/// files `/proc/sys` and `core_pattern` are), and a number no distribution assigns to a
/// user or daemon (systemd's dynamic users end at 65519; container subordinate ranges
/// start at 100000 and are handed out in blocks of 65536 well below it). It owns each
/// sandbox's workspace; no host account has it.
pub const ROOT_CALLER_SANDBOX_UID: u32 = 2_000_000_000;

/// How long a kill waits for the sandbox's processes to be gone.
const KILL_BOUND: Duration = Duration::from_secs(5);

/// The interpreter code cells run with (sandboxd's runner, `python3` on the sandbox's
/// `PATH`): the host's system Python.
const PYTHON: &str = "/usr/bin/python3";

/// The `PATH` every command starts with.
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

// What `local://` sandboxes can do: one definition, in `crate::backends::capabilities`.
use crate::backends::capabilities::LOCAL as CAPABILITIES;
