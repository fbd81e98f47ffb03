//! Class 5: nothing planted at a name the file API uses can block or divert it. (`local://`)
//! The attacks live in `fs_attacks`; each proves its payload unconfined first.

use sandboxio::NetworkPolicy;

use crate::fs_attacks;
use crate::support;

#[test]
fn class_05__a_fifo_planted_at_the_temp_name_never_blocks_a_write() {
    fs_attacks::a_fifo_planted_at_the_temp_name_never_blocks_a_write(
        "local_class_05__a_fifo_planted_at_the_temp_name_never_blocks_a_write",
        support::local(NetworkPolicy::deny_all()),
        3000,
    );
}

#[test]
fn class_05__a_link_planted_at_the_temp_name_never_diverts_a_write() {
    fs_attacks::a_link_planted_at_the_temp_name_never_diverts_a_write(
        "local_class_05__a_link_planted_at_the_temp_name_never_diverts_a_write",
        support::local(NetworkPolicy::deny_all()),
        3000,
    );
}

#[test]
fn class_05__a_file_operation_past_its_deadline_is_stopped_with_its_process() {
    fs_attacks::a_file_operation_past_its_deadline_is_stopped_with_its_process(
        "local_class_05__a_file_operation_past_its_deadline_is_stopped_with_its_process",
        support::local(NetworkPolicy::deny_all()),
        fs_attacks::fs_leftovers_inside,
    );
}

/// A link the code plants in the workspace to a host file outside the sandbox's view leads
/// nowhere for the file API, for a read or a write, as for the code itself: the operations
/// resolve paths inside the sandbox, never through the workspace's host directory.
#[test]
fn class_05__a_link_in_the_workspace_never_reaches_a_host_file() {
    let host = fs_attacks::host_dir("local_class_05__a_link_in_the_workspace_never_reaches_a_host_file");
    let secret = host.join("secret");
    std::fs::write(&secret, "host secret").unwrap();
    let sbx = support::local(NetworkPolicy::deny_all());
    let planted = fs_attacks::sh(&sbx, &format!("ln -s {} link && cat link", secret.display()));
    // The control: followed on the host, the planted link does reach the host file.
    let workspace_link = support::local_root().join(sbx.id()).join("workspace/link");
    let on_host = std::fs::read_to_string(&workspace_link).unwrap_or_default();
    let read = support::block_on(sbx.fs().read_text("link"));
    let wrote = support::block_on(sbx.fs().write("link", "overwritten"));
    let after = std::fs::read_to_string(&secret).unwrap_or_default();
    let _ = support::block_on(sbx.close());
    let _ = std::fs::remove_dir_all(&host);
    assert_eq!(on_host, "host secret", "control: the link does not reach the host file on the host");
    assert!(
        !planted.stdout_lossy().contains("host secret"),
        "the code itself read the host file: {planted:?}"
    );
    assert!(
        !read.as_ref().is_ok_and(|t| t.contains("host secret")),
        "read() followed the link on the host: {read:?}"
    );
    assert_eq!(after, "host secret", "write() through the link changed the host file ({wrote:?})");
}
