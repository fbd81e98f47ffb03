//! `e2b://` DSN and environment parsing: pure functions from text to a typed
//! `E2bConfig`, so every rule has an exact-output test and nothing here does I/O.

use crate::dsn::Dsn;
use crate::error::{Error, Result};
use crate::secret::SecretString;

use super::SCHEME;

/// The environment variable holding the API key (`e2b_<hex>`), sent as `X-API-Key`.
pub const API_KEY_ENV: &str = "E2B_API_KEY";
/// The environment variable that overrides the default domain (the DSN's `domain=` wins).
pub const DOMAIN_ENV: &str = "E2B_DOMAIN";
/// The domain the control plane and sandboxes live under unless overridden.
pub const DEFAULT_DOMAIN: &str = "e2b.app";
/// The template used unless the DSN or the builder names one: E2B's code interpreter,
/// whose Jupyter bridge serves `run_code`.
pub const DEFAULT_TEMPLATE: &str = "code-interpreter-v1";
/// envd's port inside every sandbox.
pub const ENVD_PORT: u16 = 49983;
/// The code interpreter's port inside a code-interpreter sandbox.
pub const CODE_PORT: u16 = 49999;

/// The DSN options `e2b://` understands.
pub(crate) const OPTIONS: &[&str] = &["domain", "template"];

/// Where and as whom the adapter talks to E2B.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct E2bConfig {
    /// The domain, for example `e2b.app`.
    pub(crate) domain: String,
    /// The template of new sandboxes.
    pub(crate) template: String,
    /// The API key; `None` until needed, so that building a backend (and
    /// `Sandbox::capabilities_of`) works without one. Creating or connecting without it is
    /// [`Error::Auth`] naming [`API_KEY_ENV`].
    pub(crate) api_key: Option<SecretString>,
}

impl std::fmt::Debug for E2bConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bConfig")
            .field("domain", &self.domain)
            .field("template", &self.template)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl E2bConfig {
    /// Parses a DSN, reading the environment through `env` (a function, so tests pass a
    /// map). Precedence: DSN option, then environment variable, then default.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`]: an authority or path in the DSN (E2B has one endpoint per
    /// domain; use `domain=`), an unknown option, an empty or malformed domain or template.
    pub(crate) fn parse(dsn: &Dsn, env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        dsn.reject_unknown_options(OPTIONS)?;
        if !dsn.authority().is_empty() || !dsn.path().is_empty() {
            return Err(Error::configuration(
                "e2b:// takes no host or path: write e2b:// (or e2b://?domain=<domain> for another deployment)",
            ));
        }
        let domain = match dsn.option("domain") {
            Some(d) => d.to_owned(),
            None => env(DOMAIN_ENV).filter(|d| !d.is_empty()).unwrap_or_else(|| DEFAULT_DOMAIN.to_owned()),
        };
        check_domain(&domain)?;
        let template = dsn.option("template").unwrap_or(DEFAULT_TEMPLATE).to_owned();
        check_template(&template)?;
        let api_key = env(API_KEY_ENV).filter(|k| !k.is_empty()).map(SecretString::new);
        Ok(E2bConfig { domain, template, api_key })
    }

    /// The API key, or the authentication error that names [`API_KEY_ENV`].
    pub(crate) fn api_key(&self) -> Result<&SecretString> {
        self.api_key.as_ref().ok_or_else(|| {
            Error::auth(
                SCHEME,
                format!("no API key: set the environment variable {API_KEY_ENV} (an E2B key, e2b_<hex>)"),
                Some(API_KEY_ENV.to_owned()),
            )
        })
    }

    /// The control plane's base URL, `https://api.<domain>`.
    pub(crate) fn api_url(&self) -> String {
        format!("https://api.{}", self.domain)
    }

    /// The base URL of `port` in sandbox `id`: the per-port host
    /// `https://<port>-<id>.<domain>`. `domain` is the sandbox's own domain when the API
    /// returned one, else the configured one. Requests also carry the routing headers
    /// (`E2b-Sandbox-Id`, `E2b-Sandbox-Port`), which the edge proxy reads on shared hosts.
    pub(crate) fn sandbox_url(&self, id: &str, port: u16, domain: Option<&str>) -> String {
        format!("https://{port}-{id}.{}", domain.unwrap_or(&self.domain))
    }
}

/// A DNS name made of labels of letters, digits and `-` (with an optional `:port` for
/// self-hosted deployments), so that it cannot smuggle a path, user info or a scheme.
fn check_domain(domain: &str) -> Result<()> {
    let (host, port) = match domain.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (domain, None),
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let host_ok = !host.is_empty() && host.len() <= 253 && host.split('.').all(label_ok);
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0));
    if host_ok && port_ok {
        Ok(())
    } else {
        Err(Error::configuration(format!(
            "e2b:// domain {domain:?} is not a domain name (labels of letters, digits and '-', optionally :port)"
        )))
    }
}

/// A template id or alias: what E2B accepts in `templateID` (letters, digits, `-`, `_`,
/// `.`, `:` for a tag, `/` for a team namespace), at most 128 characters.
pub(crate) fn check_template(template: &str) -> Result<()> {
    let ok = !template.is_empty()
        && template.len() <= 128
        && template.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/'));
    if ok {
        Ok(())
    } else {
        Err(Error::configuration(format!(
            "e2b:// template {template:?} is not a template id or alias (letters, digits, '-', '_', '.', ':', '/', at most 128)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::ErrorCode;

    fn parse(raw: &str, env: &[(&str, &str)]) -> Result<E2bConfig> {
        let env: HashMap<String, String> =
            env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        E2bConfig::parse(&Dsn::parse(raw)?, |k| env.get(k).cloned())
    }

    #[test]
    fn defaults() {
        let c = parse("e2b://", &[("E2B_API_KEY", "e2b_00ff")]).unwrap();
        assert_eq!(c.domain, "e2b.app");
        assert_eq!(c.template, "code-interpreter-v1");
        assert_eq!(c.api_key().unwrap().expose_secret(), "e2b_00ff");
        assert_eq!(c.api_url(), "https://api.e2b.app");
        assert_eq!(c.sandbox_url("i1a2b3", 49983, None), "https://49983-i1a2b3.e2b.app");
        assert_eq!(c.sandbox_url("i1a2b3", 49999, Some("eu.e2b.dev")), "https://49999-i1a2b3.eu.e2b.dev");
    }

    #[test]
    fn dsn_beats_environment_beats_default() {
        let c = parse("e2b://?domain=e2b.dev&template=base", &[("E2B_DOMAIN", "example.org")]).unwrap();
        assert_eq!((c.domain.as_str(), c.template.as_str()), ("e2b.dev", "base"));
        assert_eq!(c.api_url(), "https://api.e2b.dev");
        let c = parse("e2b://", &[("E2B_DOMAIN", "example.org:8443")]).unwrap();
        assert_eq!(c.api_url(), "https://api.example.org:8443");
        let c = parse("e2b://", &[("E2B_DOMAIN", "")]).unwrap();
        assert_eq!(c.domain, "e2b.app");
    }

    #[test]
    fn missing_key_is_the_auth_error_naming_the_variable() {
        for env in [&[][..], &[("E2B_API_KEY", "")][..]] {
            let c = parse("e2b://", env).unwrap();
            let err = c.api_key().unwrap_err();
            assert_eq!(err.code(), ErrorCode::Auth);
            assert_eq!(
                err.to_string(),
                "[SBX-002] authentication with the e2b backend failed: no API key: set the environment variable E2B_API_KEY (an E2B key, e2b_<hex>)"
            );
            assert!(matches!(&err, Error::Auth { env_var: Some(v), .. } if v == "E2B_API_KEY"));
        }
    }

    #[test]
    fn the_key_never_shows_in_debug() {
        let c = parse("e2b://", &[("E2B_API_KEY", "e2b_hunter2")]).unwrap();
        assert_eq!(
            format!("{c:?}"),
            "E2bConfig { domain: \"e2b.app\", template: \"code-interpreter-v1\", api_key: Some(\"<redacted>\") }"
        );
    }

    #[test]
    fn bad_dsns_are_configuration_errors_with_exact_messages() {
        for (raw, message) in [
            (
                "e2b://api.e2b.app",
                "[SBX-003] configuration error: e2b:// takes no host or path: write e2b:// (or e2b://?domain=<domain> for another deployment)",
            ),
            (
                "e2b:///v1",
                "[SBX-003] configuration error: e2b:// takes no host or path: write e2b:// (or e2b://?domain=<domain> for another deployment)",
            ),
            (
                "e2b://?region=eu",
                "[SBX-003] configuration error: unknown option \"region\" for the e2b backend; known options: domain, template",
            ),
            (
                "e2b://?domain=evil.com/x",
                "[SBX-003] configuration error: e2b:// domain \"evil.com/x\" is not a domain name (labels of letters, digits and '-', optionally :port)",
            ),
            (
                "e2b://?domain=",
                "[SBX-003] configuration error: e2b:// domain \"\" is not a domain name (labels of letters, digits and '-', optionally :port)",
            ),
            (
                "e2b://?domain=a..b",
                "[SBX-003] configuration error: e2b:// domain \"a..b\" is not a domain name (labels of letters, digits and '-', optionally :port)",
            ),
            (
                "e2b://?domain=a.b:0",
                "[SBX-003] configuration error: e2b:// domain \"a.b:0\" is not a domain name (labels of letters, digits and '-', optionally :port)",
            ),
            (
                "e2b://?template=a%20b",
                "[SBX-003] configuration error: e2b:// template \"a b\" is not a template id or alias (letters, digits, '-', '_', '.', ':', '/', at most 128)",
            ),
            (
                "e2b://?template=",
                "[SBX-003] configuration error: e2b:// template \"\" is not a template id or alias (letters, digits, '-', '_', '.', ':', '/', at most 128)",
            ),
        ] {
            let err = parse(raw, &[]).unwrap_err();
            assert_eq!(err.code(), ErrorCode::Configuration, "{raw}");
            assert_eq!(err.to_string(), message, "{raw}");
        }
    }
}
