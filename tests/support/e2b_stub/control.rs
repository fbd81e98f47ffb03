//! The control plane (`spec/openapi.yml`): `X-API-Key`, create (201 `Sandbox`, TTL 15 s
//! when `timeout` is missing, 400 when it is 0 or over an hour), get, connect (200),
//! timeout (204), kill (204, 404 after), `GET /v2/sandboxes` with the double-encoded
//! metadata filter; errors as `{"code": <int>, "message": ..}`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hyper::{Method, Request, Response, StatusCode};
use sandboxio::{NetworkPolicy, Sandbox};

use super::{API_KEY, Body, State, StubSandbox, body_bytes, empty, json};

fn error(status: StatusCode, message: &str) -> Response<Body> {
    json(status, &serde_json::json!({"code": status.as_u16(), "message": message}))
}

fn missing(id: &str) -> Response<Body> {
    error(StatusCode::NOT_FOUND, &format!("Sandbox \"{id}\" doesn't exist or you don't have access to it"))
}

/// The `timeout` field, as E2B's API checks it.
fn ttl(body: &serde_json::Value) -> Result<Duration, Box<Response<Body>>> {
    match body.get("timeout").map(serde_json::Value::as_u64) {
        None => Ok(Duration::from_secs(15)),
        Some(Some(0)) => Err(Box::new(error(StatusCode::BAD_REQUEST, "Timeout must be greater than 0"))),
        // The Pro plan's cap.
        Some(Some(s)) if s > 24 * 3600 => {
            Err(Box::new(error(StatusCode::BAD_REQUEST, "Timeout cannot be greater than 24 hours")))
        }
        Some(Some(s)) => Ok(Duration::from_secs(s)),
        Some(None) => Err(Box::new(error(StatusCode::BAD_REQUEST, "timeout is not an integer"))),
    }
}

fn sandbox_json(id: &str, s: &StubSandbox) -> serde_json::Value {
    serde_json::json!({
        "templateID": s.template, "sandboxID": id, "clientID": "stub", "envdVersion": ENVD_VERSION,
        "envdAccessToken": s.token, "domain": null, "alias": s.template,
    })
}

/// The version of envd the stub claims (E2B's SDKs pick features by it: octet-stream
/// uploads from 0.5.7, the default user from 0.4.0).
const ENVD_VERSION: &str = "0.6.13";

/// A sandbox as `GET /sandboxes/{id}` (`SandboxDetail`) and `GET /v2/sandboxes`
/// (`ListedSandbox`) describe it: both require the times, sizes, state and envd version.
fn detail_json(id: &str, s: &StubSandbox) -> serde_json::Value {
    let left = s.end_at.lock().unwrap().saturating_duration_since(Instant::now());
    let now = std::time::SystemTime::now();
    serde_json::json!({
        "templateID": s.template, "sandboxID": id, "clientID": "stub", "alias": s.template,
        "startedAt": rfc3339(s.started_at), "endAt": rfc3339(now + left),
        "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 10240, "state": "running",
        "envdVersion": ENVD_VERSION, "envdAccessToken": s.token, "metadata": s.metadata,
    })
}

/// `time` as RFC 3339 in UTC, to the second.
fn rfc3339(time: std::time::SystemTime) -> String {
    let secs = time.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days.cast_signed() + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

pub async fn handle(state: Arc<State>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    if req.headers().get("x-api-key").and_then(|k| k.to_str().ok()) != Some(API_KEY) {
        return error(StatusCode::UNAUTHORIZED, "Invalid API key");
    }
    if state.faults.storm_503.load(Ordering::SeqCst) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable");
    }
    if state.faults.fail_next_with_504.swap(false, Ordering::SeqCst) {
        return error(StatusCode::GATEWAY_TIMEOUT, "upstream request timeout");
    }
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let body: serde_json::Value = {
        let bytes = body_bytes(req).await;
        if bytes.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_default()
        }
    };
    match (method, parts.as_slice()) {
        // E2B's current SDKs create through `/v2/sandboxes` (same body, plus optional
        // `network`, `autoPause`, ...); the first version stays served.
        (Method::POST, ["sandboxes"] | ["v2", "sandboxes"]) => create(&state, body).await,
        (Method::GET, ["v2", "sandboxes"]) => list(&state, &query),
        (Method::GET, ["sandboxes", id]) => match state.sandbox(id) {
            Some(s) => json(StatusCode::OK, &detail_json(id, &s)),
            None => missing(id),
        },
        (Method::DELETE, ["sandboxes", id]) => {
            let removed = state.sandboxes.lock().unwrap().remove(*id);
            match removed {
                Some(s) => {
                    s.killed.store(true, Ordering::SeqCst);
                    let _ = s.local.kill().await;
                    empty(StatusCode::NO_CONTENT)
                }
                None => missing(id),
            }
        }
        (Method::POST, ["sandboxes", id, "timeout"]) => match (state.sandbox(id), ttl(&body)) {
            (None, _) => missing(id),
            (_, Err(e)) => *e,
            (Some(s), Ok(ttl)) => {
                *s.end_at.lock().unwrap() = Instant::now() + ttl;
                empty(StatusCode::NO_CONTENT)
            }
        },
        (Method::POST, ["sandboxes", id, "connect"]) => match (state.sandbox(id), ttl(&body)) {
            (None, _) => missing(id),
            (_, Err(e)) => *e,
            (Some(s), Ok(ttl)) => {
                // Connect only extends the TTL.
                let mut end = s.end_at.lock().unwrap();
                *end = (*end).max(Instant::now() + ttl);
                drop(end);
                json(StatusCode::OK, &sandbox_json(id, &s))
            }
        },
        _ => error(StatusCode::NOT_FOUND, "no such route"),
    }
}

async fn create(state: &Arc<State>, body: serde_json::Value) -> Response<Body> {
    state.creates.lock().unwrap().push(body.clone());
    let ttl = match ttl(&body) {
        Ok(ttl) => ttl,
        Err(e) => return *e,
    };
    let cap = state.faults.max_sandboxes.load(Ordering::SeqCst);
    if cap > 0 && state.sandboxes.lock().unwrap().len() >= cap {
        let mut r = error(
            StatusCode::TOO_MANY_REQUESTS,
            &format!("you have reached the maximum number of concurrent E2B sandboxes ({cap})"),
        );
        r.headers_mut().insert("retry-after", "2".parse().unwrap());
        return r;
    }
    let Some(template) = body["templateID"].as_str().map(str::to_owned) else {
        return error(StatusCode::BAD_REQUEST, "templateID is required");
    };
    let policy = match egress_policy(&body) {
        Ok(policy) => policy,
        Err(e) => return *e,
    };
    let mut builder = Sandbox::builder_with(state.local.clone()).network(policy).ttl(Duration::from_hours(1));
    if let Some(env) = body["envVars"].as_object() {
        for (k, v) in env {
            builder = builder.env(k.clone(), v.as_str().unwrap_or_default().to_owned());
        }
    }
    let local = match builder.create().await {
        Ok(local) => local,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &format!("Failed to place sandbox: {e}")),
    };
    let n = state.next_id.fetch_add(1, Ordering::SeqCst);
    let id = format!("i{n:019}");
    let metadata: BTreeMap<String, String> = body["metadata"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect())
        .unwrap_or_default();
    let sandbox = Arc::new(StubSandbox {
        local,
        token: format!("tok-{n}-{:x}", std::process::id()),
        template,
        metadata,
        config: body.to_string(),
        end_at: std::sync::Mutex::new(Instant::now() + ttl),
        started_at: std::time::SystemTime::now(),
        killed: std::sync::atomic::AtomicBool::new(false),
        processes: std::sync::Mutex::new(std::collections::HashMap::new()),
    });
    let reply = sandbox_json(&id, &sandbox);
    state.sandboxes.lock().unwrap().insert(id, sandbox);
    let delay = state.faults.delay_next_create_reply_ms.swap(0, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    json(StatusCode::CREATED, &reply)
}

/// The `local://` policy that stands for the create request's egress fields:
/// `allow_internet_access: false` denies all; `network.allowOut` over a `denyOut` of
/// `0.0.0.0/0` becomes an allowlist of the same destinations on every port (the local gate
/// checks more than E2B's name filter does: the stub is faithful to the wire, not to the
/// filter's weaknesses). `denyOut` takes addresses only, as E2B's API says.
fn egress_policy(body: &serde_json::Value) -> Result<NetworkPolicy, Box<Response<Body>>> {
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect()
    };
    let (allow, deny) = (strings(&body["network"]["allowOut"]), strings(&body["network"]["denyOut"]));
    if let Some(name) = deny.iter().find(|d| d.chars().any(|c| c.is_ascii_alphabetic()) && !d.contains(':')) {
        let message =
            format!("invalid denyOut entry {name:?}: domain names are not supported for deny rules");
        return Err(Box::new(error(StatusCode::BAD_REQUEST, &message)));
    }
    if body["allow_internet_access"] == false {
        return Ok(NetworkPolicy::deny_all());
    }
    if deny.iter().any(|d| d == "0.0.0.0/0") {
        if allow.is_empty() {
            return Ok(NetworkPolicy::deny_all());
        }
        let entries = allow.iter().map(|a| format!("{a}:*"));
        return NetworkPolicy::allowlist(entries)
            .map_err(|e| Box::new(error(StatusCode::BAD_REQUEST, &format!("invalid allowOut: {e}"))));
    }
    Ok(NetworkPolicy::allow_all())
}

/// `GET /v2/sandboxes?metadata=<k=v&..., each part percent-encoded>&state=..&limit=..`.
fn list(state: &Arc<State>, query: &str) -> Response<Body> {
    let mut filter = BTreeMap::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k == "metadata" {
            for pair in v.split('&') {
                let Some((k, v)) = pair.split_once('=') else {
                    return error(StatusCode::BAD_REQUEST, "invalid metadata filter");
                };
                let dec = |s: &str| {
                    form_urlencoded::parse(format!("x={s}").as_bytes()).next().map(|(_, v)| v.into_owned())
                };
                filter.insert(dec(k).unwrap_or_default(), dec(v).unwrap_or_default());
            }
        }
    }
    let listed: Vec<serde_json::Value> = state
        .sandboxes
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, s)| filter.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
        .map(|(id, s)| detail_json(id, s))
        .collect();
    json(StatusCode::OK, &serde_json::Value::Array(listed))
}

/// Kills sandboxes whose TTL passed, as E2B does (they are gone: 404 and 502 after).
pub async fn expire_loop(state: Arc<State>) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = Instant::now();
        let expired: Vec<Arc<StubSandbox>> = {
            let mut map = state.sandboxes.lock().unwrap();
            let ids: Vec<String> = map
                .iter()
                .filter(|(_, s)| *s.end_at.lock().unwrap() <= now)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        for s in expired {
            s.killed.store(true, Ordering::SeqCst);
            let _ = s.local.kill().await;
        }
    }
}
