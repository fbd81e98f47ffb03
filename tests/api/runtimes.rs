//! The async API under tokio (both flavours) and smol: no runtime is assumed.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use std::time::Duration;

use sandboxio::{Command, NetworkPolicy, Sandbox};

async fn exercise() {
    let sbx = Sandbox::builder("fake://").unwrap().network(NetworkPolicy::deny_all()).create().await.unwrap();
    let out = sbx.run(Command::shell("echo hi; sleep 2").timeout(Duration::from_secs(10))).await.unwrap();
    assert_eq!(out.stdout, b"hi\n");
    let mut stream = sbx.stream(Command::shell("echo a; echo b")).unwrap();
    let mut n = 0;
    while let Some(chunk) = stream.next_chunk().await {
        chunk.unwrap();
        n += 1;
    }
    assert_eq!(n, 2);
    sbx.close().await.unwrap();
    drop(Sandbox::builder("fake://").unwrap().network(NetworkPolicy::deny_all()).create().await.unwrap());
    assert_eq!(sandboxio::runtime::shutdown(Duration::from_secs(5)).await, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn runtimes__tokio_current_thread() {
    exercise().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes__tokio_multi_thread() {
    exercise().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes__futures_are_send_and_spawnable() {
    let handle = tokio::spawn(exercise());
    handle.await.unwrap();
}

#[test]
fn runtimes__smol() {
    smol::block_on(exercise());
}
