//! Class 4 (file part): every byte the host reads from a sandbox through the file API is bounded. (`local://`)
//! The attacks live in `fs_attacks`; each proves its payload unconfined first.

use sandboxio::NetworkPolicy;

use crate::fs_attacks;
use crate::support;

#[test]
fn class_04__a_read_of_a_huge_sparse_file_stops_at_the_read_limit() {
    fs_attacks::read_of_a_huge_sparse_file_stops_at_the_read_limit(
        "local_class_04__a_read_of_a_huge_sparse_file_stops_at_the_read_limit",
        support::local(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_04__a_read_of_a_link_to_an_endless_proc_file_ends() {
    fs_attacks::read_of_a_link_to_an_endless_proc_file_ends(
        "local_class_04__a_read_of_a_link_to_an_endless_proc_file_ends",
        support::local(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_04__a_read_of_a_link_to_another_processs_pagemap_stops_at_the_read_limit() {
    fs_attacks::read_of_a_link_to_another_processs_pagemap_stops_at_the_read_limit(
        "local_class_04__a_read_of_a_link_to_another_processs_pagemap_stops_at_the_read_limit",
        support::local(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_04__a_download_of_a_sparse_file_never_fills_the_host_disk() {
    fs_attacks::download_of_a_sparse_file_never_fills_the_host_disk(
        "local_class_04__a_download_of_a_sparse_file_never_fills_the_host_disk",
        support::local(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_04__a_download_of_a_hard_link_bomb_never_fills_the_host_disk() {
    fs_attacks::download_of_a_hard_link_bomb_never_fills_the_host_disk(
        "local_class_04__a_download_of_a_hard_link_bomb_never_fills_the_host_disk",
        support::local(NetworkPolicy::deny_all()),
    );
}

/// Not an attack: the child process of the memory test below (does nothing unless
/// `fs_attacks::CHILD` is set).
#[test]
fn child_process__fs_rss() {
    fs_attacks::rss_child(|| support::local(NetworkPolicy::deny_all()));
}

#[test]
fn class_04__client_memory_stays_flat_through_a_huge_read_and_a_large_upload_and_download() {
    fs_attacks::client_memory_stays_flat(
        "local_class_04__client_memory_stays_flat",
        "local::class_04_unbounded_host_memory_and_disk::child_process__fs_rss",
    );
}
