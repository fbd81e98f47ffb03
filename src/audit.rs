//! The audit core: one [`OperationRecord`] per public call, delivered to the sinks of an
//! [`AuditConfig`].
//!
//! Records carry no command lines, env values or file contents, so they cannot carry a
//! secret. [`RecordingSink`] keeps records in memory for tests.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use crate::error::ErrorCode;
use crate::policy::NetworkPolicy;

/// Which public call a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OperationKind {
    /// `SandboxBuilder::create`.
    Create,
    /// `Sandbox::connect`.
    Connect,
    /// `Sandbox::run`.
    Run,
    /// `Sandbox::run_code`.
    RunCode,
    /// `Sandbox::create_context`.
    CreateContext,
    /// `Sandbox::stream`, recorded when the stream ends, is closed or is dropped.
    Stream,
    /// `Fs::read`.
    FsRead,
    /// `Fs::write`.
    FsWrite,
    /// `Fs::upload`.
    FsUpload,
    /// `Fs::download`.
    FsDownload,
    /// `Fs::list`.
    FsList,
    /// `Fs::mkdir`.
    FsMkdir,
    /// `Fs::remove`.
    FsRemove,
    /// `Sandbox::kill` (a second kill is recorded with [`Outcome::NoOp`]).
    Kill,
    /// `Sandbox::close`.
    Close,
    /// `Sandbox::detach`.
    Detach,
    /// Teardown of a dropped sandbox, run by the library in the background.
    DropTeardown,
    /// A sandbox that could not be torn down within the grace bound: it may still be running.
    OrphanedSandbox,
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OperationKind::Create => "create",
            OperationKind::Connect => "connect",
            OperationKind::Run => "run",
            OperationKind::RunCode => "run_code",
            OperationKind::CreateContext => "create_context",
            OperationKind::Stream => "stream",
            OperationKind::FsRead => "fs.read",
            OperationKind::FsWrite => "fs.write",
            OperationKind::FsUpload => "fs.upload",
            OperationKind::FsDownload => "fs.download",
            OperationKind::FsList => "fs.list",
            OperationKind::FsMkdir => "fs.mkdir",
            OperationKind::FsRemove => "fs.remove",
            OperationKind::Kill => "kill",
            OperationKind::Close => "close",
            OperationKind::Detach => "detach",
            OperationKind::DropTeardown => "drop_teardown",
            OperationKind::OrphanedSandbox => "orphaned_sandbox",
        })
    }
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// It did what was asked.
    Ok,
    /// There was nothing to do (a second `kill`).
    NoOp,
    /// It failed with this code.
    Error(ErrorCode),
    /// The caller dropped the future before it finished.
    Cancelled,
}

/// One record per public call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OperationRecord {
    /// The call.
    pub kind: OperationKind,
    /// The sandbox, once known (a failed `create` has none).
    pub sandbox_id: Option<String>,
    /// The backend's scheme, for example `fake`.
    pub backend: String,
    /// When the call started (wall clock).
    pub started_at: SystemTime,
    /// How long it took.
    pub duration: Duration,
    /// How it ended.
    pub outcome: Outcome,
    /// The sandbox's metadata (the user's labels).
    pub metadata: BTreeMap<String, String>,
    /// The network policy in effect, when known (a `connect`ed handle may not know it).
    pub policy: Option<NetworkPolicy>,
}

/// Where operation records go. Implementations must be cheap and must not block for long:
/// `record` is called inline on the caller's task.
pub trait AuditSink: Send + Sync + fmt::Debug {
    /// Receives one record.
    fn record(&self, record: &OperationRecord);
}

/// The audit sinks of a sandbox or a backend. Cloning shares the sinks.
#[derive(Clone, Default)]
pub struct AuditConfig {
    sinks: Vec<Arc<dyn AuditSink>>,
}

impl AuditConfig {
    /// No sinks.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a sink. Keep your own `Arc` clone to read a [`RecordingSink`] back.
    #[must_use]
    pub fn with_sink<S: AuditSink + 'static>(mut self, sink: Arc<S>) -> Self {
        self.sinks.push(sink);
        self
    }

    /// Adds every sink of `other` that is not already here (the same `Arc`), so a sink
    /// given twice still sees each record once.
    #[must_use]
    pub fn merged(mut self, other: &AuditConfig) -> Self {
        for sink in &other.sinks {
            if !self.sinks.iter().any(|s| Arc::ptr_eq(s, sink)) {
                self.sinks.push(Arc::clone(sink));
            }
        }
        self
    }

    /// Whether there are no sinks.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.sinks.is_empty()
    }

    /// Sends `record` to every sink.
    pub fn emit(&self, record: &OperationRecord) {
        for sink in &self.sinks {
            sink.record(record);
        }
    }
}

impl fmt::Debug for AuditConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuditConfig").field("sinks", &self.sinks).finish()
    }
}

/// A sink that keeps every record in memory, for tests.
#[derive(Debug, Default)]
pub struct RecordingSink {
    records: Mutex<Vec<OperationRecord>>,
}

impl RecordingSink {
    /// An empty sink, ready to share with [`AuditConfig::with_sink`].
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A copy of the records so far, oldest first.
    #[must_use]
    pub fn records(&self) -> Vec<OperationRecord> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The records of one kind, oldest first.
    #[must_use]
    pub fn records_of(&self, kind: OperationKind) -> Vec<OperationRecord> {
        self.records().into_iter().filter(|r| r.kind == kind).collect()
    }

    /// Forgets every record.
    pub fn clear(&self) {
        self.records.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }
}

impl AuditSink for RecordingSink {
    fn record(&self, record: &OperationRecord) {
        self.records.lock().unwrap_or_else(PoisonError::into_inner).push(record.clone());
    }
}
