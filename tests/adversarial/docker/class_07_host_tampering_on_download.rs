//! Class 7: a download never loosens host permissions or ownership. (`docker://`)
//! The attacks live in `fs_attacks`; each proves its payload unconfined first.

use sandboxio::NetworkPolicy;

use crate::fs_attacks;
use crate::support;

#[test]
fn class_07__a_download_never_loosens_host_permissions() {
    if !support::docker_ready("class_07__a_download_never_loosens_host_permissions") {
        return;
    }
    fs_attacks::a_download_never_loosens_host_permissions(
        "docker_class_07__a_download_never_loosens_host_permissions",
        support::docker(NetworkPolicy::deny_all()),
    );
}

#[test]
fn class_07__a_hostile_tar_cannot_write_outside_the_target() {
    let test = "docker_class_07__a_hostile_tar_cannot_write_outside_the_target";
    if !support::docker_ready(test) || !super::class_04_unbounded_host_memory_and_disk::root_image_ready(test)
    {
        return;
    }
    let sbx = support::block_on(
        sandboxio::Sandbox::builder(&format!(
            "docker://?image={}{}",
            super::class_04_unbounded_host_memory_and_disk::ROOT_IMAGE,
            support::exec_option()
        ))
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .create(),
    )
    .unwrap();
    fs_attacks::a_hostile_tar_cannot_write_outside_the_target(test, sbx);
}
