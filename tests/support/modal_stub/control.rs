//! The control plane (`modal.client.ModalClient`): token headers checked on every call,
//! `SandboxCreate` deduplicated by `x-idempotency-key`, the faults of [`super::Faults`].

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use prost::Message;
use sandboxio::{NetworkPolicy, Sandbox};
use tonic::{Request, Response, Status};

use super::proto::client::generic_result::GenericStatus;
use super::proto::client::modal_client_server::ModalClient;
use super::proto::client::network_access::NetworkAccessType;
use super::proto::client::{
    AppGetOrCreateRequest, AppGetOrCreateResponse, EnvironmentGetOrCreateRequest,
    EnvironmentGetOrCreateResponse, EnvironmentMetadata, EnvironmentSettings, GenericResult,
    ImageGetOrCreateRequest, ImageGetOrCreateResponse, ImageJoinStreamingRequest, ImageJoinStreamingResponse,
    NetworkAccess, RpcRetryPolicy, RpcStatus, SandboxCreateRequest, SandboxCreateResponse,
    SandboxGetTaskIdRequest, SandboxGetTaskIdResponse, SandboxInfo, SandboxListRequest, SandboxListResponse,
    SandboxTag, SandboxTerminateRequest, SandboxTerminateResponse, SandboxWaitRequest, SandboxWaitResponse,
    TaskGetCommandRouterAccessRequest, TaskGetCommandRouterAccessResponse,
};
use super::{State, StubSandbox, TOKEN_ID, TOKEN_SECRET};

pub struct Control(pub Arc<State>);

fn header<T>(r: &Request<T>, name: &str) -> String {
    r.metadata().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

/// `UNAUTHENTICATED` unless both token headers are the stub's and a client type is sent;
/// the client identity of every call is recorded.
fn check<T>(state: &State, r: &Request<T>) -> Result<(), Status> {
    let identity =
        format!("type {} version {}", header(r, "x-modal-client-type"), header(r, "x-modal-client-version"));
    state.identities.lock().unwrap().insert(identity);
    if header(r, "x-modal-token-id") != TOKEN_ID || header(r, "x-modal-token-secret") != TOKEN_SECRET {
        return Err(Status::unauthenticated("Invalid token id or secret"));
    }
    if header(r, "x-modal-client-type").is_empty() {
        return Err(Status::failed_precondition("Old client: missing client type"));
    }
    Ok(())
}

/// `RESOURCE_EXHAUSTED` carrying an `RPCRetryPolicy` in `grpc-status-details-bin`.
fn throttled(after: Duration) -> Status {
    let policy = RpcRetryPolicy { retry_after_secs: after.as_secs_f32() };
    let details = RpcStatus {
        code: tonic::Code::ResourceExhausted as i32,
        message: "rate limited".to_owned(),
        details: vec![prost_types::Any {
            type_url: "type.googleapis.com/modal.client.RPCRetryPolicy".to_owned(),
            value: policy.encode_to_vec(),
        }],
    };
    Status::with_details(
        tonic::Code::ResourceExhausted,
        "Sandbox creation rate limit exceeded",
        details.encode_to_vec().into(),
    )
}

fn now_secs() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

type Entries = Pin<Box<dyn futures_core::Stream<Item = Result<ImageJoinStreamingResponse, Status>> + Send>>;

impl Control {
    async fn create(&self, key: String, m: SandboxCreateRequest) -> Result<String, Status> {
        let state = &self.0;
        let definition = m.definition.clone().unwrap_or_default();
        let network = match definition.network_access.as_ref().map(NetworkAccess::network_access_type) {
            Some(NetworkAccessType::Blocked) => NetworkPolicy::deny_all(),
            Some(NetworkAccessType::Open) | None => NetworkPolicy::allow_all(),
            // Modal's allowlists, additive: a listed domain over TLS on port 443 (the
            // `local://` gate's default port, checked by name and SNI), a listed CIDR on any
            // port and protocol.
            Some(NetworkAccessType::Allowlist) => {
                let access = definition.network_access.as_ref().expect("matched above");
                let entries = access
                    .allowed_domains
                    .iter()
                    .cloned()
                    .chain(access.allowed_cidrs.iter().map(|c| format!("{c}:*")));
                NetworkPolicy::allowlist(entries).map_err(|e| Status::invalid_argument(e.to_string()))?
            }
            Some(other) => {
                return Err(Status::invalid_argument(format!(
                    "the stub does not offer network access {other:?}"
                )));
            }
        };
        if definition.timeout_secs == 0 {
            return Err(Status::invalid_argument("timeout_secs is required"));
        }
        let local = Sandbox::builder_with(state.local.clone())
            .network(network)
            .ttl(Duration::from_hours(1))
            .create()
            .await
            .map_err(|e| Status::internal(format!("could not schedule the sandbox: {e}")))?;
        let n = state.next_id.fetch_add(1, Ordering::SeqCst);
        // The shape of Modal's V1 sandbox ids ("sb-" and 22 letters or digits): its client
        // takes any other shape for a V2 sandbox, which it reaches through other RPCs.
        let id = format!("sb-{n:022}");
        let sandbox = Arc::new(StubSandbox {
            id: id.clone(),
            app_id: m.app_id.clone(),
            task_id: format!("ta-{n:06}"),
            router_tokens: Mutex::new(Vec::new()),
            local,
            tags: m
                .tags
                .iter()
                .map(|t| (t.tag_name.clone(), t.tag_value.clone()))
                .collect::<BTreeMap<_, _>>(),
            config: format!("{m:?}"),
            created_at: now_secs() + f64::from(u32::try_from(n).unwrap_or(u32::MAX)) * 1e-3,
            end_at: Mutex::new(Instant::now() + Duration::from_secs(u64::from(definition.timeout_secs))),
            idle_timeout: definition.idle_timeout_secs.map(|s| Duration::from_secs(u64::from(s))),
            last_active: Mutex::new(Instant::now()),
            running: AtomicUsize::new(0),
            result: Mutex::new(None),
            execs: Mutex::new(std::collections::HashMap::new()),
        });
        state.sandboxes.lock().unwrap().insert(id.clone(), sandbox);
        if !key.is_empty() {
            state.created_by_key.lock().unwrap().insert(key, id.clone());
        }
        Ok(id)
    }
}

#[tonic::async_trait]
impl ModalClient for Control {
    async fn app_get_or_create(
        &self,
        r: Request<AppGetOrCreateRequest>,
    ) -> Result<Response<AppGetOrCreateResponse>, Status> {
        check(&self.0, &r)?;
        let m = r.into_inner();
        Ok(Response::new(AppGetOrCreateResponse { app_id: format!("ap-{}", m.app_name) }))
    }

    async fn environment_get_or_create(
        &self,
        r: Request<EnvironmentGetOrCreateRequest>,
    ) -> Result<Response<EnvironmentGetOrCreateResponse>, Status> {
        check(&self.0, &r)?;
        Ok(Response::new(EnvironmentGetOrCreateResponse {
            environment_id: "en-main".to_owned(),
            metadata: Some(EnvironmentMetadata {
                name: "main".to_owned(),
                settings: Some(EnvironmentSettings { image_builder_version: "2025.06".to_owned() }),
            }),
        }))
    }

    async fn image_get_or_create(
        &self,
        r: Request<ImageGetOrCreateRequest>,
    ) -> Result<Response<ImageGetOrCreateResponse>, Status> {
        check(&self.0, &r)?;
        let m = r.into_inner();
        let commands = m.image.map(|i| i.dockerfile_commands).unwrap_or_default();
        if commands.len() != 1 || !commands[0].starts_with("FROM ") || m.builder_version.is_empty() {
            return Err(Status::invalid_argument("the stub builds `FROM <ref>` images only"));
        }
        // Built at once; the result comes through ImageJoinStreaming, as for a new image.
        Ok(Response::new(ImageGetOrCreateResponse {
            image_id: format!("im-{}", commands[0].len()),
            result: None,
        }))
    }

    type ImageJoinStreamingStream = Entries;

    async fn image_join_streaming(
        &self,
        r: Request<ImageJoinStreamingRequest>,
    ) -> Result<Response<Entries>, Status> {
        check(&self.0, &r)?;
        let entry = ImageJoinStreamingResponse {
            result: Some(GenericResult { status: GenericStatus::Success as i32, ..Default::default() }),
            entry_id: "1-0".to_owned(),
            eof: true,
        };
        Ok(Response::new(Box::pin(tokio_stream::iter([Ok(entry)]))))
    }

    async fn sandbox_create(
        &self,
        r: Request<SandboxCreateRequest>,
    ) -> Result<Response<SandboxCreateResponse>, Status> {
        check(&self.0, &r)?;
        let key = header(&r, "x-idempotency-key");
        let m = r.into_inner();
        let faults = &self.0.faults;
        self.0.creates.lock().unwrap().push((key.clone(), m.clone()));
        let throttle = faults.throttle_creates.load(Ordering::SeqCst);
        if throttle > 0 {
            faults.throttle_creates.store(throttle - 1, Ordering::SeqCst);
            let after = faults.throttle_after_ms.load(Ordering::SeqCst) as u64;
            return Err(throttled(Duration::from_millis(after)));
        }
        // The same key is the same sandbox: a retry after a lost reply makes no second one.
        let known = self.0.created_by_key.lock().unwrap().get(&key).cloned();
        let id = match known {
            Some(id) => id,
            None => self.create(key, m).await?,
        };
        let delay = faults.delay_next_create_reply_ms.swap(0, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        if faults.lose_next_create_reply.swap(false, Ordering::SeqCst) {
            return Err(Status::unavailable("connection reset by peer"));
        }
        let sandbox_id = if faults.malformed_create.load(Ordering::SeqCst) { String::new() } else { id };
        Ok(Response::new(SandboxCreateResponse { sandbox_id, metadata: None }))
    }

    async fn sandbox_get_task_id(
        &self,
        r: Request<SandboxGetTaskIdRequest>,
    ) -> Result<Response<SandboxGetTaskIdResponse>, Status> {
        check(&self.0, &r)?;
        // No timeout is required: Modal's official client (1.6.4, V1 sandboxes) sends none
        // and polls. The adapter always sends one (its unit tests check that).
        let m = r.into_inner();
        let s = self.0.sandbox(&m.sandbox_id).ok_or_else(|| Status::not_found("Sandbox not found"))?;
        Ok(Response::new(match s.finished() {
            Some(result) => SandboxGetTaskIdResponse { task_id: None, task_result: Some(result) },
            None => SandboxGetTaskIdResponse { task_id: Some(s.task_id.clone()), task_result: None },
        }))
    }

    async fn sandbox_list(
        &self,
        r: Request<SandboxListRequest>,
    ) -> Result<Response<SandboxListResponse>, Status> {
        check(&self.0, &r)?;
        let m = r.into_inner();
        let wanted: Vec<(String, String)> =
            m.tags.iter().map(|t| (t.tag_name.clone(), t.tag_value.clone())).collect();
        let mut listed: Vec<Arc<StubSandbox>> = self
            .0
            .sandboxes
            .lock()
            .unwrap()
            .values()
            .filter(|s| s.app_id == m.app_id && (m.include_finished || s.finished().is_none()))
            .filter(|s| wanted.iter().all(|(k, v)| s.tags.get(k) == Some(v)))
            .filter(|s| m.before_timestamp == 0.0 || s.created_at < m.before_timestamp)
            .cloned()
            .collect();
        listed.sort_by(|a, b| b.created_at.total_cmp(&a.created_at));
        let sandboxes = listed
            .iter()
            .take(10)
            .map(|s| SandboxInfo {
                id: s.id.clone(),
                created_at: s.created_at,
                app_id: s.app_id.clone(),
                tags: s
                    .tags
                    .iter()
                    .map(|(k, v)| SandboxTag { tag_name: k.clone(), tag_value: v.clone() })
                    .collect(),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(SandboxListResponse { sandboxes }))
    }

    async fn sandbox_terminate(
        &self,
        r: Request<SandboxTerminateRequest>,
    ) -> Result<Response<SandboxTerminateResponse>, Status> {
        check(&self.0, &r)?;
        let m = r.into_inner();
        let s = self.0.sandbox(&m.sandbox_id).ok_or_else(|| Status::not_found("Sandbox not found"))?;
        let existing_result = s.finished();
        s.end(GenericStatus::Terminated).await;
        Ok(Response::new(SandboxTerminateResponse { existing_result }))
    }

    async fn sandbox_wait(
        &self,
        r: Request<SandboxWaitRequest>,
    ) -> Result<Response<SandboxWaitResponse>, Status> {
        check(&self.0, &r)?;
        let m = r.into_inner();
        let s = self.0.sandbox(&m.sandbox_id).ok_or_else(|| Status::not_found("Sandbox not found"))?;
        let until = Instant::now() + Duration::from_secs_f32(m.timeout.clamp(0.0, 55.0));
        loop {
            if let Some(result) = s.finished() {
                return Ok(Response::new(SandboxWaitResponse { result: Some(result), metadata: None }));
            }
            if Instant::now() >= until {
                return Ok(Response::new(SandboxWaitResponse::default()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn task_get_command_router_access(
        &self,
        r: Request<TaskGetCommandRouterAccessRequest>,
    ) -> Result<Response<TaskGetCommandRouterAccessResponse>, Status> {
        check(&self.0, &r)?;
        let m = r.into_inner();
        let s = self.0.by_task(&m.task_id).ok_or_else(|| Status::not_found("Task not found"))?;
        self.0.router_accesses.fetch_add(1, Ordering::SeqCst);
        let secs = match self.0.faults.router_token_secs.load(Ordering::SeqCst) {
            0 => 3600,
            n => n,
        };
        Ok(Response::new(TaskGetCommandRouterAccessResponse {
            jwt: s.issue_router_token(Duration::from_secs(secs)),
            url: self.0.router_url.lock().unwrap().clone(),
        }))
    }
}
