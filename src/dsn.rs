//! DSNs (`scheme://[authority][/path][?options]`) and the scheme registry.
//!
//! The query carries non-secret options only: a DSN with user info (`user:key@host`) or a
//! secret-looking option (`api_key=`, `token=`, …) is refused, with the value redacted.
//! Secrets come from environment variables or typed options. Precedence, strongest first:
//! typed builder options, then DSN options, then environment variables.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use crate::backend::Backend;
use crate::error::{Error, Result};

/// A parsed DSN.
#[derive(Clone, PartialEq, Eq)]
pub struct Dsn {
    scheme: String,
    authority: String,
    path: String,
    options: BTreeMap<String, String>,
}

/// Option names that would carry a secret; a DSN must not.
const SECRET_OPTION_HINTS: &[&str] = &["key", "token", "secret", "password", "passwd", "credential"];

impl Dsn {
    /// Parses `raw`.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] naming the offending
    /// part: an empty DSN, a missing `://`, a malformed scheme, user info, a repeated or
    /// secret-looking option.
    pub fn parse(raw: &str) -> Result<Dsn> {
        if raw.trim().is_empty() {
            return Err(Error::configuration(
                "empty DSN; expected scheme://[authority][/path][?options], for example \"fake://\"",
            ));
        }
        if raw.contains('\0') {
            return Err(Error::configuration("NUL byte in DSN"));
        }
        // Secrets first, so that no later message can echo one.
        let (before_fragment, fragment) = match raw.split_once('#') {
            Some((b, f)) => (b, Some(f)),
            None => (raw, None),
        };
        let (before_query, query) = match before_fragment.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (before_fragment, None),
        };
        let pairs: Vec<(String, String)> = query
            .map(|q| {
                form_urlencoded::parse(q.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
            })
            .unwrap_or_default();
        for (k, _) in &pairs {
            let lower = k.to_ascii_lowercase();
            if SECRET_OPTION_HINTS.iter().any(|h| lower.contains(h)) {
                return Err(Error::configuration(format!(
                    "DSN option {k:?} looks like a secret (value redacted); DSN options are not secret: use the backend's environment variable or a typed option"
                )));
            }
        }
        // Messages name the DSN by its scheme only: the rest may hold anything, a
        // credential pasted in the wrong place included.
        let lead: String = raw
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .take(12)
            .collect();
        let shown = format!("{lead}:…");
        if fragment.is_some() {
            return Err(Error::configuration(format!(
                "DSN {shown:?} has a '#' fragment, which DSNs do not use"
            )));
        }
        let Some((scheme, rest)) = before_query.split_once("://") else {
            return Err(Error::configuration(format!(
                "the DSN starting {lead:?} has no \"://\" after its scheme; expected scheme://[authority][/path][?options]"
            )));
        };
        let valid_scheme = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if !valid_scheme {
            return Err(Error::configuration(format!(
                "DSN scheme {scheme:?} is not a scheme (letters, digits, '+', '-', '.', starting with a letter)"
            )));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(Error::configuration(format!(
                "DSN {shown:?} carries user info (redacted); DSNs never hold credentials: put them in the backend's environment variable or a typed option"
            )));
        }
        let mut options = BTreeMap::new();
        for (k, v) in pairs {
            if k.is_empty() {
                return Err(Error::configuration(format!("DSN {shown:?} has an option with no name")));
            }
            if options.contains_key(&k) {
                return Err(Error::configuration(format!("DSN option {k:?} is given twice")));
            }
            options.insert(k, v);
        }
        Ok(Dsn {
            scheme: scheme.to_ascii_lowercase(),
            authority: authority.to_owned(),
            path: path.to_owned(),
            options,
        })
    }

    /// The scheme, lower-case (`"docker"`).
    #[must_use]
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The authority (`host:port`, or empty).
    #[must_use]
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The path, starting with `/` when present (`/var/run/docker.sock`), or empty.
    #[must_use]
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The options of the query string, decoded.
    #[must_use]
    pub fn options(&self) -> &BTreeMap<String, String> {
        &self.options
    }

    /// One option's value.
    #[must_use]
    pub fn option(&self, name: &str) -> Option<&str> {
        self.options.get(name).map(String::as_str)
    }

    /// Fails on any option outside `known`, so that a typo is never silently ignored.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] naming the option and
    /// the known ones.
    pub fn reject_unknown_options(&self, known: &[&str]) -> Result<()> {
        match self.options.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(Error::configuration(format!(
                "unknown option {k:?} for the {} backend; known options: {}",
                self.scheme,
                if known.is_empty() { "(none)".to_owned() } else { known.join(", ") }
            ))),
            None => Ok(()),
        }
    }
}

impl fmt::Display for Dsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.path)?;
        for (i, (k, v)) in self.options.iter().enumerate() {
            write!(f, "{}{k}={v}", if i == 0 { '?' } else { '&' })?;
        }
        Ok(())
    }
}

impl fmt::Debug for Dsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dsn({self})")
    }
}

/// Builds a backend from a parsed DSN. Must do no I/O and start no thread: connecting
/// happens on first use.
pub type BackendFactory = fn(&Dsn) -> Result<Arc<dyn Backend>>;

/// One first-party backend's entry in [`FIRST_PARTY`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Scheme {
    /// The DSN scheme, lower-case, without `://` (`"docker"`).
    pub name: &'static str,
    /// The Cargo feature of sandboxio that builds the backend; `None` when it is always built.
    pub feature: Option<&'static str>,
    /// The backend's constructor, `None` when this build does not contain it (its feature is
    /// off, or the backend is not released).
    pub backend: Option<BackendFactory>,
    /// Whether this version of sandboxio ships the backend; an unreleased scheme is reserved.
    pub released: bool,
}

impl Scheme {
    /// Why this build cannot reach the scheme, naming the feature, or `None` when it can.
    #[must_use]
    pub fn unavailable_reason(&self) -> Option<String> {
        if self.backend.is_some() {
            return None;
        }
        let feature = self.feature.unwrap_or("(none)");
        Some(if self.released {
            format!(
                "the {}:// backend is not in this build: enable sandboxio's Cargo feature `{feature}`",
                self.name
            )
        } else {
            format!(
                "the {}:// backend needs sandboxio's Cargo feature `{feature}`, which this version of sandboxio does not ship yet",
                self.name
            )
        })
    }
}

/// The constructor of `local://` when the `local` feature is on.
#[cfg(feature = "local")]
const LOCAL: Option<BackendFactory> = Some(crate::backends::local::LocalBackend::from_dsn);
#[cfg(not(feature = "local"))]
const LOCAL: Option<BackendFactory> = None;

/// The constructor of `docker://` when the `docker` feature is on.
#[cfg(feature = "docker")]
const DOCKER: Option<BackendFactory> = Some(crate::backends::docker::DockerBackend::from_dsn);
#[cfg(not(feature = "docker"))]
const DOCKER: Option<BackendFactory> = None;

/// The constructor of `e2b://` when the `e2b` feature is on.
#[cfg(feature = "e2b")]
const E2B: Option<BackendFactory> = Some(crate::backends::e2b::E2bBackend::from_dsn);
#[cfg(not(feature = "e2b"))]
const E2B: Option<BackendFactory> = None;

/// The constructor of `modal://` when the `modal` feature is on.
#[cfg(feature = "modal")]
const MODAL: Option<BackendFactory> = Some(crate::backends::modal::ModalBackend::from_dsn);
#[cfg(not(feature = "modal"))]
const MODAL: Option<BackendFactory> = None;

/// sandboxio's own backends, the one list that DSN resolution, the "feature not enabled"
/// errors, [`register_scheme`]'s reserved names and the README's feature table (checked by
/// a test) follow. Every scheme here is reserved, whether or not this build contains it.
pub const FIRST_PARTY: &[Scheme] = &[
    Scheme {
        name: "fake",
        feature: None,
        backend: Some(crate::testing::FakeBackend::from_dsn),
        released: true,
    },
    Scheme { name: "local", feature: Some("local"), backend: LOCAL, released: true },
    Scheme { name: "docker", feature: Some("docker"), backend: DOCKER, released: true },
    Scheme { name: "e2b", feature: Some("e2b"), backend: E2B, released: true },
    Scheme { name: "modal", feature: Some("modal"), backend: MODAL, released: true },
];

/// The first-party entry of `scheme`, if it is one.
#[must_use]
pub fn first_party(scheme: &str) -> Option<&'static Scheme> {
    FIRST_PARTY.iter().find(|s| s.name == scheme)
}

/// Third-party schemes registered with [`register_scheme`].
fn registry() -> &'static RwLock<HashMap<String, BackendFactory>> {
    static REGISTRY: OnceLock<RwLock<HashMap<String, BackendFactory>>> = OnceLock::new();
    REGISTRY.get_or_init(|| RwLock::new(HashMap::new()))
}

/// Registers a third-party backend under `scheme`, so that `Sandbox::builder("scheme://…")`
/// reaches it.
///
/// # Errors
///
/// [`Error::Configuration`] if `scheme` is already
/// registered or reserved for a first-party backend ([`FIRST_PARTY`]), or is not a valid
/// scheme.
pub fn register_scheme(scheme: &str, factory: BackendFactory) -> Result<()> {
    let probe = format!("{scheme}://");
    let parsed = Dsn::parse(&probe)?;
    if parsed.scheme() != scheme {
        return Err(Error::configuration(format!("scheme {scheme:?} must be lower-case")));
    }
    if first_party(scheme).is_some() {
        return Err(Error::configuration(format!(
            "scheme {scheme:?} is reserved for sandboxio's own backend"
        )));
    }
    let mut map = registry().write().unwrap_or_else(PoisonError::into_inner);
    if map.contains_key(scheme) {
        return Err(Error::configuration(format!("scheme {scheme:?} is already registered")));
    }
    map.insert(scheme.to_owned(), factory);
    Ok(())
}

/// Parses `raw` and builds its backend. Does no I/O.
///
/// # Errors
///
/// [`Error::Configuration`]: a malformed DSN, an
/// unknown scheme, a first-party scheme whose Cargo feature is off (naming the feature), or
/// options the backend rejects.
pub fn resolve(raw: &str) -> Result<Arc<dyn Backend>> {
    let dsn = Dsn::parse(raw)?;
    if let Some(entry) = first_party(dsn.scheme()) {
        return match entry.backend {
            Some(factory) => factory(&dsn),
            None => Err(Error::configuration(entry.unavailable_reason().unwrap_or_default())),
        };
    }
    let factory = registry().read().unwrap_or_else(PoisonError::into_inner).get(dsn.scheme()).copied();
    if let Some(factory) = factory {
        return factory(&dsn);
    }
    Err(Error::configuration(unknown_scheme(dsn.scheme())))
}

/// The message for a scheme nobody provides: what this build can reach, what needs a
/// feature turned on, and what is not shipped yet, each scheme once.
fn unknown_scheme(scheme: &str) -> String {
    let mut usable: Vec<String> =
        FIRST_PARTY.iter().filter(|s| s.backend.is_some()).map(|s| s.name.to_owned()).collect();
    usable.extend(registry().read().unwrap_or_else(PoisonError::into_inner).keys().cloned());
    usable.sort();
    let off: Vec<String> = FIRST_PARTY
        .iter()
        .filter(|s| s.released && s.backend.is_none())
        .map(|s| format!("{} (feature `{}`)", s.name, s.feature.unwrap_or("(none)")))
        .collect();
    let planned: Vec<&str> = FIRST_PARTY.iter().filter(|s| !s.released).map(|s| s.name).collect();
    let off = if off.is_empty() { String::new() } else { format!("; with a feature: {}", off.join(", ")) };
    // Nothing planned is said as nothing, not as an empty list.
    let planned = if planned.is_empty() {
        String::new()
    } else {
        format!(" (planned for later versions: {})", planned.join(", "))
    };
    format!("unknown DSN scheme {scheme:?}; schemes in this build: {}{off}{planned}", usable.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #30 item 8: with no scheme planned, the message ended in "(planned for later
    /// versions: )".
    #[test]
    fn an_unknown_scheme_names_no_empty_list() {
        let said = unknown_scheme("nosuch");
        assert!(said.starts_with("unknown DSN scheme \"nosuch\"; schemes in this build: "), "{said}");
        assert!(!said.contains(": )") && !said.ends_with(": "), "{said}");
        if FIRST_PARTY.iter().all(|s| s.released) {
            assert!(!said.contains("planned"), "{said}");
        }
    }

    #[test]
    fn parses_parts() {
        let d = Dsn::parse("docker:///var/run/docker.sock?pull=never").unwrap();
        assert_eq!(d.scheme(), "docker");
        assert_eq!(d.authority(), "");
        assert_eq!(d.path(), "/var/run/docker.sock");
        assert_eq!(d.option("pull"), Some("never"));
        let d = Dsn::parse("E2B://api.e2b.dev:443/v1?domain=x%20y").unwrap();
        assert_eq!((d.scheme(), d.authority(), d.path()), ("e2b", "api.e2b.dev:443", "/v1"));
        assert_eq!(d.option("domain"), Some("x y"));
        assert_eq!(Dsn::parse("fake://").unwrap().to_string(), "fake://");
    }

    #[test]
    fn malformed_dsns_name_the_part() {
        for (raw, needle) in [
            ("", "empty DSN"),
            ("docker//x", "starting \"docker\""),
            ("1x://", "\"1x\""),
            ("://x", "\"\""),
            ("e2b://user:hunter2@host", "user info (redacted)"),
            ("e2b://?api_key=hunter2", "\"api_key\""),
            ("fake://?a=1&a=2", "\"a\""),
            ("fake://#frag", "fragment"),
            ("e2b://?api_key=hunter2#x", "\"api_key\""),
            ("fake://?=x&token=hunter2", "\"token\""),
            ("e2b:/?api_key=hunter2", "\"api_key\""),
            ("e2b:/x?region=hunter2", "starting \"e2b\""),
            ("x://u:hunter2@h/p?q=hunter2#hunter2", "\"x:…\""),
        ] {
            let err = Dsn::parse(raw).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::Configuration, "{raw:?}");
            let msg = err.to_string();
            assert!(msg.contains(needle), "{raw:?}: {msg}");
            assert!(!msg.contains("hunter2"), "secret leaked: {msg}");
        }
    }

    #[test]
    fn unknown_and_disabled_schemes() {
        let err = resolve("nope://").unwrap_err();
        assert!(err.to_string().contains("unknown DSN scheme \"nope\""), "{err}");
        if !cfg!(feature = "modal") {
            let err = resolve("modal://").unwrap_err();
            assert!(err.to_string().contains("feature `modal`"), "{err}");
        }
    }

    #[test]
    fn the_table_matches_this_build() {
        for entry in FIRST_PARTY {
            let built = entry.name == "fake"
                || (entry.name == "local" && cfg!(feature = "local"))
                || (entry.name == "docker" && cfg!(feature = "docker"))
                || (entry.name == "e2b" && cfg!(feature = "e2b"))
                || (entry.name == "modal" && cfg!(feature = "modal"));
            assert_eq!(entry.backend.is_some(), built, "{}", entry.name);
            assert!(entry.released || !built, "{}: built but not released", entry.name);
            assert_eq!(first_party(entry.name).map(|e| e.name), Some(entry.name));
            let reserved = register_scheme(entry.name, |_| Err(Error::configuration("unused"))).unwrap_err();
            assert!(reserved.to_string().contains("reserved"), "{reserved}");
            let resolved = resolve(&format!("{}://", entry.name));
            match (entry.unavailable_reason(), entry.feature) {
                (None, _) => assert!(resolved.is_ok(), "{}: {:?}", entry.name, resolved.err()),
                (Some(reason), Some(feature)) => {
                    let err = resolved.expect_err("an unavailable scheme fails");
                    assert_eq!(err.code(), crate::ErrorCode::Configuration);
                    assert!(err.to_string().contains(&reason), "{err}");
                    assert!(reason.contains(&format!("feature `{feature}`")), "{reason}");
                    assert_eq!(reason.contains("does not ship yet"), !entry.released, "{reason}");
                }
                (Some(reason), None) => panic!("{}: unavailable without a feature: {reason}", entry.name),
            }
        }
        let unknown = resolve("nope://").unwrap_err().to_string();
        for entry in FIRST_PARTY {
            assert!(unknown.contains(entry.name), "{} missing from: {unknown}", entry.name);
        }
    }
}
