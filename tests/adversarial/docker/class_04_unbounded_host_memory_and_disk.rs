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
    fs_attacks::read_of_a_huge_sparse_file_stops_at_the_read_limit(
        "docker_class_04__a_read_of_a_huge_sparse_file_stops_at_the_read_limit",
        support::docker(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_04__a_read_of_a_link_to_an_endless_proc_file_ends() {
    if !support::docker_ready("class_04__a_read_of_a_link_to_an_endless_proc_file_ends") {
        return;
    }
    fs_attacks::read_of_a_link_to_an_endless_proc_file_ends(
        "docker_class_04__a_read_of_a_link_to_an_endless_proc_file_ends",
        support::docker(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_04__a_download_of_a_sparse_file_never_fills_the_host_disk() {
    if !support::docker_ready("class_04__a_download_of_a_sparse_file_never_fills_the_host_disk") {
        return;
    }
    fs_attacks::download_of_a_sparse_file_never_fills_the_host_disk(
        "docker_class_04__a_download_of_a_sparse_file_never_fills_the_host_disk",
        support::docker(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_04__a_download_of_a_hard_link_bomb_never_fills_the_host_disk() {
    if !support::docker_ready("class_04__a_download_of_a_hard_link_bomb_never_fills_the_host_disk") {
        return;
    }
    fs_attacks::download_of_a_hard_link_bomb_never_fills_the_host_disk(
        "docker_class_04__a_download_of_a_hard_link_bomb_never_fills_the_host_disk",
        support::docker(NetworkPolicy::deny_all()),
    );
}

/// Not an attack: the child process of the memory test below (does nothing unless
/// `fs_attacks::CHILD` is set).
#[test]
fn child_process__fs_rss() {
    fs_attacks::rss_child(|| support::docker(NetworkPolicy::deny_all()));
}

#[test]
fn class_04__client_memory_stays_flat_through_a_huge_read_and_a_large_upload_and_download() {
    if !support::docker_ready("class_04__client_memory_stays_flat") {
        return;
    }
    fs_attacks::client_memory_stays_flat(
        "docker_class_04__client_memory_stays_flat",
        "docker::class_04_unbounded_host_memory_and_disk::child_process__fs_rss",
    );
}

/// The python image (GNU `tar`, `dash`: a `tar` found on `PATH`, unlike busybox's
/// applets) with root as its user, built here from it (no registry).
pub(super) const ROOT_IMAGE: &str = "sandboxio-test/python-root:2";

pub(super) fn root_image_ready(test: &str) -> bool {
    let have = |tag: &str| {
        std::process::Command::new("docker")
            .args(["image", "inspect", "-f", "{{.Id}}", tag])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have(ROOT_IMAGE) && have(support::DOCKER_IMAGE) {
        use std::io::Write as _;
        let mut build = std::process::Command::new("docker")
            .args(["build", "-q", "-t", ROOT_IMAGE, "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        build
            .stdin
            .take()
            .unwrap()
            .write_all(format!("FROM {}\nUSER root\n", support::DOCKER_IMAGE).as_bytes())
            .unwrap();
        let _ = build.wait();
    }
    let ok = have(ROOT_IMAGE);
    if !ok {
        support::skip(test, &format!("cannot build {ROOT_IMAGE} from {}", support::DOCKER_IMAGE));
    }
    ok
}

#[test]
fn class_04__a_hostile_tar_cannot_make_the_host_read_a_huge_header() {
    let test = "docker_class_04__a_hostile_tar_cannot_make_the_host_read_a_huge_header";
    if !support::docker_ready(test) || !root_image_ready(test) {
        return;
    }
    let sbx = support::block_on(
        sandboxio::Sandbox::builder(&format!("docker://?image={ROOT_IMAGE}{}", support::exec_option()))
            .unwrap()
            .network(NetworkPolicy::deny_all())
            .create(),
    )
    .unwrap();
    fs_attacks::a_hostile_tar_cannot_make_the_host_read_a_huge_header(test, sbx);
}

#[test]
fn class_04__a_download_of_many_tiny_entries_stays_bounded() {
    let test = "docker_class_04__a_download_of_many_tiny_entries_stays_bounded";
    if !support::docker_ready(test) {
        return;
    }
    fs_attacks::a_download_of_many_tiny_entries_stays_bounded(
        test,
        support::docker(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_04__a_download_of_a_growing_file_stays_within_its_budget() {
    let test = "docker_class_04__a_download_of_a_growing_file_stays_within_its_budget";
    if !support::docker_ready(test) {
        return;
    }
    fs_attacks::a_download_of_a_growing_file_stays_within_its_budget(
        test,
        support::docker(NetworkPolicy::deny_all()),
    );
}
