//! Image references as the engine reads them: which registry an image comes from (for its
//! credentials and for errors), its repository, and its tag or pinned digest.

use std::fmt;

use crate::error::{Error, Result};

/// The registry the engine uses for a name with no registry part (Docker Hub).
pub(crate) const DOCKER_HUB: &str = "docker.io";

/// The key Docker's config file uses for Docker Hub's credentials.
pub(crate) const DOCKER_HUB_CONFIG_KEY: &str = "https://index.docker.io/v1/";

/// A parsed `[registry/]repository[:tag][@sha256:digest]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ImageRef {
    /// `host[:port]`, or [`DOCKER_HUB`] when the name has none.
    pub registry: String,
    /// The repository, without the registry (`library/` added for Docker Hub's short names
    /// is left to the engine).
    pub repository: String,
    /// The tag, when one is given (`latest` is the engine's default otherwise).
    pub tag: Option<String>,
    /// `sha256:<64 hex>`, when the reference pins one.
    pub digest: Option<String>,
}

impl ImageRef {
    /// Parses `image` the way the engine does: the first path component is a registry when
    /// it has a `.` or a `:`, or is `localhost`.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for an empty name, whitespace, or a digest that is not
    /// `sha256:` and 64 lower-case hex digits.
    pub(crate) fn parse(image: &str) -> Result<ImageRef> {
        let bad = |why: &str| Error::configuration(format!("image reference {image:?} is not valid: {why}"));
        if image.is_empty() || image.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("it is empty or holds whitespace"));
        }
        let (name, digest) = match image.split_once('@') {
            Some((name, digest)) => {
                let hex =
                    digest.strip_prefix("sha256:").ok_or_else(|| bad("a digest must be sha256:<hex>"))?;
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                    return Err(bad("a sha256 digest has 64 lower-case hex digits"));
                }
                (name, Some(digest.to_owned()))
            }
            None => (image, None),
        };
        let (registry, rest) = match name.split_once('/') {
            Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => {
                (first.to_owned(), rest)
            }
            _ => (DOCKER_HUB.to_owned(), name),
        };
        // A `:` after the last `/` starts the tag (a registry's port is before it).
        let (repository, tag) = match rest.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo.to_owned(), Some(tag.to_owned())),
            _ => (rest.to_owned(), None),
        };
        if repository.is_empty() || tag.as_deref() == Some("") {
            return Err(bad("the repository or the tag is empty"));
        }
        Ok(ImageRef { registry, repository, tag, digest })
    }

    /// The name the engine pulls: the repository with its registry (when it had one).
    pub(crate) fn name(&self) -> String {
        if self.registry == DOCKER_HUB {
            self.repository.clone()
        } else {
            format!("{}/{}", self.registry, self.repository)
        }
    }

    /// What goes in the engine's `tag` parameter: the digest when pinned (the engine then
    /// fetches exactly that manifest), else the tag, else `latest`.
    pub(crate) fn tag_or_digest(&self) -> &str {
        self.digest.as_deref().or(self.tag.as_deref()).unwrap_or("latest")
    }

    /// The key of this registry's entry in Docker's config file.
    pub(crate) fn config_key(&self) -> &str {
        if self.registry == DOCKER_HUB { DOCKER_HUB_CONFIG_KEY } else { &self.registry }
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:d7c2fca8ccb5b82efc23ef9838cfdfe64ff68083fb90a03bc94383d0a7f67fd3";

    #[test]
    fn registry_repository_tag_and_digest() {
        let r = ImageRef::parse("sandboxio/python:2").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("docker.io", "sandboxio/python", Some("2"))
        );
        assert_eq!(r.config_key(), DOCKER_HUB_CONFIG_KEY);
        let r = ImageRef::parse("127.0.0.1:5711/sbx/busybox").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("127.0.0.1:5711", "sbx/busybox", None)
        );
        assert_eq!(r.tag_or_digest(), "latest");
        assert_eq!(r.name(), "127.0.0.1:5711/sbx/busybox");
        let r = ImageRef::parse(&format!("localhost/x:1@{DIGEST}")).unwrap();
        assert_eq!((r.registry.as_str(), r.tag_or_digest()), ("localhost", DIGEST));
        assert_eq!(r.to_string(), format!("localhost/x:1@{DIGEST}"));
        assert_eq!(ImageRef::parse("busybox").unwrap().registry, "docker.io");
    }

    #[test]
    fn malformed_references_are_configuration_errors() {
        for bad in ["", "a b", "x@sha256:abc", "x@md5:0000", "x:", &format!("x@{}", DIGEST.to_uppercase())] {
            assert_eq!(ImageRef::parse(bad).unwrap_err().code(), crate::ErrorCode::Configuration, "{bad:?}");
        }
    }
}
