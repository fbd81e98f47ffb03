//! Class 6: a write behaves as the sandbox user's own write would. (`local://`)
//! The attacks live in `fs_attacks`; each proves its payload unconfined first.

use sandboxio::NetworkPolicy;

use crate::fs_attacks;
use crate::support;

#[test]
fn class_06__a_write_to_a_file_the_sandbox_user_cannot_write_is_refused() {
    fs_attacks::a_write_to_a_file_the_user_cannot_write_is_refused(
        "local_class_06__a_write_to_a_file_the_sandbox_user_cannot_write_is_refused",
        support::local(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_06__a_write_keeps_the_mode_of_an_existing_file() {
    fs_attacks::a_write_keeps_the_mode_of_an_existing_file(
        "local_class_06__a_write_keeps_the_mode_of_an_existing_file",
        support::local(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_06__a_write_through_a_link_follows_it_inside_the_sandbox() {
    fs_attacks::a_write_through_a_link_follows_it_inside_the_sandbox(
        "local_class_06__a_write_through_a_link_follows_it_inside_the_sandbox",
        support::local(NetworkPolicy::deny_all()),
    );
}
