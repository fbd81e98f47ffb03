//! The errors and bounds of file operations, alike on every path that does them: sandboxd's
//! own file requests (`sandboxd/session/fs.rs`), the `sh` scripts of `docker://`'s exec-API
//! path and `modal://` ([`file_scripts`](super::file_scripts)), and the archive streams of
//! `upload` and `download` (`transfer/stream.rs`).

use crate::error::Error;

/// The most a listing may take: [`DEFAULT_READ_LIMIT`](crate::fs::DEFAULT_READ_LIMIT) bytes.
pub(crate) const LIST_LIMIT: u64 = crate::fs::DEFAULT_READ_LIMIT;

/// The most of a file exec's stderr the host keeps (only its first words are ever read).
#[cfg_attr(
    not(any(feature = "docker", feature = "e2b", feature = "local")),
    allow(dead_code, reason = "built with modal too, used by the other backends")
)]
pub(crate) const STDERR_LIMIT: usize = 64 * 1024;

/// `InvalidInput`: a read of something that is not a regular file.
pub(crate) fn not_a_regular_file(abs: &str) -> Error {
    Error::invalid_input(format!("{abs} is not a regular file"))
}

/// `InvalidInput`: a write to a special file.
pub(crate) fn a_special_file(abs: &str) -> Error {
    Error::invalid_input(format!(
        "{abs} is a special file (FIFO, device or socket); write writes regular files only"
    ))
}

/// `InvalidInput`: a listing of something that is not a directory.
pub(crate) fn not_a_directory(abs: &str) -> Error {
    Error::invalid_input(format!("{abs} is not a directory"))
}

/// `InvalidInput`: a `mkdir` where something else exists.
pub(crate) fn exists_not_a_directory(abs: &str) -> Error {
    Error::invalid_input(format!("{abs} exists and is not a directory"))
}

/// `TooLarge`: a listing over [`LIST_LIMIT`].
pub(crate) fn over_list_limit(abs: &str) -> Error {
    Error::TooLarge {
        path: abs.to_owned(),
        limit: LIST_LIMIT,
        what: "the listing limit (DEFAULT_READ_LIMIT)".to_owned(),
    }
}

/// `Provider`: a file operation that failed for a reason with no error of its own, in the
/// words of whatever did it.
pub(crate) fn failed(backend: &str, abs: &str, said: &str) -> Error {
    Error::provider_message(backend, format!("a file operation on {abs} failed: {}", said.trim()))
}

/// Maps a failed file exec by what the tool said.
pub(crate) fn exec_failure(backend: &str, abs: &str, stderr: &[u8]) -> Error {
    let said = String::from_utf8_lossy(stderr);
    // dash says "Directory nonexistent" where busybox and coreutils say "No such file".
    let missing = ["No such file", "Directory nonexistent", "Not a directory", "not a directory"];
    if missing.iter().any(|words| said.contains(words)) {
        Error::NotFound { path: abs.to_owned() }
    } else if said.contains("ermission denied") || said.contains("Read-only file system") {
        Error::PermissionDenied { path: abs.to_owned() }
    } else if said.contains("Is a directory") {
        Error::IsADirectory { path: abs.to_owned() }
    } else {
        failed(backend, abs, &said)
    }
}

#[cfg(test)]
mod tests {
    use super::exec_failure;
    use crate::ErrorCode;

    #[test]
    fn what_the_tools_say_maps_to_typed_errors() {
        let code = |said: &str| exec_failure("docker", "/p", said.as_bytes()).code();
        assert_eq!(
            code("sandboxio-fs: 11: cannot create /proc/x: Directory nonexistent"),
            ErrorCode::NotFound
        );
        assert_eq!(code("cat: /p: No such file or directory"), ErrorCode::NotFound);
        assert_eq!(code("sh: can't create /p: Permission denied"), ErrorCode::PermissionDenied);
        assert_eq!(code("cat: read error: Is a directory"), ErrorCode::IsADirectory);
        assert_eq!(code("something else"), ErrorCode::Provider);
    }
}
