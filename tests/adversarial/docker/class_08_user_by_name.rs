//! Class 8 (root users): a sandbox user given by name (`root`) must not be looked up again
//! in the container's `/etc/passwd` at every exec, or a root user could map its name to the
//! supervisor's uid and then stop PID 1, keeping the container alive past its owner and its
//! TTL. Execs run as the numbers resolved at create. (On the sandboxd path PID 1 is root and
//! the namespace's init: the kernel drops every signal a command sends it.)

use sandboxio::{Command, NetworkPolicy};

use crate::support::{self, block_on};

#[test]
fn class_08__a_root_user_named_by_name_cannot_become_the_supervisor() {
    const TEST: &str = "class_08__a_root_user_named_by_name_cannot_become_the_supervisor";
    if !support::docker_ready(TEST) {
        return;
    }
    let sandbox = block_on(
        sandboxio::Sandbox::builder(&format!(
            "docker://?image={}&user=root{}",
            support::DOCKER_IMAGE,
            support::exec_option()
        ))
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .create(),
    )
    .unwrap();
    block_on(async {
        let remap = sandbox
            .run(Command::shell(
                "sed -i 's/^root:x:0:0:/root:x:2147480001:0:/' /etc/passwd && grep '^root:' /etc/passwd",
            ))
            .await
            .unwrap();
        // Positive control: the name now means the supervisor's uid to anything that looks it
        // up (`id -u root` reads the same file an exec by name would).
        let looked_up = sandbox.run(Command::shell("id -u root")).await.unwrap();
        if looked_up.stdout_lossy().trim() != "2147480001" {
            support::skip(TEST, &format!("the remap did not take: {remap:?} {looked_up:?}"));
            return;
        }
        let me = sandbox.run(Command::shell("id -u")).await.unwrap();
        assert_eq!(me.stdout_lossy().trim(), "0", "a later command ran as the remapped uid: {me:?}");
        // Judged by PID 1's state, not by `kill`'s status: on the sandboxd path PID 1 is the
        // namespace's init, and the kernel drops the signal after `kill` succeeds.
        let stop = sandbox
            .run(Command::shell("kill -STOP 1; sleep 0.2; grep '^State:' /proc/1/status"))
            .await
            .unwrap();
        assert!(stop.stdout_lossy().contains("State:"), "PID 1's state cannot be read: {stop:?}");
        assert!(!stop.stdout_lossy().contains("stopped"), "a command stopped PID 1: {stop:?}");
        let after = sandbox.run(Command::new("true")).await.unwrap();
        assert!(after.success(), "the sandbox stopped answering after the attempt: {after:?}");
    });
    let _ = block_on(sandbox.kill());
}
