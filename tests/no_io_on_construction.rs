//! Building backends and builders does no network I/O and starts no thread (its own
//! binary, so that no other test's threads or sockets are counted).
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use sandboxio::testing::FakeBackend;
use sandboxio::{NetworkPolicy, ResourceLimits, Sandbox};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn sockets() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

#[test]
fn hygiene__constructing_builders_and_backends_starts_no_thread_and_opens_no_socket() {
    let (threads_before, sockets_before) = (threads(), sockets());
    for _ in 0..100 {
        let builder = Sandbox::builder("fake://?seed=3")
            .unwrap()
            .network(NetworkPolicy::allowlist(["pypi.org:443"]).unwrap())
            .limits(ResourceLimits::new().memory_mib(256))
            .metadata("k", "v");
        drop(builder);
        let _ = Sandbox::builder_with(FakeBackend::new().with_seed(9)).network(NetworkPolicy::deny_all());
        let _ = sandboxio::sync::Sandbox::builder("fake://").unwrap().network(NetworkPolicy::deny_all());
        let _ = Sandbox::builder("docker://");
    }
    assert_eq!(threads(), threads_before, "a thread was started");
    assert_eq!(sockets(), sockets_before, "a socket was opened");
}
