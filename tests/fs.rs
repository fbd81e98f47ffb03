//! `Sandbox::fs` on the fake: round trips, binary safety, errors, no host escape.
#![allow(non_snake_case)] // test names read as contract clauses: `area__requirement`

mod support;

use std::os::unix::fs::PermissionsExt;

use sandboxio::{Command, ErrorCode, FileKind};
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
    use sandboxio::{Capabilities, DirEntry, FileKind, Result};

    #[derive(Debug)]
    pub struct Hostile;

    #[derive(Debug)]
    struct HostileSandbox;

    impl Backend for Hostile {
        fn scheme(&self) -> &str {
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
        fn id(&self) -> &str {
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
        fn read(&self, _: &str, _: u64) -> BoxFuture<'_, Result<Vec<u8>>> {
            Box::pin(async { Ok(b"x".to_vec()) })
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
