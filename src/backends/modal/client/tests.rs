//! The control-plane client against a `ModalClient` server on loopback over TLS (a CA made by
//! rcgen for the test), built from its own copy of the generated messages
//! (`OUT_DIR/modal-stub/`): headers, idempotency keys across retries, idempotent terminate,
//! the error mapping end to end, paging.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tonic::{Request, Response, Status};

use super::*;
use crate::ErrorCode;
use crate::backends::modal::config::Credentials;
use crate::secret::SecretString;

#[allow(
    clippy::pedantic,
    missing_docs,
    dead_code,
    reason = "generated code; this test serves only part of it"
)]
mod stub {
    include!(concat!(env!("OUT_DIR"), "/modal-stub/modal.client.rs"));
}

use stub::modal_client_server::{ModalClient, ModalClientServer};

/// What the server saw of one call: method, headers of interest.
#[derive(Debug, Clone)]
struct Seen {
    method: &'static str,
    headers: BTreeMap<String, String>,
}

#[derive(Default)]
struct State {
    seen: Vec<Seen>,
    /// Statuses to answer, in order, before answering normally.
    faults: Vec<Status>,
    /// Sandboxes by idempotency key (the server's deduplication) and their ids.
    created: BTreeMap<String, String>,
    terminated: Vec<String>,
    /// `(id, created_at)` of listed sandboxes, newest first.
    listed: Vec<(String, f64)>,
    page: usize,
}

#[derive(Clone, Default)]
struct Server(Arc<Mutex<State>>);

impl Server {
    fn record<T>(&self, method: &'static str, r: &Request<T>) -> Result<(), Status> {
        let headers = r
            .metadata()
            .iter()
            .filter_map(|kv| match kv {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) if k.as_str().starts_with("x-") => {
                    Some((k.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned()))
                }
                _ => None,
            })
            .collect();
        let mut s = self.0.lock().unwrap();
        s.seen.push(Seen { method, headers });
        if s.faults.is_empty() { Ok(()) } else { Err(s.faults.remove(0)) }
    }
}

type Never =
    Pin<Box<dyn futures_core::Stream<Item = Result<stub::ImageJoinStreamingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ModalClient for Server {
    async fn app_get_or_create(
        &self,
        r: Request<stub::AppGetOrCreateRequest>,
    ) -> Result<Response<stub::AppGetOrCreateResponse>, Status> {
        self.record("AppGetOrCreate", &r)?;
        let m = r.into_inner();
        assert_eq!(m.object_creation_type, stub::ObjectCreationType::CreateIfMissing as i32);
        Ok(Response::new(stub::AppGetOrCreateResponse {
            app_id: format!("ap-{}-{}", m.app_name, m.environment_name),
        }))
    }
    async fn environment_get_or_create(
        &self,
        r: Request<stub::EnvironmentGetOrCreateRequest>,
    ) -> Result<Response<stub::EnvironmentGetOrCreateResponse>, Status> {
        self.record("EnvironmentGetOrCreate", &r)?;
        let m = r.into_inner();
        assert_eq!(m.object_creation_type, 0, "look up only");
        let settings =
            stub::EnvironmentSettings { image_builder_version: format!("2025.06-{}", m.deployment_name) };
        Ok(Response::new(stub::EnvironmentGetOrCreateResponse {
            environment_id: "en-1".into(),
            metadata: Some(stub::EnvironmentMetadata { name: m.deployment_name, settings: Some(settings) }),
        }))
    }
    async fn image_get_or_create(
        &self,
        r: Request<stub::ImageGetOrCreateRequest>,
    ) -> Result<Response<stub::ImageGetOrCreateResponse>, Status> {
        self.record("ImageGetOrCreate", &r)?;
        let m = r.into_inner();
        assert_eq!((m.app_id.as_str(), m.builder_version.as_str()), ("ap-1", "2025.06"));
        let image = m.image.unwrap();
        let result = |status, exception: &str| {
            Some(stub::GenericResult { status, exception: exception.into(), ..Default::default() })
        };
        let (id, result) = match image.dockerfile_commands.as_slice() {
            [c] if c == "FROM ready:1" => ("im-ready", result(1, "")),
            [c] if c == "FROM bad:1" => ("im-bad", result(2, "pull access denied")),
            [c] if c == "FROM slow:1" => ("im-slow", result(0, "")),
            other => panic!("unexpected image {other:?}"),
        };
        Ok(Response::new(stub::ImageGetOrCreateResponse { image_id: id.into(), result }))
    }
    type ImageJoinStreamingStream = Never;
    async fn image_join_streaming(
        &self,
        r: Request<stub::ImageJoinStreamingRequest>,
    ) -> Result<Response<Never>, Status> {
        self.record("ImageJoinStreaming", &r)?;
        let m = r.into_inner();
        assert_eq!((m.image_id.as_str(), m.timeout), ("im-slow", 55.0));
        let entry = |id: &str, status| stub::ImageJoinStreamingResponse {
            result: (status > 0).then(|| stub::GenericResult { status, ..Default::default() }),
            entry_id: id.into(),
            eof: false,
        };
        // The first stream ends with no result; the one reopened from its last entry has it.
        let items = match m.last_entry_id.as_str() {
            "" => vec![Ok(entry("e1", 0)), Ok(entry("e2", 0))],
            "e2" => vec![Ok(entry("e3", 0)), Ok(entry("e4", 1))],
            other => panic!("reopened from {other:?}"),
        };
        Ok(Response::new(Box::pin(tokio_stream::iter(items))))
    }
    async fn sandbox_create(
        &self,
        r: Request<stub::SandboxCreateRequest>,
    ) -> Result<Response<stub::SandboxCreateResponse>, Status> {
        self.record("SandboxCreate", &r)?;
        let key = r
            .metadata()
            .get("x-idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let m = r.into_inner();
        let timeout = m.definition.as_ref().map_or(0, |d| d.timeout_secs);
        let mut s = self.0.lock().unwrap();
        let n = s.created.len();
        let id = s.created.entry(key).or_insert_with(|| format!("sb-{n}-ttl{timeout}")).clone();
        Ok(Response::new(stub::SandboxCreateResponse { sandbox_id: id, metadata: None }))
    }
    async fn sandbox_get_task_id(
        &self,
        r: Request<stub::SandboxGetTaskIdRequest>,
    ) -> Result<Response<stub::SandboxGetTaskIdResponse>, Status> {
        self.record("SandboxGetTaskId", &r)?;
        let m = r.into_inner();
        assert_eq!(m.timeout, Some(10.0), "a timeout is always sent");
        let polls = self.0.lock().unwrap().seen.iter().filter(|c| c.method == "SandboxGetTaskId").count();
        Ok(Response::new(match m.sandbox_id.as_str() {
            // Scheduled on the third poll.
            "sb-slow" if polls < 3 => stub::SandboxGetTaskIdResponse::default(),
            "sb-slow" => stub::SandboxGetTaskIdResponse { task_id: Some("ta-1".into()), task_result: None },
            _ => stub::SandboxGetTaskIdResponse {
                task_id: None,
                task_result: Some(stub::GenericResult { status: 4, exitcode: 124, ..Default::default() }),
            },
        }))
    }
    async fn sandbox_list(
        &self,
        r: Request<stub::SandboxListRequest>,
    ) -> Result<Response<stub::SandboxListResponse>, Status> {
        self.record("SandboxList", &r)?;
        let m = r.into_inner();
        assert_eq!(
            m.tags.iter().map(|t| (t.tag_name.as_str(), t.tag_value.as_str())).collect::<Vec<_>>(),
            [("owner", "ci")]
        );
        let mut s = self.0.lock().unwrap();
        s.page += 1;
        let sandboxes = s
            .listed
            .iter()
            .filter(|(_, at)| m.before_timestamp == 0.0 || *at < m.before_timestamp)
            .take(2)
            .map(|(id, at)| stub::SandboxInfo {
                id: id.clone(),
                created_at: *at,
                // sb-2 lacks the tag, as if the server had misread the filter.
                tags: if id == "sb-2" { Vec::new() } else { m.tags.clone() },
                ..Default::default()
            })
            .collect();
        Ok(Response::new(stub::SandboxListResponse { sandboxes }))
    }
    async fn sandbox_terminate(
        &self,
        r: Request<stub::SandboxTerminateRequest>,
    ) -> Result<Response<stub::SandboxTerminateResponse>, Status> {
        self.record("SandboxTerminate", &r)?;
        let id = r.into_inner().sandbox_id;
        let mut s = self.0.lock().unwrap();
        if !s.created.values().any(|v| *v == id) || s.terminated.contains(&id) {
            return Err(Status::not_found(format!("Sandbox {id} not found")));
        }
        s.terminated.push(id);
        Ok(Response::new(stub::SandboxTerminateResponse { existing_result: None }))
    }
    async fn sandbox_wait(
        &self,
        r: Request<stub::SandboxWaitRequest>,
    ) -> Result<Response<stub::SandboxWaitResponse>, Status> {
        self.record("SandboxWait", &r)?;
        let m = r.into_inner();
        let result = match m.sandbox_id.as_str() {
            "sb-running" => Some(stub::GenericResult::default()),
            _ => Some(stub::GenericResult { status: 3, exitcode: 137, ..Default::default() }),
        };
        Ok(Response::new(stub::SandboxWaitResponse { result, metadata: None }))
    }
    async fn task_get_command_router_access(
        &self,
        r: Request<stub::TaskGetCommandRouterAccessRequest>,
    ) -> Result<Response<stub::TaskGetCommandRouterAccessResponse>, Status> {
        self.record("TaskGetCommandRouterAccess", &r)?;
        let task = r.into_inner().task_id;
        Ok(Response::new(stub::TaskGetCommandRouterAccessResponse {
            jwt: if task == "ta-1" { "jwt-1".into() } else { String::new() },
            url: "https://router.test:443".into(),
        }))
    }
}

/// Serves `server` on 127.0.0.1 over TLS; returns the settings and the CA to trust.
async fn serve(server: Server) -> (Settings, Vec<u8>) {
    let (mut builder, ca, incoming, addr) = super::super::test_tls::tls_server("modal.test").await;
    tokio::spawn(builder.add_service(ModalClientServer::new(server)).serve_with_incoming(incoming));
    let settings = Settings {
        server_url: format!("https://{addr}"),
        credentials: Credentials {
            token_id: "ak-test".into(),
            token_secret: SecretString::new("as-hunter2"),
        },
        environment: "main".into(),
        image_builder_version: None,
    };
    (settings, ca)
}

async fn client(server: &Server) -> Control {
    let (settings, ca) = serve(server.clone()).await;
    Control::new(&settings, Some((&ca, "modal.test"))).unwrap()
}

fn create_request() -> SandboxCreateRequest {
    let deny = crate::NetworkPolicy::deny_all();
    let none = BTreeMap::new();
    let plan = super::super::request::CreatePlan {
        ttl: Duration::from_secs(90),
        idle_timeout: None,
        limits: crate::ResourceLimits::default(),
        network: &deny,
        metadata: &none,
    };
    super::super::request::create_request("ap-1", "im-1", &plan).unwrap()
}

#[tokio::test]
async fn every_call_carries_the_identity_and_a_retried_create_keeps_its_key() {
    let server = Server::default();
    server.0.lock().unwrap().faults = vec![Status::unavailable("lost"), Status::internal("lost again")];
    let c = client(&server).await;
    let id = c.create(create_request()).await.unwrap();
    assert_eq!(id, "sb-0-ttl90");
    let s = server.0.lock().unwrap();
    assert_eq!(s.seen.len(), 3, "two transient faults, then the answer");
    assert_eq!(s.created.len(), 1, "one sandbox for three attempts");
    let keys: Vec<_> = s.seen.iter().map(|c| c.headers["x-idempotency-key"].clone()).collect();
    assert!(keys[0].len() == 32 && keys.iter().all(|k| *k == keys[0]), "{keys:?}");
    let attempts: Vec<_> = s.seen.iter().map(|c| c.headers["x-retry-attempt"].as_str()).collect();
    assert_eq!(attempts, ["0", "1", "2"]);
    for seen in &s.seen {
        assert_eq!(seen.headers["x-modal-client-type"], "9");
        assert_eq!(seen.headers["x-modal-client-version"], "1.0.0");
        assert_eq!(
            seen.headers["x-modal-libmodal-version"],
            format!("sandboxio-rust/{}", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(seen.headers["x-modal-token-id"], "ak-test");
        assert_eq!(seen.headers["x-modal-token-secret"], "as-hunter2");
    }
}

#[tokio::test]
async fn two_creates_get_two_keys_and_two_sandboxes() {
    let server = Server::default();
    let c = client(&server).await;
    let a = c.create(create_request()).await.unwrap();
    let b = c.create(create_request()).await.unwrap();
    assert_ne!(a, b);
}

#[tokio::test]
async fn retries_stop_after_three_and_non_transient_statuses_are_not_retried() {
    let server = Server::default();
    server.0.lock().unwrap().faults = (0..4).map(|_| Status::unavailable("down")).collect();
    let c = client(&server).await;
    let err = c.create(create_request()).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Connect);
    assert_eq!(server.0.lock().unwrap().seen.len(), 4);

    let server = Server::default();
    server.0.lock().unwrap().faults =
        vec![Status::resource_exhausted("Sandbox creation rate limit (5/s) exceeded")];
    let c = client(&server).await;
    let err = c.create(create_request()).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::RateLimited);
    assert_eq!(server.0.lock().unwrap().seen.len(), 1);

    let server = Server::default();
    server.0.lock().unwrap().faults = vec![Status::unauthenticated("invalid token")];
    let err = client(&server).await.app("evals", "main").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "[SBX-002] authentication with the modal backend failed: Modal refused the token: invalid token"
    );
    assert!(!format!("{err:?}").contains("hunter2"));

    let server = Server::default();
    server.0.lock().unwrap().faults = vec![Status::failed_precondition("Old client")];
    let err = client(&server).await.app("evals", "main").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Configuration);
}

#[tokio::test]
async fn app_and_terminate_twice() {
    let server = Server::default();
    let c = client(&server).await;
    assert_eq!(c.app("evals", "main").await.unwrap(), "ap-evals-main");
    let id = c.create(create_request()).await.unwrap();
    c.terminate(&id).await.unwrap();
    c.terminate(&id).await.unwrap();
    c.terminate("sb-never").await.unwrap();
    let s = server.0.lock().unwrap();
    assert_eq!(s.terminated, [id]);
    assert_eq!(s.seen.iter().filter(|c| c.method == "SandboxTerminate").count(), 3);
}

#[tokio::test]
async fn list_reads_pages_backwards_until_an_empty_one_and_checks_the_tags() {
    let server = Server::default();
    server.0.lock().unwrap().listed = (0..5).map(|i| (format!("sb-{i}"), f64::from(100 - i))).collect();
    let c = client(&server).await;
    let ids = c.list("ap-1", "main", &[("owner".into(), "ci".into())]).await.unwrap();
    assert_eq!(ids, ["sb-0", "sb-1", "sb-3", "sb-4"], "a sandbox without the tags is left out");
    assert_eq!(server.0.lock().unwrap().page, 4, "pages of 2, 2, 1, then the empty one");
}

#[tokio::test]
async fn a_server_with_another_authority_is_refused() {
    let server = Server::default();
    let (settings, _) = serve(server.clone()).await;
    let other = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap()
        .self_signed(&rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let c = Control::new(&settings, Some((other.pem().as_bytes(), "modal.test"))).unwrap();
    let err = c.app("evals", "main").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Connect, "{err}");
    assert!(server.0.lock().unwrap().seen.is_empty());
}

#[tokio::test]
async fn the_task_comes_after_polls_and_a_finished_sandbox_is_gone() {
    let server = Server::default();
    let c = client(&server).await;
    assert_eq!(c.task_id("sb-slow", Call::Sandbox("sb-slow")).await.unwrap(), "ta-1");
    let err = c.task_id("sb-done", Call::Sandbox("sb-done")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "[SBX-007] sandbox sb-done is gone: it already finished (status 4, exit code 124)"
    );
    let (url, jwt) = c.router_access("sb-slow", "ta-1").await.unwrap();
    assert_eq!((url.as_str(), jwt.expose_secret()), ("https://router.test:443", "jwt-1"));
    let err = c.router_access("sb-slow", "ta-2").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Provider);
}

#[tokio::test]
async fn images_are_built_through_reopened_join_streams_and_a_failed_build_says_why() {
    let server = Server::default();
    let c = client(&server).await;
    assert_eq!(c.builder_version("main").await.unwrap(), "2025.06-main");
    assert_eq!(c.image("ap-1", "ready:1", "2025.06").await.unwrap(), "im-ready");
    assert_eq!(c.image("ap-1", "slow:1", "2025.06").await.unwrap(), "im-slow");
    let joins = server.0.lock().unwrap().seen.iter().filter(|c| c.method == "ImageJoinStreaming").count();
    assert_eq!(joins, 2);
    let err = c.image("ap-1", "bad:1", "2025.06").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "[SBX-003] configuration error: Modal could not build the image bad:1: pull access denied (status 2)"
    );
}

#[tokio::test]
async fn wait_tells_running_from_ended() {
    let server = Server::default();
    let c = client(&server).await;
    assert_eq!(c.wait("sb-running", Duration::ZERO).await.unwrap(), None);
    let ended = c.wait("sb-1", Duration::from_secs(10)).await.unwrap().unwrap();
    assert_eq!((ended.status, ended.exitcode), (3, 137));
}

#[test]
fn the_token_secret_is_a_sensitive_header_and_never_printed() {
    let credentials = Credentials { token_id: "ak-1".into(), token_secret: SecretString::new("as-hunter2") };
    let identity = Identity::new(&credentials).unwrap();
    let shown = format!("{identity:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("\"x-modal-token-secret\": Sensitive"), "{shown}");
    assert!(shown.contains("\"x-modal-token-id\": \"ak-1\""), "{shown}");
    let bad = Credentials { token_id: "ak-\n".into(), token_secret: SecretString::new("s") };
    assert_eq!(Identity::new(&bad).unwrap_err().code(), ErrorCode::Configuration);
}
