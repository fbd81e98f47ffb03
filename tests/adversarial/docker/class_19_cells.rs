//! Class 19 on `docker://`: what a code cell can do to later cells and to the host (see
//! `cell_attacks.rs`), as the image's user and, for the start-up hooks, as root.

use sandboxio::{NetworkPolicy, Sandbox};

use crate::cell_attacks as attack;
use crate::support::{DOCKER_IMAGE, block_on, child_role, docker, docker_ready, exec_option};

const CHILD: &str = "docker::class_19_cells::class_19__docker_flood_child";

/// A sandbox of the test image, as `user` when given, with `env`.
fn sandbox(user: Option<&str>, env: &[(&str, &str)]) -> Sandbox {
    let user = user.map(|u| format!("&user={u}")).unwrap_or_default();
    let mut builder = Sandbox::builder(&format!("docker://?image={DOCKER_IMAGE}{user}{}", exec_option()))
        .unwrap()
        .network(NetworkPolicy::deny_all());
    for (k, v) in env {
        builder = builder.env(*k, *v);
    }
    block_on(builder.create()).unwrap()
}

/// Whether these tests apply: the engine is here, and cells run on sandboxd's runner (the
/// exec API has no contexts and no rich results; its one-shot runner starts isolated too).
fn ready(test: &str) -> bool {
    if !docker_ready(test) {
        return false;
    }
    if !exec_option().is_empty() {
        println!("[n/a] {test}: cells on the exec API have no contexts or rich results");
        return false;
    }
    true
}

#[test]
fn class_19__docker_flood_child() {
    match child_role().as_deref() {
        Some("docker-cell-flood") => attack::flood_child(&docker(NetworkPolicy::deny_all())),
        Some("docker-cell-flood-control") => attack::flood_control_child(&docker(NetworkPolicy::deny_all())),
        _ => {}
    }
}

#[test]
fn class_19__a_docker_cell_flooding_its_result_channel_leaves_the_host_under_64_mib() {
    let test = "class_19__a_docker_cell_flooding_its_result_channel_leaves_the_host_under_64_mib";
    if child_role().is_some() || !ready(test) {
        return;
    }
    attack::flood_keeps_host_memory_flat("docker", CHILD, "docker-cell-flood");
}

#[test]
fn class_19__docker_start_up_hooks_planted_by_a_cell_do_not_reach_later_cells() {
    if !ready("class_19__docker_start_up_hooks_planted_by_a_cell_do_not_reach_later_cells") {
        return;
    }
    for user in [None, Some("0")] {
        for pth in [false, true] {
            let sbx = sandbox(user, &[]);
            attack::user_site_hooks_do_not_reach_later_cells(&sbx, pth);
            block_on(sbx.close()).unwrap();
        }
        let sbx = sandbox(user, &[("PYTHONPATH", "/tmp/sbxlib")]);
        attack::a_pythonpath_hook_does_not_reach_later_cells(&sbx, "/tmp/sbxlib");
        block_on(sbx.close()).unwrap();
    }
}

#[test]
fn class_19__a_docker_process_left_behind_cannot_forge_a_later_cells_result() {
    if !ready("class_19__a_docker_process_left_behind_cannot_forge_a_later_cells_result") {
        return;
    }
    for user in [None, Some("0")] {
        let sbx = sandbox(user, &[]);
        attack::a_process_left_behind_cannot_forge_a_later_cell(&sbx);
        block_on(sbx.close()).unwrap();
    }
}

#[test]
fn class_19__a_docker_command_watching_for_new_runners_cannot_take_one_as_it_starts() {
    if !ready("class_19__a_docker_command_watching_for_new_runners_cannot_take_one_as_it_starts") {
        return;
    }
    for user in [None, Some("0")] {
        let sbx = sandbox(user, &[]);
        attack::a_command_watching_for_new_runners_cannot_take_one_as_it_starts(&sbx, "/tmp");
        attack::the_runner_needs_no_ctypes(&sbx);
        block_on(sbx.close()).unwrap();
    }
}

#[test]
fn class_19__a_docker_error_of_many_lines_costs_a_bounded_traceback() {
    if !ready("class_19__a_docker_error_of_many_lines_costs_a_bounded_traceback") {
        return;
    }
    let sbx = sandbox(None, &[]);
    attack::an_error_of_many_lines_costs_a_bounded_traceback(&sbx);
    block_on(sbx.close()).unwrap();
}
