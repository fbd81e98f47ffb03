//! Attacks on `docker://`, one module per class.

mod class_03_pid_exhaustion;
mod class_03_process_tree;
mod class_03_stress;
mod class_04_stream_memory;
mod class_04_template_setup_limits;
mod class_04_unbounded_host_memory_and_disk;
mod class_05_races_in_the_file_api;
mod class_06_file_semantics_of_the_sandbox_user;
mod class_07_host_tampering_on_download;
mod class_08_detach_misuse;
mod class_08_owner_death;
mod class_08_template_users;
mod class_08_user_by_name;
mod class_09_command_secrets;
mod class_10_kill_path;
mod class_11_forged_results;
mod class_17_attacks_on_sandboxd;
mod class_18_egress;
mod class_19_cells;

use std::process::Command as OsCommand;

/// Runs the docker CLI; its stdout (empty when it fails).
pub fn docker_cli(args: &[&str]) -> String {
    let out = OsCommand::new("docker").args(args).output().expect("the docker CLI");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The engine's own view of a container's processes (`docker top`: the host's `ps` over the
/// container's cgroup): what sandboxed code cannot forge or hide from. One line per process,
/// `PID ARGS`; empty when the container is gone.
pub fn host_view(id: &str) -> Vec<String> {
    docker_cli(&["top", id, "-eo", "pid,args"]).lines().skip(1).map(str::to_owned).collect()
}

/// Whether container `id` runs its commands through sandboxd (its `io.sandboxio.exec`
/// label), not the exec API.
pub fn on_sandboxd(id: &str) -> bool {
    docker_cli(&["inspect", "-f", "{{index .Config.Labels \"io.sandboxio.exec\"}}", id]).trim() == "sandboxd"
}

/// The processes of container `id` whose command line contains `marker`, as the host sees them.
pub fn survivors(id: &str, marker: &str) -> Vec<String> {
    host_view(id).into_iter().filter(|l| l.contains(marker)).collect()
}

/// Containers (any state) carrying label `key=value`: `(id, state)` pairs.
pub fn labelled(key: &str, value: &str) -> Vec<(String, String)> {
    docker_cli(&[
        "ps",
        "-a",
        "--no-trunc",
        "--filter",
        &format!("label={key}={value}"),
        "--format",
        "{{.ID}} {{.State}}",
    ])
    .lines()
    .filter_map(|l| l.split_once(' ').map(|(a, b)| (a.to_owned(), b.to_owned())))
    .collect()
}
