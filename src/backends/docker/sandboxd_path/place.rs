//! Placing sandboxd in a created container: the embedded binary, copied through the engine's
//! archive API to [`SANDBOXD_PATH`] before the start (see the module docs of
//! `sandboxd_path`).

use std::io;
use std::sync::OnceLock;

use bollard::Docker;

use crate::error::{Error, Result};

use crate::backends::docker::SCHEME;
use crate::backends::docker::client::provider;

/// The directory sandboxd is placed in, in every container of the sandboxd path.
pub(crate) const SANDBOXD_DIR: &str = "/.sandboxio";

/// The path of sandboxd in the container.
pub(crate) const SANDBOXD_PATH: &str = "/.sandboxio/sandboxd";

/// The archive that places sandboxd (see the module docs), built once per process; `None`
/// when this build has no sandboxd.
fn archive() -> Option<&'static [u8]> {
    static ARCHIVE: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    ARCHIVE
        .get_or_init(|| {
            let binary = crate::sandboxd::BINARY?;
            let mut builder = tar::Builder::new(Vec::new());
            let name = SANDBOXD_DIR.trim_start_matches('/');
            let entry = |kind: tar::EntryType, size: usize| {
                let mut header = tar::Header::new_gnu();
                header.set_entry_type(kind);
                header.set_size(size as u64);
                header.set_mode(0o555);
                header.set_uid(u64::from(crate::backends::docker::SUPERVISOR_ID));
                header.set_gid(u64::from(crate::backends::docker::SUPERVISOR_ID));
                header.set_mtime(0);
                header
            };
            let mut dir = entry(tar::EntryType::Directory, 0);
            builder.append_data(&mut dir, format!("{name}/"), io::empty()).ok()?;
            let mut file = entry(tar::EntryType::Regular, binary.len());
            builder.append_data(&mut file, format!("{name}/sandboxd"), binary).ok()?;
            builder.into_inner().ok()
        })
        .as_deref()
}

/// Whether this build can run sandboxd in containers.
pub(crate) fn available() -> bool {
    archive().is_some()
}

/// Copies sandboxd into the created (not yet started) container `id`.
pub(crate) async fn place(docker: &Docker, id: &str) -> Result<()> {
    let Some(archive) = archive() else {
        return Err(Error::provider_message(SCHEME, "this build of sandboxio has no sandboxd"));
    };
    let options =
        bollard::query_parameters::UploadToContainerOptions { path: "/".into(), ..Default::default() };
    docker
        .upload_to_container(id, Some(options), bollard::body_full(bytes::Bytes::from_static(archive)))
        .await
        .map_err(|e| provider("placing sandboxd in the container", e))
}
