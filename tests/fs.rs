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
