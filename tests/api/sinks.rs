//! The tracing and JSON-lines audit sinks: one entry per operation, no secret anywhere.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use std::sync::{Arc, Mutex};

use sandboxio::testing::FakeBackend;
use sandboxio::{
    Command, NetworkPolicy, Sandbox,
    audit::{AuditConfig, JsonLinesSink, TracingSink},
};

/// Collects every event and span field as text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        self.0.lock().unwrap().push(format!("span {span:?}"));
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        self.0.lock().unwrap().push(format!("record {values:?}"));
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        self.0.lock().unwrap().push(format!("event {} {event:?}", event.metadata().target()));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn observability__tracing_and_json_lines_sinks_record_every_operation_without_secrets() {
    let canary = "sinks-canary-secret-7731";
    let path = std::env::temp_dir().join(format!("sandboxio-audit-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let capture = Capture::default();
    tracing::subscriber::with_default(capture.clone(), || {
        let audit =
            AuditConfig::new().with_sink(TracingSink::new()).with_sink(JsonLinesSink::append(&path).unwrap());
        futures_lite::future::block_on(async {
            let sbx = Sandbox::builder_with(FakeBackend::new())
                .network(NetworkPolicy::deny_all())
                .secret_env("TOKEN", canary)
                .metadata("team", "obs")
                .audit(audit)
                .create()
                .await
                .unwrap();
            sbx.run(Command::shell("echo $TOKEN")).await.unwrap();
            let _ = sbx.run(Command::new("x").secret_env("BAD", format!("{canary}\0"))).await;
            let _ = sbx.fs().read("missing").await;
            sbx.close().await.unwrap();
        });
    });
    let log = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 5, "{log}");
    assert!(lines[0].starts_with(r#"{"kind":"create","#), "{}", lines[0]);
    assert!(lines[2].contains(r#""outcome":"error","error_code":"SBX-013""#), "{}", lines[2]);
    assert!(
        lines
            .iter()
            .all(|l| l.contains(r#""metadata":{"team":"obs"}"#) && l.contains(r#""policy":"deny-all""#))
    );
    assert!(!log.contains(canary));
    let traced = capture.0.lock().unwrap().join("\n");
    assert_eq!(traced.matches("event sandboxio::audit").count(), 5, "{traced}");
    assert!(
        traced.contains("op: run") || traced.contains("op=run") || traced.contains("run failed"),
        "{traced}"
    );
    assert!(!traced.contains(canary), "secret in tracing output");
}
