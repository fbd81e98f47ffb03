//! Registry credentials for pulls: typed on the backend, or found the way the `docker` CLI
//! finds them (Docker's config file: a credential helper for the registry, the default
//! credential store, or the file's own `auths`).
//!
//! Secrets stay [`SecretString`]s until the moment they are handed to bollard, which puts
//! them (base64 JSON) in the pull request's `X-Registry-Auth` header; bollard never logs
//! headers, and nothing here derives `Debug` over a secret.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use bollard::auth::DockerCredentials;

use super::reference::ImageRef;
use crate::backends::docker::SCHEME;
use crate::error::{Error, Result};
use crate::secret::SecretString;

/// How long a credential helper may take to answer: 10 seconds (a keychain prompt that
/// nobody answers must not hang a pull).
pub const CREDENTIAL_HELPER_TIMEOUT: Duration = Duration::from_secs(10);

/// Credentials for one registry, given to
/// [`DockerBackend::with_registry_auth`](crate::backends::docker::DockerBackend::with_registry_auth). `Debug`
/// prints the user name only.
#[derive(Clone)]
pub struct RegistryAuth {
    kind: AuthKind,
}

#[derive(Clone)]
enum AuthKind {
    Basic { username: String, password: SecretString },
    IdentityToken(SecretString),
}

impl RegistryAuth {
    /// A user name and password (or an access token the registry accepts as a password).
    pub fn basic(username: impl Into<String>, password: impl Into<SecretString>) -> Self {
        RegistryAuth { kind: AuthKind::Basic { username: username.into(), password: password.into() } }
    }

    /// An identity (refresh) token, as `docker login` stores for registries that issue one.
    pub fn identity_token(token: impl Into<SecretString>) -> Self {
        RegistryAuth { kind: AuthKind::IdentityToken(token.into()) }
    }

    /// What the engine is sent for `registry` (its `serveraddress`).
    fn to_docker(&self, registry: &str) -> DockerCredentials {
        let mut credentials =
            DockerCredentials { serveraddress: Some(registry.to_owned()), ..Default::default() };
        match &self.kind {
            AuthKind::Basic { username, password } => {
                credentials.username = Some(username.clone());
                credentials.password = Some(password.expose_secret().to_owned());
            }
            AuthKind::IdentityToken(token) => {
                credentials.identitytoken = Some(token.expose_secret().to_owned());
            }
        }
        credentials
    }
}

impl fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            AuthKind::Basic { username, .. } => f
                .debug_struct("RegistryAuth")
                .field("username", username)
                .field("password", &"[redacted]")
                .finish(),
            AuthKind::IdentityToken(_) => {
                f.debug_struct("RegistryAuth").field("identity_token", &"[redacted]").finish()
            }
        }
    }
}

/// Where a pull's credentials come from, as configured on the backend.
#[derive(Clone, Default)]
pub(crate) struct CredentialSources {
    /// Typed on the backend, by registry (`host[:port]`, or `docker.io`): these win.
    pub typed: BTreeMap<String, RegistryAuth>,
    /// Docker's config file; `None`: `$DOCKER_CONFIG/config.json`, else
    /// `~/.docker/config.json`.
    pub config_file: Option<PathBuf>,
}

impl fmt::Debug for CredentialSources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CredentialSources")
            .field("typed", &self.typed.keys().collect::<Vec<_>>())
            .field("config_file", &self.config_file)
            .finish()
    }
}

impl CredentialSources {
    /// The typed credentials, by registry, for a build's `FROM` images.
    pub(crate) fn typed_for_build(&self) -> std::collections::HashMap<String, DockerCredentials> {
        self.typed.iter().map(|(registry, auth)| (registry.clone(), auth.to_docker(registry))).collect()
    }

    /// The credentials for `image`'s registry, or `None` to pull anonymously. Where they
    /// came from is returned too, for the pull's log (never the secret).
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for a config file that is not JSON or an `auth` entry that
    /// is not base64 `user:password`; [`Error::Auth`] when a credential helper fails (other
    /// than "not found") or does not answer within [`CREDENTIAL_HELPER_TIMEOUT`].
    pub(crate) async fn for_image(&self, image: &ImageRef) -> Result<Option<(DockerCredentials, String)>> {
        if let Some(auth) = self.typed.get(&image.registry).or_else(|| self.typed.get(image.config_key())) {
            return Ok(Some((auth.to_docker(image.config_key()), "the backend's typed credentials".into())));
        }
        let path = match &self.config_file {
            Some(path) => path.clone(),
            None => match default_config_file() {
                Some(path) => path,
                None => return Ok(None),
            },
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(Error::configuration(format!(
                    "cannot read Docker's config file {}",
                    path.display()
                ))
                .with_source(e));
            }
        };
        let config = DockerConfig::parse(&text, &path)?;
        let key = image.config_key();
        if let Some(helper) = config.helper_for(key) {
            let found = run_helper(&format!("docker-credential-{helper}"), key).await?;
            return Ok(found
                .map(|auth| (auth.to_docker(key), format!("credential helper docker-credential-{helper}"))));
        }
        Ok(config.auths.get(key).map(|auth| (auth.to_docker(key), format!("{}", path.display()))))
    }
}

/// `$DOCKER_CONFIG/config.json`, else `$HOME/.docker/config.json`.
fn default_config_file() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(Path::new(&dir).join("config.json"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| Path::new(&home).join(".docker/config.json"))
}

/// The parts of Docker's config file a pull reads.
struct DockerConfig {
    auths: BTreeMap<String, RegistryAuth>,
    cred_helpers: BTreeMap<String, String>,
    creds_store: Option<String>,
}

impl DockerConfig {
    fn parse(text: &str, path: &Path) -> Result<DockerConfig> {
        let bad = |why: &str| Error::configuration(format!("Docker's config file {}: {why}", path.display()));
        let json: serde_json::Value = serde_json::from_str(text).map_err(|_| bad("not JSON"))?;
        let strings = |key: &str| -> BTreeMap<String, String> {
            json.get(key)
                .and_then(serde_json::Value::as_object)
                .map(|o| o.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
                .unwrap_or_default()
        };
        let mut auths = BTreeMap::new();
        for (registry, entry) in
            json.get("auths").and_then(serde_json::Value::as_object).into_iter().flatten()
        {
            let field =
                |name: &str| entry.get(name).and_then(serde_json::Value::as_str).filter(|s| !s.is_empty());
            let auth = if let Some(token) = field("identitytoken") {
                RegistryAuth::identity_token(token)
            } else if let Some(encoded) = field("auth") {
                // Never echo the entry: it is the secret.
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .ok()
                    .and_then(|d| String::from_utf8(d).ok())
                    .ok_or_else(|| bad(&format!("the `auth` of {registry:?} is not base64 text")))?;
                let (user, password) = decoded
                    .split_once(':')
                    .ok_or_else(|| bad(&format!("the `auth` of {registry:?} is not user:password")))?;
                RegistryAuth::basic(user, password)
            } else if let (Some(user), Some(password)) = (field("username"), field("password")) {
                RegistryAuth::basic(user, password)
            } else {
                continue;
            };
            auths.insert(normalise_key(registry), auth);
        }
        let cred_helpers = strings("credHelpers").into_iter().map(|(k, v)| (normalise_key(&k), v)).collect();
        let creds_store =
            json.get("credsStore").and_then(serde_json::Value::as_str).filter(|s| !s.is_empty());
        Ok(DockerConfig { auths, cred_helpers, creds_store: creds_store.map(str::to_owned) })
    }

    /// The helper for `key`: its own in `credHelpers`, else `credsStore`.
    fn helper_for(&self, key: &str) -> Option<&str> {
        self.cred_helpers.get(key).or(self.creds_store.as_ref()).map(String::as_str)
    }
}

/// Config keys are `host[:port]`, sometimes written as a URL (`https://host/v1/`); Docker
/// Hub's stays the URL the CLI writes.
fn normalise_key(key: &str) -> String {
    if key == super::reference::DOCKER_HUB_CONFIG_KEY {
        return key.to_owned();
    }
    let bare = key.trim_start_matches("https://").trim_start_matches("http://");
    bare.split('/').next().unwrap_or(bare).to_owned()
}

/// Runs `program get` with `server` on its stdin (the credential-helper protocol), bounded
/// by [`CREDENTIAL_HELPER_TIMEOUT`]: `None` when it has no credentials for `server`.
async fn run_helper(program: &str, server: &str) -> Result<Option<RegistryAuth>> {
    use tokio::io::AsyncWriteExt as _;
    let failed = |why: String| Error::auth(SCHEME, format!("credential helper {program} {why}"), None);
    let mut child = tokio::process::Command::new(program)
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("cannot start: {e}")))?;
    let mut stdin = child.stdin.take().ok_or_else(|| failed("has no stdin".into()))?;
    let answered = async {
        stdin.write_all(server.as_bytes()).await?;
        drop(stdin);
        child.wait_with_output().await
    };
    let output = match tokio::time::timeout(CREDENTIAL_HELPER_TIMEOUT, answered).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(failed(format!("failed: {e}"))),
        Err(_) => return Err(failed(format!("did not answer within {CREDENTIAL_HELPER_TIMEOUT:?}"))),
    };
    let said = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        // The protocol's own way of saying "none for this server".
        if said.contains("credentials not found")
            || String::from_utf8_lossy(&output.stderr).contains("credentials not found")
        {
            return Ok(None);
        }
        // Its output may hold a secret: report only the status.
        return Err(failed(format!("failed for {server} ({})", output.status)));
    }
    let json: serde_json::Value = serde_json::from_str(&said)
        .map_err(|_| failed(format!("answered something other than JSON for {server}")))?;
    let field = |name: &str| json.get(name).and_then(serde_json::Value::as_str).unwrap_or_default();
    let (username, secret) = (field("Username"), field("Secret"));
    if secret.is_empty() {
        return Ok(None);
    }
    Ok(Some(if username == "<token>" {
        RegistryAuth::identity_token(secret)
    } else {
        RegistryAuth::basic(username, secret)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(name: &str) -> ImageRef {
        ImageRef::parse(name).unwrap()
    }

    fn temp_dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sbx-credentials-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    #[test]
    fn auths_entries_are_read_and_typed_credentials_win() {
        let dir = temp_dir("auths");
        let file = dir.join("config.json");
        let encoded = base64::engine::general_purpose::STANDARD.encode("alice:from-file-pw");
        std::fs::write(
            &file,
            format!(r#"{{"auths":{{"http://127.0.0.1:5712/v2/":{{"auth":"{encoded}"}}}}}}"#),
        )
        .unwrap();
        let mut sources = CredentialSources { config_file: Some(file.clone()), ..Default::default() };
        let (found, from) = block_on(sources.for_image(&image("127.0.0.1:5712/x:1"))).unwrap().unwrap();
        assert_eq!(
            (found.username.as_deref(), found.password.as_deref()),
            (Some("alice"), Some("from-file-pw"))
        );
        assert_eq!(from, file.display().to_string());
        assert!(block_on(sources.for_image(&image("127.0.0.1:9/x"))).unwrap().is_none());
        sources.typed.insert("127.0.0.1:5712".into(), RegistryAuth::basic("bob", "typed-pw"));
        let (found, _) = block_on(sources.for_image(&image("127.0.0.1:5712/x:1"))).unwrap().unwrap();
        assert_eq!(found.username.as_deref(), Some("bob"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_missing_config_file_means_anonymous_and_a_broken_one_is_a_configuration_error() {
        let dir = temp_dir("broken");
        let sources = CredentialSources { config_file: Some(dir.join("none.json")), ..Default::default() };
        assert!(block_on(sources.for_image(&image("busybox"))).unwrap().is_none());
        std::fs::write(dir.join("bad.json"), r#"{"auths":{"r.example":{"auth":"bm90LWEtcGFpcg=="}}}"#)
            .unwrap();
        let sources = CredentialSources { config_file: Some(dir.join("bad.json")), ..Default::default() };
        let e = block_on(sources.for_image(&image("r.example/x"))).unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::Configuration);
        assert!(!e.to_string().contains("bm90LWEtcGFpcg"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A helper answering the protocol: the server it was asked for comes back as the user,
    /// `<token>` for one registry (an identity token), "not found" for another.
    #[test]
    fn credential_helpers_speak_the_protocol() {
        let dir = temp_dir("helper");
        let helper = dir.join("docker-credential-sbxtest");
        std::fs::write(
            &helper,
            "#!/bin/sh\n[ \"$1\" = get ] || exit 2\nread -r s\ncase $s in\n  none.example) echo 'credentials not found in native keychain'; exit 1;;\n  token.example) printf '{\"ServerURL\":\"%s\",\"Username\":\"<token>\",\"Secret\":\"tok-1\"}' \"$s\";;\n  *) printf '{\"ServerURL\":\"%s\",\"Username\":\"%s\",\"Secret\":\"pw-2\"}' \"$s\" \"$s\";;\nesac\n",
        )
        .unwrap();
        std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let program = helper.display().to_string();
        let Some(RegistryAuth { kind: AuthKind::Basic { username, password } }) =
            block_on(run_helper(&program, "r.example:5000")).unwrap()
        else {
            panic!("no basic credentials");
        };
        assert_eq!((username.as_str(), password.expose_secret()), ("r.example:5000", "pw-2"));
        assert!(matches!(
            block_on(run_helper(&program, "token.example")).unwrap(),
            Some(RegistryAuth { kind: AuthKind::IdentityToken(_) })
        ));
        assert!(block_on(run_helper(&program, "none.example")).unwrap().is_none());
        let missing = block_on(run_helper(&dir.join("nope").display().to_string(), "x")).unwrap_err();
        assert_eq!(missing.code(), crate::ErrorCode::Auth);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn debug_never_shows_a_secret() {
        let text = format!(
            "{:?} {:?}",
            RegistryAuth::basic("u", "pw-canary"),
            RegistryAuth::identity_token("tok-canary")
        );
        assert!(!text.contains("canary"), "{text}");
        assert!(text.contains("\"u\""), "{text}");
    }

    #[test]
    fn config_keys_written_as_urls_match_hosts() {
        assert_eq!(normalise_key("https://r.example:5000/v2/"), "r.example:5000");
        assert_eq!(normalise_key("r.example"), "r.example");
        assert_eq!(
            normalise_key(super::super::reference::DOCKER_HUB_CONFIG_KEY),
            "https://index.docker.io/v1/"
        );
    }
}
