//! Class 6: a write behaves as the sandbox user's own write would. (`docker://`)
//! The attacks live in `fs_attacks`; each proves its payload unconfined first.

use sandboxio::NetworkPolicy;

use crate::fs_attacks;
use crate::support;

#[test]
fn class_06__a_write_to_a_file_the_sandbox_user_cannot_write_is_refused() {
    if !support::docker_ready("class_06__a_write_to_a_file_the_sandbox_user_cannot_write_is_refused") {
        return;
    }
    fs_attacks::a_write_to_a_file_the_user_cannot_write_is_refused(
        "docker_class_06__a_write_to_a_file_the_sandbox_user_cannot_write_is_refused",
        support::docker(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_06__a_write_keeps_the_mode_of_an_existing_file() {
    if !support::docker_ready("class_06__a_write_keeps_the_mode_of_an_existing_file") {
        return;
    }
    fs_attacks::a_write_keeps_the_mode_of_an_existing_file(
        "docker_class_06__a_write_keeps_the_mode_of_an_existing_file",
        support::docker(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_06__a_write_through_a_link_follows_it_inside_the_sandbox() {
    if !support::docker_ready("class_06__a_write_through_a_link_follows_it_inside_the_sandbox") {
        return;
    }
    fs_attacks::a_write_through_a_link_follows_it_inside_the_sandbox(
        "docker_class_06__a_write_through_a_link_follows_it_inside_the_sandbox",
        support::docker(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_06__a_read_of_a_file_only_root_may_read_is_refused() {
    if !support::docker_ready("class_06__a_read_of_a_file_only_root_may_read_is_refused") {
        return;
    }
    fs_attacks::a_read_of_a_file_only_root_may_read_is_refused(
        "docker_class_06__a_read_of_a_file_only_root_may_read_is_refused",
        support::docker(NetworkPolicy::deny_all()),
        "/etc/shadow",
    );
}
