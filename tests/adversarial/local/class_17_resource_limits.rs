//! Class 17 (`local://`): code cannot change sandboxd's resource limits. Every process of a
//! `local://` sandbox has one uid, and the kernel lets a process set the limits of another of
//! its uid (`prlimit64`) without the ptrace check that keeps sandboxd's memory and
//! descriptors out of reach. On main at `ce3d8bd`, a command set sandboxd's descriptor limit
//! to 12 and every later command and code cell of the sandbox failed ("starting the command:
//! Too many open files"); a shepherd's limit would blind the probe that checks a runner is
//! out of reach. The seccomp filter now refuses `prlimit64` on another process with new
//! limits; a process's own limits (`setrlimit`, `ulimit`) are untouched.

use std::time::Duration;

use sandboxio::{Command, NetworkPolicy};

use crate::fs_attacks::sh;
use crate::support::{block_on, local, skip};

/// Sets the descriptor limit of the process whose pid is its argument (0: itself) to 12 and
/// says `SET <soft> <hard>` as read back, or `REFUSED <errno>`.
const PAYLOAD: &str = "import resource as r, sys
pid = int(sys.argv[1])
try:
    r.prlimit(pid, r.RLIMIT_NOFILE, (12, 12))
    print('SET %d %d' % r.prlimit(pid, r.RLIMIT_NOFILE))
except OSError as e:
    print('REFUSED %d' % e.errno)
";

fn payload(pid: &str) -> String {
    format!("python3 -c \"{}\" {pid}", PAYLOAD.replace('"', "\\\""))
}

#[test]
fn class_17__code_cannot_change_sandboxds_resource_limits() {
    let test = "local_class_17__code_cannot_change_sandboxds_resource_limits";
    // The control, unconfined: the payload sets a host process's limit (a child of this test,
    // the same user), which the kernel allows.
    let mut host_child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let host = std::process::Command::new("sh").arg("-c").arg(payload(&host_child.id().to_string())).output();
    let _ = host_child.kill();
    let _ = host_child.wait();
    match host {
        Ok(out) if String::from_utf8_lossy(&out.stdout).trim() == "SET 12 12" => {}
        other => return skip(test, &format!("the payload does not set a host process's limit: {other:?}")),
    }
    let sbx = local(NetworkPolicy::deny_all());
    // The control inside: a command's own limits are its to set.
    let own = sh(&sbx, &payload("0"));
    assert_eq!(
        own.stdout_lossy().trim(),
        "SET 12 12",
        "{test}: control: a command sets its own limit: {own:?}"
    );
    let before = sh(&sbx, "grep 'Max open files' /proc/1/limits");
    let attack = sh(&sbx, &payload("1"));
    let after = sh(&sbx, "grep 'Max open files' /proc/1/limits");
    assert_eq!(before.stdout_lossy(), after.stdout_lossy(), "{test}: sandboxd's limit changed: {attack:?}");
    assert!(
        attack.stdout_lossy().starts_with("REFUSED"),
        "{test}: code set sandboxd's descriptor limit: {attack:?}"
    );
    let later = block_on(sbx.run(Command::new("true").timeout(Duration::from_secs(30))));
    assert!(later.is_ok_and(|r| r.success()), "{test}: a later command must still start");
    block_on(sbx.close()).unwrap();
}
