//! Removing template images nobody needs any more: every change to a template (or to its
//! base image) makes a new image under a new tag, and the old ones stay in the engine until
//! removed.

use std::collections::HashMap;

use bollard::Docker;

use super::{REPOSITORY, TEMPLATE_HASH_LABEL, Templates, current_tag};
use crate::backends::docker::client::{provider, status};
use crate::error::Result;

/// What [`DockerBackend::prune_templates`](crate::backends::docker::DockerBackend::prune_templates) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrunedTemplates {
    /// The template images removed: their tags (`sandboxio-template/<name>:<hash>`), or the
    /// image id of an untagged one (a setup whose tag another setup of the same template
    /// took over).
    pub removed: Vec<String>,
    /// The template images kept: the current image of each template (or, for a template
    /// whose base image is not in the engine, every image of that name), and those a
    /// container still uses.
    pub kept: Vec<String>,
}

/// The comment a template's commit writes on its image.
pub(super) const COMMENT_PREFIX: &str = "sandboxio template ";

/// Removes the images of `templates`' names (every template tag of those names, and the
/// untagged images their setups committed) except the current ones.
pub(super) async fn prune(docker: &Docker, templates: &Templates) -> Result<PrunedTemplates> {
    let mut current = Vec::new();
    let mut unknown_base = Vec::new();
    for (name, template) in templates {
        match docker.inspect_image(template.base()).await {
            Ok(base) => current.push(current_tag(name, template, &base.id.unwrap_or_default())),
            // Which tag is current cannot be said: keep them all.
            Err(_) => unknown_base.push(name.as_str()),
        }
    }
    let name_of =
        |tag: &str| tag.strip_prefix(&format!("{REPOSITORY}/"))?.split_once(':').map(|(n, _)| n.to_owned());
    let options = bollard::query_parameters::ListImagesOptions {
        filters: Some(HashMap::from([("label".to_owned(), vec![TEMPLATE_HASH_LABEL.to_owned()])])),
        ..Default::default()
    };
    let images =
        docker.list_images(Some(options)).await.map_err(|e| provider("listing template images", e))?;
    let mut report = PrunedTemplates::default();
    for image in images {
        let tags: Vec<_> = image.repo_tags.iter().filter(|t| t.as_str() != "<none>:<none>").collect();
        let targets: Vec<String> = if tags.is_empty() {
            // Untagged: only what a setup of one of these templates committed (an image
            // built FROM a template image inherits the label, and is not ours to remove).
            let comment =
                docker.inspect_image(&image.id).await.ok().and_then(|i| i.comment).unwrap_or_default();
            let ours = comment
                .strip_prefix(COMMENT_PREFIX)
                .is_some_and(|name| templates.contains_key(name) && !unknown_base.contains(&name));
            if ours { vec![image.id.clone()] } else { Vec::new() }
        } else {
            let mut targets = Vec::new();
            for tag in tags {
                let Some(name) = name_of(tag).filter(|n| templates.contains_key(n)) else { continue };
                if current.contains(tag) || unknown_base.contains(&name.as_str()) {
                    report.kept.push(tag.clone());
                } else {
                    targets.push(tag.clone());
                }
            }
            targets
        };
        for target in targets {
            let options = bollard::query_parameters::RemoveImageOptions {
                force: false,
                noprune: false,
                platforms: None,
            };
            match docker.remove_image(&target, Some(options), None).await {
                Ok(_) => report.removed.push(target),
                // A container (a sandbox, or a stopped one) still uses it.
                Err(e) if status(&e) == Some(409) => report.kept.push(target),
                Err(e) if status(&e) == Some(404) => {}
                Err(e) => return Err(provider(&format!("removing the template image {target}"), e)),
            }
        }
    }
    report.removed.sort();
    report.kept.sort();
    Ok(report)
}
