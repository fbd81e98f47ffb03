//! The control plane: E2B's REST API at `https://api.<domain>` (`spec/openapi.yml` in E2B's
//! repository), authenticated with `X-API-Key`. Create, connect, kill, set the TTL, and
//! list by metadata. Request bodies are built by pure functions with exact-output
//! tests.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::errors::Call;
use super::http::{self, REQUEST_TIMEOUT};
use crate::error::Result;
use crate::policy::ProviderAllowlist;
use crate::secret::SecretString;

/// What create and connect return (`components.schemas.Sandbox`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SandboxInfo {
    #[serde(rename = "sandboxID")]
    pub(crate) sandbox_id: String,
    #[serde(rename = "templateID", default)]
    pub(crate) template_id: String,
    #[serde(default)]
    pub(crate) envd_version: String,
    /// envd's token (`X-Access-Token`), present when the sandbox was created `secure`.
    #[serde(default)]
    pub(crate) envd_access_token: Option<String>,
    /// The sandbox's domain; `None` means the configured one.
    #[serde(default)]
    pub(crate) domain: Option<String>,
}

/// One entry of a listing (`components.schemas.ListedSandbox`), the fields the sweep uses.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListedSandbox {
    #[serde(rename = "sandboxID")]
    pub(crate) sandbox_id: String,
    #[serde(default)]
    pub(crate) metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) state: String,
    /// When its TTL ends (RFC 3339).
    #[serde(default)]
    pub(crate) end_at: String,
    /// When it started (RFC 3339).
    #[serde(default)]
    pub(crate) started_at: String,
}

/// Unix seconds of an RFC 3339 UTC timestamp as E2B writes them
/// (`2025-01-02T03:04:05.678Z`, or with a `+hh:mm` offset); `None` for anything else.
pub(crate) fn unix_seconds(stamp: &str) -> Option<u64> {
    let num = |range: std::ops::Range<usize>| stamp.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let bytes = stamp.as_bytes();
    if bytes.get(4) != Some(&b'-')
        || bytes.get(7) != Some(&b'-')
        || !matches!(bytes.get(10), Some(b'T' | b't' | b' '))
    {
        return None;
    }
    // Skip fractional seconds, then read the zone.
    let zone = stamp[19..].trim_start_matches(|c: char| c == '.' || c.is_ascii_digit());
    let offset = match zone {
        "Z" | "z" => 0,
        _ => {
            let sign = match zone.get(..1)? {
                "+" => 1,
                "-" => -1,
                _ => return None,
            };
            let (h, m) = (zone.get(1..3)?.parse::<i64>().ok()?, zone.get(4..6)?.parse::<i64>().ok()?);
            sign * (h * 3600 + m * 60)
        }
    };
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // Days from the civil date (Howard Hinnant's `days_from_civil`).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hour * 3600 + minute * 60 + second - offset).ok()
}

/// Whole seconds for a TTL field: rounded up, at least 1 (E2B refuses 0 with 400).
pub(crate) fn ttl_secs(ttl: Duration) -> u64 {
    crate::duration::whole_seconds(ttl, 1)
}

/// What a create request says about egress.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Egress<'a> {
    /// `allow_internet_access: false` (the API's equivalent of `denyOut: ["0.0.0.0/0"]`).
    Deny,
    /// `allow_internet_access: true`.
    Allow,
    /// E2B's own domain filter: `network.allowOut` the domains, `network.denyOut`
    /// everything else (`0.0.0.0/0`); allowed entries take precedence over denied ones.
    /// `dnsServers` is left out, so E2B's default resolver (8.8.8.8) stays reachable:
    /// without one no allowed name resolves.
    Domains(&'a ProviderAllowlist),
}

/// The JSON of `POST /sandboxes` (`NewSandbox`). `timeout` is always sent: E2B's default
/// TTL is 15 s. `secure` is always true so envd asks for the access token; `egress` is
/// set before any code runs.
pub(crate) fn create_body(
    template: &str,
    ttl: Duration,
    metadata: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
    egress: Egress<'_>,
) -> serde_json::Value {
    let mut body = serde_json::json!({
        "templateID": template,
        "timeout": ttl_secs(ttl),
        "metadata": metadata,
        "envVars": env,
        "secure": true,
        "allow_internet_access": !matches!(egress, Egress::Deny),
    });
    if let Egress::Domains(list) = egress {
        body["network"] = serde_json::json!({ "allowOut": list.domains(), "denyOut": [ALL_TRAFFIC] });
    }
    body
}

/// The CIDR block of every IPv4 address, as E2B's SDKs name "all traffic".
const ALL_TRAFFIC: &str = "0.0.0.0/0";

/// The `metadata` query value of `GET /v2/sandboxes`: `k=v` pairs joined by `&`, each key
/// and value percent-encoded first, so that the whole string is one query value (the URL
/// encoder then encodes it a second time, which E2B's API undoes in two steps).
pub(crate) fn metadata_query(metadata: &BTreeMap<String, String>) -> String {
    let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>().replace('+', "%20");
    metadata.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect::<Vec<_>>().join("&")
}

/// A client of one deployment's control plane.
#[derive(Clone)]
pub(crate) struct Api {
    http: reqwest::Client,
    base: String,
    key: SecretString,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api").field("base", &self.base).finish_non_exhaustive()
    }
}

impl Api {
    pub(crate) fn new(http: reqwest::Client, base: String, key: SecretString) -> Self {
        Api { http, base, key }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header("X-API-Key", self.key.expose_secret())
            .timeout(REQUEST_TIMEOUT)
    }

    /// `POST /sandboxes`. Not retried: a retry after a lost reply could make a second
    /// sandbox.
    pub(crate) async fn create(&self, body: &serde_json::Value) -> Result<SandboxInfo> {
        let response =
            http::send(|| self.request(reqwest::Method::POST, "/sandboxes").json(body), false, Call::Create)
                .await?;
        http::read_json(response).await
    }

    /// `POST /sandboxes/{id}/connect`: attaches to a running sandbox (or resumes a paused
    /// one), extending its TTL to at least `ttl` from now.
    pub(crate) async fn connect(&self, id: &str, ttl: Duration) -> Result<SandboxInfo> {
        let body = serde_json::json!({ "timeout": ttl_secs(ttl) });
        let path = format!("/sandboxes/{id}/connect");
        let response =
            http::send(|| self.request(reqwest::Method::POST, &path).json(&body), true, Call::Connect(id))
                .await?;
        http::read_json(response).await
    }

    /// `POST /sandboxes/{id}/timeout`: the TTL becomes `ttl` from now (it may shorten it).
    pub(crate) async fn set_timeout(&self, id: &str, ttl: Duration) -> Result<()> {
        let body = serde_json::json!({ "timeout": ttl_secs(ttl) });
        let path = format!("/sandboxes/{id}/timeout");
        http::send(|| self.request(reqwest::Method::POST, &path).json(&body), true, Call::Sandbox(id))
            .await?;
        Ok(())
    }

    /// `DELETE /sandboxes/{id}`: `true` if it was killed, `false` if it was already gone
    /// (404), so killing is idempotent.
    pub(crate) async fn kill(&self, id: &str) -> Result<bool> {
        let path = format!("/sandboxes/{id}");
        match http::send(|| self.request(reqwest::Method::DELETE, &path), true, Call::Sandbox(id)).await {
            Ok(_) => Ok(true),
            Err(e) if e.code() == crate::ErrorCode::SandboxGone => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `GET /v2/sandboxes`: every running or paused sandbox whose metadata holds all of
    /// `metadata`, following `X-Next-Token` pages (at most `max_pages` of 100).
    pub(crate) async fn list(
        &self,
        metadata: &BTreeMap<String, String>,
        max_pages: usize,
    ) -> Result<Vec<ListedSandbox>> {
        let filter = metadata_query(metadata);
        let mut out = Vec::new();
        let mut next: Option<String> = None;
        for _ in 0..max_pages {
            let make = || {
                let mut query = vec![("state", "running,paused".to_owned()), ("limit", "100".to_owned())];
                if !filter.is_empty() {
                    query.push(("metadata", filter.clone()));
                }
                if let Some(token) = &next {
                    query.push(("nextToken", token.clone()));
                }
                self.request(reqwest::Method::GET, "/v2/sandboxes").query(&query)
            };
            let response = http::send(make, true, Call::Account).await?;
            next = response.headers().get("X-Next-Token").and_then(|v| v.to_str().ok()).map(str::to_owned);
            out.extend(http::read_json::<Vec<ListedSandbox>>(response).await?);
            if next.as_deref().is_none_or(str::is_empty) {
                break;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_create_body() {
        let metadata = BTreeMap::from([("sandboxio.owner".to_owned(), "p1".to_owned())]);
        let env = BTreeMap::from([("A".to_owned(), "1".to_owned())]);
        assert_eq!(
            create_body("code-interpreter-v1", Duration::from_millis(120_500), &metadata, &env, Egress::Deny)
                .to_string(),
            r#"{"allow_internet_access":false,"envVars":{"A":"1"},"metadata":{"sandboxio.owner":"p1"},"secure":true,"templateID":"code-interpreter-v1","timeout":121}"#
        );
        assert_eq!(
            create_body("base", Duration::from_mins(5), &BTreeMap::new(), &BTreeMap::new(), Egress::Allow)
                .to_string(),
            r#"{"allow_internet_access":true,"envVars":{},"metadata":{},"secure":true,"templateID":"base","timeout":300}"#
        );
        let list = ProviderAllowlist::new(["pypi.org", "*.pythonhosted.org"]).unwrap();
        assert_eq!(
            create_body(
                "base",
                Duration::from_mins(5),
                &BTreeMap::new(),
                &BTreeMap::new(),
                Egress::Domains(&list)
            )
            .to_string(),
            r#"{"allow_internet_access":true,"envVars":{},"metadata":{},"network":{"allowOut":["pypi.org","*.pythonhosted.org"],"denyOut":["0.0.0.0/0"]},"secure":true,"templateID":"base","timeout":300}"#
        );
    }

    #[test]
    fn ttl_rounds_up_and_is_never_zero() {
        assert_eq!(ttl_secs(Duration::ZERO), 1);
        assert_eq!(ttl_secs(Duration::from_millis(1)), 1);
        assert_eq!(ttl_secs(Duration::from_mins(1)), 60);
        assert_eq!(ttl_secs(Duration::from_millis(60_001)), 61);
    }

    #[test]
    fn the_metadata_filter_is_one_value() {
        let m = BTreeMap::from([("a b".to_owned(), "x=y&z".to_owned()), ("k".to_owned(), "v".to_owned())]);
        assert_eq!(metadata_query(&m), "a%20b=x%3Dy%26z&k=v");
        assert_eq!(metadata_query(&BTreeMap::new()), "");
    }

    #[test]
    fn replies_parse_with_omitted_fields() {
        let info: SandboxInfo = serde_json::from_str(
            r#"{"templateID":"t","sandboxID":"i1","clientID":"c","envdVersion":"0.6.13","envdAccessToken":"tok","domain":null,"alias":"x"}"#,
        )
        .unwrap();
        assert_eq!(info.sandbox_id, "i1");
        assert_eq!(info.envd_access_token.as_deref(), Some("tok"));
        assert_eq!(info.domain, None);
        let listed: Vec<ListedSandbox> = serde_json::from_str(
            r#"[{"sandboxID":"i1","metadata":{"k":"v"},"state":"running","endAt":"2026-01-01T00:00:00Z","cpuCount":2}]"#,
        )
        .unwrap();
        assert_eq!(listed[0].metadata.get("k").map(String::as_str), Some("v"));
        assert_eq!(listed[0].end_at, "2026-01-01T00:00:00Z");
    }

    #[test]
    fn rfc3339_stamps_become_unix_seconds() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(unix_seconds("2000-03-01T00:00:00Z"), Some(951_868_800));
        assert_eq!(unix_seconds("2025-01-02T03:04:05.678Z"), Some(1_735_787_045));
        assert_eq!(unix_seconds("2025-01-02T05:04:05+02:00"), Some(1_735_787_045));
        assert_eq!(unix_seconds("2025-13-02T03:04:05Z"), None);
        assert_eq!(unix_seconds("yesterday"), None);
        assert_eq!(unix_seconds(""), None);
    }
}
