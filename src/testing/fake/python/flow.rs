//! How evaluation stops early: a raised exception, `sys.exit`, or the process being stopped.

use super::super::machine::Stop;

#[derive(Debug)]
pub(super) enum Flow {
    /// An exception: class name and message.
    Raise(String, String),
    /// The process was stopped (deadline, stdin needed): not visible to Python.
    Stop(Stop),
    /// `sys.exit(code)`.
    Exit(i32),
}

impl From<Stop> for Flow {
    fn from(s: Stop) -> Self {
        Flow::Stop(s)
    }
}

/// Raises the exception `name` with the message `value`.
pub(super) fn raise<T>(name: &str, value: impl Into<String>) -> Result<T, Flow> {
    Err(Flow::Raise(name.to_owned(), value.into()))
}

/// Python integers are unbounded; the fake's are 64-bit, so going beyond is unmodelled
/// (never a wrong number).
pub(super) fn overflow() -> Flow {
    Flow::Raise("NotImplementedError".into(), "the fake Python models 64-bit integers only".into())
}

/// The `OSError` subclass Python raises for a failed file operation on `path`.
pub(super) fn io_error(e: &crate::Error, path: &str) -> Result<(), Flow> {
    match e {
        crate::Error::NotFound { .. } => {
            raise("FileNotFoundError", format!("[Errno 2] No such file or directory: '{path}'"))
        }
        crate::Error::IsADirectory { .. } => {
            raise("IsADirectoryError", format!("[Errno 21] Is a directory: '{path}'"))
        }
        _ => raise("OSError", format!("{path}: {e}")),
    }
}
