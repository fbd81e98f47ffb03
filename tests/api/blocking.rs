//! The blocking facade: no runtime needed, no nested-runtime panic inside tokio, the same
//! errors, and drops that clean up.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use std::error::Error as _;
use std::time::Duration;

use sandboxio::sync::Sandbox;
use sandboxio::testing::{Failure, FakeBackend};
use sandboxio::{Command, Error, ErrorCode, NetworkPolicy, exec::StreamKind};

fn sandbox_on(fake: &FakeBackend) -> Sandbox {
    Sandbox::builder_with(fake.clone()).network(NetworkPolicy::deny_all()).create().unwrap()
}

/// Everything a blocking caller does, with no executor anywhere.
fn lifecycle(fake: &FakeBackend) {
    let sandbox = sandbox_on(fake);
    let out = sandbox.run(Command::new("echo").arg("hi")).unwrap();
    assert_eq!(out.stdout, b"hi\n");
    let chunks: Vec<_> =
        sandbox.stream(Command::shell("echo a; echo b >&2")).unwrap().map(Result::unwrap).collect();
    assert_eq!(chunks.iter().map(|c| c.stream).collect::<Vec<_>>(), [StreamKind::Stdout, StreamKind::Stderr]);
    sandbox.fs().write("f.txt", "data").unwrap();
    assert_eq!(sandbox.fs().read_text("f.txt").unwrap(), "data");
    let cell = sandbox.run_code("print(6 * 7)").unwrap();
    assert_eq!(cell.stdout_lossy(), "42\n");
    sandbox.kill().unwrap();
    sandbox.kill().unwrap();
    sandbox.close().unwrap();
}

#[test]
fn sync_parity__a_plain_main_needs_no_runtime() {
    lifecycle(&FakeBackend::new());
}

#[test]
fn sync_parity__inside_a_current_thread_tokio_runtime_there_is_no_nested_runtime_panic() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { lifecycle(&FakeBackend::new()) });
}

#[test]
fn sync_parity__inside_a_multi_thread_tokio_runtime_there_is_no_nested_runtime_panic() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async { tokio::spawn(async { lifecycle(&FakeBackend::new()) }).await.unwrap() });
}

#[test]
fn sync_parity__inside_smol_there_is_no_panic_either() {
    smol::block_on(async { lifecycle(&FakeBackend::new()) });
}

#[test]
fn sync_parity__errors_are_the_same_type_code_and_source_chain() {
    let fake = FakeBackend::new();
    let sandbox = sandbox_on(&fake);
    // Invalid input, capability, timeout, provider error with a source, configuration.
    let err: Error = sandbox.run(Command::new("echo").arg("a\0b")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidInput);
    let err = sandbox.run(Command::shell("sleep 60").timeout(Duration::from_secs(1))).unwrap_err();
    assert!(matches!(err, Error::ExecutionTimeout { .. }), "{err}");
    fake.fail_next(Failure::RateLimited(Some(Duration::from_secs(4))));
    let err = sandbox.run(Command::new("true")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::RateLimited);
    let err = Sandbox::builder("nope://").unwrap_err();
    assert_eq!(err.code(), ErrorCode::Configuration);
    let err = sandbox.fs().upload("/definitely/not/here", "x").unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
    // A provider error keeps its source through the facade, exactly as through async.
    let dir = std::env::temp_dir().join(format!("sandboxio-sync-src-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("file"), "x").unwrap();
    sandbox.fs().write("sub/inner.txt", "x").unwrap();
    let err = sandbox.fs().download("sub", dir.join("file").join("nested")).unwrap_err();
    let source = err.source().map(ToString::to_string);
    assert!(source.is_some(), "the host I/O error is kept as the source: {err}");
    let fake_min = FakeBackend::new().with_capabilities(sandboxio::policy::Capabilities::NETWORK_DENY);
    let plain = sandbox_on(&fake_min);
    let err = plain.stream(Command::new("echo")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityNotSupported);
}

#[test]
fn sync_parity__dropping_a_blocking_sandbox_or_stream_leaves_no_orphan() {
    let fake = FakeBackend::new();
    let sandbox = sandbox_on(&fake);
    let mut stream = sandbox.stream(Command::shell("echo 1; sleep 5; echo 2")).unwrap();
    assert_eq!(stream.next().unwrap().unwrap().data, b"1\n");
    assert_eq!(fake.live_processes(), 1);
    drop(stream);
    assert_eq!(fake.live_processes(), 0, "dropping the blocking stream terminated its process");
    drop(sandbox);
    assert_eq!(sandboxio::sync::shutdown(Duration::from_secs(5)), 0);
    assert!(fake.live_sandboxes().is_empty(), "dropping the blocking sandbox tore it down");
}
