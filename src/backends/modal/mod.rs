//! `modal://`: sandboxes on Modal (gVisor), over Modal's gRPC API. Feature `modal`.
//!
//! **Status: the lower layers only.** This module holds the protocol and the pure pieces of
//! the adapter; the backend itself (create, exec through the command router, files,
//! terminate, sweep) is not built yet, so `modal://` still resolves to the "not released yet"
//! configuration error of [`crate::dsn::FIRST_PARTY`] and declares no capability.
//!
//! What is here, each with exact-output tests:
//!
//! - the trimmed protocol (`proto/modal/api.proto`, `proto/modal/task_command_router.proto`,
//!   naming the upstream commit they follow), compiled at build time by protox (no
//!   `protoc`) into prost messages and tonic clients (TLS through rustls with ring and the
//!   built-in web roots; no plaintext mode). `scripts/check-modal-proto` compares every
//!   declaration with upstream files;
//! - [`config`]: the DSN `modal://[?app=<name>&image=<ref>&idle_timeout=<s>&profile=<name>]`,
//!   the environment (`MODAL_TOKEN_ID`, `MODAL_TOKEN_SECRET`, `MODAL_SERVER_URL`,
//!   `MODAL_ENVIRONMENT`, `MODAL_PROFILE`, `MODAL_CONFIG_PATH`,
//!   `MODAL_IMAGE_BUILDER_VERSION`) over the profile file (`~/.modal.toml`: a table per
//!   profile with `token_id`, `token_secret`, `server_url`, `environment`,
//!   `image_builder_version`, `active`); a missing token half is [`Error::Auth`] naming its
//!   variable;
//! - the client identity sent on every control-plane call and the `SandboxCreate` request
//!   (`request`): TTL always sent as `timeout_secs`, idle timeout, CPU and memory, the
//!   network blocked or open, metadata as tags; `docs/adr/0008-modal-backend.md` says which
//!   client the adapter presents and why;
//! - the mapping of gRPC statuses to [`Error`] with the status kept as the source, the
//!   server's retry-after read from the status details, a "client too old" refusal as a
//!   configuration error, and the retry rule for idempotent calls (`errors`);
//! - the control-plane client (`client`): one TLS channel (connected lazily: building it does
//!   no I/O), the identity headers on every call (the secret marked sensitive), messages
//!   bounded to 16 MiB, a 60 s deadline a call, and idempotent calls (all of app, create,
//!   terminate, list) retried after a transient status under one `x-idempotency-key`, so a
//!   lost create reply does not make a second sandbox; terminate of a sandbox Modal no longer
//!   knows succeeds; listing by tags reads pages backwards by creation time; the task id is
//!   long-polled (a timeout always sent; a sandbox that already finished is
//!   [`Error::SandboxGone`](crate::Error::SandboxGone)), then the router's URL and token;
//!   the workspace's image builder version; the image `FROM <ref>` built through
//!   `ImageGetOrCreate` and `ImageJoinStreaming` (a stream that ends without a result is
//!   reopened from its last entry id; a failed build is a configuration error saying why);
//!   `SandboxWait` telling a running sandbox from an ended one;
//! - the command-router client (`router`): one TLS channel per task with
//!   `authorization: Bearer <token>` (the Modal token is never sent there), exec ids made by
//!   the client, stdout/stderr read from a byte offset and reopened where a cut stream stopped
//!   (at most 10 times), stdin written at a byte offset with an end-of-file, the exit as a code
//!   or a signal. No command timeout is sent: the router would kill only the command, not its
//!   process group, so the adapter will keep its own (as `e2b://` does).
//!
//! Both clients' tests run them against servers on loopback over TLS from a CA made at test
//! time, built from their own generated copy of the messages (`OUT_DIR/modal-stub/`).
//!
//! An opt-in test (`live`, `#[ignore]`d) drives both clients against the real service:
//! create, exec `echo` through the router, list by tag, terminate twice, wait.
//!
//! Not built yet: the backend and sandbox types over these clients (process-group wrapper
//! and group kill through a second exec, owner death through the idle timeout, files
//! through Modal's fs tools), the `local://`-backed stub and its contract run, the live
//! contract run.
//!
//! [`Error`]: crate::Error
//! [`Error::Auth`]: crate::Error::Auth

// Until the backend that calls them lands (issue #16), the pieces are used by their tests only.
#![allow(dead_code)]

pub mod config;

mod client;
mod errors;
#[cfg(test)]
mod live;
mod proto;
mod request;
mod router;
#[cfg(test)]
mod test_tls;

/// The DSN scheme.
const SCHEME: &str = "modal";
