//! Class 12: no workspace outlives `close()` unseen: a sandbox closed while busy, or whose
//! code locked its directories, leaves nothing, or leaves what `reap` finds.

use std::time::Duration;

use sandboxio::backends::local::LocalBackend;
use sandboxio::inventory::ReapOptions;
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

/// Rewrites the owner in a sandbox's record to a process of this host that is gone (pid
/// 2^22 + 1 is above the kernel's `pid_max` limit, so no process ever has it).
fn orphan(dir: &std::path::Path) {
    let record = dir.join("sandbox");
    let text = std::fs::read_to_string(&record).unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_owned();
    let forged: String = text
        .lines()
        .map(|l| if l.starts_with("owner ") { format!("owner {host}:4194305:1\n") } else { format!("{l}\n") })
        .collect();
    std::fs::write(&record, forged).unwrap();
}

/// The host pid of a sandbox's sandboxd, from its record.
pub(super) fn sandboxd_pid(dir: &std::path::Path) -> u32 {
    let text = std::fs::read_to_string(dir.join("sandbox")).unwrap();
    let label = text.lines().find_map(|l| l.strip_prefix("sandboxd ")).expect("no sandboxd in the record");
    label.rsplit(':').nth(1).unwrap().parse().unwrap()
}

#[test]
fn class_12__reap_ends_a_dead_owners_sandbox_and_keeps_a_detached_one_until_its_ttl() {
    let backend = LocalBackend::new();
    let create = |detached: bool| {
        block_on(
            sandboxio::Sandbox::builder_with(backend.clone())
                .network(NetworkPolicy::deny_all())
                .detached(detached)
                .create(),
        )
        .unwrap()
    };
    let (owned, detached) = (create(false), create(true));
    let (owned_dir, detached_dir) = (local_root().join(owned.id()), local_root().join(detached.id()));
    for dir in [&owned_dir, &detached_dir] {
        orphan(dir);
    }
    let owned_pid = sandboxd_pid(&owned_dir);
    assert!(std::path::Path::new(&format!("/proc/{owned_pid}")).exists(), "control: sandboxd is not running");
    // Another process's sweep: this backend's own sandboxes are never its to take.
    let mut options = ReapOptions::new();
    options.owner_dead = true;
    let report = block_on(LocalBackend::new().reap(options)).unwrap();
    // Positive control: the forged dead owner makes the owned sandbox an orphan.
    assert!(
        report.removed.contains(&owned.id().to_owned()),
        "control: reap kept {} ({report:?})",
        owned.id()
    );
    assert!(
        eventually(Duration::from_secs(5), || !std::path::Path::new(&format!("/proc/{owned_pid}")).exists()),
        "reap removed the directory of {} but left its sandboxd running",
        owned.id()
    );
    assert!(
        !report.removed.contains(&detached.id().to_owned()),
        "reap removed a detached sandbox before its TTL"
    );
    let out = block_on(detached.run(Command::new("echo").arg("alive"))).unwrap();
    assert_eq!(out.stdout, b"alive\n");
    let _ = block_on(owned.kill());
    let _ = block_on(detached.kill());
}
