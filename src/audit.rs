//! The audit core: one [`OperationRecord`] per public call, delivered to the sinks of an
//! [`AuditConfig`].
//!
//! Records carry no command lines, env values or file contents, so they cannot carry a
//! secret. [`RecordingSink`] keeps records in memory for tests.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
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
    /// `Sandbox::interrupt`.
    Interrupt,
    /// `Sandbox::stream`, recorded when the stream ends, is closed or is dropped.
    Stream,
    /// `Sandbox::run_code_stream`, recorded when the stream ends or is dropped.
    RunCodeStream,
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
    /// `Sandbox::extend_ttl`.
    ExtendTtl,
    /// Teardown of a dropped sandbox, run by the library in the background.
    DropTeardown,
    /// A sandbox that could not be torn down within the grace bound: it may still be running.
    OrphanedSandbox,
    /// A connection the egress gate of a sandbox under an allowlist judged (not a call:
    /// the sandbox's code asked): [`Outcome::Ok`] when relayed,
    /// [`ErrorCode::NetworkPolicyViolation`] when refused; [`OperationRecord::egress`] says
    /// where to and why.
    Egress,
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OperationKind::Create => "create",
            OperationKind::Connect => "connect",
            OperationKind::Run => "run",
            OperationKind::RunCode => "run_code",
            OperationKind::CreateContext => "create_context",
            OperationKind::Interrupt => "interrupt",
            OperationKind::Stream => "stream",
            OperationKind::RunCodeStream => "run_code_stream",
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
            OperationKind::ExtendTtl => "extend_ttl",
            OperationKind::DropTeardown => "drop_teardown",
            OperationKind::OrphanedSandbox => "orphaned_sandbox",
            OperationKind::Egress => "egress",
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
    /// For [`OperationKind::Egress`]: the connection the gate judged.
    pub egress: Option<EgressRecord>,
}

/// What an egress gate decided about one connection from a sandbox. The host is the text
/// the sandbox's client named, cut to 253 bytes (the longest DNS name).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EgressRecord {
    /// The destination host as the client named it (a name or an IP literal); empty when the
    /// gate refused before reading one (too many connections).
    pub host: String,
    /// The destination port (0 when not read).
    pub port: u16,
    /// The address the gate dialled, when it relayed.
    pub address: Option<std::net::SocketAddr>,
    /// Why it refused (`not-listed`, `non-public-address`, `sni-mismatch`, …: the word of the
    /// gate's `X-Sandboxio-Egress` header), `None` when it relayed.
    pub refused: Option<String>,
    /// Decisions left out before this one, to bound what a sandbox's code can make the
    /// sinks write (at most 100 records per second per sandbox).
    pub suppressed: u64,
}

impl EgressRecord {
    /// A decision about `host:port` (the host cut to 253 bytes on a character boundary).
    #[must_use]
    pub fn new(host: &str, port: u16, address: Option<std::net::SocketAddr>, refused: Option<&str>) -> Self {
        let mut end = host.len().min(253);
        while !host.is_char_boundary(end) {
            end -= 1;
        }
        EgressRecord {
            host: host[..end].to_owned(),
            port,
            address,
            refused: refused.map(str::to_owned),
            suppressed: 0,
        }
    }
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

/// A sink that turns each record into a `tracing` event on target `sandboxio::audit`: INFO
/// for successes, no-ops and cancellations, WARN for failures. The event carries the
/// operation, sandbox id, backend, duration in milliseconds, outcome, error code and policy
/// as fields; it is emitted inside the operation's own span (`sandboxio`, with `op`,
/// `backend` and `sandbox_id`), so subscribers see both.
#[derive(Debug, Default, Clone, Copy)]
pub struct TracingSink;

impl TracingSink {
    /// The sink, ready for [`AuditConfig::with_sink`].
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::new(TracingSink)
    }
}

impl AuditSink for TracingSink {
    fn record(&self, r: &OperationRecord) {
        let duration_ms = u64::try_from(r.duration.as_millis()).unwrap_or(u64::MAX);
        let sandbox_id = r.sandbox_id.as_deref().unwrap_or("");
        let policy = r.policy.as_ref().map(ToString::to_string).unwrap_or_default();
        match r.outcome {
            Outcome::Error(code) => tracing::warn!(
                target: "sandboxio::audit",
                op = %r.kind, sandbox_id, backend = %r.backend, duration_ms, outcome = "error", code = %code, policy,
                "{} failed with {code}", r.kind
            ),
            outcome => tracing::info!(
                target: "sandboxio::audit",
                op = %r.kind, sandbox_id, backend = %r.backend, duration_ms, outcome = outcome_name(outcome), policy,
                "{} {}", r.kind, outcome_name(outcome)
            ),
        }
    }
}

fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Ok => "ok",
        Outcome::NoOp => "no-op",
        Outcome::Error(_) => "error",
        Outcome::Cancelled => "cancelled",
    }
}

/// A sink that appends each record to a file as one JSON object per line:
/// `{"kind":"run","sandbox_id":"…","backend":"docker","started_at_ms":…,"duration_ms":…,
/// "outcome":"error","error_code":"SBX-006","policy":"deny-all","metadata":{…}}`, and for
/// [`OperationKind::Egress`] records an `"egress":{"host":…,"port":…,"address":…,
/// "refused":…,"suppressed":…}` member last.
/// Times are milliseconds (`started_at_ms` since the Unix epoch). Records carry no command
/// lines, env values or file contents, so the file holds no secret.
#[derive(Debug)]
pub struct JsonLinesSink {
    file: Mutex<std::fs::File>,
}

impl JsonLinesSink {
    /// Opens `path` for appending (creating it).
    ///
    /// # Errors
    ///
    /// [`Error::Provider`](crate::Error::Provider) with the I/O error as the source
    /// if the file cannot be opened.
    pub fn append(path: impl AsRef<std::path::Path>) -> crate::Result<Arc<Self>> {
        let path = path.as_ref();
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| {
            crate::Error::provider("host", format!("cannot open audit log {}", path.display()), e)
        })?;
        Ok(Arc::new(JsonLinesSink { file: Mutex::new(file) }))
    }

    /// The JSON line of one record (without the newline).
    #[must_use]
    pub fn line(r: &OperationRecord) -> String {
        let started_at_ms = r
            .started_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let duration_ms = u64::try_from(r.duration.as_millis()).unwrap_or(u64::MAX);
        let error_code = match r.outcome {
            Outcome::Error(code) => json_string(code.as_str()),
            _ => "null".to_owned(),
        };
        let policy = r.policy.as_ref().map_or_else(|| "null".to_owned(), |p| json_string(&p.to_string()));
        let metadata: Vec<String> =
            r.metadata.iter().map(|(k, v)| format!("{}:{}", json_string(k), json_string(v))).collect();
        let egress = r.egress.as_ref().map_or_else(String::new, |e| {
            format!(
                ",\"egress\":{{\"host\":{},\"port\":{},\"address\":{},\"refused\":{},\"suppressed\":{}}}",
                json_string(&e.host),
                e.port,
                e.address.map_or_else(|| "null".to_owned(), |a| json_string(&a.to_string())),
                e.refused.as_deref().map_or_else(|| "null".to_owned(), json_string),
                e.suppressed
            )
        });
        format!(
            "{{\"kind\":{},\"sandbox_id\":{},\"backend\":{},\"started_at_ms\":{started_at_ms},\"duration_ms\":{duration_ms},\"outcome\":{},\"error_code\":{error_code},\"policy\":{policy},\"metadata\":{{{}}}{egress}}}",
            json_string(&r.kind.to_string()),
            r.sandbox_id.as_deref().map_or_else(|| "null".to_owned(), json_string),
            json_string(&r.backend),
            json_string(outcome_name(r.outcome)),
            metadata.join(",")
        )
    }
}

impl AuditSink for JsonLinesSink {
    fn record(&self, record: &OperationRecord) {
        use std::io::Write as _;
        let mut line = Self::line(record);
        line.push('\n');
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::warn!(target: "sandboxio::audit", "cannot append to the audit log: {e}");
        }
    }
}

/// `s` as a JSON string literal (RFC 8259 §7 escapes).
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_escape_and_shape() {
        let record = OperationRecord {
            kind: OperationKind::Run,
            sandbox_id: Some("sb-1".into()),
            backend: "fake".into(),
            started_at: SystemTime::UNIX_EPOCH + Duration::from_millis(1500),
            duration: Duration::from_millis(42),
            outcome: Outcome::Error(ErrorCode::ExecutionTimeout),
            metadata: BTreeMap::from([("team \"x\"".into(), "line\nbreak\u{1}".into())]),
            policy: Some(NetworkPolicy::deny_all()),
            egress: None,
        };
        assert_eq!(
            JsonLinesSink::line(&record),
            r#"{"kind":"run","sandbox_id":"sb-1","backend":"fake","started_at_ms":1500,"duration_ms":42,"outcome":"error","error_code":"SBX-006","policy":"deny-all","metadata":{"team \"x\"":"line\nbreak\u0001"}}"#
        );
        let refused = OperationRecord {
            kind: OperationKind::Egress,
            outcome: Outcome::Error(ErrorCode::NetworkPolicyViolation),
            metadata: BTreeMap::new(),
            policy: None,
            duration: Duration::ZERO,
            egress: Some(EgressRecord::new("évil\\".repeat(100).as_str(), 443, None, Some("not-listed"))),
            ..record
        };
        let line = JsonLinesSink::line(&refused);
        // 42 whole `évil\` (6 bytes each) fit in 253 bytes; the 43rd's first byte would
        // split its `é`. The backslash is escaped in JSON.
        let host = "évil\\\\".repeat(42);
        let expected = format!(
            r#"{{"kind":"egress","sandbox_id":"sb-1","backend":"fake","started_at_ms":1500,"duration_ms":0,"outcome":"error","error_code":"SBX-008","policy":null,"metadata":{{}},"egress":{{"host":"{host}","port":443,"address":null,"refused":"not-listed","suppressed":0}}}}"#
        );
        assert_eq!(line, expected);
    }
}
