//! Class 4 (streams) on `docker://`: an unread stream costs the host a bounded amount of
//! memory, whatever the command writes. Measured in a dedicated child process (this binary
//! re-run), whose peak RSS is its own.

use std::io::Read as _;
use std::time::Duration;

use sandboxio::{Command, NetworkPolicy};

use crate::support::{block_on, child_role, docker, docker_ready, peak_rss_mib, spawn_child};

const GIB: u64 = 1 << 30;

/// The child: a stream of 1 GiB left unread for two seconds, then drained. Prints
/// `RESULT <bytes drained> <peak RSS MiB>`.
#[test]
fn class_04__docker_unread_stream_child() {
    if child_role().as_deref() != Some("docker-unread-stream") {
        return;
    }
    let sbx = docker(NetworkPolicy::deny_all());
    let mut stream = sbx.stream(Command::shell("head -c 1073741824 /dev/zero")).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let mut drained = 0u64;
    while let Some(chunk) = block_on(futures_lite::StreamExt::next(&mut stream)) {
        drained += chunk.unwrap().data.len() as u64;
    }
    block_on(sbx.close()).unwrap();
    println!("RESULT {drained} {}", peak_rss_mib());
}

#[test]
fn class_04__an_unread_docker_stream_keeps_host_memory_flat() {
    let test = "class_04__an_unread_docker_stream_keeps_host_memory_flat";
    if child_role().is_some() || !docker_ready(test) {
        return;
    }
    let mut child = spawn_child(
        "docker::class_04_stream_memory::class_04__docker_unread_stream_child",
        "docker-unread-stream",
        &[],
    );
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(child.wait().unwrap().success(), "the child failed: {out}");
    let result = out
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no result: {out}"));
    let mut fields = result.split_whitespace().map(|f| f.parse::<u64>().unwrap());
    let (drained, peak) = (fields.next().unwrap(), fields.next().unwrap());
    println!("class_04 docker stream: {drained} bytes drained after a 2 s stall, peak RSS {peak} MiB");
    // Positive control: the whole GiB really went through the stream.
    assert_eq!(drained, GIB, "control: the stream did not carry 1 GiB");
    assert!(peak < 128, "an unread stream of 1 GiB took the host to {peak} MiB");
}
