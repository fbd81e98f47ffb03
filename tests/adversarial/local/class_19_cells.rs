//! Class 19 on `local://`: what a code cell can do to later cells and to the host (see
//! `cell_attacks.rs`). CI runs these as root and as an unprivileged caller.

use sandboxio::{NetworkPolicy, Sandbox};

use crate::cell_attacks as attack;
use crate::support::{block_on, child_role, local};

const CHILD: &str = "local::class_19_cells::class_19__flood_child";

#[test]
fn class_19__flood_child() {
    match child_role().as_deref() {
        Some("cell-flood") => attack::flood_child(&local(NetworkPolicy::deny_all())),
        Some("cell-flood-control") => attack::flood_control_child(&local(NetworkPolicy::deny_all())),
        _ => {}
    }
}

#[test]
fn class_19__a_cell_flooding_its_result_channel_leaves_the_host_under_64_mib() {
    if child_role().is_some() {
        return;
    }
    attack::flood_keeps_host_memory_flat("local", CHILD, "cell-flood");
}

#[test]
fn class_19__usercustomize_planted_by_a_cell_does_not_reach_later_cells() {
    let sbx = local(NetworkPolicy::deny_all());
    attack::user_site_hooks_do_not_reach_later_cells(&sbx, false);
    block_on(sbx.close()).unwrap();
}

#[test]
fn class_19__a_pth_file_planted_by_a_cell_does_not_reach_later_cells() {
    let sbx = local(NetworkPolicy::deny_all());
    attack::user_site_hooks_do_not_reach_later_cells(&sbx, true);
    block_on(sbx.close()).unwrap();
}

#[test]
fn class_19__sitecustomize_on_pythonpath_does_not_reach_later_cells() {
    let sbx = block_on(
        Sandbox::builder("local://")
            .unwrap()
            .network(NetworkPolicy::deny_all())
            .env("PYTHONPATH", "/tmp/sbxlib")
            .create(),
    )
    .unwrap();
    attack::a_pythonpath_hook_does_not_reach_later_cells(&sbx, "/tmp/sbxlib");
    block_on(sbx.close()).unwrap();
}

#[test]
fn class_19__a_process_left_behind_cannot_forge_a_later_cells_result() {
    let sbx = local(NetworkPolicy::deny_all());
    attack::a_process_left_behind_cannot_forge_a_later_cell(&sbx);
    block_on(sbx.close()).unwrap();
}

#[test]
fn class_19__a_concurrent_command_cannot_take_over_a_live_context() {
    let sbx = local(NetworkPolicy::deny_all());
    attack::a_concurrent_command_cannot_take_over_a_live_context(&sbx);
    block_on(sbx.close()).unwrap();
}

#[test]
fn class_19__a_command_watching_for_new_runners_cannot_take_one_as_it_starts() {
    let sbx = local(NetworkPolicy::deny_all());
    attack::a_command_watching_for_new_runners_cannot_take_one_as_it_starts(&sbx, "/workspace");
    block_on(sbx.close()).unwrap();
}

#[test]
fn class_19__the_runner_needs_no_ctypes() {
    let sbx = local(NetworkPolicy::deny_all());
    attack::the_runner_needs_no_ctypes(&sbx);
    block_on(sbx.close()).unwrap();
}

#[test]
fn class_19__an_error_of_many_lines_costs_a_bounded_traceback() {
    let sbx = local(NetworkPolicy::deny_all());
    attack::an_error_of_many_lines_costs_a_bounded_traceback(&sbx);
    block_on(sbx.close()).unwrap();
}
