//! Class 8 through `detach` and `connect` (the paths the first attack review did not reach):
//! sandboxed code cannot detach its own sandbox (PID 1's stdin, the owner link, is out of
//! its reach, root user included), `connect` attaches only to containers sandboxio made,
//! and a `connect`ed handle's kills end only its own commands, never the owner's.
//! These held on aed87c0 (main); they keep holding.

use std::time::Duration;

use sandboxio::{Command, ErrorCode, NetworkPolicy, Sandbox};

use super::{docker_cli, survivors};
use crate::support::{self, block_on, eventually};

/// As the sandbox's user (root here), writes `detach` into the stdin of every process it can
/// find, PID 1's supervisor shell (the owner link) included, through `/proc/<pid>/fd/0`
/// (the pattern `sandboxio-in[i]t` keeps the payload's own command line from matching).
/// The positive control: the same write reaches a reader of its own uid (`control-got-x`).
const DETACH_ATTACK: &str = r#"sleep 3 | { read -r l; echo "control-got-$l"; } &
sleep 0.3
for p in /proc/[0-9]*; do
  p=${p#/proc/}
  [ "$p" = "$$" ] && continue
  case "$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)" in
    *sandboxio-in[i]t*) printf 'detach\n' > /proc/$p/fd/0 2>/dev/null && echo "wrote-pid1-$p" ;;
    *) [ -p /proc/$p/fd/0 ] && printf 'x\n' > /proc/$p/fd/0 2>/dev/null ;;
  esac
done
wait"#;

#[test]
fn class_08__sandboxed_code_cannot_detach_its_own_sandbox() {
    const TEST: &str = "class_08__sandboxed_code_cannot_detach_its_own_sandbox";
    if !support::docker_ready(TEST) {
        return;
    }
    let sandbox = block_on(
        Sandbox::builder(&format!(
            "docker://?image={}&user=0{}",
            support::DOCKER_IMAGE,
            support::exec_option()
        ))
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .create(),
    )
    .unwrap();
    let id = sandbox.id().to_owned();
    let said = block_on(sandbox.run(Command::shell(DETACH_ATTACK).timeout(Duration::from_secs(20))))
        .unwrap()
        .stdout_lossy()
        .into_owned();
    if !said.contains("control-got-x") {
        support::skip(TEST, &format!("the payload cannot write a reader's stdin unconfined: {said:?}"));
        let _ = block_on(sandbox.kill());
        return;
    }
    println!("{TEST}: the payload said {said:?}");
    assert!(!said.contains("wrote-pid1"), "sandboxed code wrote into the owner link: {said:?}");
    // PID 1 answers a detach with `detached` on its output, which the engine logs.
    let logs = docker_cli(&["logs", &id]);
    assert!(!logs.contains("detached"), "PID 1 was detached from inside: {logs:?}");
    let _ = block_on(sandbox.close());
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
