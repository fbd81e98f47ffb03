//! `upload` and `download` as one tar stream through a sandbox's exec stream (`tar -x` or
//! `tar -c`, `crate::transfer`'s scripts), for every backend whose commands stream (`local://`,
//! and `docker://` over sandboxd): each transfer is one command in the sandbox, as its
//! user, so links, permissions and mounts are the sandbox's own. Paths arrive absolute and
//! checked by the backend (which keeps its own rules for its root directories); what the
//! host takes is bounded by the download's budget, and dropping a transfer drops its
//! stream, which kills its process. The other file operations are sandboxd's own requests
//! ([`Session`](super::Session)'s).

use std::path::Path;

use crate::error::Result;
use crate::transfer::{StartStream, TransferMeter};

/// The directory an archive for `abs` is extracted in (or archived from), and its root
/// entry's name; `root` itself (a workspace) is `.` in `root`.
pub(crate) fn split(abs: &str, root: &str) -> (String, String) {
    if abs == root {
        return (root.to_owned(), ".".to_owned());
    }
    match abs.rsplit_once('/') {
        Some(("", name)) => ("/".to_owned(), name.to_owned()),
        Some((parent, name)) => (parent.to_owned(), name.to_owned()),
        None => (root.to_owned(), abs.to_owned()),
    }
}

/// Copies the host tree at `host_path` to `abs` as one tar stream.
pub(crate) async fn upload(
    start: impl StartStream,
    scheme: &'static str,
    host_path: &Path,
    abs: &str,
    root: &str,
    meter: TransferMeter,
) -> Result<()> {
    let (dir, name) = split(abs, root);
    crate::transfer::upload_via_stream(start, scheme, host_path, abs, (&dir, &name), meter).await
}

/// Copies the sandbox tree at `abs` to `host_path` as one tar stream, within `budget`;
/// `paced` for a transport without flow control of its own (see
/// [`download_via_stream`](crate::transfer::download_via_stream)).
pub(crate) async fn download(
    start: impl StartStream,
    scheme: &'static str,
    (abs, root): (&str, &str),
    host_path: &Path,
    budget: u64,
    paced: bool,
    meter: TransferMeter,
) -> Result<()> {
    let (dir, name) = split(abs, root);
    crate::transfer::download_via_stream(start, scheme, abs, (&dir, &name), (host_path, budget), paced, meter)
        .await
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn archives_root_at_the_parent_directory() {
        assert_eq!(split("/workspace", "/workspace"), ("/workspace".to_owned(), ".".to_owned()));
        assert_eq!(split("/workspace/a b", "/workspace"), ("/workspace".to_owned(), "a b".to_owned()));
        assert_eq!(split("/a", "/"), ("/".to_owned(), "a".to_owned()));
    }
}
