//! A template's setup container, run as a sandbox in all but its user: it carries the
//! sandbox labels (so `Sandbox::list`, `Sandbox::reap` and the CLI's `ls`/`reap` see it),
//! the pids/memory/CPU limits, the network policy and `no-new-privileges`, and an owner
//! link, so it ends when the process that started it ends, however that process dies.
//!
//! Unlike a sandbox, the setup runs as root with the engine's default capabilities (it
//! installs packages). Its watch therefore cannot be a process root could stop: PID 1 is a
//! shell (no `docker-init`) that does nothing but read its stdin, the owner's attach
//! connection. Signals sent from inside the container to its PID 1 are dropped by the
//! kernel unless PID 1 handles them, and this one handles none, so the setup can neither
//! kill nor stop the watch. End-of-file on the link (the owner closed it, or died and the
//! engine closed it) ends PID 1, which ends the container and every process in it, and the
//! engine removes it (`auto_remove`).
//!
//! The setup itself is an exec (`sh -c script`, as root), and its status is the exit code
//! the engine records for that exec: nothing the setup prints or writes can change it.
//! (It used to run under PID 1 and report its status as a marker line in its output, with
//! a nonce passed in PID 1's argv, which root in the container reads in
//! `/proc/1/cmdline`: a setup command could print the marker with status 0 and have a
//! setup whose later commands failed, or had not run, committed and cached.)

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};

use super::Template;
use crate::backends::docker::client::provider;
use crate::backends::docker::container::{limited, owner_linked};
use crate::backends::docker::create::RemoveOnDrop;
use crate::backends::docker::image::build::BuildLog;
use crate::backends::docker::owner_link::{AttachOutput, owner_attach};
use crate::backends::docker::sandbox::unique_suffix;
use crate::backends::docker::{SCHEME, labels, users};
use crate::error::{Error, Result};
use crate::policy::NetworkPolicy;

/// The container label naming the template a setup container is setting up.
pub const TEMPLATE_SETUP_LABEL: &str = "io.sandboxio.template.setup";

/// The name prefix of setup containers: `sandboxio-template-setup-<template>-<16 hex>`.
pub(super) const NAME_PREFIX: &str = "sandboxio-template-setup-";

/// How long after the setup timeout the container's own timer kills every setup process
/// (a backstop: the host removes the container at the timeout itself).
const TTL_MARGIN: Duration = Duration::from_secs(10);

/// PID 1, `sh -c WATCH sandboxio-setup <ttl seconds>`, as root: a timer kills every process
/// but PID 1 when the TTL ends, and PID 1 itself only reads its stdin (the owner link) until
/// end-of-file: `read` is not interrupted by signals in dash or busybox, which is why the
/// timer cannot end PID 1 and the host's own timeout removes the container. The setup runs
/// beside it as an exec ([`start`]).
const WATCH: &str = r#"(sleep "$1"; kill -KILL -1) </dev/null >/dev/null 2>&1 &
while IFS= read -r l; do :; done
exit 137"#;

/// How long the setup's output is still read after the engine says its shell ended: a
/// process the setup left in the background may hold the output open (it is frozen and the
/// container removed after the commit).
const AFTER_EXIT: Duration = Duration::from_millis(500);

/// How long the engine may take to record the setup's exit once its output has ended.
const EXIT_RECORDED_WITHIN: Duration = Duration::from_secs(10);

/// A running setup container: removed when dropped, and ended by the engine when its owner
/// link (held here) closes.
pub(super) struct Running {
    pub id: String,
    /// Removes the container when the setup is dropped, whatever happened.
    _guard: RemoveOnDrop,
    /// The owner link: PID 1's stdin. Dropping it ends PID 1.
    _link: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    /// PID 1's output (it writes none): kept with the link, its connection's other half.
    _attached: AttachOutput,
    /// The setup's exec, and its output (both streams).
    exec_id: String,
    output: AttachOutput,
    /// The base image's `/etc/passwd` and `/etc/group` as built (`None`: it has none),
    /// read before the template's files or commands could change them.
    pub base_users: (Option<Vec<u8>>, Option<Vec<u8>>),
}

/// The container body of `template`'s setup: its labels, limits and network.
fn body(
    name: &str,
    template: &Template,
    base_id: &str,
    runtime: Option<String>,
) -> Result<ContainerCreateBody> {
    let ttl = template.timeout().saturating_add(TTL_MARGIN);
    let network = if template.network() { NetworkPolicy::AllowAll } else { NetworkPolicy::DenyAll };
    let mut labels = labels::for_new(&BTreeMap::new(), ttl, false)?;
    labels.insert(labels::NETWORK.into(), crate::sandboxd::session::egress::policy_label(&network));
    labels.insert(labels::USER.into(), "0".into());
    labels.insert(TEMPLATE_SETUP_LABEL.into(), name.to_owned());
    Ok(ContainerCreateBody {
        image: Some(base_id.to_owned()),
        cmd: Some(vec![
            "sh".into(),
            "-c".into(),
            WATCH.into(),
            "sandboxio-setup".into(),
            ttl.as_secs().to_string(),
        ]),
        entrypoint: Some(Vec::new()),
        user: Some("0".into()),
        labels: Some(labels),
        host_config: Some(HostConfig {
            // No docker-init: PID 1 must be the watch itself (see the module's docs).
            init: Some(false),
            auto_remove: Some(true),
            security_opt: Some(vec!["no-new-privileges".into()]),
            network_mode: Some(if template.network() { "bridge" } else { "none" }.into()),
            runtime,
            ..limited(&template.limits())
        }),
        ..owner_linked()
    })
}

/// The setup as one shell script: `set -e`, then the template's commands in order.
fn script(template: &Template) -> String {
    std::iter::once("set -e".to_owned())
        .chain(template.commands().iter().cloned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Creates `template`'s setup container from the base image `base_id`, writes the
/// template's files, attaches the owner link, starts it and starts the setup in it as an
/// exec (root, no stdin, both output streams attached).
pub(super) async fn start(
    docker: &Docker,
    name: &str,
    template: &Template,
    base_id: &str,
    runtime: Option<String>,
    failed: &(dyn Fn(String) -> Error + Sync),
) -> Result<Running> {
    let options = bollard::query_parameters::CreateContainerOptions {
        name: Some(format!("{NAME_PREFIX}{name}-{}", unique_suffix())),
        platform: String::new(),
    };
    let made = docker
        .create_container(Some(options), body(name, template, base_id, runtime)?)
        .await
        .map_err(|e| provider("creating the template's setup container", e))?;
    let guard = RemoveOnDrop { docker: docker.clone(), id: Some(made.id.clone()) };
    // The base's users, as built: what the template's sandboxes are resolved against.
    let (passwd, group) = users::Source::Image.paths();
    let base_users = (
        users::read_small_file(docker, &made.id, passwd).await?,
        users::read_small_file(docker, &made.id, group).await?,
    );
    if !template.files().is_empty() {
        let archive = files_archive(template.files())
            .map_err(|e| Error::provider(SCHEME, "archiving the template's files", e))?;
        unpack_at_root(docker, &made.id, archive)
            .await
            .map_err(|e| failed(format!("writing its files: {e}")))?;
    }
    // The link exists before the start: an owner dying at any instant after the start
    // request leaves a PID 1 that reads end-of-file.
    let bollard::container::AttachContainerResults { output, input } = docker
        .attach_container(&made.id, Some(owner_attach()))
        .await
        .map_err(|e| provider("attaching to the template's setup container", e))?;
    docker.start_container(&made.id, None).await.map_err(|e| failed(format!("starting its setup: {e}")))?;
    let config = bollard::models::ExecConfig {
        cmd: Some(vec!["sh".into(), "-c".into(), script(template)]),
        user: Some("0".into()),
        attach_stdin: Some(false),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        ..Default::default()
    };
    let exec = docker
        .create_exec(&made.id, config)
        .await
        .map_err(|e| failed(format!("creating its setup's exec: {e}")))?;
    let started = docker
        .start_exec(
            &exec.id,
            Some(bollard::exec::StartExecOptions { detach: false, tty: false, output_capacity: None }),
        )
        .await
        .map_err(|e| failed(format!("starting its setup's exec: {e}")))?;
    let bollard::exec::StartExecResults::Attached { output: setup_output, .. } = started else {
        return Err(failed("the engine started its setup detached, with no output to read".into()));
    };
    Ok(Running {
        id: made.id,
        _guard: guard,
        _link: input,
        _attached: output,
        exec_id: exec.id,
        output: setup_output,
        base_users,
    })
}

/// The most of a failed setup's output kept in its error: 4 KiB (the end of it).
const OUTPUT_TAIL: usize = 4096;

/// The longest line of the setup's output passed on whole (to the build log and
/// `tracing`): 64 KiB; a longer one is passed on in pieces of this size.
const LINE_LIMIT: usize = 64 * 1024;

impl Running {
    /// Reads the setup's output (both streams) until it ends, or shortly after the engine
    /// says the setup's shell ended, passing each line to the build log and `tracing` as it
    /// comes: the setup's exit status as the engine recorded it, and the last
    /// [`OUTPUT_TAIL`] bytes of its output (never more held: a setup may print a lot).
    /// `None` for the status when the engine recorded none (the container ended).
    pub(super) async fn finish(&mut self, docker: &Docker, log: &BuildLog) -> (Option<i64>, String) {
        use futures_lite::StreamExt as _;
        let (mut partial, mut tail) = (Vec::new(), Vec::new());
        let emit = |line: &[u8]| {
            let line = String::from_utf8_lossy(line);
            tracing::info!(target: "sandboxio::docker::template", "{}", crate::text::Escaped(&line));
            if let Some(callback) = &log.0 {
                callback(&line);
            }
        };
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let mut ended_at: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                frame = self.output.next() => {
                    let Some(Ok(frame)) = frame else { break };
                    partial.extend_from_slice(&frame.into_bytes());
                    while let Some(end) = partial.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = partial.drain(..=end).take(end).collect();
                        emit(&line);
                        keep_tail(&mut tail, &line);
                        tail.push(b'\n');
                    }
                    // A line with no end in sight is passed on in pieces: the setup
                    // chooses how long its lines are, the host's memory does not.
                    while partial.len() >= LINE_LIMIT {
                        let piece: Vec<u8> = partial.drain(..LINE_LIMIT).collect();
                        emit(&piece);
                        keep_tail(&mut tail, &piece);
                    }
                }
                _ = tick.tick() => match ended_at {
                    Some(at) if at.elapsed() >= AFTER_EXIT => break,
                    Some(_) => {}
                    None => {
                        if exit_code(docker, &self.exec_id).await.is_some() {
                            ended_at = Some(tokio::time::Instant::now());
                        }
                    }
                },
            }
        }
        if !partial.is_empty() {
            emit(&partial);
            keep_tail(&mut tail, &partial);
        }
        let deadline = tokio::time::Instant::now() + EXIT_RECORDED_WITHIN;
        let status = loop {
            match docker.inspect_exec(&self.exec_id).await {
                Ok(i) if i.running != Some(true) => break i.exit_code,
                Ok(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => break None,
            }
        };
        (status, String::from_utf8_lossy(&tail).trim().to_owned())
    }
}

/// How often the setup's disk use is checked.
const DISK_CHECK_EVERY: Duration = Duration::from_secs(1);

/// Returns (the bytes written) once setup container `id` has written more than `limit`
/// bytes to its writable layer, as the engine measures it; never while it stays within.
/// A failed measurement is tried again at the next check (the container may be ending).
pub(super) async fn watch_disk(docker: &Docker, id: &str, limit: u64) -> u64 {
    let options = bollard::query_parameters::InspectContainerOptions { size: true };
    loop {
        tokio::time::sleep(DISK_CHECK_EVERY).await;
        let written = docker
            .inspect_container(id, Some(options.clone()))
            .await
            .ok()
            .and_then(|i| i.size_rw)
            .and_then(|n| u64::try_from(n).ok());
        if let Some(written) = written.filter(|&n| n > limit) {
            return written;
        }
    }
}

/// The exit code the engine recorded for exec `exec_id`, once it has ended.
async fn exit_code(docker: &Docker, exec_id: &str) -> Option<i64> {
    let inspected = docker.inspect_exec(exec_id).await.ok()?;
    if inspected.running == Some(true) { None } else { inspected.exit_code }
}

fn keep_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    tail.extend_from_slice(bytes);
    tail.drain(..tail.len().saturating_sub(OUTPUT_TAIL));
}

/// The labels a committed template image must not inherit from its setup container (the
/// engine merges a container's labels into its commit): each set to an empty value, so no
/// container made from the image, by sandboxio or by `docker run`, reads as a sandboxio
/// sandbox or as this setup's.
pub(super) fn unlabelled() -> HashMap<String, String> {
    [
        labels::MANAGED,
        labels::SESSION,
        labels::OWNER,
        labels::EXPIRES,
        labels::DETACHED,
        labels::USER,
        labels::NETWORK,
        labels::VERSION,
        TEMPLATE_SETUP_LABEL,
    ]
    .into_iter()
    .map(|k| (k.to_owned(), String::new()))
    .collect()
}

/// The template's files as a tar archive (owner 0:0), for the engine's archive API on a
/// container that has not started.
fn files_archive(files: &[(String, Vec<u8>, u32)]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, data, mode) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(*mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, path.trim_start_matches('/'), &data[..])?;
    }
    builder.into_inner()
}

/// Unpacks the tar `archive` at `/` in container `id`, as its root.
pub(super) async fn unpack_at_root(
    docker: &Docker,
    id: &str,
    archive: Vec<u8>,
) -> std::result::Result<(), bollard::errors::Error> {
    let options =
        bollard::query_parameters::UploadToContainerOptions { path: "/".into(), ..Default::default() };
    docker.upload_to_container(id, Some(options), bollard::body_full(archive.into())).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setup_container_is_labelled_limited_and_without_network_by_default() {
        let template = Template::new("b").run("true");
        let body = body("t", &template, "sha256:base", None).unwrap();
        let labels = body.labels.unwrap();
        assert_eq!(labels.get(labels::MANAGED).map(String::as_str), Some("true"));
        assert_eq!(labels.get(TEMPLATE_SETUP_LABEL).map(String::as_str), Some("t"));
        assert!(labels.contains_key(labels::OWNER) && labels.contains_key(labels::EXPIRES));
        let host = body.host_config.unwrap();
        assert_eq!(host.pids_limit, Some(i64::from(crate::backends::docker::DEFAULT_PIDS_LIMIT)));
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!((host.init, host.auto_remove), (Some(false), Some(true)));
        assert_eq!(body.stdin_once, Some(true));
        let default_memory = i64::try_from(super::super::DEFAULT_SETUP_MEMORY_MIB << 20).unwrap();
        assert_eq!((host.memory, host.memory_swap), (Some(default_memory), Some(default_memory)));
        let limited = template.setup_limits(crate::ResourceLimits::new().memory_mib(256).pids(64));
        let host = super::body("t", &limited, "b", None).unwrap().host_config.unwrap();
        assert_eq!((host.memory, host.pids_limit), (Some(256 << 20), Some(64)));
        let open = Template::new("b").setup_network(true);
        let host = super::body("t", &open, "b", None).unwrap().host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("bridge"));
    }

    #[test]
    fn every_setup_label_is_blanked_on_the_image() {
        let body = body("t", &Template::new("b"), "b", None).unwrap();
        let blank = unlabelled();
        for key in body.labels.unwrap().keys() {
            assert_eq!(blank.get(key).map(String::as_str), Some(""), "{key} would reach the image");
        }
    }
}
