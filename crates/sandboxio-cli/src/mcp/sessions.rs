//! The MCP sessions of `sandboxio mcp --transport http` (the revisions before 2026-07-28
//! open one with `initialize`): rmcp's in-memory session manager, with at most `max` live
//! at once and each closed after `idle` without a request from its client. rmcp removes a
//! session when its worker stops, so an expired one frees its place.
//!
//! A session is a conversation of the token's one client, not a principal: the sandboxes
//! belong to the token (see `http.rs`), and a session's end kills none of them.

use std::cell::Cell;
use std::future::Future;
use std::time::Duration;

use futures_core::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{EventStore, ServerSseMessage, SessionId};
use std::sync::Arc;

/// Why a session operation failed.
#[derive(Debug)]
pub enum SessionsError {
    /// `max` sessions are live.
    Full(usize),
    /// rmcp's own.
    Local(LocalSessionManagerError),
}

impl std::fmt::Display for SessionsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionsError::Full(max) => write!(
                f,
                "{max} MCP sessions are live, the operator's bound (--max-sessions); close one (HTTP DELETE) or wait for one to expire"
            ),
            SessionsError::Local(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SessionsError {}

impl From<LocalSessionManagerError> for SessionsError {
    fn from(e: LocalSessionManagerError) -> Self {
        SessionsError::Local(e)
    }
}

tokio::task_local! {
    /// Set by [`BoundedSessions::create_session`] when it refuses a session over the bound,
    /// for the request being served on this task: rmcp turns every session manager error
    /// into a 500, and the server answers this one with 503 instead ([`noting_full`]).
    static REFUSED_FULL: Cell<bool>;
}

/// Runs `request` (rmcp serving one HTTP request) and says whether it was refused a new
/// session because `max` were live.
pub async fn noting_full<T>(request: impl Future<Output = T>) -> (T, bool) {
    REFUSED_FULL
        .scope(Cell::new(false), async move {
            let out = request.await;
            (out, REFUSED_FULL.with(Cell::get))
        })
        .await
}

/// rmcp's [`LocalSessionManager`] with a bound on live sessions and an idle expiry.
pub struct BoundedSessions {
    inner: LocalSessionManager,
    max: usize,
    /// Held while a session is counted and made, so that two `initialize`s cannot both
    /// take the last place.
    creating: tokio::sync::Mutex<()>,
}

impl BoundedSessions {
    /// At most `max` live sessions, each closed after `idle` without a request.
    pub fn new(max: usize, idle: Duration) -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(idle);
        BoundedSessions { inner, max, creating: tokio::sync::Mutex::new(()) }
    }
}

impl SessionManager for BoundedSessions {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let _creating = self.creating.lock().await;
        if self.inner.sessions.read().await.len() >= self.max {
            // Outside `noting_full` (no HTTP request on this task) there is nothing to tell.
            let _ = REFUSED_FULL.try_with(|full| full.set(true));
            return Err(SessionsError::Full(self.max));
        }
        Ok(self.inner.create_session().await?)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}
