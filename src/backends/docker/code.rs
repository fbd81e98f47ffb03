//! `run_code` for Python: one `python3` process per cell, through the same wrapper as
//! `run` (so a timeout or a cancel kills the cell's whole process tree).
//!
//! The cell's source arrives on stdin; [`RUNNER`] compiles and executes it, letting its
//! output through byte for byte. When the cell raises, the runner prints the traceback to
//! stderr as Python would, and writes the exception's type name, message and traceback
//! lines, NUL-separated UTF-8, to a record file named by the client (no `json`: Debian's
//! `python3-minimal` lacks it); the client reads that file back
//! with `cat` as the sandbox's user. The structured error is the exception object's own, never a
//! parse of the text output. No state survives between cells and no rich outputs are
//! produced: `STATEFUL_CODE` and `RICH_OUTPUTS` are not declared (that needs a kernel in
//! the container, a later step).

use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::exec::{Code, CodeError, CodeResult, Command};

use super::{Shared, exec, fs};

/// `python3 -c RUNNER`, the cell on stdin; `RECORD = ...` is prepended by [`runner`].
const RUNNER: &str = r#"import os, sys, traceback
source = sys.stdin.read()
sys.stdin = open(os.devnull)
sys.argv = ["<cell>"]
scope = {"__name__": "__main__", "__builtins__": __builtins__}
try:
    exec(compile(source, "<cell>", "exec"), scope)
except SystemExit as e:
    code = e.code
    sys.exit(code if isinstance(code, int) else (0 if code is None else 1))
except BaseException as e:
    lines = traceback.format_exception(type(e), e, e.__traceback__)
    sys.stderr.write("".join(lines))
    sys.stderr.flush()
    fields = [type(e).__name__, str(e)] + lines
    with open(RECORD, "wb") as f:
        f.write("\0".join(x.replace("\0", "\\0") for x in fields).encode("utf-8", "backslashreplace"))
    sys.exit(1)
"#;

fn runner(record: &str) -> String {
    // The path is ours (`/tmp/.sandboxio/<key>.error`): no quote or backslash to escape.
    format!("RECORD = '{record}'\n{RUNNER}")
}

/// The exception from a record file: name, message, traceback lines.
fn parse_record(bytes: &[u8]) -> Result<CodeError> {
    let text = String::from_utf8_lossy(bytes);
    let mut fields = text.split('\0');
    let (Some(name), Some(value)) = (fields.next(), fields.next()) else {
        return Err(Error::provider(
            super::SCHEME,
            "the cell's error record is malformed",
            std::io::Error::other(format!("{} bytes", bytes.len())),
        ));
    };
    let traceback = fields.map(|l| l.trim_end_matches('\n').to_owned()).collect();
    Ok(CodeError::new(name, value).with_traceback(traceback))
}

pub(super) async fn run_code(shared: Arc<Shared>, code: Code) -> Result<CodeResult> {
    if code.language_name() != "python" {
        return Err(Error::unsupported(
            super::SCHEME,
            format!("code in {:?} (only python)", code.language_name()),
        ));
    }
    let started = Instant::now();
    let record = format!("/tmp/.sandboxio/{}.error", shared.next_key());
    let mut command =
        Command::new("python3").arg("-c").arg(runner(&record)).stdin(code.source().as_bytes().to_vec());
    if let Some(timeout) = code.timeout_duration() {
        command = command.timeout(timeout);
    }
    let ran = exec::run(Arc::clone(&shared), command).await?;
    let status = ran.exit_code().unwrap_or(-1);
    let mut result = CodeResult::new(status, ran.stdout, ran.stderr);
    if status != 0 {
        match fs::read(&shared, &record).await {
            Ok(bytes) => {
                result = result.with_error(parse_record(&bytes)?);
                let cleanup = Arc::clone(&shared);
                super::rt::detach(async move {
                    let _ = exec::run_raw(&cleanup, &["rm", "-f", "--", &record]).await;
                });
            }
            // Exited non-zero without raising (sys.exit(3)): no structured error.
            Err(e) if e.code() == crate::ErrorCode::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(result.with_duration(started.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse() {
        let e = parse_record(
            b"ZeroDivisionError\0division by zero\0Traceback (most recent call last):\n\0  x / 0\n",
        )
        .unwrap();
        assert_eq!((e.name.as_str(), e.value.as_str()), ("ZeroDivisionError", "division by zero"));
        assert_eq!(e.traceback, vec!["Traceback (most recent call last):", "  x / 0"]);
        assert!(parse_record(b"only a name").is_err());
    }
}
