//! Class 17 on `local://`: the sandboxed code attacks sandboxd, the init of the sandbox's
//! PID namespace: it signals it and its own shepherd, reads their memory and descriptors
//! through `/proc`, rewrites or replaces the bound binary, forges frames, and puts a socket
//! of its own where sandboxd's socket used to be (`class_17_inside_sessions.rs`: it can no
//! longer reach sandboxd's socket at all). Commands run as sandboxd's own
//! uid here (the user namespace maps one), with no capability. Every refusal is paired with
//! the same operation succeeding where it is allowed.

use sandboxio::{Command, NetworkPolicy, Sandbox};

use crate::sandboxd_attacks::{self, sh};
use crate::support::{block_on, local};

#[test]
fn class_17__sandboxd_cannot_be_signalled_or_read_by_the_sandbox_user() {
    let sandbox = local(NetworkPolicy::deny_all());
    let pid1 = sh(&sandbox, "cat /proc/1/comm");
    assert_eq!(pid1.stdout_lossy(), "sandboxd\n", "control: PID 1 is not sandboxd: {pid1:?}");
    sandboxd_attacks::signals_and_proc(&sandbox);
    block_on(sandbox.close()).unwrap();
}

#[test]
fn class_17__the_file_api_never_serves_sandboxds_own_process_files() {
    let sandbox = local(NetworkPolicy::deny_all());
    sandboxd_attacks::file_api_never_serves_sandboxd(&sandbox, "/workspace");
    block_on(sandbox.close()).unwrap();
}

#[test]
fn class_17__sandboxds_binary_cannot_be_changed_by_the_sandbox_user() {
    let sandbox = local(NetworkPolicy::deny_all());
    // Positive control: the user writes where it may (the workspace and /tmp).
    let control = sh(&sandbox, "echo x > sbx-control && echo x > /tmp/sbx-control && echo WROTE");
    assert!(control.stdout_lossy().contains("WROTE"), "the control write failed: {control:?}");
    let before = sh(&sandbox, "stat -c '%i %a %s' /.sandboxio/sandboxd");
    sandboxd_attacks::binary_unchanged(
        &sandbox,
        &[
            ("rename its directory", "mv /.sandboxio /.moved"),
            ("make a directory at the root", "mkdir /.sandboxio2"),
        ],
    );
    let after = sh(&sandbox, "stat -c '%i %a %s' /.sandboxio/sandboxd");
    assert!(
        before.success() && before.stdout == after.stdout,
        "sandboxd's file changed: {before:?} {after:?}"
    );
    assert!(after.stdout_lossy().contains(" 555 "), "sandboxd's file is not read-only: {after:?}");
    block_on(sandbox.close()).unwrap();
}

/// Output that looks like sandboxd's frames is output: a command cannot end itself, or
/// another command, with a forged `Exit`.
#[test]
fn class_17__frames_a_command_prints_are_its_output_not_sandboxds() {
    let sandbox = local(NetworkPolicy::deny_all());
    sandboxd_attacks::forged_frames(&sandbox);
    block_on(sandbox.close()).unwrap();
}

/// The code can write the `run` directory bound into the sandbox (the egress gate's), where
/// sandboxd's socket was before issue #27, and puts its own listener there, answering
/// anything with a forged frame: `connect` never looks inside the sandbox, and reaches the
/// real sandboxd.
#[test]
fn class_17__a_socket_planted_inside_is_never_what_connect_reaches() {
    let sandbox = local(NetworkPolicy::deny_all());
    let planted = "import os, socket, time\n\
        p = '/run/sandboxio/sandboxd.sock'\n\
        s = socket.socket(socket.AF_UNIX); s.bind(p); s.listen(8)\n\
        print('planted', flush=True)\n\
        s.settimeout(20)\n\
        while True:\n    c, _ = s.accept(); c.sendall(bytes(64)); c.close()\n";
    let mut stream = sandbox.stream(Command::new("python3").arg("-c").arg(planted)).unwrap();
    let first = block_on(futures_lite::StreamExt::next(&mut stream)).unwrap().unwrap();
    assert_eq!(first.data, b"planted\n", "control: the planted listener did not start");
    // Positive control: the planted listener answers whoever reaches it.
    let reached = sh(
        &sandbox,
        "python3 -c \"import socket; c = socket.socket(socket.AF_UNIX); \
         c.connect('/run/sandboxio/sandboxd.sock'); print(len(c.recv(64)))\"",
    );
    assert_eq!(
        reached.stdout_lossy(),
        "64\n",
        "control: the planted listener cannot be reached: {reached:?}"
    );
    let attached = block_on(Sandbox::connect("local://", sandbox.id())).unwrap();
    let out = block_on(attached.run(Command::new("echo").arg("real"))).unwrap();
    assert_eq!(out.stdout, b"real\n", "connect did not reach the real sandboxd: {out:?}");
    block_on(attached.close()).unwrap();
    drop(stream);
    // The owner's session is untouched.
    let after = sh(&sandbox, "echo alive");
    assert_eq!(after.stdout_lossy(), "alive\n", "{after:?}");
    block_on(sandbox.close()).unwrap();
}
