//! The container of a new sandbox, as pure functions of typed input: its body (image,
//! PID 1, user, labels, environment, hardening, network mode, mounts), the engine's fields
//! for its limits, and PID 1 on each exec path. `create` only sends what these return.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig};

use crate::backend::CreateSpec;
use crate::error::{Error, Result};
use crate::policy::{Capabilities, NetworkPolicy};

use super::exec_path::ExecPath;
use super::sandboxd_path::SANDBOXD_PATH;
use super::{SCHEME, labels, users};

/// The pids limit applied when the caller sets none: 1024 processes.
pub const DEFAULT_PIDS_LIMIT: u32 = 1024;

/// The uid and gid of PID 1, sandboxio's supervisor in the container: neither root nor
/// any user an image defines, nor any command's gid (1000000000 to 1999999999). With every
/// capability dropped, a process may signal, trace or open `/proc/<pid>/fd` of another only
/// when their ids match, so no sandboxed process (root included) can touch PID 1.
pub const SUPERVISOR_ID: u32 = 2_147_480_001;

/// PID 1 (under Docker's init), `sh -c INIT sandboxio-init <ttl>`, run as
/// [`SUPERVISOR_ID`]: prepares `/tmp/.sandboxio`, arms the TTL, then reads its stdin, which
/// is the owner's attach connection. End-of-file (the owner closed it, or died: the engine
/// closes it either way) ends PID 1, and with it the container; the line `detach` makes it
/// wait for the TTL instead. Once it reads, everything it runs is a shell builtin: it never
/// executes a file the sandboxed code could have replaced.
const INIT: &str = r#"mkdir -p /tmp/.sandboxio 2>/dev/null && chmod 1777 /tmp/.sandboxio 2>/dev/null
(sleep "$1"; kill $$) &
while IFS= read -r l; do
  [ "$l" = detach ] && { echo detached; wait; exit 0; }
done
exit 0"#;

/// What a new container is made of besides the caller's spec.
pub(super) struct Setup<'a> {
    pub(super) image: &'a str,
    /// The sandbox user, as the caller or the image names it.
    pub(super) user: Option<&'a str>,
    /// The files that user is resolved against (recorded for `connect`).
    pub(super) users: users::Source,
    pub(super) workdir: &'a str,
    pub(super) runtime: Option<String>,
    pub(super) path: ExecPath,
}

/// The container of a new sandbox: hardened, labelled (`labels`, from
/// [`labels::for_new`], plus the exec path, network, user and user files), PID 1 [`INIT`]
/// as [`SUPERVISOR_ID`] (or sandboxd), its stdin open once (the owner link), with `env` as
/// its variables and, under an allowlist, the gate's directory mounted (`egress`).
pub(super) fn container_body(
    spec: &CreateSpec,
    setup: &Setup<'_>,
    env: &[(String, String)],
    egress: Option<bollard::models::Mount>,
    mut labels: HashMap<String, String>,
) -> Result<ContainerCreateBody> {
    let Setup { image, user, workdir, path, .. } = *setup;
    labels.insert(labels::EXEC_PATH.into(), path.as_str().into());
    labels.insert(labels::NETWORK.into(), crate::sandboxd::session::egress::policy_label(&spec.network));
    // Commands run as this user (exec `user`); PID 1 runs as the supervisor id. `connect`
    // reads it back.
    if user.and_then(|u| u.split(':').next()).and_then(|u| u.parse::<u32>().ok()) == Some(SUPERVISOR_ID) {
        return Err(Error::configuration(format!(
            "uid {SUPERVISOR_ID} is sandboxio's own supervisor id in docker:// containers; choose another sandbox user"
        )));
    }
    labels.insert(labels::USER.into(), user.unwrap_or_default().to_owned());
    labels.insert(labels::USERS.into(), setup.users.label().to_owned());
    let network_mode = match &spec.network {
        NetworkPolicy::AllowAll => "bridge",
        NetworkPolicy::Allowlist(_) if egress.is_none() || path == ExecPath::ExecApi => {
            return Err(Error::missing_capability(SCHEME, Capabilities::NETWORK_ALLOWLIST));
        }
        // An allowlisted sandbox's only way out is the gate's socket.
        _ => "none",
    };
    let host_config = HostConfig {
        init: Some(true),
        auto_remove: Some(true),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        network_mode: Some(network_mode.into()),
        mounts: egress.map(|mount| vec![mount]),
        runtime: setup.runtime.clone(),
        ..limited(&spec.limits)
    };
    let ttl_secs = spec.ttl.as_secs().max(1).to_string();
    let (cmd, pid1_user, host_config) = match path {
        ExecPath::ExecApi => (
            vec!["sh".into(), "-c".into(), INIT.into(), "sandboxio-init".into(), ttl_secs],
            format!("{SUPERVISOR_ID}:{SUPERVISOR_ID}"),
            host_config,
        ),
        ExecPath::Sandboxd => sandboxd_pid1(spec.ttl, host_config),
    };
    Ok(ContainerCreateBody {
        image: Some(image.to_owned()),
        cmd: Some(cmd),
        entrypoint: Some(Vec::new()),
        env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        user: Some(pid1_user),
        working_dir: Some(workdir.to_owned()),
        labels: Some(labels),
        host_config: Some(host_config),
        ..owner_linked()
    })
}

/// A container whose PID 1's stdin is the owner's attach connection, closed by the engine
/// when that connection ends (`StdinOnce`); the rest defaults.
pub(super) fn owner_linked() -> ContainerCreateBody {
    ContainerCreateBody {
        open_stdin: Some(true),
        stdin_once: Some(true),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        ..Default::default()
    }
}

/// The engine's fields for `limits` (the rest default): memory, the same as memory plus
/// swap (so no swap), CPU in nano-CPUs, and the pids limit ([`DEFAULT_PIDS_LIMIT`] unless
/// set). Sandboxes and template setups share them.
pub(super) fn limited(limits: &crate::ResourceLimits) -> HostConfig {
    let memory =
        limits.memory_mib.map(|mib| i64::try_from(mib.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX));
    HostConfig {
        pids_limit: Some(i64::from(limits.pids.unwrap_or(DEFAULT_PIDS_LIMIT))),
        memory,
        memory_swap: memory,
        nano_cpus: limits.cpu_millicores.map(|m| i64::from(m) * 1_000_000),
        ..Default::default()
    }
}

/// PID 1 of a sandboxd container: its argv, its user (root: it runs each command as the
/// sandbox's user with a gid of its own) and its host configuration: sandboxd is the init
/// (no Docker init in front of it, so nothing in the container can signal it), holding
/// only `CAP_SETUID`, `CAP_SETGID` (the commands' identities) and `CAP_KILL` (ending
/// them), on top of the hardening both paths share.
///
/// The container keeps no log: sandboxd's stdout is the session itself, every byte of every
/// command's output in frames, which the engine's default `json-file` driver would encode
/// and write to the host's disk (5 GB for 100 MB of zeros, and most of a stream's time).
pub(super) fn sandboxd_pid1(ttl: Duration, host_config: HostConfig) -> (Vec<String>, String, HostConfig) {
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
    let argv = vec![SANDBOXD_PATH.to_owned(), "--ttl-ms".to_owned(), ttl_ms.to_string()];
    let host_config = HostConfig {
        init: Some(false),
        cap_add: Some(vec!["SETUID".into(), "SETGID".into(), "KILL".into()]),
        log_config: Some(HostConfigLogConfig { typ: Some("none".into()), config: None }),
        ..host_config
    };
    (argv, "0:0".to_owned(), host_config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid1_is_sandboxd_as_root_with_three_capabilities_no_docker_init_and_no_log() {
        let base = HostConfig { cap_drop: Some(vec!["ALL".into()]), init: Some(true), ..Default::default() };
        let (argv, user, host) = sandboxd_pid1(Duration::from_secs(90), base);
        assert_eq!(argv, ["/.sandboxio/sandboxd", "--ttl-ms", "90000"]);
        assert_eq!(user, "0:0");
        assert_eq!(host.init, Some(false));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
        assert_eq!(host.cap_add, Some(vec!["SETUID".to_owned(), "SETGID".to_owned(), "KILL".to_owned()]));
        assert_eq!(host.log_config.and_then(|l| l.typ).as_deref(), Some("none"), "the session is not logged");
        assert_eq!(ExecPath::parse("api").unwrap(), ExecPath::ExecApi);
        assert!(ExecPath::parse("exec").is_err());
    }

    fn spec(network: NetworkPolicy) -> CreateSpec {
        let mut spec = CreateSpec::new(network);
        spec.ttl = Duration::from_secs(90);
        spec
    }

    fn setup(path: ExecPath) -> Setup<'static> {
        Setup {
            image: "img:1",
            user: Some("sbx"),
            users: users::Source::Image,
            workdir: "/w",
            runtime: None,
            path,
        }
    }

    fn base_labels() -> HashMap<String, String> {
        [("io.sandboxio.managed".to_owned(), "true".to_owned())].into()
    }

    #[test]
    fn limits_are_memory_without_swap_nano_cpus_and_pids_with_a_default() {
        let set = crate::ResourceLimits { memory_mib: Some(512), cpu_millicores: Some(1500), pids: Some(64) };
        assert_eq!(
            limited(&set),
            HostConfig {
                pids_limit: Some(64),
                memory: Some(512 * 1024 * 1024),
                memory_swap: Some(512 * 1024 * 1024),
                nano_cpus: Some(1_500_000_000),
                ..Default::default()
            }
        );
        assert_eq!(
            limited(&crate::ResourceLimits::default()),
            HostConfig { pids_limit: Some(1024), ..Default::default() }
        );
    }

    #[test]
    fn an_exec_api_container_is_the_init_shell_as_the_supervisor_hardened_without_network() {
        let env = [("A".to_owned(), "1".to_owned())];
        let body = container_body(
            &spec(NetworkPolicy::DenyAll),
            &setup(ExecPath::ExecApi),
            &env,
            None,
            base_labels(),
        )
        .unwrap();
        let labels: HashMap<String, String> = [
            ("io.sandboxio.managed", "true"),
            ("io.sandboxio.exec", "api"),
            (
                "io.sandboxio.network",
                crate::sandboxd::session::egress::policy_label(&NetworkPolicy::DenyAll).as_str(),
            ),
            ("io.sandboxio.user", "sbx"),
            ("io.sandboxio.users", "image"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let expected = ContainerCreateBody {
            image: Some("img:1".into()),
            cmd: Some(vec!["sh".into(), "-c".into(), INIT.into(), "sandboxio-init".into(), "90".into()]),
            entrypoint: Some(Vec::new()),
            env: Some(vec!["A=1".into()]),
            user: Some(format!("{SUPERVISOR_ID}:{SUPERVISOR_ID}")),
            working_dir: Some("/w".into()),
            labels: Some(labels),
            host_config: Some(HostConfig {
                init: Some(true),
                auto_remove: Some(true),
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec!["no-new-privileges".into()]),
                network_mode: Some("none".into()),
                mounts: None,
                runtime: None,
                pids_limit: Some(1024),
                ..Default::default()
            }),
            open_stdin: Some(true),
            stdin_once: Some(true),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            ..Default::default()
        };
        assert_eq!(body, expected);
    }

    #[test]
    fn a_sandboxd_container_under_an_allowlist_mounts_the_gate_and_has_no_network() {
        let allow = NetworkPolicy::allowlist(["example.com"]).unwrap();
        let mount =
            bollard::models::Mount { target: Some("/run/sandboxio-egress".into()), ..Default::default() };
        let body = container_body(
            &spec(allow.clone()),
            &setup(ExecPath::Sandboxd),
            &[],
            Some(mount.clone()),
            base_labels(),
        )
        .unwrap();
        assert_eq!(body.cmd, Some(vec![SANDBOXD_PATH.to_owned(), "--ttl-ms".into(), "90000".into()]));
        assert_eq!(body.user.as_deref(), Some("0:0"));
        let host = body.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(host.mounts, Some(vec![mount]));
        assert_eq!(host.init, Some(false));
        assert_eq!(body.labels.unwrap().get(labels::EXEC_PATH).map(String::as_str), Some("sandboxd"));
        // An allow-all sandbox is on the bridge.
        let open = container_body(
            &spec(NetworkPolicy::AllowAll),
            &setup(ExecPath::Sandboxd),
            &[],
            None,
            base_labels(),
        )
        .unwrap();
        assert_eq!(open.host_config.unwrap().network_mode.as_deref(), Some("bridge"));
    }

    #[test]
    fn an_allowlist_without_a_gate_or_on_the_exec_api_and_the_supervisor_uid_are_refused() {
        let allow = NetworkPolicy::allowlist(["example.com"]).unwrap();
        let mount = bollard::models::Mount::default();
        for (path, gate) in [(ExecPath::ExecApi, Some(mount)), (ExecPath::Sandboxd, None)] {
            let refused =
                container_body(&spec(allow.clone()), &setup(path), &[], gate, base_labels()).unwrap_err();
            assert_eq!(refused.code(), crate::ErrorCode::CapabilityNotSupported);
        }
        let supervisor = SUPERVISOR_ID.to_string();
        let as_supervisor = Setup { user: Some(&supervisor), ..setup(ExecPath::ExecApi) };
        let refused = container_body(&spec(NetworkPolicy::DenyAll), &as_supervisor, &[], None, base_labels())
            .unwrap_err();
        assert_eq!(refused.code(), crate::ErrorCode::Configuration);
    }
}
