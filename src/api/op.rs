//! One audit record and one `tracing` span per public call.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tracing::Instrument;

use crate::audit::{AuditConfig, OperationKind, OperationRecord, Outcome};
use crate::error::Result;
use crate::policy::NetworkPolicy;

/// What every record of one sandbox shares.
#[derive(Debug, Clone)]
pub(crate) struct OpContext {
    pub(crate) backend: Arc<str>,
    pub(crate) sandbox_id: Option<Arc<str>>,
    pub(crate) audit: AuditConfig,
    pub(crate) metadata: Arc<BTreeMap<String, String>>,
    pub(crate) policy: Option<NetworkPolicy>,
}

impl OpContext {
    /// `e` with this sandbox's scheme where a backend's default refusal could not name it
    /// ([`crate::backend::UNNAMED_BACKEND`]).
    pub(crate) fn named(&self, e: crate::Error) -> crate::Error {
        match e {
            crate::Error::CapabilityNotSupported { backend, capability }
                if backend == crate::backend::UNNAMED_BACKEND =>
            {
                crate::Error::CapabilityNotSupported { backend: self.backend.to_string(), capability }
            }
            other => other,
        }
    }

    pub(crate) fn record_template(&self, kind: OperationKind) -> OperationRecord {
        OperationRecord {
            kind,
            sandbox_id: self.sandbox_id.as_deref().map(str::to_owned),
            backend: self.backend.to_string(),
            started_at: SystemTime::now(),
            duration: std::time::Duration::ZERO,
            outcome: Outcome::Ok,
            metadata: (*self.metadata).clone(),
            policy: self.policy.clone(),
            egress: None,
        }
    }

    pub(crate) fn span(&self, kind: OperationKind) -> tracing::Span {
        tracing::info_span!(
            "sandboxio",
            op = %kind,
            backend = %self.backend,
            sandbox_id = self.sandbox_id.as_deref().unwrap_or(""),
        )
    }

    /// Starts timing an operation; the guard records it exactly once (as cancelled if it
    /// is dropped before [`OpGuard::finish`]).
    pub(crate) fn start(&self, kind: OperationKind) -> OpGuard<'_> {
        OpGuard {
            ctx: self,
            kind,
            sandbox_id: None,
            started_at: SystemTime::now(),
            started: Instant::now(),
            done: false,
        }
    }

    /// Runs `fut` as operation `kind`: in its span, with its one record.
    pub(crate) async fn observe<T>(
        &self,
        kind: OperationKind,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        self.observe_with(kind, fut, |_| Outcome::Ok).await
    }

    /// As [`OpContext::observe`], with `ok_outcome` deciding the outcome of a success.
    pub(crate) async fn observe_with<T>(
        &self,
        kind: OperationKind,
        fut: impl Future<Output = Result<T>>,
        ok_outcome: impl FnOnce(&T) -> Outcome,
    ) -> Result<T> {
        let guard = self.start(kind);
        let result = fut.instrument(self.span(kind)).await.map_err(|e| self.named(e));
        guard.finish(match &result {
            Ok(v) => ok_outcome(v),
            Err(e) => Outcome::Error(e.code()),
        });
        result
    }
}

/// The one record of a call whose handle outlives it (a stream): written once, when the
/// handle ends or is dropped, timed from the call.
#[derive(Debug)]
pub(crate) struct LateRecord {
    pub(crate) ctx: OpContext,
    kind: OperationKind,
    started_at: SystemTime,
    started: Instant,
    recorded: bool,
}

impl LateRecord {
    /// Starts timing operation `kind` now.
    pub(crate) fn new(ctx: OpContext, kind: OperationKind) -> Self {
        LateRecord { ctx, kind, started_at: SystemTime::now(), started: Instant::now(), recorded: false }
    }

    /// Writes the record with `outcome`, unless it was written already.
    pub(crate) fn record(&mut self, outcome: Outcome) {
        if std::mem::replace(&mut self.recorded, true) {
            return;
        }
        let mut record = self.ctx.record_template(self.kind);
        record.started_at = self.started_at;
        record.duration = self.started.elapsed();
        record.outcome = outcome;
        self.ctx.audit.emit(&record);
    }
}

pub(crate) struct OpGuard<'a> {
    ctx: &'a OpContext,
    kind: OperationKind,
    sandbox_id: Option<String>,
    started_at: SystemTime,
    started: Instant,
    done: bool,
}

impl OpGuard<'_> {
    /// Names the sandbox in the record (for `create`, which learns the id on the way).
    pub(crate) fn set_sandbox_id(&mut self, id: &str) {
        self.sandbox_id = Some(id.to_owned());
    }

    /// Drops the guard without a record, for a call whose record another object writes.
    pub(crate) fn disarm(mut self) {
        self.done = true;
    }

    pub(crate) fn finish(mut self, outcome: Outcome) {
        self.emit(outcome);
    }

    fn emit(&mut self, outcome: Outcome) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let mut record = self.ctx.record_template(self.kind);
        if let Some(id) = self.sandbox_id.take() {
            record.sandbox_id = Some(id);
        }
        record.started_at = self.started_at;
        record.duration = self.started.elapsed();
        record.outcome = outcome;
        if let Outcome::Error(code) = outcome {
            tracing::debug!(op = %self.kind, %code, "operation failed");
        }
        self.ctx.audit.emit(&record);
    }
}

impl Drop for OpGuard<'_> {
    fn drop(&mut self) {
        self.emit(Outcome::Cancelled);
    }
}
