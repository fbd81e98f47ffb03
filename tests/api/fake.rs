//! The `FakeBackend` as a product: scripting, failures on demand, calls, determinism, and
//! the example of testing your own code against the fake in `docs/testing.md`.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use crate::support;

use std::time::Duration;

use sandboxio::testing::{Failure, FakeBackend, sbx_fake};
use sandboxio::{CodeResult, Command, ErrorCode, ExecResult, NetworkPolicy, Sandbox, audit::OperationKind};
use support::{block_on, fake_sandbox};

/// `docs/testing.md`'s example: a tool under test, a scripted answer, assertions on calls.
async fn my_agent_tool(sandbox: &Sandbox, _query: &str) -> String {
    let out = sandbox.run_code("import pandas; print(pandas.__version__)").await.unwrap();
    out.stdout_lossy().into_owned()
}

#[test]
fn fake__readme_example_my_agent_tool() {
    let sbx_fake = sbx_fake();
    sbx_fake.on_run_code("import pandas", ExecResult::new(0, "2.2.1\n", ""));
    let result = block_on(my_agent_tool(&sbx_fake.sandbox, "check pandas version"));
    assert!(result.contains("2.2.1"));
    assert_eq!(sbx_fake.calls()[0].network, NetworkPolicy::deny_all());
    assert_eq!(sbx_fake.calls()[0].kind, OperationKind::RunCode);
}

#[test]
fn fake__scripted_responses_win_and_later_rules_override_earlier() {
    let (fake, sbx) = fake_sandbox();
    fake.on_run("git status", ExecResult::new(0, "clean\n", ""));
    fake.on_run("git status", ExecResult::new(1, "", "dirty\n"));
    let out = block_on(sbx.run(Command::new("git").arg("status"))).unwrap();
    assert_eq!((out.exit_code(), out.stderr_lossy().as_ref()), (Some(1), "dirty\n"));
    fake.on_run_code("magic", CodeResult::new(0, "scripted\n", ""));
    assert_eq!(block_on(sbx.run_code("magic()")).unwrap().stdout, b"scripted\n");
    // Scripted answers reach streams too.
    let mut stream = sbx.stream(Command::new("git").arg("status")).unwrap();
    assert_eq!(block_on(stream.next_chunk()).unwrap().unwrap().data, b"dirty\n");
    assert_eq!(block_on(stream.wait()).unwrap().exit_code(), Some(1));
}

#[test]
fn fake__failures_on_demand() {
    let (fake, sbx) = fake_sandbox();
    fake.fail_next(Failure::Timeout);
    let err = block_on(sbx.run(Command::new("true").timeout(Duration::from_secs(30)))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ExecutionTimeout);
    fake.fail_next(Failure::NetworkPolicyViolation);
    let err = block_on(sbx.run_code("print(1)")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NetworkPolicyViolation);
    assert!(err.to_string().contains("deny-all"), "{err}");
    fake.fail_on("deploy", Failure::ExitCode(9));
    assert_eq!(block_on(sbx.run(Command::shell("deploy now"))).unwrap().exit_code(), Some(9));
    fake.fail_next(Failure::RateLimited(Some(Duration::from_secs(2))));
    assert_eq!(block_on(sbx.run(Command::new("true"))).unwrap_err().code(), ErrorCode::RateLimited);
    fake.fail_next(Failure::Auth);
    assert_eq!(block_on(sbx.run(Command::new("true"))).unwrap_err().code(), ErrorCode::Auth);
    fake.fail_next(Failure::Expire);
    assert_eq!(block_on(sbx.run(Command::new("true"))).unwrap_err().code(), ErrorCode::SandboxGone);
    assert_eq!(block_on(sbx.fs().read("x")).unwrap_err().code(), ErrorCode::SandboxGone, "expiry sticks");
}

#[test]
fn fake__flaky_every_nth_call() {
    let (fake, sbx) = fake_sandbox();
    fake.flaky_every(3, Failure::Provider("flake".into()));
    let results: Vec<bool> = (0..6).map(|_| block_on(sbx.run(Command::new("true"))).is_ok()).collect();
    assert_eq!(results, [true, true, false, true, true, false]);
}

#[test]
fn fake__calls_record_the_policy_and_arguments_in_effect() {
    let fake = FakeBackend::new();
    let sbx = block_on(
        Sandbox::builder_with(fake.clone()).network(NetworkPolicy::allowlist(["pypi.org"]).unwrap()).create(),
    )
    .unwrap();
    block_on(sbx.run(Command::new("echo").arg("x"))).unwrap();
    block_on(sbx.fs().write("f", "y")).unwrap();
    let calls = fake.calls();
    let kinds: Vec<_> = calls.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [OperationKind::Create, OperationKind::Run, OperationKind::FsWrite]);
    assert!(calls.iter().all(|c| c.network == NetworkPolicy::allowlist(["pypi.org"]).unwrap()));
    assert_eq!(calls[1].argv, ["echo", "x"]);
    assert_eq!(calls[2].path.as_deref(), Some("f"));
}

#[test]
fn fake__simulated_egress_obeys_the_policy() {
    let fake = FakeBackend::new();
    let deny =
        block_on(Sandbox::builder_with(fake.clone()).network(NetworkPolicy::deny_all()).create()).unwrap();
    let out = block_on(deny.run(Command::new("curl").arg("https://canary.test/"))).unwrap();
    assert_eq!(out.exit_code(), Some(7));
    let out =
        block_on(deny.run_code("import socket\nsocket.create_connection(('canary.test', 80))")).unwrap();
    assert_eq!(out.error.unwrap().name, "OSError");

    let allow = block_on(
        Sandbox::builder_with(fake).network(NetworkPolicy::allowlist(["canary.test:443"]).unwrap()).create(),
    )
    .unwrap();
    assert!(block_on(allow.run(Command::new("curl").arg("https://canary.test/x"))).unwrap().success());
    assert_eq!(
        block_on(allow.run(Command::new("curl").arg("http://canary.test/x"))).unwrap().exit_code(),
        Some(7)
    );
    assert_eq!(
        block_on(allow.run(Command::new("curl").arg("https://other.test/"))).unwrap().exit_code(),
        Some(7)
    );
}

#[test]
fn fake__is_deterministic_for_a_seed() {
    let run = |seed| {
        let fake = FakeBackend::new().with_seed(seed);
        let sbx = block_on(Sandbox::builder_with(fake).network(NetworkPolicy::deny_all()).create()).unwrap();
        let out = block_on(sbx.run(Command::shell("echo $RANDOM; head -c 8 /dev/urandom"))).unwrap();
        (sbx.id().to_owned(), out.stdout)
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn fake__a_thirty_second_sleep_finishes_in_virtual_time() {
    let (fake, sbx) = fake_sandbox();
    let wall = std::time::Instant::now();
    let out = block_on(sbx.run(Command::new("sleep").arg("30"))).unwrap();
    assert!(out.success());
    assert_eq!(fake.now(), sandboxio::testing::DEFAULT_CREATE_LATENCY + Duration::from_secs(30));
    assert!(wall.elapsed() < Duration::from_secs(5), "no real waiting");
}

#[test]
fn observability__one_operation_record_per_call() {
    use OperationKind as K;
    let fake = FakeBackend::new();
    let sbx = block_on(
        Sandbox::builder_with(fake.clone())
            .network(NetworkPolicy::deny_all())
            .metadata("team", "evals")
            .create(),
    )
    .unwrap();
    block_on(sbx.run(Command::new("true"))).unwrap();
    let _ = block_on(sbx.run(Command::new("echo").arg("\0")));
    block_on(sbx.run_code("1")).unwrap();
    let stream = sbx.stream(Command::new("echo")).unwrap();
    drop(stream);
    block_on(sbx.fs().write("a", "b")).unwrap();
    let _ = block_on(sbx.fs().read("missing"));
    block_on(sbx.kill()).unwrap();
    block_on(sbx.kill()).unwrap();
    block_on(sbx.close()).unwrap();
    let records = fake.audit_records();
    let kinds: Vec<_> = records.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [K::Create, K::Run, K::Run, K::RunCode, K::Stream, K::FsWrite, K::FsRead, K::Kill, K::Kill, K::Close]
    );
    assert_eq!(records[2].outcome, sandboxio::audit::Outcome::Error(ErrorCode::InvalidInput));
    assert_eq!(records[6].outcome, sandboxio::audit::Outcome::Error(ErrorCode::NotFound));
    assert_eq!(records[8].outcome, sandboxio::audit::Outcome::NoOp);
    for r in &records {
        assert_eq!(r.backend, "fake");
        assert_eq!(r.sandbox_id.as_deref(), Some(records[0].sandbox_id.as_deref().unwrap()));
        assert_eq!(r.metadata.get("team").map(String::as_str), Some("evals"));
        assert_eq!(r.policy, Some(NetworkPolicy::deny_all()));
    }
    #[cfg(feature = "contract")] // `labels` is a test-only hook
    assert_eq!(fake.labels(records[0].sandbox_id.as_deref().unwrap()).unwrap()["team"], "evals");
}

#[test]
fn observability__secrets_never_reach_records_errors_or_debug_output() {
    let fake = FakeBackend::new();
    let canary = "canary-secret-4f1c9e";
    let sbx = block_on(
        Sandbox::builder_with(fake.clone())
            .network(NetworkPolicy::deny_all())
            .secret_env("API_KEY", canary)
            .create(),
    )
    .unwrap();
    let err = block_on(sbx.run(Command::new("true").secret_env("BAD", format!("{canary}\0")))).unwrap_err();
    let out = block_on(sbx.run(Command::shell("echo $API_KEY"))).unwrap();
    assert_eq!(out.stdout_lossy(), format!("{canary}\n"), "the secret reaches the process");
    let surfaces = format!("{err} {err:?} {:?} {:?} {sbx:?}", fake.audit_records(), fake.calls());
    assert!(!surfaces.contains(canary), "secret leaked: {surfaces}");
}

#[test]
fn observability__every_public_call_writes_exactly_one_record() {
    use OperationKind as K;
    let fake = FakeBackend::new();
    let sbx =
        block_on(Sandbox::builder_with(fake.clone()).network(NetworkPolicy::deny_all()).create()).unwrap();
    let host = std::env::temp_dir().join(format!("sandboxio-obs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&host);
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("in.txt"), "x").unwrap();
    block_on(async {
        let ctx = sbx.create_context("python").await.unwrap();
        sbx.run_code(sandboxio::Code::new("1").in_context(&ctx)).await.unwrap();
        sbx.fs().mkdir("d").await.unwrap();
        sbx.fs().upload(host.join("in.txt"), "d/in.txt").await.unwrap();
        sbx.fs().list("d").await.unwrap();
        sbx.fs().download("d/in.txt", host.join("out.txt")).await.unwrap();
        sbx.fs().read_text("d/in.txt").await.unwrap();
        sbx.fs().remove("d", true).await.unwrap();
        let attached = Sandbox::connect_with(fake.clone(), sbx.id()).await.unwrap();
        attached.close().await.unwrap();
    });
    let id = block_on(sbx.detach()).unwrap();
    let kinds: Vec<_> = fake.audit_records().iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [
            K::Create,
            K::CreateContext,
            K::RunCode,
            K::FsMkdir,
            K::FsUpload,
            K::FsList,
            K::FsDownload,
            K::FsRead,
            K::FsRemove,
            K::Connect,
            K::Close,
            K::Detach
        ]
    );
    assert!(fake.audit_records().iter().all(|r| r.sandbox_id.as_deref() == Some(id.as_str())));
    let again = block_on(Sandbox::connect_with(fake.clone(), &id)).unwrap();
    block_on(again.kill()).unwrap();
}

#[test]
fn observability__a_sink_given_twice_sees_each_record_once() {
    let fake = FakeBackend::new();
    let sbx = block_on(
        Sandbox::builder_with(fake.clone())
            .network(NetworkPolicy::deny_all())
            .audit(sandboxio::audit::AuditConfig::new().with_sink(fake.audit_sink()))
            .create(),
    )
    .unwrap();
    block_on(sbx.run(Command::new("true"))).unwrap();
    assert_eq!(fake.audit_records().len(), 2);
}
