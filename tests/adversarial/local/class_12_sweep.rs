//! Class 12: no workspace outlives `close()` unseen: a sandbox closed while busy, or whose
//! code locked its directories, leaves nothing, or leaves what `reap` finds.

use std::time::Duration;

use sandboxio::backends::ReapOptions;
use sandboxio::backends::local::LocalBackend;
use sandboxio::{Command, NetworkPolicy};

use crate::support::{block_on, eventually, local, local_root};

#[test]
fn class_12__close_while_busy_with_locked_directories_leaves_no_workspace() {
    let sbx = local(NetworkPolicy::deny_all());
    let dir = local_root().join(sbx.id());
    // Busy: a writer creating files as fast as it can, and directories locked with mode 0.
    let setup =
        "mkdir -p locked/deep/er && touch locked/deep/er/f && chmod 0 locked/deep/er locked/deep locked";
    let out = block_on(sbx.run(Command::shell(setup))).unwrap();
    assert!(out.success(), "{}", out.stderr_lossy());
    let _busy =
        sbx.stream(Command::shell("i=0; while :; do mkdir -p w/$i; : > w/$i/f; i=$((i+1)); done")).unwrap();
    // Positive control: the tree is really there on the host, and growing.
    assert!(
        eventually(Duration::from_secs(5), || dir.join("workspace/w/20").exists()),
        "control: the writer never wrote"
    );
    assert!(dir.join("workspace/locked").exists(), "control: the locked directory is not there");
    block_on(sbx.close()).unwrap();
    let left = dir.exists();
    // Whatever close could not remove, the sweep must find.
    let report = block_on(LocalBackend::new().reap(ReapOptions::default())).unwrap();
    assert!(!left, "close() left {} behind (reap then removed {:?})", dir.display(), report.removed);
}

/// A stand-in for a bwrap child orphaned while its owner died, whose sandbox directory is
/// gone: a process of the uid sandboxes run as, with a sandbox's mark in its argv.
fn orphan(id: &str) -> std::process::Child {
    let argv = format!("--tmpfs /run/sandboxio/{id}/0 --bind /nonexistent/{id}/workspace /workspace");
    let mut cmd = if crate::support::is_root() {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid", "2000000000", "--regid", "2000000000", "--clear-groups", "--", "/bin/sh"]);
        c
    } else {
        std::process::Command::new("/bin/sh")
    };
    cmd.args(["-c", "sleep 300", "bwrap"]).args(argv.split(' '));
    cmd.spawn().unwrap()
}

#[test]
fn class_12__reap_kills_processes_of_sandboxes_whose_directory_is_gone() {
    let id = format!("local-0rphan{}", std::process::id());
    let mut child = orphan(&id);
    let backend = LocalBackend::new();
    // Positive control: the stand-in carries the mark the backend finds.
    assert!(
        eventually(Duration::from_secs(5), || !backend.running_processes(&id).is_empty()),
        "control: the orphan's mark is not found"
    );
    block_on(backend.reap(ReapOptions::default())).unwrap();
    let gone = eventually(Duration::from_secs(5), || child.try_wait().is_ok_and(|s| s.is_some()));
    let _ = child.kill();
    let _ = child.wait();
    assert!(gone, "reap left a process of a sandbox whose directory is gone");
}
