//! Class 2: sandboxed code never runs as the host's uid 0, and `/proc/sys` is read-only
//! inside, whoever the caller is.

use std::time::Duration;

use sandboxio::{Command, NetworkPolicy};

use crate::support::{block_on, eventually, is_root, local, processes_mentioning};

/// Counts the `/proc/sys` files the probe's uid may write (`os.access`, which asks the kernel
/// without writing anything), and whether `core_pattern` opens for writing.
const PROBE: &str = r#"
import os
n = 0
for d, _, files in os.walk("/proc/sys"):
    for f in files:
        if os.access(os.path.join(d, f), os.W_OK):
            n += 1
try:
    open("/proc/sys/kernel/core_pattern", "r+").close()
    core = "open"
except OSError:
    core = "refused"
print(n, core)
"#;

fn probe_here() -> (usize, String) {
    let out = std::process::Command::new("/usr/bin/python3").args(["-c", PROBE]).output().unwrap();
    parse(&out.stdout)
}

fn parse(out: &[u8]) -> (usize, String) {
    let text = String::from_utf8_lossy(out);
    let mut words = text.split_whitespace();
    (words.next().unwrap().parse().unwrap(), words.next().unwrap().to_owned())
}

#[test]
fn class_02__code_never_runs_as_host_root_and_kernel_settings_stay_read_only() {
    if is_root() {
        // Positive control: the probe does see a writable /proc/sys as host root.
        let (writable, core) = probe_here();
        assert!(
            writable > 0 && core == "open",
            "control: host root sees no writable /proc/sys ({writable}, {core})"
        );
    }
    let sbx = local(NetworkPolicy::deny_all());
    let out = block_on(sbx.run(Command::new("/usr/bin/python3").arg("-c").arg(PROBE))).unwrap();
    assert!(out.success(), "{}", out.stderr_lossy());
    assert_eq!(parse(&out.stdout), (0, "refused".to_owned()), "/proc/sys is writable inside the sandbox");

    // The host uid of a sandboxed process, read on the host from /proc (independent of
    // what the sandbox's own uid mapping says).
    let stream = sbx.stream(Command::new("sleep").arg("30")).unwrap();
    let mut procs = Vec::new();
    let seen = eventually(Duration::from_secs(5), || {
        procs = processes_mentioning(&format!("/{}/", sbx.id()))
            .into_iter()
            .filter(|(_, comm)| comm == "sleep")
            .collect();
        !procs.is_empty()
    });
    assert!(seen, "control: the scan did not find the sandboxed sleep");
    for (pid, _) in &procs {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let uids = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap().to_owned();
        assert!(
            uids.split_whitespace().all(|u| u != "0"),
            "sandboxed pid {pid} runs with a host uid 0: {uids}"
        );
    }
    block_on(stream.close()).unwrap();
    block_on(sbx.close()).unwrap();
}

/// A host user other than the caller, to try the sandbox's plant with (`sandboxio-ci`, which
/// CI creates).
const OTHER_USER: &str = "sandboxio-ci";

#[test]
fn class_02__no_host_user_can_reach_what_a_root_callers_sandbox_plants() {
    let test = "class_02__no_host_user_can_reach_what_a_root_callers_sandbox_plants";
    if !is_root() {
        println!("[n/a] {test}: the caller is not root (its sandboxes run as the caller)");
        return;
    }
    let known = std::process::Command::new("id").arg(OTHER_USER).output().is_ok_and(|o| o.status.success());
    if !known {
        crate::support::skip(test, &format!("no host user {OTHER_USER} to try the plant with"));
        return;
    }
    let sbx = local(NetworkPolicy::deny_all());
    // The sandbox opens its workspace up and plants a setuid shell there.
    let plant = "cp /bin/sh ./sh && chmod 4755 ./sh && chmod 755 . && echo planted";
    let out = block_on(sbx.run(Command::shell(plant))).unwrap();
    assert_eq!(out.stdout, b"planted\n", "{}", out.stderr_lossy());
    let planted = crate::support::local_root().join(sbx.id()).join("workspace/sh");
    // Positive control: the plant is there, setuid, on the host.
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&planted).unwrap().permissions());
    assert!(mode & 0o4000 != 0, "control: the planted shell is not setuid ({mode:o})");
    // The other user cannot reach it, whatever the sandbox did to its modes.
    let tried = std::process::Command::new("runuser")
        .args(["-u", OTHER_USER, "--"])
        .arg(&planted)
        .args(["-p", "-c", "id -u"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&tried.stdout).trim().to_owned();
    assert!(
        !tried.status.success() && said.is_empty(),
        "host user {OTHER_USER} ran the sandbox's plant: uid {said}"
    );
    block_on(sbx.close()).unwrap();
}
