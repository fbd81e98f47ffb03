//! Class 17: the sandboxed code attacks sandboxd, the supervisor that runs as the
//! container's PID 1 on the sandboxd path (`docker://`, the default): it signals it,
//! reads its memory and descriptors, rewrites or replaces its binary, forges its frames and
//! floods its stream. As the image's sandbox user and as a root sandbox user (commands hold
//! no capability either way). Every refusal is paired with the same operation succeeding
//! where it is allowed.

use std::time::Duration;

use futures_lite::StreamExt as _;
use sandboxio::{Command, NetworkPolicy, Sandbox};

use crate::support::{self, block_on};

fn sandbox(user: Option<&str>) -> Sandbox {
    let dsn = match user {
        Some(user) => format!("docker://?image={}&user={user}&exec=sandboxd", support::DOCKER_IMAGE),
        None => format!("docker://?image={}&exec=sandboxd", support::DOCKER_IMAGE),
    };
    block_on(Sandbox::builder(&dsn).unwrap().network(NetworkPolicy::deny_all()).create()).unwrap()
}

fn sh(sandbox: &Sandbox, script: &str) -> sandboxio::ExecResult {
    block_on(sandbox.run(Command::shell(script).timeout(Duration::from_secs(30)))).unwrap()
}

/// Signals, `/proc` and `ptrace`-style access against PID 1 and the command's own shepherd
/// (its parent).
fn signals_and_proc(user: Option<&str>) {
    let sandbox = sandbox(user);
    // Positive control: a command can signal, and read the environment of, its own child.
    let own = sh(
        &sandbox,
        "sleep 100 & c=$!; sleep 0.2; tr '\\0' '\\n' < /proc/$c/environ | grep -c PATH; kill -KILL $c; wait $c; echo rc=$?",
    );
    assert!(own.stdout_lossy().contains("rc=137"), "the control cannot signal its own child: {own:?}");
    assert!(own.stdout_lossy().starts_with('1'), "the control cannot read its own child's environ: {own:?}");
    for signal in ["KILL", "TERM", "STOP", "INT", "HUP"] {
        // A root user may signal its own command's shepherd (same uid): that ends the
        // command (reported as an error), and nothing else.
        let _ =
            block_on(sandbox.run(Command::shell(format!("kill -{signal} 1; kill -{signal} $PPID; exit 0"))));
        let state = sh(&sandbox, "grep '^State:' /proc/1/status");
        assert!(state.stdout_lossy().contains("State:"), "SIG{signal}: PID 1 is gone: {state:?}");
        assert!(!state.stdout_lossy().contains("stopped"), "SIG{signal} stopped PID 1: {state:?}");
    }
    for (what, script) in [
        ("PID 1's environ", "cat /proc/1/environ"),
        ("PID 1's memory", "head -c 16 /proc/1/mem"),
        // (A root user may list the names in /proc/1/fd, the directory being root's; opening
        // or resolving a descriptor is the ptrace check that counts.)
        ("PID 1's descriptors", "readlink /proc/1/fd/0 || readlink /proc/1/fd/1"),
        ("PID 1's session stream", "echo forged > /proc/1/fd/1"),
        ("the shepherd's environ", "cat /proc/$PPID/environ"),
        ("the shepherd's descriptors", "readlink /proc/$PPID/fd/0"),
    ] {
        let out = sh(&sandbox, &format!("{script} >/dev/null 2>&1 && echo REACHED"));
        assert!(!out.stdout_lossy().contains("REACHED"), "a command read {what}: {out:?}");
    }
    // A command holds only its standard streams: nothing of the session's stream.
    let fds = sh(&sandbox, "ls /proc/self/fd");
    let listed: Vec<String> = fds.stdout_lossy().split_whitespace().map(str::to_owned).collect();
    assert!(listed.contains(&"2".to_owned()), "the control lists no descriptor: {fds:?}");
    assert!(listed.len() <= 4, "a command holds more than its standard streams: {listed:?}");
    let after = sh(&sandbox, "echo alive");
    assert_eq!(after.stdout_lossy(), "alive\n", "the sandbox stopped answering: {after:?}");
    let _ = block_on(sandbox.kill());
}

#[test]
fn class_17__sandboxd_cannot_be_signalled_or_read_by_the_sandbox_user() {
    const TEST: &str = "class_17__sandboxd_cannot_be_signalled_or_read_by_the_sandbox_user";
    if support::docker_ready(TEST) {
        signals_and_proc(None);
    }
}

#[test]
fn class_17__sandboxd_cannot_be_signalled_or_read_by_a_root_sandbox_user() {
    const TEST: &str = "class_17__sandboxd_cannot_be_signalled_or_read_by_a_root_sandbox_user";
    if support::docker_ready(TEST) {
        signals_and_proc(Some("0"));
    }
}

/// The binary and its directory refuse every change but the rename a root user may make of
/// the directory, which the running sandboxd does not notice.
fn binary(user: Option<&str>, root: bool) {
    let sandbox = sandbox(user);
    // Positive control: the user can write where it may (its home, or as root /etc).
    let writable = if root { "/etc/sbx-control" } else { "$HOME/sbx-control" };
    let control = sh(&sandbox, &format!("echo x > {writable} && echo WROTE"));
    assert!(control.stdout_lossy().contains("WROTE"), "the control write failed: {control:?}");
    for (what, script) in [
        ("append to it", "echo x >> /.sandboxio/sandboxd"),
        ("truncate it", ": > /.sandboxio/sandboxd"),
        ("change its mode", "chmod 777 /.sandboxio/sandboxd"),
        ("remove it", "rm -f /.sandboxio/sandboxd"),
        ("add a file beside it", "echo x > /.sandboxio/planted"),
        ("replace it", "cp /bin/sh /.sandboxio/sandboxd"),
    ] {
        let out = sh(&sandbox, &format!("{script} 2>/dev/null && echo CHANGED"));
        assert!(!out.stdout_lossy().contains("CHANGED"), "a command could {what}: {out:?}");
    }
    let same = sh(&sandbox, "stat -c '%u %a %s' /.sandboxio/sandboxd /.sandboxio");
    let said = same.stdout_lossy();
    let lines: Vec<&str> = said.lines().map(str::trim).collect();
    assert_eq!(lines.len(), 2, "{same:?}");
    assert!(lines[0].starts_with("2147480001 555 "), "sandboxd's file changed: {same:?}");
    assert!(lines[1].starts_with("2147480001 555 "), "sandboxd's directory changed: {same:?}");
    if root {
        // Declared: a root user may rename the directory (its parent is root's), and plant
        // another; the running sandboxd is not its file and keeps serving.
        let moved = sh(
            &sandbox,
            "mv /.sandboxio /.moved && mkdir /.sandboxio && cp /bin/sh /.sandboxio/sandboxd && echo MOVED",
        );
        assert!(moved.stdout_lossy().contains("MOVED"), "{moved:?}");
        let after = sh(&sandbox, "echo alive");
        assert_eq!(after.stdout_lossy(), "alive\n", "sandboxd stopped answering after the swap: {after:?}");
    }
    let _ = block_on(sandbox.kill());
}

#[test]
fn class_17__sandboxds_binary_cannot_be_changed_by_the_sandbox_user() {
    const TEST: &str = "class_17__sandboxds_binary_cannot_be_changed_by_the_sandbox_user";
    if support::docker_ready(TEST) {
        binary(None, false);
    }
}

#[test]
fn class_17__sandboxds_binary_cannot_be_changed_by_a_root_sandbox_user() {
    const TEST: &str = "class_17__sandboxds_binary_cannot_be_changed_by_a_root_sandbox_user";
    if support::docker_ready(TEST) {
        binary(Some("0"), true);
    }
}

/// Output that looks like sandboxd's frames is output: a command cannot end itself, or
/// another command, with a forged `Exit`.
#[test]
fn class_17__frames_a_command_prints_are_its_output_not_sandboxds() {
    const TEST: &str = "class_17__frames_a_command_prints_are_its_output_not_sandboxds";
    if !support::docker_ready(TEST) {
        return;
    }
    let sandbox = sandbox(None);
    // A well-formed `Exit` frame for ids 1 to 8 (header: length 6, kind 0x84, id; body:
    // status code 0), printed by a command that then exits 3.
    let mut frames = Vec::new();
    for id in 1u32..=8 {
        frames.extend_from_slice(&6u32.to_be_bytes());
        frames.push(0x84);
        frames.extend_from_slice(&id.to_be_bytes());
        frames.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    let octal = frames.iter().fold(String::new(), |mut out, b| {
        use std::fmt::Write as _;
        let _ = write!(out, "\\{b:03o}");
        out
    });
    let script = format!("printf '{octal}'; exit 3");
    let out = sh(&sandbox, &script);
    assert_eq!(out.exit_code(), Some(3), "{out:?}");
    assert_eq!(out.stdout, frames, "the printed frames did not come back as output");
    let after = sh(&sandbox, "echo alive");
    assert_eq!(after.stdout_lossy(), "alive\n", "{after:?}");
    let _ = block_on(sandbox.kill());
}

/// A command flooding its output while nobody reads it does not stall the sandbox's other
/// commands (the host's memory under an unread stream is class 4's `class_04_stream_memory`).
#[test]
fn class_17__a_flooding_command_does_not_stall_the_others() {
    const TEST: &str = "class_17__a_flooding_command_does_not_stall_the_others";
    if !support::docker_ready(TEST) {
        return;
    }
    let sandbox = sandbox(None);
    let mut flood = sandbox.stream(Command::new("yes").arg("flood")).unwrap();
    // Positive control: the flood runs.
    let first = block_on(flood.next()).expect("a first chunk").expect("a chunk");
    assert!(first.data.starts_with(b"flood"), "{first:?}");
    for _ in 0..20 {
        let out = sh(&sandbox, "echo beside");
        assert_eq!(out.stdout_lossy(), "beside\n", "{out:?}");
    }
    drop(flood);
    let _ = block_on(sandbox.kill());
}
