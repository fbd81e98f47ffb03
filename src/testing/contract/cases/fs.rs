//! Filesystem: round trips, binary safety, mapped errors, no host-path escape.

use std::sync::Arc;

use crate::policy::Capabilities as C;
use crate::{ErrorCode, FileKind};

use super::super::Row;
use super::super::ctx::{Ctx, Verdict, expect, expect_code, expect_eq};
use super::Case;

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(Row::Filesystem, "filesystem__write_read_round_trip", |cx| Box::pin(round_trip(cx)))
            .requires(C::FILESYSTEM),
        Case::new(Row::Filesystem, "filesystem__binary_safety", |cx| Box::pin(binary(cx)))
            .requires(C::FILESYSTEM),
        Case::new(Row::Filesystem, "filesystem__list_mkdir_remove_round_trip", |cx| {
            Box::pin(list_mkdir_remove(cx))
        })
        .requires(C::FILESYSTEM),
        Case::new(Row::Filesystem, "filesystem__upload_download_round_trip", |cx| {
            Box::pin(upload_download(cx))
        })
        .requires(C::FILESYSTEM),
        Case::new(Row::Filesystem, "filesystem__missing_path_raises_not_found", |cx| Box::pin(missing(cx)))
            .requires(C::FILESYSTEM),
        Case::new(Row::Filesystem, "filesystem__no_host_path_escape", |cx| Box::pin(no_escape(cx)))
            .requires(C::FILESYSTEM),
        Case::new(Row::Filesystem, "filesystem__relative_paths_share_the_working_directory_of_run", |cx| {
            Box::pin(shared_cwd(cx))
        })
        .requires(C::FILESYSTEM | C::RUN),
    ]
}

/// A fresh host directory for one test.
fn host_dir(cx: &Ctx, what: &str) -> std::result::Result<std::path::PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("sandboxio-contract-{}-{what}", cx.token));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make host dir {}: {e}", dir.display()))?;
    Ok(dir)
}

async fn round_trip(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let fs = sandbox.fs();
        fs.write("contract/deep/note.txt", "first")
            .await
            .map_err(|e| cx.unexpected("write (new parents)", &e))?;
        fs.write("contract/deep/note.txt", "second")
            .await
            .map_err(|e| cx.unexpected("write (overwrite)", &e))?;
        let text =
            fs.read_text("contract/deep/note.txt").await.map_err(|e| cx.unexpected("read_text", &e))?;
        expect_eq(text.as_str(), "second", "the file read back after an overwrite")
    })
}

async fn binary(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let bytes: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        sandbox.fs().write("all-bytes.bin", bytes.clone()).await.map_err(|e| cx.unexpected("write", &e))?;
        let back = sandbox.fs().read("all-bytes.bin").await.map_err(|e| cx.unexpected("read", &e))?;
        expect_eq(back, bytes, "every byte value read back")
    })
}

async fn list_mkdir_remove(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let fs = sandbox.fs();
        fs.mkdir("tree/a/b").await.map_err(|e| cx.unexpected("mkdir with parents", &e))?;
        fs.mkdir("tree/a/b").await.map_err(|e| cx.unexpected("mkdir of an existing directory", &e))?;
        fs.write("tree/a/file.txt", "12345").await.map_err(|e| cx.unexpected("write", &e))?;
        let entries = fs.list("tree/a").await.map_err(|e| cx.unexpected("list", &e))?;
        let shape: Vec<(String, FileKind)> = entries.iter().map(|e| (e.name.clone(), e.kind)).collect();
        expect_eq(
            shape,
            vec![("b".to_owned(), FileKind::Dir), ("file.txt".to_owned(), FileKind::File)],
            "listing",
        )?;
        let file = entries.iter().find(|e| e.name == "file.txt").map(|e| e.size);
        expect_eq(file, Some(5), "the file's size in bytes")?;
        let refused = fs.remove("tree", false).await;
        expect(refused.is_err(), || "expected remove(non-empty dir, recursive = false) to fail".to_owned())?;
        fs.remove("tree", true).await.map_err(|e| cx.unexpected("remove recursive", &e))?;
        let gone = fs.list("tree").await;
        expect_code(&gone, ErrorCode::NotFound, "list() of a removed directory")
    })
}

#[cfg(unix)]
fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).map_or(0, |m| m.permissions().mode() & 0o777)
}

#[cfg(not(unix))]
fn mode_of(_: &std::path::Path) -> u32 {
    0o755
}

async fn upload_download(cx: Arc<Ctx>) -> Verdict {
    let src = host_dir(&cx, "up")?;
    let dst = host_dir(&cx, "down")?;
    std::fs::create_dir_all(src.join("sub")).map_err(|e| e.to_string())?;
    std::fs::write(src.join("run.sh"), "#!/bin/sh\necho hi\n").map_err(|e| e.to_string())?;
    std::fs::write(src.join("sub/data.bin"), [0u8, 1, 254, 255]).map_err(|e| e.to_string())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(src.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
    }
    let verdict = with_sandbox!(cx, |sandbox| {
        sandbox.fs().upload(&src, "project").await.map_err(|e| cx.unexpected("upload", &e))?;
        sandbox
            .fs()
            .download("project", dst.join("copy"))
            .await
            .map_err(|e| cx.unexpected("download", &e))?;
        let data = std::fs::read(dst.join("copy/sub/data.bin"))
            .map_err(|e| format!("downloaded file missing: {e}"))?;
        expect_eq(data, vec![0u8, 1, 254, 255], "bytes after upload and download")?;
        expect_eq(mode_of(&dst.join("copy/run.sh")), 0o755, "the mode kept")
    });
    let _ = std::fs::remove_dir_all(&src);
    let _ = std::fs::remove_dir_all(&dst);
    verdict
}

async fn missing(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let result = sandbox.fs().read("no/such/file.txt").await;
        expect_code(&result, ErrorCode::NotFound, "read() of a missing path")?;
        if let Err(e) = result {
            expect(e.to_string().contains("no/such/file.txt"), || {
                format!("expected the error to name the path, observed {e}")
            })?;
        }
        Ok(())
    })
}

async fn no_escape(cx: Arc<Ctx>) -> Verdict {
    let dst = host_dir(&cx, "escape")?;
    let verdict = with_sandbox!(cx, |sandbox| {
        let dotdot = sandbox.fs().write("../escape.txt", "x").await;
        expect_code(&dotdot, ErrorCode::InvalidInput, "a path with '..'")?;
        sandbox.fs().write("out/ok.txt", "fine").await.map_err(|e| cx.unexpected("write", &e))?;
        if cx.caps.contains(crate::Capabilities::RUN) {
            // A link inside the sandbox pointing out of it is never followed on the host.
            let made = sandbox.run(cx.probes.symlink("/etc/passwd", "out/link")).await;
            expect(made.as_ref().is_ok_and(crate::ExecResult::success), || {
                format!("could not make a link: {made:?}")
            })?;
        }
        sandbox.fs().download("out", dst.join("o")).await.map_err(|e| cx.unexpected("download", &e))?;
        expect(dst.join("o/ok.txt").exists(), || "expected the regular file downloaded".to_owned())?;
        expect(std::fs::symlink_metadata(dst.join("o/link")).is_err(), || {
            "expected the sandbox link not to be created or followed on the host".to_owned()
        })
    });
    let _ = std::fs::remove_dir_all(&dst);
    verdict
}

async fn shared_cwd(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        sandbox.fs().write("relative.txt", "same place").await.map_err(|e| cx.unexpected("write", &e))?;
        let out = sandbox
            .run(cx.probes.read_file("relative.txt"))
            .await
            .map_err(|e| cx.unexpected("run(cat)", &e))?;
        expect_eq(out.stdout_lossy().as_ref(), "same place", "a relative fs path read by a relative run path")
    })
}
