//! Class 7: a download never loosens host permissions or ownership. (`local://`)
//! The attacks live in `fs_attacks`; each proves its payload unconfined first.

use sandboxio::NetworkPolicy;

use crate::fs_attacks;
use crate::support;

#[test]
fn class_07__a_download_never_loosens_host_permissions() {
    fs_attacks::a_download_never_loosens_host_permissions(
        "local_class_07__a_download_never_loosens_host_permissions",
        support::local(NetworkPolicy::deny_all()),
    );
}
