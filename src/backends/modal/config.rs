//! `modal://` DSN, environment and profile-file parsing: pure functions from text to typed
//! settings, so every rule has an exact-output test. Reading `~/.modal.toml` is the one
//! piece of I/O (`read_profile_file`), done at the first `create`, never when a backend
//! is built.

use std::time::Duration;

use crate::dsn::Dsn;
use crate::error::{Error, Result};
use crate::secret::SecretString;

use super::SCHEME;

/// The environment variable holding the token id (`ak-…`), sent as `x-modal-token-id`.
pub const TOKEN_ID_ENV: &str = "MODAL_TOKEN_ID";
/// The environment variable holding the token secret (`as-…`), sent as
/// `x-modal-token-secret`.
pub const TOKEN_SECRET_ENV: &str = "MODAL_TOKEN_SECRET";
/// The environment variable that overrides the control plane's URL.
pub const SERVER_URL_ENV: &str = "MODAL_SERVER_URL";
/// The environment variable naming the Modal environment (workspace section).
pub const ENVIRONMENT_ENV: &str = "MODAL_ENVIRONMENT";
/// The environment variable that chooses a profile of the profile file.
pub const PROFILE_ENV: &str = "MODAL_PROFILE";
/// The environment variable that moves the profile file.
pub const CONFIG_PATH_ENV: &str = "MODAL_CONFIG_PATH";
/// The environment variable that fixes the image builder version.
pub const IMAGE_BUILDER_VERSION_ENV: &str = "MODAL_IMAGE_BUILDER_VERSION";
/// The control plane unless overridden.
pub const DEFAULT_SERVER_URL: &str = "https://api.modal.com:443";
/// The Modal app that new sandboxes belong to unless the DSN names one (created if missing).
pub const DEFAULT_APP: &str = "sandboxio";
/// The image of new sandboxes unless the DSN or the builder names one.
pub const DEFAULT_IMAGE: &str = "python:3.13-slim";
/// The longest sandbox lifetime Modal accepts (`timeout_secs`): 24 hours.
pub const MAX_TTL: Duration = Duration::from_hours(24);

/// The DSN options `modal://` understands.
pub(crate) const OPTIONS: &[&str] = &["app", "environment", "idle_timeout", "image", "profile"];

/// What the DSN and the environment say, before the profile file is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModalConfig {
    /// The app of new sandboxes, the scope of the sweep.
    pub(crate) app: String,
    /// The image reference of new sandboxes (`FROM <image>`).
    pub(crate) image: String,
    /// Idle timeout sent with every create, `None` for none.
    pub(crate) idle_timeout: Option<Duration>,
    /// The profile to read (`profile=` or `MODAL_PROFILE`); `None`: the active one.
    pub(crate) profile: Option<String>,
    /// The environment variables that override the profile file, captured at parse time.
    pub(crate) env: Overrides,
}

/// Values from the environment (each wins over the profile file).
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Overrides {
    pub(crate) token_id: Option<String>,
    pub(crate) token_secret: Option<SecretString>,
    pub(crate) server_url: Option<String>,
    pub(crate) environment: Option<String>,
    pub(crate) image_builder_version: Option<String>,
    /// `MODAL_CONFIG_PATH`, else `$HOME/.modal.toml`, else `None`.
    pub(crate) config_path: Option<String>,
}

impl std::fmt::Debug for Overrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overrides")
            .field("token_id", &self.token_id)
            .field("token_secret", &self.token_secret.as_ref().map(|_| "<redacted>"))
            .field("server_url", &self.server_url)
            .field("environment", &self.environment)
            .field("image_builder_version", &self.image_builder_version)
            .field("config_path", &self.config_path)
            .finish()
    }
}

/// One profile of the profile file (a TOML table per profile name). The secret prints as
/// `[redacted]` ([`SecretString`]'s `Debug`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Profile {
    pub(crate) token_id: Option<String>,
    pub(crate) token_secret: Option<SecretString>,
    pub(crate) server_url: Option<String>,
    pub(crate) environment: Option<String>,
    pub(crate) image_builder_version: Option<String>,
}

/// The token pair sent on every control-plane call.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub(crate) token_id: String,
    pub(crate) token_secret: SecretString,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("token_id", &self.token_id)
            .field("token_secret", &"<redacted>")
            .finish()
    }
}

/// Everything a client needs: the environment over the profile over the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `https://host[:port]`.
    pub(crate) server_url: String,
    pub(crate) credentials: Credentials,
    /// Empty for the workspace's default environment.
    pub(crate) environment: String,
    /// `None`: ask the workspace (`EnvironmentGetOrCreate`).
    pub(crate) image_builder_version: Option<String>,
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

impl ModalConfig {
    /// Parses a DSN, reading the environment through `env` (a function, so tests pass a
    /// map). Precedence: DSN option, then environment variable, then default.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`]: a host or path in the DSN, an unknown option, an empty or
    /// malformed app name, image or profile, an idle timeout that is not a whole number of
    /// seconds from 1 to 86400.
    pub(crate) fn parse(dsn: &Dsn, env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        dsn.reject_unknown_options(OPTIONS)?;
        if !dsn.authority().is_empty() || !dsn.path().is_empty() {
            return Err(Error::configuration(
                "modal:// takes no host or path: write modal:// (the server comes from MODAL_SERVER_URL or the profile)",
            ));
        }
        let app = dsn.option("app").unwrap_or(DEFAULT_APP).to_owned();
        check_name("app", &app)?;
        let image = dsn.option("image").unwrap_or(DEFAULT_IMAGE).to_owned();
        check_image(&image)?;
        let profile = match dsn.option("profile") {
            Some(p) => Some(p.to_owned()),
            None => non_empty(env(PROFILE_ENV)),
        };
        if let Some(p) = &profile {
            check_name("profile", p)?;
        }
        let idle_timeout = dsn.option("idle_timeout").map(parse_idle_timeout).transpose()?;
        let config_path = non_empty(env(CONFIG_PATH_ENV))
            .or_else(|| non_empty(env("HOME")).map(|h| format!("{}/.modal.toml", h.trim_end_matches('/'))));
        let overrides = Overrides {
            token_id: non_empty(env(TOKEN_ID_ENV)),
            token_secret: non_empty(env(TOKEN_SECRET_ENV)).map(SecretString::new),
            server_url: non_empty(env(SERVER_URL_ENV)),
            environment: match dsn.option("environment") {
                Some(e) => {
                    check_name("environment", e)?;
                    Some(e.to_owned())
                }
                None => non_empty(env(ENVIRONMENT_ENV)),
            },
            image_builder_version: non_empty(env(IMAGE_BUILDER_VERSION_ENV)),
            config_path,
        };
        Ok(ModalConfig { app, image, idle_timeout, profile, env: overrides })
    }

    /// Merges the environment over `profile` (the chosen profile of the file, or the
    /// default one when there is no file).
    ///
    /// # Errors
    ///
    /// [`Error::Auth`] naming [`TOKEN_ID_ENV`] or [`TOKEN_SECRET_ENV`] when that half of
    /// the token is in neither place; [`Error::Configuration`] for a server URL that is not
    /// `https://host[:port]`.
    pub(crate) fn settings(&self, profile: &Profile) -> Result<Settings> {
        let pick = |env: &Option<String>, file: &Option<String>| env.clone().or_else(|| file.clone());
        let server_url =
            pick(&self.env.server_url, &profile.server_url).unwrap_or_else(|| DEFAULT_SERVER_URL.to_owned());
        check_server_url(&server_url)?;
        let missing = |var: &str| {
            Error::auth(
                SCHEME,
                format!(
                    "no Modal token: set the environment variables {TOKEN_ID_ENV} and {TOKEN_SECRET_ENV} (or token_id and token_secret in a profile of ~/.modal.toml); {var} is missing"
                ),
                Some(var.to_owned()),
            )
        };
        let token_id = pick(&self.env.token_id, &profile.token_id).ok_or_else(|| missing(TOKEN_ID_ENV))?;
        let token_secret = self
            .env
            .token_secret
            .clone()
            .or_else(|| profile.token_secret.clone())
            .ok_or_else(|| missing(TOKEN_SECRET_ENV))?;
        Ok(Settings {
            server_url,
            credentials: Credentials { token_id, token_secret },
            environment: pick(&self.env.environment, &profile.environment).unwrap_or_default(),
            image_builder_version: pick(&self.env.image_builder_version, &profile.image_builder_version),
        })
    }
}

/// Chooses a profile in the profile file's text: `name` when given (it must exist), else
/// the first table with `active = true`, else none (all fields empty).
///
/// # Errors
///
/// [`Error::Configuration`] when the text is not TOML, a profile is not a table, a known
/// key is not a string (`active` not a boolean), or `name` is not in the file.
pub(crate) fn parse_profile(text: &str, name: Option<&str>) -> Result<Profile> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        Error::configuration(format!("the Modal profile file is not TOML: {}", e.message()))
    })?;
    let chosen = match name {
        Some(n) => Some((
            n,
            table.get(n).ok_or_else(|| {
                Error::configuration(format!("the Modal profile file has no profile {n:?}"))
            })?,
        )),
        None => table
            .iter()
            .find(|(_, v)| v.get("active").and_then(toml::Value::as_bool) == Some(true))
            .map(|(k, v)| (k.as_str(), v)),
    };
    let Some((n, value)) = chosen else { return Ok(Profile::default()) };
    let profile = value
        .as_table()
        .ok_or_else(|| Error::configuration(format!("the Modal profile {n:?} is not a table")))?;
    if profile.get("active").is_some_and(|a| !a.is_bool()) {
        return Err(Error::configuration(format!(
            "the Modal profile {n:?} has an `active` that is not true or false"
        )));
    }
    let string = |key: &str| -> Result<Option<String>> {
        match profile.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(non_empty(Some(s.clone()))),
            Some(_) => Err(Error::configuration(format!(
                "the Modal profile {n:?} has a `{key}` that is not a string"
            ))),
        }
    };
    Ok(Profile {
        token_id: string("token_id")?,
        token_secret: string("token_secret")?.map(SecretString::new),
        server_url: string("server_url")?,
        environment: string("environment")?,
        image_builder_version: string("image_builder_version")?,
    })
}

/// Reads the profile file of `config` (no file: the empty profile) and chooses its profile.
///
/// # Errors
///
/// [`Error::Configuration`] when the file exists but cannot be read or parsed, or the
/// named profile is not in it (a named profile without a file is the same error).
pub(crate) fn read_profile_file(config: &ModalConfig) -> Result<Profile> {
    let text = match config.env.config_path.as_deref().map(std::fs::read_to_string) {
        Some(Ok(text)) => text,
        Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        None => String::new(),
        Some(Err(e)) => {
            return Err(
                Error::configuration(format!("cannot read the Modal profile file: {e}")).with_source(e)
            );
        }
    };
    parse_profile(&text, config.profile.as_deref())
}

/// `idle_timeout=<seconds>`: a whole number from 1 to 86400.
fn parse_idle_timeout(raw: &str) -> Result<Duration> {
    match raw.parse::<u64>() {
        Ok(s) if (1..=MAX_TTL.as_secs()).contains(&s) => Ok(Duration::from_secs(s)),
        _ => Err(Error::configuration(format!(
            "modal:// idle_timeout {raw:?} is not a whole number of seconds from 1 to 86400"
        ))),
    }
}

/// App and profile names: letters, digits, `-`, `_`, `.`, 1 to 64 characters.
fn check_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::configuration(format!(
            "modal:// {what} {name:?} is not a name (letters, digits, '-', '_', '.', at most 64)"
        )))
    }
}

/// An image reference as a registry accepts it (`[host/]path[:tag][@digest]`): no spaces,
/// no newline (it becomes one `FROM` line of the image definition), at most 255 characters.
pub(crate) fn check_image(image: &str) -> Result<()> {
    let ok = !image.is_empty()
        && image.len() <= 255
        && image.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/' | '@'));
    if ok {
        Ok(())
    } else {
        Err(Error::configuration(format!(
            "modal:// image {image:?} is not an image reference (letters, digits, '-', '_', '.', ':', '/', '@', at most 255)"
        )))
    }
}

/// `https://host[:port]` with nothing after the authority. Plain `http://` is refused: the
/// token travels in every request's headers.
fn check_server_url(url: &str) -> Result<()> {
    let authority = url.strip_prefix("https://").map(|r| r.trim_end_matches('/'));
    let ok = authority.is_some_and(|a| {
        let (host, port) = match a.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        };
        !host.is_empty()
            && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
            && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0))
    });
    if ok {
        Ok(())
    } else {
        Err(Error::configuration(format!(
            "the Modal server URL {url:?} is not https://host[:port] (plain http is refused: the token goes in every request)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::ErrorCode;

    fn parse(raw: &str, env: &[(&str, &str)]) -> Result<ModalConfig> {
        let env: HashMap<String, String> =
            env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        ModalConfig::parse(&Dsn::parse(raw)?, |k| env.get(k).cloned())
    }

    const FILE: &str = r#"
[default]
token_id = "ak-file"
token_secret = "as-file"

[work]
token_id = "ak-work"
token_secret = "as-work"
server_url = "https://modal.example.org:8443"
environment = "staging"
image_builder_version = "2025.06"
active = true
"#;

    #[test]
    fn defaults_and_environment() {
        let c = parse(
            "modal://",
            &[("MODAL_TOKEN_ID", "ak-1"), ("MODAL_TOKEN_SECRET", "as-1"), ("HOME", "/home/u/")],
        )
        .unwrap();
        assert_eq!(
            (c.app.as_str(), c.image.as_str(), c.idle_timeout, c.profile.as_deref()),
            ("sandboxio", "python:3.13-slim", None, None)
        );
        assert_eq!(c.env.config_path.as_deref(), Some("/home/u/.modal.toml"));
        let s = c.settings(&Profile::default()).unwrap();
        assert_eq!(s.server_url, "https://api.modal.com:443");
        assert_eq!(s.credentials.token_id, "ak-1");
        assert_eq!(s.credentials.token_secret.expose_secret(), "as-1");
        assert_eq!((s.environment.as_str(), s.image_builder_version), ("", None));
    }

    #[test]
    fn dsn_options_are_typed() {
        let c = parse(
            "modal://?app=evals&image=ghcr.io/org/img:1.2@sha256:ab&idle_timeout=300&profile=work",
            &[("MODAL_PROFILE", "other"), ("MODAL_CONFIG_PATH", "/etc/modal.toml")],
        )
        .unwrap();
        assert_eq!(c.app, "evals");
        assert_eq!(c.image, "ghcr.io/org/img:1.2@sha256:ab");
        assert_eq!(c.idle_timeout, Some(Duration::from_mins(5)));
        assert_eq!(c.profile.as_deref(), Some("work"));
        assert_eq!(c.env.config_path.as_deref(), Some("/etc/modal.toml"));
        let c = parse("modal://", &[("MODAL_PROFILE", "other")]).unwrap();
        assert_eq!(c.profile.as_deref(), Some("other"));
    }

    #[test]
    fn the_active_profile_and_the_environment_over_it() {
        let active = parse_profile(FILE, None).unwrap();
        assert_eq!(active.token_id.as_deref(), Some("ak-work"));
        let named = parse_profile(FILE, Some("default")).unwrap();
        assert_eq!(named.token_id.as_deref(), Some("ak-file"));
        let c = parse("modal://", &[]).unwrap();
        let s = c.settings(&active).unwrap();
        assert_eq!(
            (
                s.server_url.as_str(),
                s.credentials.token_id.as_str(),
                s.environment.as_str(),
                s.image_builder_version.as_deref()
            ),
            ("https://modal.example.org:8443", "ak-work", "staging", Some("2025.06"))
        );
        assert_eq!(s.credentials.token_secret.expose_secret(), "as-work");
        let c = parse(
            "modal://",
            &[
                ("MODAL_TOKEN_ID", "ak-env"),
                ("MODAL_SERVER_URL", "https://api.modal.com"),
                ("MODAL_ENVIRONMENT", "prod"),
            ],
        )
        .unwrap();
        let s = c.settings(&active).unwrap();
        assert_eq!(
            (s.server_url.as_str(), s.credentials.token_id.as_str(), s.environment.as_str()),
            ("https://api.modal.com", "ak-env", "prod")
        );
        assert_eq!(s.credentials.token_secret.expose_secret(), "as-work");
        // No active profile and no name: nothing from the file.
        assert!(parse_profile("[a]\ntoken_id = \"x\"\n", None).unwrap() == Profile::default());
        assert!(parse_profile("", None).unwrap() == Profile::default());
    }

    #[test]
    fn a_missing_token_is_the_auth_error_naming_the_variable() {
        for (env, var) in [
            (&[][..], "MODAL_TOKEN_ID"),
            (&[("MODAL_TOKEN_ID", "ak-1")][..], "MODAL_TOKEN_SECRET"),
            (&[("MODAL_TOKEN_SECRET", "as-1"), ("MODAL_TOKEN_ID", "")][..], "MODAL_TOKEN_ID"),
        ] {
            let err = parse("modal://", env).unwrap().settings(&Profile::default()).unwrap_err();
            assert_eq!(err.code(), ErrorCode::Auth);
            assert_eq!(
                err.to_string(),
                format!(
                    "[SBX-002] authentication with the modal backend failed: no Modal token: set the environment variables MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or token_id and token_secret in a profile of ~/.modal.toml); {var} is missing"
                )
            );
            assert!(matches!(&err, Error::Auth { env_var: Some(v), .. } if v == var));
        }
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let c =
            parse("modal://", &[("MODAL_TOKEN_ID", "ak-1"), ("MODAL_TOKEN_SECRET", "as-hunter2")]).unwrap();
        let s = c.settings(&parse_profile(FILE, Some("work")).unwrap()).unwrap();
        for shown in [format!("{c:?}"), format!("{s:?}")] {
            assert!(!shown.contains("hunter2") && !shown.contains("as-work"), "{shown}");
        }
        assert_eq!(
            format!("{:?}", s.credentials),
            "Credentials { token_id: \"ak-1\", token_secret: \"<redacted>\" }"
        );
    }

    #[test]
    fn bad_input_is_a_configuration_error_with_an_exact_message() {
        for (raw, message) in [
            (
                "modal://api.modal.com",
                "modal:// takes no host or path: write modal:// (the server comes from MODAL_SERVER_URL or the profile)",
            ),
            (
                "modal://?region=us",
                "unknown option \"region\" for the modal backend; known options: app, environment, idle_timeout, image, profile",
            ),
            (
                "modal://?app=a%20b",
                "modal:// app \"a b\" is not a name (letters, digits, '-', '_', '.', at most 64)",
            ),
            (
                "modal://?profile=",
                "modal:// profile \"\" is not a name (letters, digits, '-', '_', '.', at most 64)",
            ),
            (
                "modal://?image=a%0AFROM%20b",
                "modal:// image \"a\\nFROM b\" is not an image reference (letters, digits, '-', '_', '.', ':', '/', '@', at most 255)",
            ),
            (
                "modal://?idle_timeout=0",
                "modal:// idle_timeout \"0\" is not a whole number of seconds from 1 to 86400",
            ),
            (
                "modal://?idle_timeout=1.5",
                "modal:// idle_timeout \"1.5\" is not a whole number of seconds from 1 to 86400",
            ),
            (
                "modal://?idle_timeout=86401",
                "modal:// idle_timeout \"86401\" is not a whole number of seconds from 1 to 86400",
            ),
        ] {
            let err = parse(raw, &[]).unwrap_err();
            assert_eq!(err.code(), ErrorCode::Configuration, "{raw}");
            assert_eq!(err.to_string(), format!("[SBX-003] configuration error: {message}"), "{raw}");
        }
        for url in ["http://127.0.0.1:1234", "https://", "https://h/x", "https://h:0", "ftp://h"] {
            let c = parse(
                "modal://",
                &[("MODAL_SERVER_URL", url), ("MODAL_TOKEN_ID", "a"), ("MODAL_TOKEN_SECRET", "b")],
            )
            .unwrap();
            let err = c.settings(&Profile::default()).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "[SBX-003] configuration error: the Modal server URL {url:?} is not https://host[:port] (plain http is refused: the token goes in every request)"
                )
            );
        }
        for (text, name, message) in [
            ("[a", None, "the Modal profile file is not TOML: "),
            ("a = 1", Some("a"), "the Modal profile \"a\" is not a table"),
            ("[a]\ntoken_id = 1", Some("a"), "the Modal profile \"a\" has a `token_id` that is not a string"),
            (
                "[a]\nactive = \"yes\"",
                Some("a"),
                "the Modal profile \"a\" has an `active` that is not true or false",
            ),
            ("", Some("work"), "the Modal profile file has no profile \"work\""),
        ] {
            let err = parse_profile(text, name).unwrap_err();
            assert_eq!(err.code(), ErrorCode::Configuration);
            assert!(
                err.to_string().starts_with(&format!("[SBX-003] configuration error: {message}")),
                "{err}"
            );
        }
    }

    #[test]
    fn the_environment_option_wins_over_the_variable() {
        let env = |k: &str| (k == ENVIRONMENT_ENV).then(|| "from-env".to_owned());
        let c = ModalConfig::parse(&Dsn::parse("modal://?environment=staging").unwrap(), env).unwrap();
        assert_eq!(c.env.environment.as_deref(), Some("staging"));
        let c = ModalConfig::parse(&Dsn::parse("modal://").unwrap(), env).unwrap();
        assert_eq!(c.env.environment.as_deref(), Some("from-env"));
        let err = ModalConfig::parse(&Dsn::parse("modal://?environment=a%20b").unwrap(), env).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::Configuration);
    }
}
