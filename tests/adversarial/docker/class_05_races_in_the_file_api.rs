//! Class 5: nothing planted at a name the file API uses can block or divert it. (`docker://`)
//! The attacks live in `fs_attacks`; each proves its payload unconfined first.

use sandboxio::NetworkPolicy;

use crate::fs_attacks;
use crate::support;

#[test]
fn class_05__a_fifo_planted_at_the_temp_name_never_blocks_a_write() {
    if !support::docker_ready("class_05__a_fifo_planted_at_the_temp_name_never_blocks_a_write") {
        return;
    }
    fs_attacks::a_fifo_planted_at_the_temp_name_never_blocks_a_write(
        "docker_class_05__a_fifo_planted_at_the_temp_name_never_blocks_a_write",
        support::docker(NetworkPolicy::deny_all()),
        3000,
    );
}

#[test]
fn class_05__a_link_planted_at_the_temp_name_never_diverts_a_write() {
    if !support::docker_ready("class_05__a_link_planted_at_the_temp_name_never_diverts_a_write") {
        return;
    }
    fs_attacks::a_link_planted_at_the_temp_name_never_diverts_a_write(
        "docker_class_05__a_link_planted_at_the_temp_name_never_diverts_a_write",
        support::docker(NetworkPolicy::deny_all()),
        3000,
    );
}

#[test]
fn class_05__a_file_operation_past_its_deadline_is_stopped_with_its_process() {
    if !support::docker_ready("class_05__a_file_operation_past_its_deadline_is_stopped_with_its_process") {
        return;
    }
    fs_attacks::a_file_operation_past_its_deadline_is_stopped_with_its_process(
        "docker_class_05__a_file_operation_past_its_deadline_is_stopped_with_its_process",
        support::docker(NetworkPolicy::deny_all()),
        fs_attacks::fs_leftovers_inside,
    );
}
