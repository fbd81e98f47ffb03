//! A teardown that hangs is bounded: the grace expiry reports an orphan (its own test
//! binary, because the grace bound and `shutdown` are process-wide).
#![cfg(feature = "contract")] // `simulate_kill_hang` is a test-only hook
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandboxio::audit::{AuditConfig, OperationKind, RecordingSink};
use support::block_on;

/// Captures `tracing` events on target `sandboxio::orphan`.
#[derive(Clone, Default)]
struct OrphanWarnings(Arc<Mutex<Vec<String>>>);

impl tracing::Subscriber for OrphanWarnings {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if event.metadata().target() == "sandboxio::orphan"
            && *event.metadata().level() == tracing::Level::WARN
        {
            self.0.lock().unwrap().push(format!("{event:?}"));
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn cancellation_identity__grace_expiry_emits_an_orphan_warning_and_record() {
    let warnings = OrphanWarnings::default();
    tracing::subscriber::set_global_default(warnings.clone()).unwrap();
    let sink = RecordingSink::new();
    let fake = sandboxio::testing::FakeBackend::new();
    let sbx = block_on(
        sandboxio::Sandbox::builder_with(fake.clone())
            .network(sandboxio::NetworkPolicy::deny_all())
            .metadata("owner", "grace-test")
            .teardown_grace(Duration::from_millis(100))
            .audit(AuditConfig::new().with_sink(Arc::clone(&sink)))
            .create(),
    )
    .unwrap();
    let id = sbx.id().to_owned();
    fake.simulate_kill_hang(&id, true);
    drop(sbx); // never blocks, even though the kill will hang
    assert_eq!(
        block_on(sandboxio::runtime::shutdown(Duration::from_secs(10))),
        0,
        "the grace bound ends the teardown"
    );
    let orphans = sink.records_of(OperationKind::OrphanedSandbox);
    assert_eq!(orphans.len(), 1);
    assert_eq!(orphans[0].sandbox_id.as_deref(), Some(id.as_str()));
    assert_eq!(orphans[0].metadata.get("owner").map(String::as_str), Some("grace-test"));
    let logged = warnings.0.lock().unwrap().clone();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(logged[0].contains(&id), "{logged:?}");
}
