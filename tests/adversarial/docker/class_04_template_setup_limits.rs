//! Class 4 (exhausting the host) for `docker://` template setups: a setup runs install
//! scripts as root with nobody watching, and had the pids limit and the timeout but no
//! memory limit and no bound on what it wrote to the host's disk. It now runs with a memory
//! limit of `DEFAULT_SETUP_MEMORY_MIB` unless the caller gives one, and its container's
//! writable layer is measured while it runs: past `Template::setup_disk_mib` the setup is
//! removed and the template fails with `TooLarge`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandboxio::ErrorCode;
use sandboxio::backends::docker::{DEFAULT_SETUP_MEMORY_MIB, DockerBackend, Template};

use super::docker_cli;
use crate::support;

const BASE: &str = "sandboxio/busybox:1";

/// Prints the setup container's memory limit as its cgroup (v1 or v2) says.
const PRINT_MEMORY_LIMIT: &str = "echo memory-limit=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max)";

/// The setup's memory limit is `DEFAULT_SETUP_MEMORY_MIB` when the caller gives none (it
/// was unlimited: the cgroup said `9223372036854771712` or `max`), and the caller's when
/// given (the positive control that the probe reads the limit). A setup that writes past
/// its disk limit fails with `TooLarge` within seconds and leaves no image and no
/// container (it ran to its end and was committed, however much it wrote); the control, a
/// setup writing under the limit, builds.
#[test]
fn class_04__a_template_setup_is_bounded_in_memory_and_disk() {
    const TEST: &str = "class_04__a_template_setup_is_bounded_in_memory_and_disk";
    if !support::shared::docker_image_ready(TEST, BASE, "busybox") {
        return;
    }
    let stamp = format!("{}-{:?}", std::process::id(), Instant::now());
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = Arc::clone(&lines);
    let by_default = Template::new(BASE).file("/stamp", stamp.clone()).run(PRINT_MEMORY_LIMIT);
    let given = Template::new(BASE)
        .file("/stamp", format!("{stamp}-given"))
        .run(PRINT_MEMORY_LIMIT)
        .setup_limits(sandboxio::ResourceLimits::new().memory_mib(96));
    // Under a 60 MiB disk limit: 8 MiB, then a pause the disk watch sees it in; 200 MiB.
    let under = Template::new(BASE)
        .file("/stamp", format!("{stamp}-under"))
        .run("dd if=/dev/zero of=/fill bs=1048576 count=8 2>/dev/null && sleep 2")
        .setup_disk_mib(60);
    let over = Template::new(BASE)
        .file("/stamp", format!("{stamp}-over"))
        .run("dd if=/dev/zero of=/fill bs=1048576 count=200 2>/dev/null && sleep 30 && echo over-setup-finished")
        .setup_disk_mib(60);
    let backend = DockerBackend::from_env()
        .unwrap()
        .with_docker_config("/nonexistent/sandboxio/config.json")
        .with_template("sbx-limits-default", by_default)
        .with_template("sbx-limits-given", given)
        .with_template("sbx-limits-under", under)
        .with_template("sbx-limits-over", over)
        .with_build_log(move |line| log.lock().unwrap().push(line.to_owned()));
    let mut images = Vec::new();
    for name in ["sbx-limits-default", "sbx-limits-given", "sbx-limits-under"] {
        images.push(backend.prepare_template_blocking(name).unwrap().image);
    }
    let started = Instant::now();
    let over = backend.prepare_template_blocking("sbx-limits-over");
    let took = started.elapsed();
    if let Ok(prepared) = &over {
        images.push(prepared.image.clone());
    }
    let leftover = docker_cli(&["ps", "-aq", "--filter", "name=sandboxio-template-setup-sbx-limits-over-"]);
    for image in &images {
        docker_cli(&["rmi", image]);
    }
    let limits: Vec<String> =
        lines.lock().unwrap().iter().filter_map(|l| l.strip_prefix("memory-limit=")).map(str::to_owned).collect();
    assert_eq!(
        limits,
        [(DEFAULT_SETUP_MEMORY_MIB << 20).to_string(), (96u64 << 20).to_string()],
        "the setups' memory limits (default, then given)"
    );
    let e = over.expect_err("a setup that wrote 200 MiB past a 60 MiB disk limit was committed");
    assert_eq!(e.code(), ErrorCode::TooLarge, "{e}");
    assert!(e.to_string().contains("setup_disk_mib"), "{e}");
    assert!(took < Duration::from_secs(25), "the disk limit took {took:?} to stop the setup");
    assert!(!lines.lock().unwrap().iter().any(|l| l == "over-setup-finished"), "the setup ran on");
    assert!(
        support::eventually(Duration::from_secs(10), || docker_cli(&[
            "ps",
            "-aq",
            "--filter",
            "name=sandboxio-template-setup-sbx-limits-over-"
        ])
        .trim()
        .is_empty()),
        "the setup container stayed: {leftover}"
    );
}
