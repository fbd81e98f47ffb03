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
    /// [`ErrorCode::Configuration`](crate::ErrorCode::Configuration) naming the offending
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
    /// [`ErrorCode::Configuration`](crate::ErrorCode::Configuration) naming the option and
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

/// Schemes of first-party backends, the Cargo feature each needs, and whether this version
/// ships that feature yet.
const FIRST_PARTY: &[(&str, &str, bool)] =
    &[("local", "local", true), ("docker", "docker", true), ("e2b", "e2b", false), ("modal", "modal", false)];

fn registry() -> &'static RwLock<HashMap<String, BackendFactory>> {
    static REGISTRY: OnceLock<RwLock<HashMap<String, BackendFactory>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut map: HashMap<String, BackendFactory> = HashMap::new();
        map.insert("fake".into(), crate::testing::FakeBackend::from_dsn);
        #[cfg(feature = "local")]
        map.insert("local".into(), crate::backends::local::LocalBackend::from_dsn);
        #[cfg(feature = "docker")]
        map.insert("docker".into(), crate::backends::docker::DockerBackend::from_dsn);
        RwLock::new(map)
    })
}

/// Registers a third-party backend under `scheme`, so that `Sandbox::builder("scheme://…")`
/// reaches it.
///
/// # Errors
///
/// [`ErrorCode::Configuration`](crate::ErrorCode::Configuration) if `scheme` is already
/// registered or reserved for a first-party backend, or is not a valid scheme.
pub fn register_scheme(scheme: &str, factory: BackendFactory) -> Result<()> {
    let probe = format!("{scheme}://");
    let parsed = Dsn::parse(&probe)?;
    if parsed.scheme() != scheme {
        return Err(Error::configuration(format!("scheme {scheme:?} must be lower-case")));
    }
    if FIRST_PARTY.iter().any(|(s, _, _)| *s == scheme) {
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
/// [`ErrorCode::Configuration`](crate::ErrorCode::Configuration): a malformed DSN, an
/// unknown scheme, a first-party scheme whose Cargo feature is off (naming the feature), or
/// options the backend rejects.
pub fn resolve(raw: &str) -> Result<Arc<dyn Backend>> {
    let dsn = Dsn::parse(raw)?;
    let factory = registry().read().unwrap_or_else(PoisonError::into_inner).get(dsn.scheme()).copied();
    if let Some(factory) = factory {
        return factory(&dsn);
    }
    if let Some((scheme, feature, shipped)) = FIRST_PARTY.iter().find(|(s, _, _)| *s == dsn.scheme()) {
        return Err(Error::configuration(if *shipped {
            format!(
                "the {scheme}:// backend is not in this build: enable sandboxio's Cargo feature `{feature}`"
            )
        } else {
            format!(
                "the {scheme}:// backend needs sandboxio's Cargo feature `{feature}`, which this version of sandboxio does not ship yet"
            )
        }));
    }
    // What this build can reach (the registry), what needs a feature turned on, and what is
    // not shipped yet: each scheme once.
    let mut usable: Vec<String> =
        registry().read().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect();
    usable.sort();
    let off: Vec<String> = FIRST_PARTY
        .iter()
        .filter(|(s, _, shipped)| *shipped && !usable.iter().any(|u| u == s))
        .map(|(s, feature, _)| format!("{s} (feature `{feature}`)"))
        .collect();
    let planned: Vec<&str> =
        FIRST_PARTY.iter().filter(|(_, _, shipped)| !shipped).map(|(s, _, _)| *s).collect();
    let off = if off.is_empty() { String::new() } else { format!("; with a feature: {}", off.join(", ")) };
    Err(Error::configuration(format!(
        "unknown DSN scheme {:?}; schemes in this build: {}{off} (planned for later versions: {})",
        dsn.scheme(),
        usable.join(", "),
        planned.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let err = resolve("e2b://").unwrap_err();
        assert!(err.to_string().contains("feature `e2b`"), "{err}");
    }
}
