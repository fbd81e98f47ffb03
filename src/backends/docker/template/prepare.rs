//! Preparing a template's image: found in the engine by its content hash (and trusted
//! only on the base's layers plus one), or set up once in a container ([`super::setup`])
//! and committed, with sandboxd and the base's user files placed for its sandboxes.

use std::sync::{Arc, PoisonError};

use bollard::Docker;
use bollard::models::ContainerConfig;

use super::{BuildLocks, PreparedTemplate, TEMPLATE_HASH_LABEL, Template, setup};
use crate::backends::docker::image::build::BuildLog;
use crate::backends::docker::image::pull::{ImageError, ImageErrorKind};
use crate::backends::docker::image::reference::ImageRef;
use crate::error::{Error, Result};

/// Makes sure the engine has `template`'s image: found by its content hash, or set up
/// now. `base` is the engine's view of the base image (already pulled as the policy says).
pub(crate) async fn prepare(
    docker: &Docker,
    request: &SetupRequest<'_>,
    base: &bollard::models::ImageInspect,
    locks: &BuildLocks,
) -> Result<PreparedTemplate> {
    let SetupRequest { name, template, .. } = *request;
    template.check(name)?;
    let base_id = base.id.clone().unwrap_or_default();
    let hash = template.hash(&base_id);
    let image = image_tag(name, &hash);
    let lock =
        Arc::clone(locks.lock().unwrap_or_else(PoisonError::into_inner).entry(image.clone()).or_default());
    let _building = lock.lock().await;
    if let Ok(found) = docker.inspect_image(&image).await {
        match trusted(&found, base, &hash) {
            Ok(()) => {
                tracing::info!(target: "sandboxio::docker::template", template = name, image = %image, "cached");
                return Ok(PreparedTemplate { image, id: found.id.unwrap_or_default(), cached: true });
            }
            Err(why) => tracing::warn!(
                target: "sandboxio::docker::template",
                template = name, image = %image,
                "the tag is not this template's image ({why}): setting it up again",
            ),
        }
    }
    let started = std::time::Instant::now();
    let id = set_up(docker, request, base, &image, &hash).await?;
    tracing::info!(target: "sandboxio::docker::template", template = name, image = %image, elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX), "built");
    Ok(PreparedTemplate { image, id, cached: false })
}

/// Whether `found`, the image the template's tag names, is what a setup of this template
/// on `base` committed: it carries the content hash the setup labelled it with, and its
/// layers are the base's plus at most the one a commit adds. A tag re-pointed at another
/// image (one built elsewhere, or from another base, copying the label or not) fails.
/// An image made to pass both checks on purpose (the base, one layer, the label) cannot be
/// told apart; whoever can tag images in the engine controls the engine anyway.
fn trusted(
    found: &bollard::models::ImageInspect,
    base: &bollard::models::ImageInspect,
    hash: &str,
) -> std::result::Result<(), String> {
    let labelled =
        found.config.as_ref().and_then(|c| c.labels.as_ref()).and_then(|l| l.get(TEMPLATE_HASH_LABEL));
    if labelled.map(String::as_str) != Some(hash) {
        return Err(format!("its {TEMPLATE_HASH_LABEL} label is {labelled:?}"));
    }
    let layers = |image: &bollard::models::ImageInspect| {
        image.root_fs.as_ref().and_then(|r| r.layers.clone()).unwrap_or_default()
    };
    let (found, base) = (layers(found), layers(base));
    if !found.starts_with(&base) || found.len() > base.len() + 1 {
        return Err(format!(
            "its {} layers are not the base image's {} plus at most one",
            found.len(),
            base.len()
        ));
    }
    Ok(())
}

/// The repository of every template image.
pub(crate) const REPOSITORY: &str = "sandboxio-template";

/// The tag of template `name`'s image with content hash `hash`:
/// `sandboxio-template/<name>:<first 16 hex digits>`.
fn image_tag(name: &str, hash: &str) -> String {
    format!("{REPOSITORY}/{name}:{}", &hash[..16])
}

/// The tag `name`'s image has on the base whose image id is `base_id`.
pub(crate) fn current_tag(name: &str, template: &Template, base_id: &str) -> String {
    image_tag(name, &template.hash(base_id))
}

/// What a template's setup needs from its backend.
pub(crate) struct SetupRequest<'a> {
    pub name: &'a str,
    pub template: &'a Template,
    /// The backend's OCI runtime (`runsc`): the setup runs under it as sandboxes do.
    pub runtime: Option<String>,
    pub log: &'a BuildLog,
}

/// Runs the setup in a container from the base (`setup.rs`: files first, then the
/// commands as root), pauses it, places sandboxd, and commits it as `image`, labelled with
/// `hash`. The container is removed whatever happens.
async fn set_up(
    docker: &Docker,
    request: &SetupRequest<'_>,
    base: &bollard::models::ImageInspect,
    image: &str,
    hash: &str,
) -> Result<String> {
    let SetupRequest { name, template, log, .. } = *request;
    let failed = |message: String| {
        let reference = ImageRef::parse(image).expect("a template tag is a valid reference");
        ImageError::new(&reference, ImageErrorKind::BuildFailed, format!("template {name:?}: {message}"))
            .into_error()
    };
    let base_id = base.id.clone().unwrap_or_default();
    let mut running =
        setup::start(docker, name, template, &base_id, request.runtime.clone(), &failed).await?;
    let id = running.id.clone();
    let setup = async {
        tokio::select! {
            finished = running.finish(docker, log) => Ok(finished),
            written = setup::watch_disk(docker, &id, template.disk_limit()) => Err(written),
        }
    };
    let Ok(finished) = tokio::time::timeout(template.timeout, setup).await else {
        return Err(failed(format!("the setup ran past its timeout of {:?}", template.timeout)));
    };
    let (status, output) = finished.map_err(|written| {
        Error::too_large(
            "/",
            template.disk_limit(),
            format!(
                "template {name:?}: its setup wrote {written} bytes to its container's file system; raise Template::setup_disk_mib"
            ),
        )
    })?;
    match status {
        Some(0) => {}
        Some(code) => return Err(failed(format!("a setup command exited with {code}; output: {output}"))),
        None => {
            return Err(failed(format!("the setup container ended before the setup did; output: {output}")));
        }
    }
    let mut labels = setup::unlabelled();
    labels.insert(TEMPLATE_HASH_LABEL.to_owned(), hash.to_owned());
    // Freeze whatever the setup left running, then place this build's sandboxd as a baked
    // image holds it (`sandboxd_path/baked.rs`): no process can touch the file before the commit, so the
    // image's label may name it, at the base's layers plus the commit's one, and sandboxes
    // from it start as fast as from a baked base. (The base's own label, which the image
    // would inherit, counts the base's layers only, so it never vouches for what the setup,
    // as root, could have changed.)
    docker.pause_container(&running.id).await.map_err(|e| failed(format!("pausing it to commit: {e}")))?;
    let layers = base.root_fs.as_ref().and_then(|r| r.layers.as_ref()).map_or(0, Vec::len) + 1;
    if let Some(sandboxd) = crate::backends::docker::sandboxd_id() {
        crate::backends::docker::sandboxd_path::place(docker, &running.id).await?;
        labels.insert(
            crate::backends::docker::sandboxd_path::baked::SANDBOXD.to_owned(),
            format!("{sandboxd}:{layers}"),
        );
    }
    // The base's users as built, beside sandboxd where neither the setup (frozen) nor a
    // sandbox user can write them: the template's sandboxes are resolved against these,
    // never against the /etc/passwd the setup, as root, may have rewritten.
    let (passwd, group) = &running.base_users;
    let archive =
        crate::backends::docker::users::base_archive(passwd.as_deref(), group.as_deref()).map_err(|e| {
            Error::provider(crate::backends::docker::SCHEME, "archiving the base image's users", e)
        })?;
    setup::unpack_at_root(docker, &running.id, archive)
        .await
        .map_err(|e| failed(format!("placing the base image's users: {e}")))?;
    // Keep what sandboxes see of the base: its user, entrypoint and command.
    let base_config = base.config.clone().unwrap_or_default();
    if let Some(recorded) = base_user_label(base_config.user.as_deref(), &running.base_users, layers) {
        labels.insert(crate::backends::docker::sandboxd_path::baked::USER.to_owned(), recorded);
    }
    let config = ContainerConfig {
        user: Some(base_config.user.clone().filter(|u| !u.is_empty()).unwrap_or_else(|| "0".into())),
        entrypoint: Some(base_config.entrypoint.clone().unwrap_or_default()),
        cmd: base_config.cmd.clone().or_else(|| Some(vec!["sh".into()])),
        labels: Some(labels),
        ..Default::default()
    };
    let (repo, tag) = image.rsplit_once(':').expect("a template tag has a tag");
    let options = bollard::query_parameters::CommitContainerOptions {
        container: Some(running.id.clone()),
        repo: Some(repo.into()),
        tag: Some(tag.into()),
        comment: Some(format!("{}{name}", super::prune::COMMENT_PREFIX)),
        // Paused above, and removed (paused) after.
        pause: false,
        ..Default::default()
    };
    let committed =
        docker.commit_container(options, config).await.map_err(|e| failed(format!("committing: {e}")))?;
    Ok(committed.id)
}

/// The [`baked::USER`](crate::backends::docker::sandboxd_path::baked::USER) label of a template image with `layers` layers
/// on a base whose configured user is `user` and whose files are `base_users`: how the base
/// resolves that user, so a create needs no archive read. None for no user, a `name:group`
/// (the label names a bare name), or one the base does not resolve (the create then fails
/// reading the files, with the reason).
fn base_user_label(
    user: Option<&str>,
    (passwd, group): &(Option<Vec<u8>>, Option<Vec<u8>>),
    layers: usize,
) -> Option<String> {
    let user = user.filter(|u| !u.is_empty() && !u.contains(':'))?;
    let text = |b: &Option<Vec<u8>>| b.as_deref().map(|b| String::from_utf8_lossy(b).into_owned());
    let source = crate::backends::docker::users::Source::TemplateBase;
    let resolved = crate::backends::docker::users::resolve(
        user,
        text(passwd).as_deref(),
        text(group).as_deref(),
        source,
    )
    .ok()?;
    Some(format!("{user}:{}:{}:{}:{layers}", resolved.uid, resolved.gid, resolved.home))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_user_label_records_only_what_the_base_resolves_without_root() {
        let files = (Some(b"root:x:0:0::/root:/bin/sh\nsbx:x:1000:1001::/home/sbx:/bin/sh\n".to_vec()), None);
        assert_eq!(base_user_label(Some("sbx"), &files, 4).as_deref(), Some("sbx:1000:1001:/home/sbx:4"));
        let baked = crate::backends::docker::sandboxd_path::baked::Baked::read(
            &[(
                crate::backends::docker::sandboxd_path::baked::USER.to_owned(),
                "sbx:1000:1001:/home/sbx:4".to_owned(),
            )]
            .into(),
            4,
            None,
        );
        assert_eq!(baked.user("sbx").map(|r| r.uid), Some(1000));
        for user in [None, Some(""), Some("sbx:sbx"), Some("nobody-here")] {
            assert_eq!(base_user_label(user, &files, 4), None, "{user:?}");
        }
        let remapped = (Some(b"sbx:x:0:0::/root:/bin/sh\n".to_vec()), None);
        assert_eq!(base_user_label(Some("sbx"), &remapped, 4), None, "an unasked-for root");
    }

    #[test]
    fn the_base_users_archive_holds_both_files_owned_by_the_supervisor() {
        let archive = crate::backends::docker::users::base_archive(Some(b"p"), None).unwrap();
        let mut archive = tar::Archive::new(archive.as_slice());
        let entries: Vec<(String, u32, u64, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().display().to_string(),
                    h.mode().unwrap(),
                    h.uid().unwrap(),
                    h.size().unwrap(),
                )
            })
            .collect();
        let id = u64::from(crate::backends::docker::SUPERVISOR_ID);
        assert_eq!(
            entries,
            [
                (".sandboxio/".to_owned(), 0o555, id, 0),
                (".sandboxio/base-passwd".to_owned(), 0o444, id, 1),
                (".sandboxio/base-group".to_owned(), 0o444, id, 0),
            ]
        );
    }
}
