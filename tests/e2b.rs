//! `e2b://` against the protocol stub (`tests/support/e2b_stub`): the transports end to
//! end over TLS, the faults the stub provokes, and the mapping of each to a typed error.

#![cfg(all(feature = "e2b", feature = "local", feature = "contract"))]

#[path = "support/e2b_stub/mod.rs"]
mod e2b_stub;

use std::time::Duration;

use sandboxio::{Command, ErrorCode, ExitStatus, NetworkPolicy, Sandbox};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures_lite::future::block_on(f)
}

#[test]
fn run_exit_codes_stdin_and_env_over_tls() {
    let stub = e2b_stub::Stub::start();
    block_on(async {
        let sandbox = Sandbox::builder_with(stub.backend()).network(NetworkPolicy::deny_all()).create().await.unwrap();
        let out = sandbox.run(Command::new("echo").arg("hi there")).await.unwrap();
        assert_eq!((out.status, out.stdout.as_slice()), (ExitStatus::Code(0), &b"hi there\n"[..]));
        let out = sandbox.run(Command::shell("echo err >&2; exit 3")).await.unwrap();
        assert_eq!((out.status, out.stderr.as_slice()), (ExitStatus::Code(3), &b"err\n"[..]));
        let out = sandbox.run(Command::new("cat").stdin(b"piped".to_vec())).await.unwrap();
        assert_eq!(out.stdout, b"piped");
        let out = sandbox.run(Command::shell("echo $FOO").env("FOO", "bar")).await.unwrap();
        assert_eq!(out.stdout, b"bar\n");
        let out = sandbox.run(Command::shell("kill -9 $$")).await.unwrap();
        assert_eq!(out.status, ExitStatus::Signal(9));
        sandbox.close().await.unwrap();
    });
    let sent = stub.state.creates.lock().unwrap()[0].clone();
    assert_eq!(sent["allow_internet_access"], false);
    assert_eq!(sent["timeout"], 120, "an owned sandbox's TTL is the owner bound: {sent}");
}
