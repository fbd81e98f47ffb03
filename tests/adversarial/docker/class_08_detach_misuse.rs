//! Class 8 through `detach` and `connect` (the paths the first attack review did not reach):
//! sandboxed code cannot detach its own sandbox (PID 1's stdin, the owner link, is out of
//! its reach, root user included), `connect` attaches only to containers sandboxio made,
//! and a `connect`ed handle's kills end only its own commands, never the owner's.
//! These held on aed87c0 (main); they keep holding. The detach attack was vacuous on the
//! sandboxd path until 2026-12 (it looked only for the exec-API path's `sandboxio-init`
//! shell and its engine log, which a sandboxd container has neither of): it now also
//! writes a well-formed `Detach` frame into sandboxd's stdin, and the proof is the owner's
//! death ending the container, on both paths.

use std::time::Duration;

use sandboxio::{Command, ErrorCode, NetworkPolicy, Sandbox};

use super::class_08_owner_death::{kill_owner, owner_child, owner_said, running, spawn_owner};
use super::{docker_cli, survivors};
use crate::support::{self, block_on, eventually};

/// As the sandbox's user, writes into the stdin of every process it can open, through
/// `/proc/<pid>/fd/0`: to PID 1 (the owner link) what would detach it on either path (a
/// `detach` line for the exec-API path's `sandboxio-init` shell, a `Detach` frame for
/// sandboxd), `x` to any other pipe reader. (The brackets in `sandboxio-in[i]t` and
/// `sandbox[d]` keep the payload's own command line, which its subshells share, from
/// matching.) Two positive controls
/// in the same run: the same write reaches a reader of the user's own (`control-got-x`),
/// and the frame bytes, fed to a sandboxd of the code's own after a `Hello`, make it answer
/// `Detached` (`control-frame-detaches`: a zero-length frame of kind `0x89`). The `Hello`
/// carries `$SANDBOXD_PROTOCOL` (below 8), which the caller sets.
pub(super) const DETACH_ATTACK: &str = r#"hello="\000\000\000\003\001\000\000\000\000\000\00${SANDBOXD_PROTOCOL}\000"
detach='\000\000\000\000\011\000\000\000\000'
{ printf "$hello$detach"; sleep 1; } | timeout 3 /.sandboxio/sandbox[d] 2>/dev/null | od -An -tx1 | tr -d ' \n' | grep -q 000000008900000000 && echo control-frame-detaches
sleep 3 | { read -r l; echo "control-got-$l"; } &
sleep 0.3
for p in /proc/[0-9]*; do
  p=${p#/proc/}
  [ "$p" = "$$" ] && continue
  ( : >> /proc/$p/fd/0 ) 2>/dev/null || continue
  case "$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)" in
    *sandboxio-in[i]t*) printf 'detach\n' >> /proc/$p/fd/0 && echo "wrote-owner-link-$p" ;;
    /.sandboxio/sandbox[d]*) printf "$detach" >> /proc/$p/fd/0 && echo "wrote-owner-link-$p" ;;
    *) [ -p /proc/$p/fd/0 ] && printf 'x\n' >> /proc/$p/fd/0 ;;
  esac
done
wait"#;

/// One owner child per sandbox user (the image's, then root) runs [`DETACH_ATTACK`] in its
/// sandbox and is then killed (`SIGKILL`): a sandbox the code had detached would run on to its TTL
/// (10 minutes); an attached one ends within the owner-death bound.
#[test]
fn class_08__sandboxed_code_cannot_detach_its_own_sandbox() {
    const TEST: &str = "class_08__sandboxed_code_cannot_detach_its_own_sandbox";
    if let Ok(label) = std::env::var("SBX_ADV_OWNER") {
        return owner_child(&label);
    }
    if !support::docker_ready(TEST) {
        return;
    }
    for user in ["", "0"] {
        let label = format!("{}-detach-{user}", std::process::id());
        let mut child = spawn_owner(module_path!(), TEST, &label, user, "detach");
        let (_, said) = owner_said(&mut child);
        let said = said.expect("the owner ran the attack");
        if !said.contains("control-got-x") || !said.contains("control-frame-detaches") {
            let _ = child.kill();
            let _ = child.wait();
            for (id, _) in running(&label) {
                docker_cli(&["rm", "-f", &id]);
            }
            support::skip(TEST, &format!("a positive control failed (user {user:?}): {said}"));
            return;
        }
        assert!(
            !said.contains("wrote-owner-link"),
            "user {user:?}: the code wrote into the owner link: {said}"
        );
        assert!(!running(&label).is_empty(), "user {user:?}: the sandbox died of the attack itself: {said}");
        let (gone, after, left) = kill_owner(child, &label);
        println!(
            "{TEST}: user {user:?}: the payload said {said}; container gone {after:?} after the owner's SIGKILL: {gone}"
        );
        assert!(gone, "user {user:?}: the sandbox outlived its owner (detached from inside?): {left:?}");
    }
}

#[test]
fn class_08__connect_refuses_containers_sandboxio_did_not_make() {
    const TEST: &str = "class_08__connect_refuses_containers_sandboxio_did_not_make";
    if !support::docker_ready(TEST) {
        return;
    }
    // Control: the same call attaches to a sandbox sandboxio made.
    let ours = support::docker(NetworkPolicy::deny_all());
    let dsn = format!("docker://?image={}{}", support::DOCKER_IMAGE, support::exec_option());
    let connected = block_on(Sandbox::connect(&dsn, ours.id()));
    assert!(connected.is_ok(), "the control: connect to a sandbox of ours failed: {connected:?}");
    drop(connected);
    let name = format!("sbx-adv-foreign-{}", std::process::id());
    let made = docker_cli(&["run", "-d", "--rm", "--name", &name, support::DOCKER_IMAGE, "sleep", "120"]);
    let foreign = made.trim().to_owned();
    assert!(!foreign.is_empty(), "could not start a foreign container");
    for target in [foreign.as_str(), &foreign[..12], name.as_str()] {
        let err = block_on(Sandbox::connect(&dsn, target)).map(|s| s.id().to_owned()).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Connect, "connect({target}) to a foreign container: {err}");
    }
    let still = docker_cli(&["top", &foreign, "-eo", "pid,args"]);
    docker_cli(&["rm", "-f", &foreign]);
    assert!(still.contains("sleep 120"), "connect touched the foreign container: {still:?}");
    let _ = block_on(ours.close());
}

#[test]
fn class_08__a_connected_handle_kills_only_its_own_commands() {
    const TEST: &str = "class_08__a_connected_handle_kills_only_its_own_commands";
    if !support::docker_ready(TEST) {
        return;
    }
    let owner = support::docker(NetworkPolicy::deny_all());
    let id = owner.id().to_owned();
    let dsn = format!("docker://?image={}{}", support::DOCKER_IMAGE, support::exec_option());
    let other = block_on(Sandbox::connect(&dsn, &id)).unwrap();
    block_on(async {
        let mut owners = owner.stream(Command::shell("echo up; exec sleep 7501")).unwrap();
        assert_eq!(owners.next_chunk().await.unwrap().unwrap().data, b"up\n");
        // The connected handle's command times out: its killer runs.
        let timed = other.run(Command::shell("sleep 7502").timeout(Duration::from_secs(1))).await;
        assert_eq!(timed.unwrap_err().code(), ErrorCode::ExecutionTimeout);
        // Control: the killer ended the connected handle's command.
        assert!(
            eventually(Duration::from_secs(5), || survivors(&id, "sleep 7502").is_empty()),
            "the control: the connected handle's command outlived its timeout"
        );
        assert!(
            !survivors(&id, "sleep 7501").is_empty(),
            "the connected handle's kill ended the owner's command"
        );
        // And the other way round: the owner's stream, closed, ends only its own command.
        let mut others = other.stream(Command::shell("echo up; exec sleep 7503")).unwrap();
        assert_eq!(others.next_chunk().await.unwrap().unwrap().data, b"up\n");
        owners.close().await.unwrap();
        assert!(eventually(Duration::from_secs(5), || survivors(&id, "sleep 7501").is_empty()));
        assert!(
            !survivors(&id, "sleep 7503").is_empty(),
            "the owner's kill ended the connected handle's command"
        );
        others.close().await.unwrap();
        // A connected handle owns nothing: closing it leaves the sandbox running.
        other.close().await.unwrap();
        assert_eq!(owner.run(Command::shell("echo alive")).await.unwrap().stdout_lossy(), "alive\n");
    });
    println!("{TEST}: each handle's kill ended its own command only");
    let _ = block_on(owner.close());
}
