//! Class 18 on `local://`: code in a sandbox under an allowlist tries every way past the
//! egress gate it can name (`egress_attacks.rs`), as the caller's uid (CI runs this binary
//! as root, whose sandboxes run as an unprivileged uid, and as an unprivileged user).

use sandboxio::{AuditConfig, NetworkPolicy, Sandbox};

use crate::egress_attacks::{Target, attack_the_allowlist};
use crate::support::{block_on, is_root};

#[test]
fn class_18__nothing_but_the_listed_destinations_is_reached_from_a_local_sandbox() {
    let create = |policy: NetworkPolicy, audit: AuditConfig| {
        block_on(Sandbox::builder("local://").unwrap().network(policy).audit(audit).create()).unwrap()
    };
    let who = if is_root() { "local:// (root caller)" } else { "local:// (unprivileged caller)" };
    attack_the_allowlist(&Target {
        create: &create,
        python: "/usr/bin/python3",
        gate: "/run/sandboxio/egress.sock",
        who,
    });
}
