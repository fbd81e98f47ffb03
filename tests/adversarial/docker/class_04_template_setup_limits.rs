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
    let limits: Vec<String> = lines
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| l.strip_prefix("memory-limit="))
        .map(str::to_owned)
        .collect();
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

/// The child side of the endless-line proof: prepares a template whose setup prints 1 GiB
/// with no newline, counting what reaches the build log; prints
/// `RESULT <bytes logged> <peak RSS MiB>`.
#[test]
fn class_04__template_setup_endless_line_child() {
    if support::child_role().as_deref() != Some("template-endless-line") {
        return;
    }
    let logged = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = Arc::clone(&logged);
    let stamp = format!("{}-{:?}", std::process::id(), Instant::now());
    let template =
        Template::new(BASE).file("/stamp", stamp).run("head -c 268435456 /dev/zero").setup_disk_mib(64);
    let backend = DockerBackend::from_env()
        .unwrap()
        .with_docker_config("/nonexistent/sandboxio/config.json")
        .with_template("sbx-endless-line", template)
        .with_build_log(move |line| {
            count.fetch_add(line.len() as u64, std::sync::atomic::Ordering::Relaxed);
        });
    let prepared = backend.prepare_template_blocking("sbx-endless-line").unwrap();
    docker_cli(&["rmi", &prepared.image]);
    println!("RESULT {} {}", logged.load(std::sync::atomic::Ordering::Relaxed), support::peak_rss_mib());
}

/// A setup's output is passed to the build log line by line, and a line with no end (256 MiB
/// of zeros, no newline) was gathered whole in host memory first: the host's RSS grew by
/// what the setup printed. Measured in a child process (this binary re-run). Positive
/// control: all of it reached the build log. (256 MiB, twice the RSS bound, catches the old
/// code as 1 GiB did, in a quarter of the time: 1 GiB took 94 s of a 157-s binary under load.)
#[test]
fn class_04__a_template_setup_printing_an_endless_line_keeps_host_memory_flat() {
    const TEST: &str = "class_04__a_template_setup_printing_an_endless_line_keeps_host_memory_flat";
    if support::child_role().is_some() || !support::shared::docker_image_ready(TEST, BASE, "busybox") {
        return;
    }
    let figures = support::child_figures(
        "docker::class_04_template_setup_limits::class_04__template_setup_endless_line_child",
        "template-endless-line",
    );
    let (logged, peak) = (figures[0], figures[1]);
    println!("{TEST}: {logged} bytes logged, peak RSS {peak} MiB");
    assert_eq!(logged, 1 << 28, "control: the setup's 256 MiB did not reach the build log");
    assert!(peak < 128, "a setup's endless line took the host to {peak} MiB");
}
