//! Class 4 (streams) on `docker://`: an unread stream costs the host a bounded amount of
//! memory, whatever the command writes. Measured in a dedicated child process (this binary
//! re-run), whose peak RSS is its own.

use sandboxio::NetworkPolicy;

use crate::support::{child_role, docker, docker_ready, drain_an_unread_gib, unread_stream_figures};

#[test]
fn class_04__docker_unread_stream_child() {
    if child_role().as_deref() == Some("docker-unread-stream") {
        drain_an_unread_gib(docker(NetworkPolicy::deny_all()));
    }
}

#[test]
fn class_04__an_unread_docker_stream_keeps_host_memory_flat() {
    if child_role().is_some() || !docker_ready("class_04__an_unread_docker_stream_keeps_host_memory_flat") {
        return;
    }
    let (drained, peak) = unread_stream_figures(
        "docker::class_04_stream_memory::class_04__docker_unread_stream_child",
        "docker-unread-stream",
    );
    println!("class_04 docker stream: {drained} bytes drained after a 2 s stall, peak RSS {peak} MiB");
    // Positive control: the whole GiB really went through the stream.
    assert_eq!(drained, 1 << 30, "control: the stream did not carry 1 GiB");
    assert!(peak < 128, "an unread stream of 1 GiB took the host to {peak} MiB");
}
