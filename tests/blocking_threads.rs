//! No library thread outlives the last blocking handle (its own binary, so that no other
//! test's threads are counted).
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use std::time::{Duration, Instant};

use sandboxio::{Command, NetworkPolicy};

/// Names of this process's threads that sandboxio started.
fn library_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| name.starts_with("sandboxio"))
        .collect()
}

#[test]
fn sync_parity__no_library_thread_remains_once_the_last_blocking_handle_is_dropped() {
    let host = std::env::temp_dir().join(format!("sandboxio-threads-{}", std::process::id()));
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("in.txt"), "x").unwrap();
    {
        let sandbox = sandboxio::sync::Sandbox::builder("fake://")
            .unwrap()
            .network(NetworkPolicy::deny_all())
            .create()
            .unwrap();
        sandbox.run(Command::new("echo").arg("x")).unwrap();
        // Upload and download use library threads for host I/O; drop uses one for teardown.
        sandbox.fs().upload(host.join("in.txt"), "in.txt").unwrap();
        sandbox.fs().download("in.txt", host.join("out.txt")).unwrap();
        let _stream = sandbox.stream(Command::shell("sleep 5")).unwrap();
    }
    assert_eq!(sandboxio::sync::shutdown(Duration::from_secs(5)), 0);
    let start = Instant::now();
    while !library_threads().is_empty() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(library_threads(), Vec::<String>::new(), "library threads left behind");
}
