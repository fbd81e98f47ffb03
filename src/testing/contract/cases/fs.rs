//! Filesystem: round trips, binary safety, mapped errors, no host-path escape.

use std::sync::Arc;

use crate::policy::Capabilities as C;
use crate::{ErrorCode, fs::FileKind};

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
        Case::new(Row::Filesystem, "filesystem__mkdir_over_or_through_a_file_is_refused", |cx| {
            Box::pin(mkdir_over_a_file(cx))
        })
        .requires(C::FILESYSTEM),
        Case::new(Row::Filesystem, "filesystem__no_host_path_escape", |cx| Box::pin(no_escape(cx)))
            .requires(C::FILESYSTEM),
        Case::new(Row::Filesystem, "filesystem__relative_paths_share_the_working_directory_of_run", |cx| {
            Box::pin(shared_cwd(cx))
        })
        .requires(C::FILESYSTEM | C::RUN),
        Case::new(
            Row::Filesystem,
            "filesystem__write_is_refused_where_the_sandbox_user_could_not_write",
            |cx| Box::pin(write_as_the_user(cx)),
        )
        .requires(C::FILESYSTEM | C::RUN),
        Case::new(Row::Filesystem, "filesystem__write_keeps_the_mode_of_an_existing_file", |cx| {
            Box::pin(write_keeps_mode(cx))
        })
        .requires(C::FILESYSTEM),
        Case::new(Row::Filesystem, "filesystem__write_follows_a_link_inside_the_sandbox", |cx| {
            Box::pin(write_follows_link(cx))
        })
        .requires(C::FILESYSTEM | C::RUN),
        Case::new(Row::Filesystem, "filesystem__read_over_the_read_limit_is_too_large", |cx| {
            Box::pin(read_limit(cx))
        })
        .requires(C::FILESYSTEM),
        Case::new(
            Row::Filesystem,
            "filesystem__download_over_its_budget_is_too_large_and_leaves_nothing",
            |cx| Box::pin(download_budget(cx)),
        )
        .requires(C::FILESYSTEM),
        Case::new(Row::Filesystem, "filesystem__download_never_loosens_host_permissions", |cx| {
            Box::pin(download_keeps_host_modes(cx))
        })
        .requires(C::FILESYSTEM),
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

/// `mkdir` at a regular file is `InvalidInput`; through one (a parent is a file) it is
/// `NotFound` naming the path, as `ENOTDIR` is everywhere; the file is left as it was.
async fn mkdir_over_a_file(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let fs = sandbox.fs();
        fs.write("plain.txt", "x").await.map_err(|e| cx.unexpected("write", &e))?;
        expect_code(&fs.mkdir("plain.txt").await, ErrorCode::InvalidInput, "mkdir where a file is")?;
        let through = fs.mkdir("plain.txt/sub/deeper").await;
        expect_code(&through, ErrorCode::NotFound, "mkdir through a file (a parent is a regular file)")?;
        if let Err(sandboxio_err) = &through {
            let said = sandboxio_err.to_string();
            expect(said.contains("plain.txt/sub/deeper"), || {
                format!("expected the NotFound to name the path as written, observed {said}")
            })?;
        }
        let left = fs.read("plain.txt").await.map_err(|e| cx.unexpected("read back the file", &e))?;
        expect_eq(left, b"x".to_vec(), "the file after both refusals")
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
        if cx.caps.contains(crate::policy::Capabilities::RUN) {
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

/// A write behaves as the sandbox user's own write would: where the user's own `>` is
/// refused, `write` is `PermissionDenied` naming the file and changes nothing; where it is
/// allowed (a root user), `write` succeeds too.
async fn write_as_the_user(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let fs = sandbox.fs();
        fs.write("ro.txt", "orig").await.map_err(|e| cx.unexpected("write", &e))?;
        let made = sandbox.run(crate::Command::shell("chmod 444 ro.txt")).await;
        expect(made.as_ref().is_ok_and(crate::ExecResult::success), || format!("chmod 444: {made:?}"))?;
        let own = sandbox
            .run(crate::Command::shell("echo mine > ro.txt"))
            .await
            .map_err(|e| cx.unexpected("run(the user's own write)", &e))?;
        if own.success() {
            // The user may write it (root): so may `write`.
            return fs
                .write("ro.txt", "new")
                .await
                .map_err(|e| cx.unexpected("write where the user may", &e));
        }
        let refused = fs.write("ro.txt", "new").await;
        expect_code(
            &refused,
            ErrorCode::PermissionDenied,
            "write() to a file the sandbox user may not write",
        )?;
        if let Err(e) = &refused {
            expect(e.to_string().contains("ro.txt"), || format!("expected the error to name the file: {e}"))?;
        }
        let text = fs.read_text("ro.txt").await.map_err(|e| cx.unexpected("read_text", &e))?;
        expect_eq(text.as_str(), "orig", "the file after a refused write")?;
        let listing = fs.list(".").await.map_err(|e| cx.unexpected("list", &e))?;
        let kept = listing.iter().find(|e| e.name == "ro.txt").map(|e| e.mode);
        expect_eq(kept, Some(0o444), "the mode after a refused write")
    })
}

/// An existing file keeps its mode: `write` writes it in place.
async fn write_keeps_mode(cx: Arc<Ctx>) -> Verdict {
    let src = host_dir(&cx, "keep-mode")?;
    std::fs::write(src.join("tool.sh"), "old").map_err(|e| e.to_string())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(src.join("tool.sh"), std::fs::Permissions::from_mode(0o750))
            .map_err(|e| e.to_string())?;
    }
    let verdict = with_sandbox!(cx, |sandbox| {
        let fs = sandbox.fs();
        fs.upload(src.join("tool.sh"), "tool.sh").await.map_err(|e| cx.unexpected("upload", &e))?;
        fs.write("tool.sh", "new").await.map_err(|e| cx.unexpected("write over an existing file", &e))?;
        let text = fs.read_text("tool.sh").await.map_err(|e| cx.unexpected("read_text", &e))?;
        expect_eq(text.as_str(), "new", "the file after write")?;
        let entries = fs.list(".").await.map_err(|e| cx.unexpected("list", &e))?;
        let mode = entries.iter().find(|e| e.name == "tool.sh").map(|e| e.mode);
        let expected = if cfg!(unix) { 0o750 } else { 0o644 };
        expect_eq(mode, Some(expected), "the mode kept by write")
    });
    let _ = std::fs::remove_dir_all(&src);
    verdict
}

/// A link is followed inside the sandbox's own view: the link stays, its target is written.
async fn write_follows_link(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let fs = sandbox.fs();
        fs.write("real.txt", "before").await.map_err(|e| cx.unexpected("write", &e))?;
        let made = sandbox.run(cx.probes.symlink("real.txt", "link.txt")).await;
        expect(made.as_ref().is_ok_and(crate::ExecResult::success), || {
            format!("could not make a link: {made:?}")
        })?;
        fs.write("link.txt", "through").await.map_err(|e| cx.unexpected("write through a link", &e))?;
        let text = fs.read_text("real.txt").await.map_err(|e| cx.unexpected("read_text", &e))?;
        expect_eq(text.as_str(), "through", "the link's target after write")?;
        let entries = fs.list(".").await.map_err(|e| cx.unexpected("list", &e))?;
        let kind = entries.iter().find(|e| e.name == "link.txt").map(|e| e.kind);
        expect_eq(kind, Some(FileKind::Symlink), "the link after write")
    })
}

/// `read` takes at most its limit; over it is `TooLarge`.
async fn read_limit(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let fs = sandbox.fs();
        fs.write("hundred.bin", vec![7u8; 100]).await.map_err(|e| cx.unexpected("write", &e))?;
        let over = fs.read_limit(99).read("hundred.bin").await;
        expect_code(&over, ErrorCode::TooLarge, "read() of 100 bytes with a 99-byte limit")?;
        let exact = fs
            .read_limit(100)
            .read("hundred.bin")
            .await
            .map_err(|e| cx.unexpected("read at the limit", &e))?;
        expect_eq(exact.len(), 100, "bytes read at exactly the limit")
    })
}

/// `download` puts at most its budget on the host's disk; over it is `TooLarge`, and what
/// it had created is gone.
async fn download_budget(cx: Arc<Ctx>) -> Verdict {
    let dst = host_dir(&cx, "budget")?;
    let verdict = with_sandbox!(cx, |sandbox| {
        let fs = sandbox.fs();
        for name in ["a", "b", "c"] {
            fs.write(&format!("big/{name}.bin"), vec![1u8; 20_000])
                .await
                .map_err(|e| cx.unexpected("write", &e))?;
        }
        let over = fs.download_limit(30_000).download("big", dst.join("big")).await;
        expect_code(&over, ErrorCode::TooLarge, "download() of 60 kB with a 30 kB budget")?;
        expect(!dst.join("big").exists(), || {
            "expected the refused download to leave nothing on the host".to_owned()
        })?;
        fs.download_limit(100_000)
            .download("big", dst.join("big"))
            .await
            .map_err(|e| cx.unexpected("download within budget", &e))?;
        let size = std::fs::metadata(dst.join("big/c.bin")).map_or(0, |m| m.len());
        expect_eq(size, 20_000, "a file downloaded within the budget")
    });
    let _ = std::fs::remove_dir_all(&dst);
    verdict
}

/// Download never loosens host permissions: an existing host directory keeps its mode, a
/// new file never gets group/world write or setuid bits from the sandbox.
async fn download_keeps_host_modes(cx: Arc<Ctx>) -> Verdict {
    let dst = host_dir(&cx, "host-modes")?;
    let src = host_dir(&cx, "host-modes-src")?;
    let target = dst.join("private");
    std::fs::create_dir(&target).map_err(|e| e.to_string())?;
    std::fs::write(src.join("open.txt"), "x").map_err(|e| e.to_string())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?;
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o777)).map_err(|e| e.to_string())?;
        std::fs::set_permissions(src.join("open.txt"), std::fs::Permissions::from_mode(0o666))
            .map_err(|e| e.to_string())?;
    }
    let verdict = with_sandbox!(cx, |sandbox| {
        let fs = sandbox.fs();
        fs.upload(&src, "open").await.map_err(|e| cx.unexpected("upload", &e))?;
        fs.download("open", &target).await.map_err(|e| cx.unexpected("download", &e))?;
        if cfg!(unix) {
            expect_eq(mode_of(&target), 0o700, "the existing host directory's mode")?;
            let file = mode_of(&target.join("open.txt"));
            expect(file & 0o022 == 0, || {
                format!("expected no group/world write on a new host file, got {file:o}")
            })?;
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&dst);
    let _ = std::fs::remove_dir_all(&src);
    verdict
}
