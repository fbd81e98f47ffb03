//! Attacks on sandboxd from inside a sandbox, the same on every backend that runs it as
//! the init of the sandbox's PID namespace (`docker/` and `local/` class 17 call them on
//! their own sandboxes). Each pairs its refusals with a positive control in the same run.

use std::time::Duration;

use sandboxio::{Command, Sandbox};

use crate::support::block_on;

pub fn sh(sandbox: &Sandbox, script: &str) -> sandboxio::ExecResult {
    block_on(sandbox.run(Command::shell(script).timeout(Duration::from_secs(30)))).unwrap()
}

/// Signals, `/proc` and `ptrace`-style access against PID 1 and the command's own shepherd
/// (its parent); the sandbox must still answer afterwards.
pub fn signals_and_proc(sandbox: &Sandbox) {
    // Positive control: a command can signal, and read the environment of, its own child.
    let own = sh(
        sandbox,
        "sleep 100 & c=$!; sleep 0.2; tr '\\0' '\\n' < /proc/$c/environ | grep -c PATH; kill -KILL $c; wait $c; echo rc=$?",
    );
    assert!(own.stdout_lossy().contains("rc=137"), "the control cannot signal its own child: {own:?}");
    assert!(own.stdout_lossy().starts_with('1'), "the control cannot read its own child's environ: {own:?}");
    for signal in ["KILL", "TERM", "STOP", "INT", "HUP"] {
        // A user of the shepherd's uid (a root user on docker://, every user on local://)
        // may signal it: that ends the command (reported as an error), and nothing else.
        let _ =
            block_on(sandbox.run(Command::shell(format!("kill -{signal} 1; kill -{signal} $PPID; exit 0"))));
        let state = sh(sandbox, "grep '^State:' /proc/1/status");
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
        let out = sh(sandbox, &format!("{script} >/dev/null 2>&1 && echo REACHED"));
        assert!(!out.stdout_lossy().contains("REACHED"), "a command read {what}: {out:?}");
    }
    // A command holds only its standard streams: nothing of the session's stream.
    let fds = sh(sandbox, "ls /proc/self/fd");
    let listed: Vec<String> = fds.stdout_lossy().split_whitespace().map(str::to_owned).collect();
    assert!(listed.contains(&"2".to_owned()), "the control lists no descriptor: {fds:?}");
    assert!(listed.len() <= 4, "a command holds more than its standard streams: {listed:?}");
    let after = sh(sandbox, "echo alive");
    assert_eq!(after.stdout_lossy(), "alive\n", "the sandbox stopped answering: {after:?}");
}

/// The file API follows links the code plants, inside the sandbox, but never into
/// sandboxd's own process files: sandboxd does the file operations itself, and the kernel
/// lets a process read and write its own `/proc` entries (`environ`, `mem`, `comm`) where it
/// refuses the code, a root sandbox user included. The links go in `dir`, a directory the
/// user may write.
pub fn file_api_never_serves_sandboxd(sandbox: &Sandbox, dir: &str) {
    let planted = sh(
        sandbox,
        &format!(
            "cd {dir} && ln -sf /proc/version version && ln -sf /proc/1/environ pid1-environ && \
             ln -sf /proc/self/environ self-environ && ln -sf /proc/self/mem self-mem && \
             ln -sf /proc/1/comm pid1-comm && cat /proc/1/comm"
        ),
    );
    assert_eq!(planted.stdout_lossy(), "sandboxd\n", "control: the links or PID 1's name: {planted:?}");
    // Positive control: the API follows a planted link into /proc.
    let version = block_on(sandbox.fs().read(&format!("{dir}/version")));
    assert!(
        version.as_ref().is_ok_and(|v| v.starts_with(b"Linux")),
        "control: a link into /proc is not followed: {version:?}"
    );
    for link in ["pid1-environ", "self-environ", "self-mem"] {
        let read = block_on(sandbox.fs().read(&format!("{dir}/{link}")));
        assert!(read.is_err(), "the file API read sandboxd's {link}: {} bytes", read.map_or(0, |d| d.len()));
    }
    let wrote = block_on(sandbox.fs().write(&format!("{dir}/pid1-comm"), "pwned"));
    assert!(wrote.is_err(), "the file API wrote sandboxd's comm: {wrote:?}");
    let after = sh(sandbox, &format!("cat /proc/1/comm; [ -L {dir}/pid1-comm ] && echo link"));
    assert_eq!(after.stdout_lossy(), "sandboxd\nlink\n", "sandboxd's name or the link changed: {after:?}");
}

/// Output that looks like sandboxd's frames is output: a command cannot end itself, or
/// another command, with a forged `Exit`.
pub fn forged_frames(sandbox: &Sandbox) {
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
    let out = sh(sandbox, &script);
    assert_eq!(out.exit_code(), Some(3), "{out:?}");
    assert_eq!(out.stdout, frames, "the printed frames did not come back as output");
    let after = sh(sandbox, "echo alive");
    assert_eq!(after.stdout_lossy(), "alive\n", "{after:?}");
}

/// Every change a command may try on sandboxd's bound binary and its directory fails;
/// `extra` are further attempts a backend refuses too.
pub fn binary_unchanged(sandbox: &Sandbox, extra: &[(&str, &str)]) {
    let shared = [
        ("append to it", "echo x >> /.sandboxio/sandboxd"),
        ("truncate it", ": > /.sandboxio/sandboxd"),
        ("change its mode", "chmod 777 /.sandboxio/sandboxd"),
        ("remove it", "rm -f /.sandboxio/sandboxd"),
        ("add a file beside it", "echo x > /.sandboxio/planted"),
        ("replace it", "cp /bin/sh /.sandboxio/sandboxd"),
    ];
    for (what, script) in shared.iter().chain(extra) {
        let out = sh(sandbox, &format!("{script} 2>/dev/null && echo CHANGED"));
        assert!(!out.stdout_lossy().contains("CHANGED"), "a command could {what}: {out:?}");
    }
}
