//! Class 17: the sandboxed code attacks sandboxd, the supervisor that runs as the
//! container's PID 1 on the sandboxd path (`docker://`, the default): it signals it,
//! reads its memory and descriptors, rewrites or replaces its binary, forges its frames and
//! floods its stream. As the image's sandbox user and as a root sandbox user (commands hold
//! no capability either way). Every refusal is paired with the same operation succeeding
//! where it is allowed.

use futures_lite::StreamExt as _;
use sandboxio::{Command, NetworkPolicy, Sandbox};

use crate::sandboxd_attacks::{self, sh};
use crate::support::{self, block_on};

fn sandbox(user: Option<&str>) -> Sandbox {
    let dsn = match user {
        Some(user) => format!("docker://?image={}&user={user}&exec=sandboxd", support::DOCKER_IMAGE),
        None => format!("docker://?image={}&exec=sandboxd", support::DOCKER_IMAGE),
    };
    block_on(Sandbox::builder(&dsn).unwrap().network(NetworkPolicy::deny_all()).create()).unwrap()
}

/// Signals, `/proc` and `ptrace`-style access against PID 1 and the command's own shepherd
/// (its parent).
fn signals_and_proc(user: Option<&str>) {
    let sandbox = sandbox(user);
    sandboxd_attacks::signals_and_proc(&sandbox);
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

#[test]
fn class_17__the_file_api_never_serves_sandboxds_own_process_files() {
    const TEST: &str = "class_17__the_file_api_never_serves_sandboxds_own_process_files";
    if support::docker_ready(TEST) {
        for user in [None, Some("0")] {
            let sandbox = sandbox(user);
            sandboxd_attacks::file_api_never_serves_sandboxd(&sandbox, "/tmp");
            let _ = block_on(sandbox.kill());
        }
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
    sandboxd_attacks::binary_unchanged(&sandbox, &[]);
    let same = sh(&sandbox, "stat -c '%u %a %s' /.sandboxio/sandboxd /.sandboxio");
    let said = same.stdout_lossy();
    let lines: Vec<&str> = said.lines().map(str::trim).collect();
    assert_eq!(lines.len(), 2, "{same:?}");
    assert!(lines[0].starts_with("2147480001 555 "), "sandboxd's file changed: {same:?}");
    assert!(lines[1].starts_with("2147480001 555 "), "sandboxd's directory changed: {same:?}");
    if root {
        // Declared: a root user may rename the directory (its parent is root's) where
        // sandboxd was uploaded, and plant another; the running sandboxd is not its file and
        // keeps serving. Where the image holds sandboxd (baked in by scripts/build-images: a
        // lower layer of the overlay) the rename fails: overlayfs will not rename a lower
        // directory, and `mv`'s copy can neither keep the owner nor remove the original.
        let moved = sh(
            &sandbox,
            "mv /.sandboxio /.moved && mkdir /.sandboxio && cp /bin/sh /.sandboxio/sandboxd && echo MOVED",
        );
        if !moved.stdout_lossy().contains("MOVED") {
            let kept = sh(&sandbox, "stat -c '%u %a %s' /.sandboxio/sandboxd");
            assert_eq!(kept.stdout_lossy().trim(), lines[0], "a refused rename changed sandboxd: {moved:?}");
        }
        println!("root's rename of /.sandboxio: {moved:?}");
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
    sandboxd_attacks::forged_frames(&sandbox);
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
