//! `Sandbox::fs` on the fake: round trips, binary safety, errors, no host escape.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use crate::support;

use std::os::unix::fs::PermissionsExt;

use sandboxio::{Command, ErrorCode, fs::FileKind};
use support::{block_on, fake_sandbox};

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sandboxio-fs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn filesystem__write_read_list_mkdir_remove_round_trip() {
    let (_, sbx) = fake_sandbox();
    let fs = sbx.fs();
    block_on(fs.write("deep/dir/file.bin", vec![0u8, 255, 10, 13])).unwrap();
    assert_eq!(block_on(fs.read("deep/dir/file.bin")).unwrap(), vec![0u8, 255, 10, 13]);
    block_on(fs.write("deep/dir/file.bin", "replaced")).unwrap();
    assert_eq!(block_on(fs.read_text("deep/dir/file.bin")).unwrap(), "replaced");
    block_on(fs.mkdir("a/b/c")).unwrap();
    block_on(fs.mkdir("a/b/c")).unwrap();
    let entries = block_on(fs.list("deep/dir")).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (entries[0].name.as_str(), entries[0].kind, entries[0].size, entries[0].mode),
        ("file.bin", FileKind::File, 8, 0o644)
    );
    assert_eq!(block_on(fs.list("a/b")).unwrap()[0].kind, FileKind::Dir);
    let err = block_on(fs.remove("a", false)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::IsADirectory);
    block_on(fs.remove("a", true)).unwrap();
    assert_eq!(block_on(fs.list("a")).unwrap_err().code(), ErrorCode::NotFound);
    // Files written through fs are what `run` sees.
    let out = block_on(sbx.run(Command::new("cat").arg("deep/dir/file.bin"))).unwrap();
    assert_eq!(out.stdout, b"replaced");
}

#[test]
fn filesystem__missing_path_raises_not_found_naming_it() {
    let (_, sbx) = fake_sandbox();
    let err = block_on(sbx.fs().read("nope/missing.txt")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
    assert!(err.to_string().contains("nope/missing.txt"), "{err}");
    assert_eq!(block_on(sbx.fs().read("/tmp")).unwrap_err().code(), ErrorCode::IsADirectory);
}

#[test]
fn filesystem__dot_dot_and_nul_are_refused() {
    let (fake, sbx) = fake_sandbox();
    for bad in ["../etc/passwd", "a/../../b", "a\0b", ""] {
        let err = block_on(sbx.fs().write(bad, "x")).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidInput, "{bad:?}");
    }
    assert!(fake.calls().iter().all(|c| c.path.is_none()), "nothing reached the backend");
}

#[test]
fn filesystem__upload_and_download_trees_keep_bytes_and_modes() {
    let (_, sbx) = fake_sandbox();
    let src = scratch("up");
    std::fs::create_dir_all(src.join("sub/inner")).unwrap();
    std::fs::write(src.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(src.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(src.join("sub/inner/data.bin"), [0u8, 1, 2, 255]).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", src.join("link")).unwrap();
    block_on(sbx.fs().upload(&src, "proj")).unwrap();
    let listing = block_on(sbx.fs().list("proj")).unwrap();
    let names: Vec<_> = listing.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["run.sh", "sub"], "the host symlink was not followed");
    assert_eq!(listing[0].mode, 0o755);
    assert_eq!(block_on(sbx.fs().read("proj/sub/inner/data.bin")).unwrap(), [0u8, 1, 2, 255]);

    let dst = scratch("down");
    block_on(sbx.fs().download("proj", dst.join("copy"))).unwrap();
    assert_eq!(std::fs::read(dst.join("copy/sub/inner/data.bin")).unwrap(), [0u8, 1, 2, 255]);
    let mode = std::fs::metadata(dst.join("copy/run.sh")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755);
    block_on(sbx.fs().download("proj/run.sh", dst.join("single.sh"))).unwrap();
    assert_eq!(std::fs::read_to_string(dst.join("single.sh")).unwrap(), "#!/bin/sh\necho hi\n");
}

#[test]
fn filesystem__calls_name_uploads_and_downloads_as_the_audit_log_does() {
    use sandboxio::audit::OperationKind as K;
    let (fake, sbx) = fake_sandbox();
    let src = scratch("calls");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/a.txt"), "a").unwrap();
    std::fs::write(src.join("b.txt"), "b").unwrap();
    fake.clear_calls();
    let audited_before = fake.audit_records().len();
    block_on(sbx.fs().upload(&src, "proj")).unwrap();
    block_on(sbx.fs().download("proj", src.join("back"))).unwrap();
    block_on(sbx.fs().download("proj/b.txt", src.join("b.copy"))).unwrap();
    block_on(sbx.fs().write("c.txt", "c")).unwrap();
    block_on(sbx.kill()).unwrap();
    let err = block_on(sbx.fs().upload(&src, "late")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::SandboxGone);

    let calls = fake.calls();
    let kinds: Vec<_> = calls.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [K::FsUpload, K::FsDownload, K::FsDownload, K::FsWrite, K::Kill, K::FsUpload]);
    let paths: Vec<_> = calls.iter().map(|c| c.path.as_deref()).collect();
    assert_eq!(paths, [Some("proj"), Some("proj"), Some("proj/b.txt"), Some("c.txt"), None, Some("late")]);
    let audited: Vec<_> = fake.audit_records()[audited_before..].iter().map(|r| r.kind).collect();
    assert_eq!(kinds, audited, "calls() names operations as the audit log does");
    // The transfers themselves happened.
    assert_eq!(std::fs::read_to_string(src.join("back/sub/a.txt")).unwrap(), "a");
    assert_eq!(std::fs::read_to_string(src.join("b.copy")).unwrap(), "b");
}

#[test]
#[cfg(feature = "contract")] // `plant_symlink` is a test-only hook
fn filesystem__download_never_follows_links_or_escapes_the_host_target() {
    let (fake, sbx) = fake_sandbox();
    block_on(sbx.fs().write("out/ok.txt", "fine")).unwrap();
    fake.plant_symlink(sbx.id(), "out/evil", "/etc/passwd").unwrap();
    let dst = scratch("escape");
    block_on(sbx.fs().download("out", dst.join("o"))).unwrap();
    assert!(dst.join("o/ok.txt").exists());
    assert!(std::fs::symlink_metadata(dst.join("o/evil")).is_err(), "the sandbox link was skipped");
    // A host target that is itself a symlink is never written through.
    std::os::unix::fs::symlink(dst.join("elsewhere"), dst.join("trap")).unwrap();
    let err = block_on(sbx.fs().download("out/ok.txt", dst.join("trap"))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidInput);
    assert!(!dst.join("elsewhere").exists());
    let err = block_on(sbx.fs().upload(dst.join("no-such-host-file"), "x")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
}

#[test]
fn filesystem__download_drops_setuid_setgid_and_sticky_bits() {
    let (_, sbx) = fake_sandbox();
    let src = scratch("suid");
    std::fs::write(src.join("tool"), "x").unwrap();
    std::fs::set_permissions(src.join("tool"), std::fs::Permissions::from_mode(0o6755)).unwrap();
    block_on(sbx.fs().upload(src.join("tool"), "tool")).unwrap();
    assert_eq!(block_on(sbx.fs().list(".")).unwrap().iter().find(|e| e.name == "tool").unwrap().mode, 0o755);
    let dst = scratch("suid-down");
    block_on(sbx.fs().download("tool", dst.join("tool"))).unwrap();
    let mode = std::fs::metadata(dst.join("tool")).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o755);
}

mod hostile {
    //! A backend whose listing tries to escape the host target.
    use sandboxio::backend::{Backend, BackendSandbox, BoxFuture, CreateSpec, KillOutcome};
    use sandboxio::{
        Result,
        fs::{DirEntry, FileKind},
        policy::Capabilities,
    };

    #[derive(Debug)]
    pub struct Hostile;

    #[derive(Debug)]
    struct HostileSandbox;

    /// How many `read` futures of the hostile backend were dropped before they ended.
    pub static DROPPED_READS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    struct CountDrop;

    impl Drop for CountDrop {
        fn drop(&mut self) {
            DROPPED_READS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    impl Backend for Hostile {
        fn scheme(&self) -> &'static str {
            "hostile"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FILESYSTEM | Capabilities::NETWORK_DENY
        }
        fn create(&self, _: CreateSpec) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
            Box::pin(async { Ok(Box::new(HostileSandbox) as Box<dyn BackendSandbox>) })
        }
    }

    impl BackendSandbox for HostileSandbox {
        fn id(&self) -> &'static str {
            "hostile-1"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FILESYSTEM
        }
        fn list(&self, path: &str) -> BoxFuture<'_, Result<Vec<DirEntry>>> {
            let entries = if path == "." {
                vec![DirEntry::new("out", FileKind::Dir, 0, 0o755)]
            } else {
                vec![DirEntry::new("../../escaped", FileKind::File, 1, 0o644)]
            };
            Box::pin(async move { Ok(entries) })
        }
        fn read(&self, path: &str, _: u64) -> BoxFuture<'_, Result<Vec<u8>>> {
            // `forever` never ends, as a FIFO would: only the core's deadline ends the call.
            let forever = path.ends_with("forever");
            Box::pin(async move {
                if forever {
                    let _guard = CountDrop;
                    std::future::pending::<()>().await;
                }
                Ok(b"x".to_vec())
            })
        }
        fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
            Box::pin(async { Ok(KillOutcome::Killed) })
        }
    }
}

#[test]
fn filesystem__a_hostile_listing_cannot_escape_the_host_target() {
    let sbx = block_on(
        sandboxio::Sandbox::builder_with(hostile::Hostile)
            .network(sandboxio::NetworkPolicy::deny_all())
            .create(),
    )
    .unwrap();
    let dst = scratch("hostile");
    let err = block_on(sbx.fs().download("out", dst.join("a/b"))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidInput, "{err}");
    assert!(err.to_string().contains("escape"), "{err}");
    assert!(!dst.join("escaped").exists() && !dst.join("a/escaped").exists());
    block_on(sbx.close()).unwrap();
}

#[test]
fn filesystem__every_operation_has_a_deadline_and_is_dropped_at_it() {
    let sbx = block_on(
        sandboxio::Sandbox::builder_with(hostile::Hostile)
            .network(sandboxio::NetworkPolicy::deny_all())
            .create(),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let err = block_on(sbx.fs().timeout(std::time::Duration::from_millis(100)).read("forever")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ExecutionTimeout, "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(
        hostile::DROPPED_READS.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the backend's operation is dropped at the deadline (which kills its process)"
    );
    // The blocking facade has the same knobs.
    let blocking = sandboxio::sync::Sandbox::from(sbx);
    let err = blocking.fs().timeout(std::time::Duration::from_millis(100)).read("forever").unwrap_err();
    assert_eq!(err.code(), ErrorCode::ExecutionTimeout);
    assert_eq!(blocking.fs().read_limit(1).read("x").unwrap(), b"x");
    // Extreme knobs are values, not panics.
    assert_eq!(blocking.fs().timeout(std::time::Duration::MAX).read_limit(u64::MAX).read("x").unwrap(), b"x");
    assert_eq!(sandboxio::fs::DEFAULT_FS_TIMEOUT, std::time::Duration::from_mins(2));
}

#[test]
fn filesystem__read_limit_and_download_budget_on_the_fake() {
    let (_, sbx) = fake_sandbox();
    block_on(sbx.fs().write("ten.bin", vec![1u8; 10])).unwrap();
    let err = block_on(sbx.fs().read_limit(9).read("ten.bin")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::TooLarge, "{err}");
    assert!(err.to_string().contains("ten.bin") && err.to_string().contains("read_limit"), "{err}");
    assert_eq!(block_on(sbx.fs().read_limit(10).read("ten.bin")).unwrap().len(), 10);
    let dst = scratch("budget-fake");
    let err = block_on(sbx.fs().download_limit(100).download("ten.bin", dst.join("t"))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::TooLarge, "{err}");
    assert!(!dst.join("t").exists());
    block_on(sbx.fs().download_limit(600).download("ten.bin", dst.join("t"))).unwrap();
    assert_eq!(std::fs::read(dst.join("t")).unwrap().len(), 10);
}
