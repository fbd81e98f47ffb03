//! Dropping a future is cancellation: poll each operation k times and drop it, for every k
//! until it completes, and check that nothing is left behind each time.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use crate::support;

use std::time::Duration;

use sandboxio::testing::FakeBackend;
use sandboxio::{
    Code, Command, NetworkPolicy, Sandbox,
    audit::{OperationKind, Outcome},
};
use support::{block_on, fake_sandbox, poll_k_times};

/// Runs `op` cancelled after k polls for k = 0, 1, … until it completes; `check` runs after
/// each drop.
fn for_every_cancellation_point(mut op: impl FnMut(usize) -> bool, mut check: impl FnMut(usize)) {
    for k in 0..1000 {
        let completed = op(k);
        check(k);
        if completed {
            assert!(k > 1, "the operation never yielded, so cancellation was not exercised");
            return;
        }
    }
    panic!("the operation did not complete within 1000 polls");
}

#[test]
fn cancellation__mid_run_leaves_no_orphan() {
    let (fake, sbx) = fake_sandbox();
    for_every_cancellation_point(
        |k| poll_k_times(sbx.run(Command::shell("echo a; sleep 5; echo b; sleep 5; echo c")), k),
        |k| assert_eq!(fake.live_processes(), 0, "orphan process after {k} polls"),
    );
}

#[test]
fn cancellation__mid_run_code_leaves_no_orphan() {
    let (fake, sbx) = fake_sandbox();
    for_every_cancellation_point(
        |k| poll_k_times(sbx.run_code(Code::new("import time\nprint(1)\ntime.sleep(3)\nprint(2)")), k),
        |k| assert_eq!(fake.live_processes(), 0, "orphan cell after {k} polls"),
    );
}

#[test]
fn cancellation__mid_stream_leaves_no_orphan() {
    let (fake, sbx) = fake_sandbox();
    for_every_cancellation_point(
        |k| {
            poll_k_times(
                async {
                    let mut s = sbx.stream(Command::shell("echo a; sleep 1; echo b")).unwrap();
                    s.wait().await.unwrap()
                },
                k,
            )
        },
        |k| assert_eq!(fake.live_processes(), 0, "orphan stream after {k} polls"),
    );
}

#[test]
fn cancellation__mid_create_leaves_no_orphan() {
    let fake = FakeBackend::new();
    let mut created = 0;
    for_every_cancellation_point(
        |k| {
            let done = poll_k_times(
                async {
                    let sbx = Sandbox::builder_with(fake.clone())
                        .network(NetworkPolicy::deny_all())
                        .create()
                        .await
                        .unwrap();
                    sbx.close().await.unwrap();
                },
                k,
            );
            created += usize::from(done);
            done
        },
        |k| {
            // A create dropped before completion leaves nothing; a completed one is closed,
            // and one dropped between create and close is torn down in the background.
            assert_eq!(block_on(sandboxio::runtime::shutdown(Duration::from_secs(5))), 0);
            assert!(fake.live_sandboxes().is_empty(), "orphan sandbox after {k} polls");
        },
    );
    assert_eq!(created, 1);
}

#[test]
fn cancellation__is_recorded_as_cancelled_never_as_an_error() {
    let (fake, sbx) = fake_sandbox();
    assert!(!poll_k_times(sbx.run(Command::shell("sleep 5; echo late")), 2));
    let runs = fake.audit_sink().records_of(OperationKind::Run);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].outcome, Outcome::Cancelled);
}

#[test]
fn cancellation_identity__kill_works_from_synchronous_code_such_as_drop() {
    struct Owner(Option<Sandbox>);
    impl Drop for Owner {
        fn drop(&mut self) {
            // A Drop impl has no executor; kill() is a plain future any executor can poll.
            let sbx = self.0.take().unwrap();
            futures_lite::future::block_on(sbx.kill()).unwrap();
        }
    }
    let (fake, sbx) = fake_sandbox();
    drop(Owner(Some(sbx)));
    assert!(fake.live_sandboxes().is_empty());
}
