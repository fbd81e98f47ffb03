//! Class 4 (file part): every byte the host reads from a sandbox through the file API is bounded. (`docker://`)
//! The attacks live in `fs_attacks`; each proves its payload unconfined first.

use sandboxio::NetworkPolicy;

use crate::fs_attacks;
use crate::support;

#[test]
fn class_04__a_read_of_a_huge_sparse_file_stops_at_the_read_limit() {
    if !support::docker_ready("class_04__a_read_of_a_huge_sparse_file_stops_at_the_read_limit") {
        return;
    }
    fs_attacks::read_of_a_huge_sparse_file_stops_at_the_read_limit("docker_class_04__a_read_of_a_huge_sparse_file_stops_at_the_read_limit", support::docker(NetworkPolicy::deny_all()));
}

#[test]
fn class_04__a_read_of_a_link_to_an_endless_proc_file_ends() {
    if !support::docker_ready("class_04__a_read_of_a_link_to_an_endless_proc_file_ends") {
        return;
    }
    fs_attacks::read_of_a_link_to_an_endless_proc_file_ends("docker_class_04__a_read_of_a_link_to_an_endless_proc_file_ends", support::docker(NetworkPolicy::deny_all()));
}

#[test]
fn class_04__a_download_of_a_sparse_file_never_fills_the_host_disk() {
    if !support::docker_ready("class_04__a_download_of_a_sparse_file_never_fills_the_host_disk") {
        return;
    }
    fs_attacks::download_of_a_sparse_file_never_fills_the_host_disk("docker_class_04__a_download_of_a_sparse_file_never_fills_the_host_disk", support::docker(NetworkPolicy::deny_all()));
}

#[test]
fn class_04__a_download_of_a_hard_link_bomb_never_fills_the_host_disk() {
    if !support::docker_ready("class_04__a_download_of_a_hard_link_bomb_never_fills_the_host_disk") {
        return;
    }
    fs_attacks::download_of_a_hard_link_bomb_never_fills_the_host_disk("docker_class_04__a_download_of_a_hard_link_bomb_never_fills_the_host_disk", support::docker(NetworkPolicy::deny_all()));
}
