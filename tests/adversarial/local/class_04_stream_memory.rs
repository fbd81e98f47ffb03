//! Class 4 (streams): an unread stream costs the host a bounded amount of memory, whatever
//! the command writes. Measured in a dedicated child process (this binary re-run), whose
//! peak RSS is its own.

use sandboxio::NetworkPolicy;

use crate::support::{child_role, drain_an_unread_gib, local, unread_stream_figures};

#[test]
fn class_04__unread_stream_child() {
    if child_role().as_deref() == Some("unread-stream") {
        drain_an_unread_gib(local(NetworkPolicy::deny_all()));
    }
}

#[test]
fn class_04__an_unread_stream_keeps_host_memory_flat() {
    if child_role().is_some() {
        return;
    }
    let (drained, peak) = unread_stream_figures(
        "local::class_04_stream_memory::class_04__unread_stream_child",
        "unread-stream",
    );
    println!("class_04 stream: {drained} bytes drained after a 2 s stall, peak RSS {peak} MiB");
    // Positive control: the whole GiB really went through the stream.
    assert_eq!(drained, 1 << 30, "control: the stream did not carry 1 GiB");
    assert!(peak < 128, "an unread stream of 1 GiB took the host to {peak} MiB");
}
