//! Errors: the same fact gets the same words on every backend. A missing program, a missing
//! file or directory and a refused path each have one shape, naming the path exactly as the
//! caller wrote it (not as the backend resolved it).

use std::sync::Arc;

use crate::Command;
use crate::error::Error;
use crate::policy::Capabilities as C;

use super::super::Row;
use super::super::ctx::{Ctx, Verdict, expect, expect_eq};
use super::Case;

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(Row::Errors, "errors__a_missing_program_exits_127_naming_it_as_written", |cx| {
            Box::pin(missing_program(cx))
        })
        .requires(C::RUN),
        Case::new(Row::Errors, "errors__a_missing_path_is_not_found_naming_it_as_written", |cx| {
            Box::pin(missing_path(cx))
        })
        .requires(C::FILESYSTEM),
        Case::new(Row::Errors, "errors__a_directory_read_or_written_as_a_file_is_is_a_directory", |cx| {
            Box::pin(directory_as_file(cx))
        })
        .requires(C::FILESYSTEM),
        Case::new(Row::Errors, "errors__a_refused_path_is_permission_denied_naming_it_as_written", |cx| {
            Box::pin(refused_path(cx))
        })
        .requires(C::FILESYSTEM | C::RUN),
    ]
}

/// Expects `result` to be the error `shape` names (`"NotFound"`, `"PermissionDenied"`) with
/// exactly `written` as its path.
fn expect_path<T: std::fmt::Debug>(
    result: &crate::Result<T>,
    shape: &str,
    written: &str,
    what: &str,
) -> Verdict {
    let named = match result {
        Err(Error::NotFound { path }) if shape == "NotFound" => path,
        Err(Error::PermissionDenied { path }) if shape == "PermissionDenied" => path,
        other => return Err(format!("{what}: expected {shape} naming {written:?}, observed {other:?}")),
    };
    expect_eq(named.as_str(), written, &format!("{what}: the path the {shape} error names"))
}

/// A program that is not there is data, as in a shell: exit code 127, and stderr saying
/// `<program>: not found` with the program as given.
async fn missing_program(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        for program in ["sbx-no-such-program", "/sbx-no-such-dir/program"] {
            let out = sandbox
                .run(Command::new(program).arg("x"))
                .await
                .map_err(|e| cx.unexpected("run(a missing program)", &e))?;
            expect_eq(out.exit_code(), Some(127), &format!("the exit code of missing {program}"))?;
            let words = format!("{program}: not found");
            expect(out.stderr_lossy().contains(&words), || {
                format!("expected stderr to say {words:?}, observed {:?}", out.stderr_lossy())
            })?;
        }
        Ok(())
    })
}

/// A missing file or directory is `NotFound` naming the path as written, from every file
/// operation and from a missing working directory (of `run` and of `stream`).
async fn missing_path(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let fs = sandbox.fs();
        let file = "./no/such//file.txt";
        expect_path(&fs.read(file).await, "NotFound", file, "read()")?;
        expect_path(&fs.read_text("no/such.txt").await, "NotFound", "no/such.txt", "read_text()")?;
        expect_path(&fs.list("no/such/dir").await, "NotFound", "no/such/dir", "list()")?;
        expect_path(&fs.remove("no-such.txt", false).await, "NotFound", "no-such.txt", "remove()")?;
        if cx.caps.contains(C::RUN) {
            let run = sandbox.run(Command::new("true").cwd("./no/such/dir")).await;
            expect_path(&run, "NotFound", "./no/such/dir", "run() in a missing working directory")?;
        }
        if cx.caps.contains(C::STREAM) {
            // Refused at the start, or as the stream's first item: never as output and an exit.
            let streamed = match sandbox.stream(Command::new("true").cwd("./no/such/dir")) {
                Err(e) => Err(e),
                Ok(mut stream) => match stream.next_chunk().await {
                    Some(Err(e)) => Err(e),
                    other => Ok(format!("{other:?}")),
                },
            };
            expect_path(&streamed, "NotFound", "./no/such/dir", "stream() in a missing working directory")?;
        }
        Ok(())
    })
}

/// A directory where a file is wanted (`read`, `write`) is `IsADirectory` naming it as
/// written, and the write leaves the directory as it was.
async fn directory_as_file(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let fs = sandbox.fs();
        fs.mkdir("adir/inner").await.map_err(|e| cx.unexpected("mkdir", &e))?;
        let written = "./adir//";
        let named = |result: &crate::Result<()>, what: &str| match result {
            Err(Error::IsADirectory { path }) => expect(path == written, || {
                format!("{what}: IsADirectory names {path:?}, not the path as written ({written:?})")
            }),
            other => Err(format!("{what}: expected IsADirectory, observed {other:?}")),
        };
        named(&fs.read(written).await.map(drop), "read() of a directory")?;
        named(&fs.write(written, "x").await, "write() to a directory")?;
        let kept = fs.list("adir").await.map_err(|e| cx.unexpected("list after the write", &e))?;
        expect(kept.iter().any(|e| e.name == "inner"), || format!("the directory changed: {kept:?}"))
    })
}

/// A path the sandbox user may not write is `PermissionDenied` naming it as written; where
/// the user may (a root user), the write succeeds, as the user's own would.
async fn refused_path(cx: Arc<Ctx>) -> Verdict {
    with_sandbox!(cx, |sandbox| {
        let fs = sandbox.fs();
        fs.mkdir("words").await.map_err(|e| cx.unexpected("mkdir", &e))?;
        fs.write("words/ro.txt", "orig").await.map_err(|e| cx.unexpected("write", &e))?;
        let made = sandbox.run(Command::shell("chmod 444 words/ro.txt")).await;
        expect(made.as_ref().is_ok_and(crate::ExecResult::success), || format!("chmod 444: {made:?}"))?;
        let own = sandbox
            .run(Command::shell("echo mine > words/ro.txt"))
            .await
            .map_err(|e| cx.unexpected("run(the user's own write)", &e))?;
        let written = "./words//ro.txt";
        let refused = fs.write(written, "new").await;
        if own.success() {
            return refused.map_err(|e| cx.unexpected("write where the user may", &e));
        }
        expect_path(&refused, "PermissionDenied", written, "write() to a file the user may not write")
    })
}
