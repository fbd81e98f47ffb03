//! Reading a container's `passwd` and `group` files through the engine's archive API (no
//! process in the container), to resolve its user with [`super::resolve`].

use std::io;

use bollard::Docker;
use futures_lite::StreamExt as _;

use crate::error::{Error, Result};

use crate::backends::docker::SCHEME;
use crate::backends::docker::client::provider;

/// Reads a small file (at most 1 MiB) of container `id` through the archive API: `None`
/// when it does not exist.
pub(crate) async fn read_small_file(docker: &Docker, id: &str, path: &str) -> Result<Option<Vec<u8>>> {
    const LIMIT: usize = 1024 * 1024;
    let options = bollard::query_parameters::DownloadFromContainerOptions { path: path.into() };
    let mut stream = docker.download_from_container(id, Some(options));
    let mut archive = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => {
                archive.extend_from_slice(&bytes);
                if archive.len() > LIMIT + 64 * 1024 {
                    return Err(Error::provider_message(
                        SCHEME,
                        format!("{path} in the container is over 1 MiB"),
                    ));
                }
            }
            Err(e) if crate::backends::docker::client::status(&e) == Some(404) => return Ok(None),
            Err(e) => return Err(provider(&format!("reading {path} from the container"), e)),
        }
    }
    let mut entries = tar::Archive::new(archive.as_slice());
    let mut entries =
        entries.entries().map_err(|e| Error::provider(SCHEME, format!("the archive of {path}"), e))?;
    let Some(entry) = entries.next() else { return Ok(None) };
    let mut entry = entry.map_err(|e| Error::provider(SCHEME, format!("the archive of {path}"), e))?;
    if entry.header().entry_type() != tar::EntryType::Regular {
        return Ok(None);
    }
    let mut data = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(&mut entry, LIMIT as u64), &mut data)
        .map_err(|e| Error::provider(SCHEME, format!("the archive of {path}"), e))?;
    Ok(Some(data))
}

/// The sandbox user's uid, gid and home directory in container `id`, as the engine would
/// resolve `user` (`name`, `uid`, `name:group`, `uid:gid`; none: root) from the `passwd`
/// and `group` files of `source` in the container (a plain image's own, or a template
/// image's copies of its base's), refusing an unasked-for root ([`super::vet`]).
pub(crate) async fn resolve_user(
    docker: &Docker,
    id: &str,
    user: Option<&str>,
    source: super::Source,
) -> Result<super::Resolved> {
    let spec = super::user_spec(user);
    let numeric = spec.split(':').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let (passwd_path, group_path) = source.paths();
    let passwd = read_small_file(docker, id, passwd_path).await?;
    let group =
        if spec.contains(':') && !numeric { read_small_file(docker, id, group_path).await? } else { None };
    let text =
        |b: &Option<Vec<u8>>| b.as_deref().map(String::from_utf8_lossy).map(std::borrow::Cow::into_owned);
    super::resolve(spec, text(&passwd).as_deref(), text(&group).as_deref(), source)
}
