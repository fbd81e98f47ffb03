//! Getting out through the owner: a descriptor the owner process holds without
//! close-on-exec (a directory, here host `/tmp`) must not be open inside a sandbox, where it
//! would lead past every namespace.

use std::io::Read as _;

use sandboxio::{Command, NetworkPolicy};

use crate::support::{block_on, child_role, local};

/// The child: runs with fd 100 open on host `/tmp` (inherited from the shell that started
/// it). Prints `CONTROL <where fd 100 leads here>` and `INSIDE <what fd 100 is inside>`.
#[test]
fn class_16__leaked_descriptor_child() {
    if child_role().as_deref() != Some("leaked-fd") {
        return;
    }
    let here = std::fs::read_link("/proc/self/fd/100").map(|p| p.display().to_string()).unwrap_or_default();
    println!("CONTROL {here}");
    let sbx = local(NetworkPolicy::deny_all());
    let out = block_on(
        sbx.run(Command::shell("readlink /proc/self/fd/100 || echo closed; ls /proc/self/fd | tr '\\n' ' '")),
    )
    .unwrap();
    println!("INSIDE {}", out.stdout_lossy().replace('\n', " "));
    block_on(sbx.close()).unwrap();
}

#[test]
fn class_16__an_owners_leaked_descriptor_is_not_open_inside() {
    if child_role().is_some() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new("/bin/bash")
        .arg("-c")
        .arg(r#"exec 100</tmp; exec "$0" "$@""#)
        .arg(&exe)
        .args([
            "--exact",
            "local::class_16_leaked_descriptors::class_16__leaked_descriptor_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SANDBOXIO_ADVERSARIAL_CHILD", "leaked-fd")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(child.wait().unwrap().success(), "the child failed: {out}");
    let field = |key: &str| {
        out.lines().find_map(|l| l.split_once(key).map(|(_, r)| r.trim().to_owned())).unwrap_or_default()
    };
    // Positive control: the owner really holds the descriptor.
    assert_eq!(field("CONTROL "), "/tmp", "control: the owner does not hold fd 100 on /tmp: {out}");
    let inside = field("INSIDE ");
    assert!(inside.starts_with("closed"), "fd 100 is open inside the sandbox: {inside}");
    let fds: Vec<&str> = inside.trim_start_matches("closed").split_whitespace().collect();
    assert!(
        fds.iter().all(|fd| ["0", "1", "2", "3"].contains(fd)),
        "descriptors open inside besides stdio: {fds:?}"
    );
}
