//! Class 18 on `docker://` (its sandboxd path: the container has no network, the gate's
//! socket is bind-mounted read-only): code in a sandbox under an allowlist tries every way
//! past the egress gate it can name (`egress_attacks.rs`), as the image's user and as root.

use sandboxio::{NetworkPolicy, Sandbox, audit::AuditConfig};

use crate::egress_attacks::{Target, attack_the_allowlist};
use crate::support::{DOCKER_IMAGE, block_on, docker_ready};

fn attack(user: Option<&str>, who: &str) {
    if !crate::support::exec_option().is_empty() {
        // The exec-API path refuses an allowlist at `create()` (tests/docker/egress.rs); the
        // sandboxd path was attacked in the run without the option.
        println!("[class 18] {who}: not on the exec path {}", crate::support::exec_option());
        return;
    }
    let dsn = match user {
        Some(user) => format!("docker://?image={DOCKER_IMAGE}&user={user}"),
        None => format!("docker://?image={DOCKER_IMAGE}"),
    };
    let create = |policy: NetworkPolicy, audit: AuditConfig| {
        block_on(Sandbox::builder(&dsn).unwrap().network(policy).audit(audit).create()).unwrap()
    };
    attack_the_allowlist(&Target {
        create: &create,
        python: "python3",
        gate: "/run/sandboxio-egress/egress.sock",
        who,
    });
}

#[test]
fn class_18__nothing_but_the_listed_destinations_is_reached_from_a_container_as_its_image_user() {
    if docker_ready(
        "class_18__nothing_but_the_listed_destinations_is_reached_from_a_container_as_its_image_user",
    ) {
        attack(None, "docker:// (image user)");
    }
}

#[test]
fn class_18__nothing_but_the_listed_destinations_is_reached_from_a_container_as_root() {
    if docker_ready("class_18__nothing_but_the_listed_destinations_is_reached_from_a_container_as_root") {
        attack(Some("root"), "docker:// (root)");
    }
}
