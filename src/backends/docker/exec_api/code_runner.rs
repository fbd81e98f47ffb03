//! `run_code` for Python without a kernel, on `docker://`'s exec-API path (sandboxd's
//! runner serves cells everywhere else): one `python3` process per cell, run like any command (so a timeout or a cancel kills the
//! cell's whole process tree).
//!
//! The cell's source arrives on stdin; [`RUNNER`] compiles and executes it, letting its
//! output through byte for byte. When the cell raises, the runner prints the traceback to
//! stderr as Python would, and writes the exception's type name, message and traceback
//! lines, NUL-separated UTF-8, to a record file named by the client (no `json`: Debian's
//! `python3-minimal` lacks it); the backend reads that file back without following links. The structured error is the exception object's own, never a
//! parse of the text output. No state survives between cells and no rich outputs are
//! produced: `STATEFUL_CODE` and `RICH_OUTPUTS` are not declared (that needs a kernel in
//! the container, a later step).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::exec::{Code, CodeError, CodeResult, Command, ExecResult};

/// `python3 -I -u -c RUNNER`, the cell on stdin; `RECORD = ...` is prepended by [`runner`].
const RUNNER: &str = r#"import sys
# The runner's own modules come from the standard library, never from the working directory
# (`-I` leaves it off the path), where an earlier cell may have planted a `traceback.py` to
# forge this cell's result; the cell itself gets the path Python would give it without `-I`
# (the working directory, then PYTHONPATH: it may import its own modules from there).
_clean = [p for p in sys.path if p not in ("", ".", __import__("posix").getcwd())]
sys.path[:] = _clean
import os, traceback, linecache
sys.path[:] = [""] + [p for p in os.environ.get("PYTHONPATH", "").split(":") if p] + _clean
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
    sys.path[:] = _clean
    # Skip the runner's own frame: the traceback starts in the cell.
    lines = traceback.format_exception(type(e), e, e.__traceback__.tb_next)
    sys.stderr.write("".join(lines))
    sys.stderr.flush()
    fields = [type(e).__name__, str(e)] + lines
    with open(RECORD, "wb") as f:
        f.write("\0".join(x.replace("\0", "\\0") for x in fields).encode("utf-8", "backslashreplace"))
    sys.exit(1)
"#;

fn runner(record: &str) -> String {
    // The path is the backend's own (`<dir>/<key>.error`): no quote or backslash in it.
    debug_assert!(!record.contains(['\'', '\\']));
    format!("RECORD = '{record}'\n{RUNNER}")
}

/// The command that runs `code` with the interpreter `python3`, writing an error record to
/// `record` (a path inside the sandbox).
///
/// # Errors
///
/// [`Error::CapabilityNotSupported`] for a language other than Python.
pub(crate) fn command(backend: &str, python3: &str, code: &Code, record: &str) -> Result<Command> {
    if code.language_name() != "python" {
        return Err(Error::unsupported(backend, format!("code in {:?} (only python)", code.language_name())));
    }
    // `-I`: isolated, so nothing an earlier cell planted (a user site's `usercustomize.py`
    // or `.pth` file, a module in the working directory) runs before the runner, and no
    // `PYTHON*` variable changes the interpreter. `-u`: unbuffered, so what the cell prints
    // leaves the interpreter as it prints it (the cell streams).
    let mut command = Command::new(python3)
        .arg("-I")
        .arg("-u")
        .arg("-c")
        .arg(runner(record))
        .stdin(code.source().as_bytes().to_vec());
    if let Some(timeout) = code.timeout_duration() {
        command = command.timeout(timeout);
    }
    Ok(command)
}

/// The cell's result from the command's, with the error from `record` (the record file's
/// bytes, `None` when there is none: the cell did not raise).
pub(crate) fn result(ran: ExecResult, record: Option<&[u8]>, duration: Duration) -> Result<CodeResult> {
    let mut result = CodeResult::new(ran.exit_code().unwrap_or(-1), ran.stdout, ran.stderr);
    if let Some(bytes) = record {
        result = result.with_error(parse_record(bytes)?);
    }
    Ok(result.with_duration(duration))
}

/// The exception from a record file: name, message, traceback lines.
fn parse_record(bytes: &[u8]) -> Result<CodeError> {
    let text = String::from_utf8_lossy(bytes);
    let mut fields = text.split('\0');
    let (Some(name), Some(value)) = (fields.next(), fields.next()) else {
        return Err(Error::provider_message(
            "python",
            format!("the cell's error record is malformed ({} bytes)", bytes.len()),
        ));
    };
    let traceback = crate::exec::traceback_of(fields.map(|l| l.trim_end_matches('\n')));
    Ok(CodeError::new(name, value).with_traceback(traceback))
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
