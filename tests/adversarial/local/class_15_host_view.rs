//! Class 15: the inside sees as little of the host as the mechanism allows: no owner pid, no
//! host users, no host environment.

use sandboxio::{Command, NetworkPolicy};

use crate::support::{block_on, local};

#[test]
fn class_15__the_inside_sees_no_owner_pid_host_users_or_host_environment() {
    let host_passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let host_users: Vec<&str> = host_passwd
        .lines()
        .filter_map(|l| l.split(':').next())
        .filter(|u| !["root", "nobody"].contains(u))
        .collect();
    // Positive control: the host has users beyond root and nobody to leak.
    assert!(!host_users.is_empty(), "control: the host's /etc/passwd has only root and nobody");
    // SAFETY of the check: a variable only this process has.
    let sbx = local(NetworkPolicy::deny_all());
    let out = block_on(sbx.run(Command::shell("cat /etc/passwd /etc/group; env; cat /proc/self/mountinfo")))
        .unwrap();
    assert!(out.success());
    let inside = out.stdout_lossy().into_owned();
    for user in &host_users {
        assert!(
            !inside.lines().any(|l| l.starts_with(&format!("{user}:"))),
            "host user {user} is visible inside"
        );
    }
    let owner = std::process::id().to_string();
    assert!(!sbx.id().contains(&owner), "the sandbox id {} carries the owner's pid", sbx.id());
    let env_names: Vec<&str> = inside.lines().filter_map(|l| l.split_once('=').map(|(k, _)| k)).collect();
    for (name, _) in std::env::vars() {
        if !["PATH", "HOME", "PWD"].contains(&name.as_str()) {
            assert!(!env_names.contains(&name.as_str()), "the host's {name} is in the sandbox's environment");
        }
    }
    block_on(sbx.close()).unwrap();
}
