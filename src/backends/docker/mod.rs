//! `docker://`: sandboxes as Docker containers, over the Engine API with bollard. Feature
//! `docker`.
//!
//! # DSN
//!
//! - `docker://` — the engine at `DOCKER_HOST` (`unix:///path` or `tcp://host:port`), else
//!   the socket `/var/run/docker.sock`;
//! - `docker:///path/to/docker.sock` — an explicit socket; `docker://host:2375` — plain TCP;
//! - options: `image=<name:tag>` (default [`DEFAULT_IMAGE`]; the builder's `.image()` wins),
//!   `pull=never|missing|always` ([`PullPolicy`], default `never`; see [Images](#images)),
//!   `runtime=runsc` (gVisor; reports [`IsolationTier::UserspaceKernel`](crate::policy::IsolationTier::UserspaceKernel)), `user=<name|uid>`
//!   (default: the image's configured user), `exec=sandboxd|api` (how commands run, below;
//!   default `sandboxd`).
//!
//! Building a backend does no I/O and starts no thread; the first `create`, `connect` or
//! `reap` connects (bounded by [`CONNECT_TIMEOUT`]) and negotiates the API version.
//!
//! # Two exec paths
//!
//! Commands reach a sandbox one of two ways ([`ExecPath`], DSN option `exec=sandboxd|api`,
//! the label `io.sandboxio.exec` on its container):
//!
//! - **sandboxd** (the default): sandboxd, sandboxio's supervisor (`docs/adr/0006-sandboxd.md`),
//!   is the container's PID 1, spoken to over the container's attach stream. A command is
//!   one protocol round trip (about a millisecond where an exec is tens), its exit status is
//!   exact ([`ExitStatus::Signal`](crate::ExitStatus) for a signal death), and an
//!   out-of-memory kill is marked. Everything a command starts ends with it (a per-command
//!   shepherd and child subreaper). See `sandboxd_path/` for how it is
//!   placed and protected, and [`ExecPath::Sandboxd`].
//! - **the exec API** ([`ExecPath::ExecApi`], `exec=api`; automatic in a build without
//!   sandboxd, and under gVisor unless `exec=sandboxd` asks otherwise): one engine exec per command under a shell wrapper, PID 1 a shell that arms the
//!   TTL. A signal death reads as exit code 128 + n, and out-of-memory kills are not seen.
//!   Described below.
//!
//! On both paths: one container, from an image the engine has (pulled only by the pull
//! policy; otherwise a missing image is [`Error::Configuration`](crate::Error::Configuration), naming it), auto-removed when PID 1 ends; the **owner link** is an attach connection made
//! before the start of a `StdinOnce` container, so when the owning process closes it or dies
//! (even by `SIGKILL`, at any instant after the start request) the engine closes PID 1's
//! stdin and PID 1 ends the container within seconds (the adversarial suite bounds it at
//! 10 s); `detach` tells PID 1 to wait for the TTL instead. An owner that dies before its
//! start request reached the engine leaves a container that never started;
//! [`DockerBackend::reap`] with `owner_dead`, and the first `create` of every backend value,
//! remove those of dead owners on this host. Every container carries the [`labels`]
//! (`io.sandboxio.*` plus the user's metadata) that [`DockerBackend::reap`] reads. A
//! `connect`ed handle reaches a sandboxd container through a sandboxd session of its own (an
//! exec of sandboxd): its commands end when the handle goes.
//!
//! Hardening, always: every Linux capability dropped (on the sandboxd path PID 1 keeps
//! `CAP_SETUID`, `CAP_SETGID` and `CAP_KILL`, and every command runs with none),
//! `no-new-privileges`, a pids limit ([`DEFAULT_PIDS_LIMIT`] unless the caller sets one),
//! and no network (`network_mode: none`, loopback only) unless the policy is allow-all (under
//! an allowlist, the one way out is a Unix socket to sandboxio's egress gate, bind-mounted
//! read-only at `/run/sandboxio-egress` and relayed by sandboxd to `127.0.0.1:3128` inside).
//! Each command runs as the sandbox's user with a primary group of its own (a random gid in
//! `1000000000..2000000000`, no supplementary group): the kernel refuses `ptrace` and
//! `/proc/<pid>/environ` between commands, so a command's own `secret_env` stays its own.
//! Secrets never reach the container's or an exec's configuration (`docker inspect` does not
//! show them): on the sandboxd path they travel in the spawn request, on the exec-API path
//! on the wrapper's stdin. A handle from `connect` does not know the sandbox-wide ones. A
//! root sandbox user can rewrite any program another command runs, so command-scoped
//! secrets are refused for root users ([`Error::CapabilityNotSupported`](crate::Error::CapabilityNotSupported),
//! `COMMAND_SECRETS`).
//!
//! Files are handled as the sandbox's user, inside the container, so its own permissions,
//! links and mounts apply: on the sandboxd path read, write, list, mkdir and remove are
//! sandboxd's own file requests (no process, no program of the image), and upload and
//! download one streamed `tar`; on the exec-API path all of them are commands (`sh`
//! scripts, and `tar`). Image requirements: `tar` for upload and download; on the
//! exec-API path also a POSIX `sh`, `cat`, `head`, `stat`, `mkdir`, `rm`, `chmod`, `sleep`,
//! `/proc`, a world-writable `/tmp` (busybox or Debian's minbase has them all) and, on the
//! engine's host, `ps` (procps) for `docker top`.
//!
//! # The exec-API path
//!
//! PID 1 runs under Docker's init as sandboxio's supervisor id [`SUPERVISOR_ID`] (neither
//! root nor the sandbox's user): a shell that arms the TTL and then reads its stdin, the owner
//! link. With no capability, a process can signal, trace or open `/proc/<pid>/{fd,mem,environ}`
//! of another only when their user ids match: the sandbox's user, root included, can neither
//! stop nor deceive PID 1, and PID 1 never executes a file after its start (only shell
//! builtins). No process can shed its command's gid, so it marks everything the command
//! starts, including processes that call `setsid`, double-fork or rename themselves. When the
//! main process exits, the wrapper kills every other process with the gid; a timeout, a
//! dropped future or a terminated stream does the same with a second exec. Either way the
//! host then checks through the engine's `top` (the host's `ps`, which the sandboxed code
//! cannot write or fake) that no process with the gid is left; a kill that fails, hangs or is
//! fought off is tried again (four tries in all), and then the whole sandbox is removed
//! through the engine, and the operation reports
//! [`ErrorCode::SandboxGone`](crate::ErrorCode::SandboxGone) rather than a timeout. The gid
//! lives only in the host's memory: the kill path reads nothing the sandboxed code can write.
//! The uid [`SUPERVISOR_ID`] cannot be the sandbox user.
//!
//! Declared capabilities: `RUN`, `RUN_CODE` (the image's `python3`; a sandbox whose image has
//! none does not declare it, nor the two after it), `STATEFUL_CODE` and `RICH_OUTPUTS` (on
//! the sandboxd path only: one persistent interpreter per code context driven by sandboxd's
//! runner, results by MIME type, every open matplotlib figure as PNG, `Sandbox::interrupt`;
//! on the exec-API path one process per cell and no rich results), `STREAM`, `STDIN`,
//! `FILESYSTEM`, `NETWORK_DENY`, `NETWORK_ALLOWLIST` (on the sandboxd path, and not under
//! gVisor: the container has no network and its one way out is sandboxio's egress gate, see
//! `egress.rs`), the three limits, `CONNECT`, `DETACH` and `COMMAND_SECRETS` (not for root
//! users).
//!
//! # Images
//!
//! - **Pulls** follow the backend's [`PullPolicy`] at `create` (never by default;
//!   [`DockerBackend::with_pull`], DSN `pull=`), or run at once with [`DockerBackend::pull`].
//!   The engine pulls; sandboxio sends the registry's credentials (typed with
//!   [`DockerBackend::with_registry_auth`], else from Docker's config file: a credential
//!   helper, then `auths`), follows the progress (`tracing` target `sandboxio::docker::pull`
//!   and [`DockerBackend::with_pull_progress`]: layers and bytes), checks a pinned digest
//!   (`image@sha256:…`) on the result, and fails a pull silent for
//!   [`PULL_STALL_TIMEOUT`]. A pull inside `create` is owned by the caller's future:
//!   dropping it closes the engine connection, which cancels the pull. Registry failures
//!   are typed: an [`ImageError`] (image, registry, [`ImageErrorKind`]) is the source of the
//!   [`Error`](crate::Error) (`Configuration` for an unknown image, `Auth`, `RateLimited`, `Connect` for
//!   a registry that is down or silent, `Provider` for a corrupt layer).
//! - **Builds**: [`DockerBackend::build_image`] sends a context directory as a tar stream
//!   (`.dockerignore` honoured) and streams the build's log.
//! - **Templates**: [`Template`] (a base image, files, setup commands) registered with
//!   [`DockerBackend::with_template`] and named by the builder's `.template(name)`: set up
//!   once in a container, committed by the engine, found again by a content hash (and
//!   trusted only on the base's layers plus one; [`DockerBackend::prune_templates`] removes
//!   old versions). The setup container is a sandbox but for its user: labelled, limited,
//!   without network by default, and ended with its owner; its commands run as root with
//!   the engine's default capabilities (see [`Template`]).
//!
//! # Layout
//!
//! `backend.rs` (configuration, DSN, [`Backend`](crate::backend::Backend)), `create.rs`
//! and `connect.rs` (a new handle), `container.rs` (the container body and limits, pure),
//! `owner_link.rs`, `sandbox.rs` (the state both exec paths share), `sandboxd_path/` and
//! `exec_api/` (each its own `BackendSandbox`), `image/` (pull, credentials, reference,
//! build, `.dockerignore`), `template/` (prepare, setup, prune), `users/`, `labels.rs`,
//! `reap.rs`, `client.rs` (the engine connection), `rt.rs` (its runtime), and `hooks.rs`
//! (the test hooks the contract suite's probes use, feature `contract`).

mod backend;
mod client;
mod connect;
mod container;
mod create;
mod exec_api;
mod exec_path;
#[cfg(feature = "contract")]
mod hooks;
mod image;
pub mod labels;
mod owner_link;
mod reap;
mod rt;
mod sandbox;
mod sandboxd_path;
mod template;
mod users;

pub use backend::{DEFAULT_IMAGE, DockerBackend, sandboxd_id};
pub use client::CONNECT_TIMEOUT;
pub use container::{DEFAULT_PIDS_LIMIT, SUPERVISOR_ID};
pub use exec_path::ExecPath;
pub use image::{
    BuiltImage, CREDENTIAL_HELPER_TIMEOUT, ImageError, ImageErrorKind, PULL_STALL_TIMEOUT, PullPolicy,
    PullProgress, PulledImage, RegistryAuth,
};
pub use template::{
    DEFAULT_SETUP_DISK_MIB, DEFAULT_SETUP_MEMORY_MIB, DEFAULT_SETUP_TIMEOUT, PreparedTemplate,
    PrunedTemplates, TEMPLATE_HASH_LABEL, TEMPLATE_SETUP_LABEL, Template,
};

const SCHEME: &str = "docker";

// What `docker://` sandboxes can do: one definition, in `crate::backends::capabilities`.
use crate::backends::capabilities::DOCKER as CAPABILITIES;
