//! The control-plane client: one TLS channel to `ModalClient`, the identity headers on every
//! call, bounded messages, and the retry rule for idempotent calls (`errors::transient`,
//! `errors::backoff`) with one `x-idempotency-key` kept across the attempts of a call.

use std::time::Duration;

use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

use super::SCHEME;
use super::config::{Credentials, Settings};
use super::errors::{self, Call};
use super::proto::client::generic_result::GenericStatus;
use super::proto::client::modal_client_client::ModalClientClient;
use super::proto::client::{
    AppGetOrCreateRequest, EnvironmentGetOrCreateRequest, GenericResult, Image, ImageGetOrCreateRequest,
    ImageJoinStreamingRequest, ObjectCreationType, SandboxCreateRequest, SandboxGetTaskIdRequest,
    SandboxListRequest, SandboxTag, SandboxTerminateRequest, SandboxWaitRequest,
    TaskGetCommandRouterAccessRequest,
};
use super::request::identity_headers;
use crate::error::{Error, Result};
use crate::secret::SecretString;

/// The largest message the adapter accepts from the control plane.
pub(crate) const MAX_MESSAGE: usize = 16 * 1024 * 1024;
/// How long one control-plane call may take before it is abandoned (and, if idempotent,
/// retried).
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_mins(1);
/// How long one `SandboxGetTaskId` long poll may wait on the server.
pub(crate) const TASK_POLL: Duration = Duration::from_secs(10);
/// The most task-id polls before giving up (5 minutes at [`TASK_POLL`]).
pub(crate) const TASK_POLLS: u32 = 30;
/// How long one `ImageJoinStreaming` stream may wait on the server.
pub(crate) const BUILD_POLL: Duration = Duration::from_secs(55);
/// The most `ImageJoinStreaming` streams opened for one image (about 30 minutes).
pub(crate) const BUILD_POLLS: u32 = 33;
/// The most pages a listing reads (a page is what the server returns for one call).
pub(crate) const MAX_PAGES: usize = 1000;

/// Adds the identity and token headers to every request.
#[derive(Clone)]
pub(crate) struct Identity {
    headers: Vec<(&'static str, AsciiMetadataValue)>,
}

impl Identity {
    /// The headers of [`identity_headers`], the token secret marked sensitive (its `Debug`
    /// shows `Sensitive`, and HTTP/2 never indexes it in its header table).
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] when a value is not visible ASCII.
    pub(crate) fn new(credentials: &Credentials) -> Result<Self> {
        let mut headers = Vec::new();
        for (name, value) in identity_headers(credentials) {
            let mut v: AsciiMetadataValue = MetadataValue::try_from(value.as_str())
                .map_err(|_| Error::configuration(format!("the Modal header {name} is not visible ASCII")))?;
            if name == "x-modal-token-secret" {
                v.set_sensitive(true);
            }
            headers.push((name, v));
        }
        Ok(Identity { headers })
    }
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.headers.iter().map(|(k, v)| (k, v))).finish()
    }
}

impl tonic::service::Interceptor for Identity {
    fn call(&mut self, mut request: Request<()>) -> std::result::Result<Request<()>, Status> {
        for (name, value) in &self.headers {
            request.metadata_mut().insert(*name, value.clone());
        }
        Ok(request)
    }
}

/// A lazily connected TLS channel to `url` (`https://` only), trusting the built-in web roots
/// or only `trust`'s CA for its named domain; HTTP/2 keepalive every 30 s.
///
/// # Errors
///
/// [`Error::Configuration`] when the URL is not `https://` or is refused.
pub(crate) fn channel(url: &str, trust: Option<(&[u8], &str)>) -> Result<Channel> {
    if !url.starts_with("https://") {
        return Err(Error::configuration(format!("the Modal URL {url:?} is not https://")));
    }
    let tls = match trust {
        None => ClientTlsConfig::new().with_webpki_roots(),
        Some((ca_pem, domain)) => {
            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem)).domain_name(domain)
        }
    };
    let endpoint = Endpoint::from_shared(url.to_owned())
        .and_then(|e| e.tls_config(tls))
        .map_err(|e| Error::configuration(format!("the Modal URL {url} is refused")).with_source(e))?
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .connect_timeout(Duration::from_secs(30));
    Ok(endpoint.connect_lazy())
}

type Inner = ModalClientClient<InterceptedService<Channel, Identity>>;

/// A control-plane client. Building it does no I/O: the channel connects on first use.
#[derive(Clone)]
pub(crate) struct Control {
    inner: Inner,
}

impl Control {
    /// A client for `settings`, trusting the built-in web roots, or only `ca_pem` when given
    /// (the test servers' authority; `domain` is then the name their certificate carries).
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] when the URL or the TLS settings are refused, or a header
    /// value is not visible ASCII.
    pub(crate) fn new(settings: &Settings, trust: Option<(&[u8], &str)>) -> Result<Self> {
        let channel = channel(&settings.server_url, trust)?;
        let inner = ModalClientClient::with_interceptor(channel, Identity::new(&settings.credentials)?)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        Ok(Control { inner })
    }

    /// Runs `call` once, or, when `idempotent`, up to [`errors::RETRIES`] more times after a
    /// transient status, every attempt carrying the same `x-idempotency-key` and its
    /// `x-retry-attempt`.
    async fn unary<Req, Resp, F, Fut>(
        &self,
        message: Req,
        idempotent: bool,
        what: Call<'_>,
        call: F,
    ) -> Result<Resp>
    where
        Req: Clone,
        F: Fn(Inner, Request<Req>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<Resp>, Status>>,
    {
        let key = idempotency_key();
        let mut attempt = 0u32;
        loop {
            let mut request = Request::new(message.clone());
            request.set_timeout(CALL_TIMEOUT);
            let md = request.metadata_mut();
            md.insert("x-idempotency-key", MetadataValue::try_from(key.as_str()).expect("hex is ASCII"));
            md.insert("x-retry-attempt", MetadataValue::from(attempt));
            match call(self.inner.clone(), request).await {
                Ok(reply) => return Ok(reply.into_inner()),
                Err(status)
                    if idempotent && attempt < errors::RETRIES && errors::transient(status.code()) =>
                {
                    attempt += 1;
                    futures_timer::Delay::new(errors::backoff(attempt)).await;
                }
                Err(status) => return Err(errors::from_status(status, what)),
            }
        }
    }

    /// The id of app `name` in `environment`, created if missing.
    ///
    /// # Errors
    ///
    /// The mapped status (`errors::from_status`).
    pub(crate) async fn app(&self, name: &str, environment: &str) -> Result<String> {
        let message = AppGetOrCreateRequest {
            app_name: name.to_owned(),
            environment_name: environment.to_owned(),
            object_creation_type: ObjectCreationType::CreateIfMissing as i32,
        };
        let reply = self
            .unary(message, true, Call::Control, |mut c, r| async move { c.app_get_or_create(r).await })
            .await?;
        Ok(reply.app_id)
    }

    /// The image builder version of `environment` (Modal decides it per workspace).
    ///
    /// # Errors
    ///
    /// The mapped status; an empty version is [`Error::Provider`].
    pub(crate) async fn builder_version(&self, environment: &str) -> Result<String> {
        let message = EnvironmentGetOrCreateRequest {
            deployment_name: environment.to_owned(),
            object_creation_type: ObjectCreationType::Unspecified as i32,
        };
        let reply =
            self.unary(message, true, Call::Control, |mut c, r| async move {
                c.environment_get_or_create(r).await
            })
            .await?;
        reply
            .metadata
            .and_then(|m| m.settings)
            .map(|s| s.image_builder_version)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                Error::provider_message(
                    SCHEME,
                    "EnvironmentGetOrCreate answered without an image builder version",
                )
            })
    }

    /// The id of the image `FROM <reference>` in app `app_id`, built if needed: the build is
    /// followed through `ImageJoinStreaming` (reopened from the last entry id when a stream
    /// ends without a result, at most [`BUILD_POLLS`] times of [`BUILD_POLL`] each).
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] when the build failed (the image cannot be pulled or built);
    /// the mapped status; [`Error::Provider`] for a build that outlasts the polls (the
    /// caller's create deadline usually ends it first).
    pub(crate) async fn image(&self, app_id: &str, reference: &str, builder_version: &str) -> Result<String> {
        let message = ImageGetOrCreateRequest {
            image: Some(Image {
                base_images: Vec::new(),
                dockerfile_commands: vec![format!("FROM {reference}")],
                secret_ids: Vec::new(),
            }),
            app_id: app_id.to_owned(),
            force_build: false,
            builder_version: builder_version.to_owned(),
        };
        let reply = self
            .unary(message, true, Call::Control, |mut c, r| async move { c.image_get_or_create(r).await })
            .await?;
        let image_id = reply.image_id;
        if image_id.is_empty() {
            return Err(Error::provider_message(SCHEME, "ImageGetOrCreate answered without an image id"));
        }
        let mut result = reply.result.filter(finished);
        let mut last_entry_id = String::new();
        let mut polls = 0;
        while result.is_none() {
            if polls == BUILD_POLLS {
                return Err(Error::provider_message(
                    SCHEME,
                    format!("image {image_id} was still building after {BUILD_POLLS} polls"),
                ));
            }
            polls += 1;
            let message = ImageJoinStreamingRequest {
                image_id: image_id.clone(),
                timeout: BUILD_POLL.as_secs_f32(),
                last_entry_id: last_entry_id.clone(),
                include_logs_for_finished: false,
            };
            let mut stream = match self.inner.clone().image_join_streaming(message).await {
                Ok(reply) => reply.into_inner(),
                Err(s) if errors::transient(s.code()) => continue,
                Err(s) => return Err(errors::from_status(s, Call::Control)),
            };
            loop {
                match stream.message().await {
                    Ok(Some(entry)) => {
                        if !entry.entry_id.is_empty() {
                            last_entry_id = entry.entry_id;
                        }
                        if let Some(r) = entry.result.filter(finished) {
                            result = Some(r);
                            break;
                        }
                        if entry.eof {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(s) if errors::transient(s.code()) => break,
                    Err(s) => return Err(errors::from_status(s, Call::Control)),
                }
            }
        }
        match result {
            Some(r) if r.status == GenericStatus::Success as i32 => Ok(image_id),
            Some(r) => Err(Error::configuration(format!(
                "Modal could not build the image {reference}: {} (status {})",
                if r.exception.is_empty() { "no reason given" } else { r.exception.as_str() },
                r.status
            ))),
            None => unreachable!("the loop ends with a result"),
        }
    }

    /// Sandbox `id`'s outcome when it has ended, `None` while it runs; a long poll of at
    /// most `timeout` on the server (`Duration::ZERO` to just look).
    ///
    /// # Errors
    ///
    /// The mapped status.
    pub(crate) async fn wait(&self, id: &str, timeout: Duration) -> Result<Option<GenericResult>> {
        let message = SandboxWaitRequest { sandbox_id: id.to_owned(), timeout: timeout.as_secs_f32() };
        let reply = self
            .unary(message, true, Call::Sandbox(id), |mut c, r| async move { c.sandbox_wait(r).await })
            .await?;
        Ok(reply.result.filter(finished))
    }

    /// Creates a sandbox and returns its id. Retried after a transient status under one
    /// idempotency key, so a lost reply does not make a second sandbox (the server
    /// deduplicates by the key).
    ///
    /// # Errors
    ///
    /// The mapped status; a reply without an id is [`Error::Provider`].
    pub(crate) async fn create(&self, request: SandboxCreateRequest) -> Result<String> {
        let reply = self
            .unary(request, true, Call::Create, |mut c, r| async move { c.sandbox_create(r).await })
            .await?;
        if reply.sandbox_id.is_empty() {
            return Err(Error::provider_message(SCHEME, "SandboxCreate answered without a sandbox id"));
        }
        Ok(reply.sandbox_id)
    }

    /// Terminates sandbox `id`; a sandbox Modal no longer knows counts as terminated.
    ///
    /// # Errors
    ///
    /// The mapped status, other than `NOT_FOUND`.
    pub(crate) async fn terminate(&self, id: &str) -> Result<()> {
        let message = SandboxTerminateRequest { sandbox_id: id.to_owned() };
        match self
            .unary(message, true, Call::Sandbox(id), |mut c, r| async move { c.sandbox_terminate(r).await })
            .await
        {
            Ok(_) | Err(Error::SandboxGone { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The task (container) of sandbox `id`, waiting for it to be scheduled: long polls of
    /// [`TASK_POLL`] each, at most [`TASK_POLLS`] of them. `call` says whether `NOT_FOUND`
    /// means a sandbox held that is gone or an id that names none.
    ///
    /// # Errors
    ///
    /// [`Error::SandboxGone`] when the sandbox already finished; the mapped status;
    /// [`Error::Provider`] when no task came within the polls.
    pub(crate) async fn task_id(&self, id: &str, call: Call<'_>) -> Result<String> {
        for _ in 0..TASK_POLLS {
            let message = SandboxGetTaskIdRequest {
                sandbox_id: id.to_owned(),
                timeout: Some(TASK_POLL.as_secs_f32()),
                wait_until_ready: false,
            };
            let reply = self
                .unary(message, true, call, |mut c, r| async move { c.sandbox_get_task_id(r).await })
                .await?;
            if let Some(result) = reply.task_result {
                return Err(Error::sandbox_gone(
                    id,
                    format!("it already finished (status {}, exit code {})", result.status, result.exitcode),
                ));
            }
            if let Some(task) = reply.task_id.filter(|t| !t.is_empty()) {
                return Ok(task);
            }
        }
        Err(Error::provider_message(SCHEME, format!("sandbox {id} got no task within {TASK_POLLS} polls")))
    }

    /// The command router of task `task_id`: its URL and the token for it.
    ///
    /// # Errors
    ///
    /// The mapped status; an empty URL or token is [`Error::Provider`].
    pub(crate) async fn router_access(
        &self,
        sandbox_id: &str,
        task_id: &str,
    ) -> Result<(String, SecretString)> {
        let message = TaskGetCommandRouterAccessRequest { task_id: task_id.to_owned() };
        let reply = self
            .unary(message, true, Call::Sandbox(sandbox_id), |mut c, r| async move {
                c.task_get_command_router_access(r).await
            })
            .await?;
        if reply.url.is_empty() || reply.jwt.is_empty() {
            return Err(Error::provider_message(
                SCHEME,
                "TaskGetCommandRouterAccess answered without a URL or a token",
            ));
        }
        Ok((reply.url, SecretString::new(reply.jwt)))
    }

    /// The ids of the running sandboxes of `app_id` that carry at least `tags` (as the
    /// server filters, and checked again here), newest first,
    /// reading pages backwards by creation time until an empty page (at most [`MAX_PAGES`]).
    ///
    /// # Errors
    ///
    /// The mapped status; a page that does not move backwards is [`Error::Provider`].
    pub(crate) async fn list(
        &self,
        app_id: &str,
        environment: &str,
        tags: &[(String, String)],
    ) -> Result<Vec<String>> {
        let tags: Vec<SandboxTag> =
            tags.iter().map(|(k, v)| SandboxTag { tag_name: k.clone(), tag_value: v.clone() }).collect();
        let mut ids = Vec::new();
        let mut before = 0.0f64;
        for _ in 0..MAX_PAGES {
            let message = SandboxListRequest {
                app_id: app_id.to_owned(),
                before_timestamp: before,
                environment_name: environment.to_owned(),
                include_finished: false,
                tags: tags.clone(),
            };
            let page = self
                .unary(message, true, Call::Control, |mut c, r| async move { c.sandbox_list(r).await })
                .await?;
            let Some(last) = page.sandboxes.last() else { return Ok(ids) };
            if before != 0.0 && last.created_at >= before {
                return Err(Error::provider_message(
                    SCHEME,
                    "SandboxList returned a page that does not go back in time",
                ));
            }
            before = last.created_at;
            // The server filters by tags; checking again keeps a misread filter from
            // handing a sweep someone else's sandbox.
            ids.extend(
                page.sandboxes.into_iter().filter(|s| tags.iter().all(|t| s.tags.contains(t))).map(|s| s.id),
            );
        }
        Err(Error::provider_message(SCHEME, format!("SandboxList returned more than {MAX_PAGES} pages")))
    }
}

/// Whether a result says something ended (an `UNSPECIFIED` status means "not yet").
fn finished(result: &GenericResult) -> bool {
    result.status != GenericStatus::Unspecified as i32
}

/// 128 random bits as hex: the idempotency key of one call, and the exec id of a command
/// (also its mark, [`crate::backends::remote::pgroup::MARKER`]).
pub(crate) fn idempotency_key() -> String {
    crate::backends::remote::pgroup::new_mark()
}

#[cfg(test)]
mod tests;
