//! Images with sandboxd baked in (`scripts/build-images` makes them): what their labels
//! promise, and when a `create` may believe them instead of placing sandboxd and reading the
//! container's `/etc/passwd` through the archive API (each of which mounts the container's
//! file system in the engine: the two costliest requests of a create).
//!
//! Two image labels, written with the layer that adds the binary:
//! - [`SANDBOXD`] = `<protocol>:<sha256>:<layers>`: [`SANDBOXD_PATH`](super::SANDBOXD_PATH)
//!   holds the sandboxd binary with this SHA-256 (mode `0555`, owned by
//!   [`SUPERVISOR_ID`](crate::backends::docker::SUPERVISOR_ID), in a directory of the same owner and mode, as
//!   the upload would leave it), speaking protocol `<protocol>`.
//! - [`USER`] = `<name>:<uid>:<gid>:<home>`: the image's `/etc/passwd` resolves `name` so.
//!
//! Images built from a labelled one inherit its labels, and their layers may replace the
//! binary or rewrite `/etc/passwd`: a label counts only while the image has exactly the
//! `<layers>` layers it was labelled with. An image that changes only its configuration
//! (`FROM ... USER root`) keeps its layers, and its files are the same. A binary other than
//! the one this build embeds (a stale image) is never run: it is uploaded over.

use std::collections::HashMap;

use crate::backends::docker::users::Resolved;

/// The image label naming the sandboxd binary the image holds.
pub(crate) const SANDBOXD: &str = "io.sandboxio.image.sandboxd";

/// The image label recording how the image's `/etc/passwd` resolves its default user.
pub(crate) const USER: &str = "io.sandboxio.image.user";

/// What an image's labels let a `create` skip.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Baked {
    /// The image holds the binary this build embeds: placing it is not needed.
    pub sandboxd: bool,
    /// A user name and what the image's `/etc/passwd` resolves it to.
    user: Option<(String, Resolved)>,
}

impl Baked {
    /// Reads the labels of an image with `layers` layers; `embedded` names the binary this
    /// build embeds (`<protocol>:<sha256>`, [`sandboxd_id`](crate::backends::docker::sandboxd_id); `None`: it has none, and
    /// no image holds it).
    pub(crate) fn read(labels: &HashMap<String, String>, layers: usize, embedded: Option<&str>) -> Baked {
        let at_layers = |value: &str| -> Option<String> {
            let (rest, count) = value.rsplit_once(':')?;
            (count.parse::<usize>().ok()? == layers).then(|| rest.to_owned())
        };
        let sandboxd = labels
            .get(SANDBOXD)
            .and_then(|v| at_layers(v))
            .is_some_and(|named| Some(named.as_str()) == embedded);
        let user = labels.get(USER).and_then(|v| at_layers(v)).and_then(|named| {
            let mut fields = named.splitn(4, ':');
            let name = fields.next().filter(|n| !n.is_empty())?.to_owned();
            let uid = fields.next()?.parse().ok()?;
            let gid = fields.next()?.parse().ok()?;
            let home = fields.next().filter(|h| h.starts_with('/'))?.to_owned();
            Some((name, Resolved { uid, gid, home }))
        });
        Baked { sandboxd, user }
    }

    /// The resolution of user `spec` (as `docker://` writes it: `name`, `uid`, `name:group`,
    /// ...) that the image recorded, when it recorded this very name.
    pub(crate) fn user(&self, spec: &str) -> Option<Resolved> {
        self.user.as_ref().filter(|(name, _)| name == spec).map(|(_, resolved)| resolved.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "629e450fff56d6685977cba1c3d08941843d13b9e9ad3403d5ffc0aa3839c1c4";

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn the_embedded_binary_at_the_labelled_layers_is_baked() {
        let id = format!("2:{DIGEST}");
        let embedded = Some(id.as_str());
        let good = labels(&[(SANDBOXD, &format!("{id}:3"))]);
        assert!(Baked::read(&good, 3, embedded).sandboxd);
        // Another binary (a stale image), another protocol, or no binary in this build.
        assert!(!Baked::read(&good, 3, Some(&id.replace('6', "7"))).sandboxd);
        assert!(!Baked::read(&labels(&[(SANDBOXD, &format!("1:{DIGEST}:3"))]), 3, embedded).sandboxd);
        assert!(!Baked::read(&good, 3, None).sandboxd);
        // An image built on top (more layers) may have replaced or changed the file.
        assert!(!Baked::read(&good, 4, embedded).sandboxd);
        // Malformed or missing labels are no promise.
        for value in ["", DIGEST, &id, &format!("{id}:x"), &format!("{id}:3:3")] {
            assert!(!Baked::read(&labels(&[(SANDBOXD, value)]), 3, embedded).sandboxd, "{value:?}");
        }
        assert_eq!(Baked::read(&HashMap::new(), 3, embedded), Baked::default());
    }

    #[test]
    fn this_build_names_its_binary_by_protocol_and_digest() {
        let id = crate::backends::docker::sandboxd_id().expect("this build embeds sandboxd");
        let (protocol, digest) = id.split_once(':').unwrap();
        assert_eq!(protocol, crate::sandboxd::proto::VERSION.to_string());
        assert!(digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()), "{digest}");
    }

    #[test]
    fn the_recorded_user_answers_only_its_own_name_at_the_labelled_layers() {
        let image = labels(&[(USER, "sandbox:1000:1001:/home/sandbox:3")]);
        let baked = Baked::read(&image, 3, None);
        let resolved = Resolved { uid: 1000, gid: 1001, home: "/home/sandbox".into() };
        assert_eq!(baked.user("sandbox"), Some(resolved));
        for other in ["root", "0", "1000", "sandbox:sandbox", "1000:1001", ""] {
            assert_eq!(baked.user(other), None, "{other:?}");
        }
        assert_eq!(Baked::read(&image, 4, None).user("sandbox"), None, "a derived image's layers");
        for value in ["sandbox:x:1:/h:3", "sandbox:1:1:relative:3", ":1:1:/h:3", "sandbox:1:1:3"] {
            assert_eq!(Baked::read(&labels(&[(USER, value)]), 3, None).user("sandbox"), None, "{value:?}");
        }
    }
}
