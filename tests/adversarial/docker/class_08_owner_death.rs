//! Class 8: owner death at any instant, during `create` included, leaves nothing running,
//! whatever the sandbox user. First seen failing on d269073 (main): owners `SIGKILLed` 0 to
//! 700 ms into `create` left containers running until their TTL, and a root sandbox user
//! killed the dead-man exec so that its container outlived its owner.
//!
//! Each owner is this test binary re-run in a child mode (`SBX_ADV_OWNER=<label>`), creating
//! one sandbox labelled `sbx-adv-owner=<label>`; the parent SIGKILLs it and counts, from the
//! engine, the containers carrying that label.

use std::io::{BufRead as _, BufReader};
use std::process::{Command as OsCommand, Stdio};
use std::time::{Duration, Instant};

use sandboxio::{Command, NetworkPolicy};

use super::labelled;
use crate::support::{self, eventually};

const LABEL: &str = "sbx-adv-owner";
/// How long a dead owner's sandbox may keep running: the bound the docs state.
const BOUND: Duration = Duration::from_secs(10);

/// Stops (SIGSTOP) every process it may signal but itself and its ancestors: a stopped
/// dead-man never reacts to its owner's death. The positive control: a root process of its
/// own (`sleep 7801`) really is stopped by it.
const ROOT_ATTACK: &str = r#"sleep 7801 & victim=$!
keep=" $$ "; p=$$
while [ "$p" -gt 1 ] 2>/dev/null; do p=$(cut -d' ' -f4 /proc/$p/stat); keep="$keep$p "; done
for p in /proc/[0-9]*; do
  p=${p#/proc/}
  case $keep in *" $p "*) continue ;; esac
  kill -STOP "$p" 2>/dev/null
done
sleep 0.2
[ "$(cut -d' ' -f3 /proc/$victim/stat)" = T ] && echo control-root-stop-works
kill -KILL $victim
exit 0"#;

/// The child mode: create one sandbox labelled `label`, say so, maybe attack, then wait to
/// be killed.
pub(super) fn owner_child(label: &str) {
    let user = std::env::var("SBX_ADV_OWNER_USER").unwrap_or_default();
    let dsn = if user.is_empty() {
        format!("docker://?image={}{}", support::DOCKER_IMAGE, support::exec_option())
    } else {
        format!("docker://?image={}&user={user}{}", support::DOCKER_IMAGE, support::exec_option())
    };
    let attack = std::env::var("SBX_ADV_OWNER_ATTACK").unwrap_or_default();
    let mut limits = sandboxio::ResourceLimits::new();
    if attack == "bomb" {
        limits = limits.pids(super::class_03_pid_exhaustion::PIDS);
    }
    let sandbox = sandboxio::sync::Sandbox::builder(&dsn)
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .metadata(LABEL, label)
        .limits(limits)
        .ttl(Duration::from_mins(10))
        .create()
        .unwrap();
    println!("CREATED {}", sandbox.id());
    let payload = match attack.as_str() {
        "1" => Some(ROOT_ATTACK),
        "detach" => Some(super::class_08_detach_misuse::DETACH_ATTACK),
        _ => None,
    };
    if let Some(payload) = payload {
        let attack = Command::shell(payload).env("SANDBOXD_PROTOCOL", crate::support::sandboxd_protocol());
        let ran = sandbox.run(attack.timeout(Duration::from_secs(20)));
        let said = ran.map(|o| o.stdout_lossy().into_owned());
        println!("ATTACKED {said:?}");
    }
    // Fills the pids limit and keeps it full; the stream stays open until the owner dies.
    let _bomb = (attack == "bomb").then(|| {
        let stream = sandbox.stream(Command::shell(super::class_03_pid_exhaustion::bomb(7408))).unwrap();
        println!("ATTACKED \"bomb\"");
        stream
    });
    std::thread::sleep(Duration::from_mins(10));
}

/// Runs `test` of `module` (its `module_path!()`) as an owner child, which creates one sandbox
/// labelled `label` as `user` and runs `attack` in it.
pub(super) fn spawn_owner(
    module: &str,
    test: &str,
    label: &str,
    user: &str,
    attack: &str,
) -> std::process::Child {
    // libtest's `--exact` wants the path inside the crate: `docker::class_08_…::<test>`.
    let path = format!("{}::{test}", module.split_once("::").map_or("", |(_, rest)| rest));
    OsCommand::new(std::env::current_exe().unwrap())
        .args([path.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env("SBX_ADV_OWNER", label)
        .env("SBX_ADV_OWNER_USER", user)
        .env("SBX_ADV_OWNER_ATTACK", attack)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// What an owner child said, up to its attack: its sandbox's id (`CREATED <id>`) and what
/// the attack reported (`ATTACKED <what>`). libtest's own `test … ... ` may precede a line.
pub(super) fn owner_said(child: &mut std::process::Child) -> (Option<String>, Option<String>) {
    let (mut id, mut attacked) = (None, None);
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some((_, rest)) = line.split_once("CREATED ") {
            id = Some(rest.to_owned());
        }
        if let Some((_, rest)) = line.split_once("ATTACKED ") {
            attacked = Some(rest.to_owned());
            break;
        }
    }
    (id, attacked)
}

/// SIGKILLs an owner child and waits (up to [`BOUND`]) for its sandbox to go: whether it
/// went, how long it took, and what was left (removed here, so nothing leaks into other
/// tests).
pub(super) fn kill_owner(
    mut child: std::process::Child,
    label: &str,
) -> (bool, Duration, Vec<(String, String)>) {
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    let gone = eventually(BOUND, || labelled(LABEL, label).is_empty());
    let after = killed.elapsed();
    let left = labelled(LABEL, label);
    for (id, _) in &left {
        super::docker_cli(&["rm", "-f", id]);
    }
    (gone, after, left)
}

pub(super) fn running(label: &str) -> Vec<(String, String)> {
    labelled(LABEL, label).into_iter().filter(|(_, state)| state != "created").collect()
}

#[test]
fn class_08__owner_death_during_create_leaves_nothing_running() {
    const TEST: &str = "class_08__owner_death_during_create_leaves_nothing_running";
    if let Ok(label) = std::env::var("SBX_ADV_OWNER") {
        return owner_child(&label);
    }
    if !support::docker_ready(TEST) {
        return;
    }
    let run = format!("{}-{}", std::process::id(), Instant::now().elapsed().as_nanos());
    let started = Instant::now();
    let mut seen_mid_create = 0;
    let mut labels = Vec::new();
    // 15 delays over 0..700 ms, alternating the image's user and a root sandbox user, each
    // nudged by a few ms so that runs do not always hit the same instants.
    for i in 0..15u64 {
        let delay = Duration::from_millis(i * 50 + (u64::from(std::process::id()) + i * 7) % 13);
        let user = if i % 2 == 0 { "" } else { "0" };
        let label = format!("{run}-{i}");
        let mut child = spawn_owner(module_path!(), TEST, &label, user, "0");
        std::thread::sleep(delay);
        child.kill().unwrap();
        child.wait().unwrap();
        // Control: the kill landed while a container of this owner existed (during create),
        // which is when a leak can happen at all.
        if !labelled(LABEL, &label).is_empty() {
            seen_mid_create += 1;
        }
        labels.push(label);
    }
    if seen_mid_create == 0 {
        support::skip(TEST, "no kill landed while a container existed: the attack never reached create");
        return;
    }
    let all_gone = eventually(BOUND, || labels.iter().all(|l| running(l).is_empty()));
    let left: Vec<_> = labels.iter().flat_map(|l| labelled(LABEL, l)).collect();
    println!(
        "{TEST}: 15 owners killed 0-700 ms into create ({seen_mid_create} with a container at the kill), {:?} in all; left after {BOUND:?}: {left:?}",
        started.elapsed()
    );
    assert!(all_gone, "containers still running {BOUND:?} after their owner died: {left:?}");
    // A container whose start never reached the engine holds no process; the next create
    // (the first of a backend value) removes those of dead owners.
    let unstarted = left.len();
    let sandbox = support::docker(NetworkPolicy::deny_all());
    let swept = eventually(BOUND, || labels.iter().all(|l| labelled(LABEL, l).is_empty()));
    let _ = support::block_on(sandbox.close());
    let left: Vec<_> = labels.iter().flat_map(|l| labelled(LABEL, l)).collect();
    println!("{TEST}: {unstarted} never-started containers swept by the next create: {swept}");
    assert!(swept, "never-started containers left after the next create: {left:?}");
}

#[test]
fn class_08__a_root_sandbox_user_cannot_outlive_its_owner() {
    const TEST: &str = "class_08__a_root_sandbox_user_cannot_outlive_its_owner";
    if let Ok(label) = std::env::var("SBX_ADV_OWNER") {
        return owner_child(&label);
    }
    if !support::docker_ready(TEST) {
        return;
    }
    let label = format!("{}-root", std::process::id());
    let mut child = spawn_owner(module_path!(), TEST, &label, "0", "1");
    let (_, attacked) = owner_said(&mut child);
    let attacked = attacked.expect("the owner ran the attack");
    if !attacked.contains("control-root-stop-works") {
        let _ = child.kill();
        let _ = child.wait();
        support::skip(TEST, &format!("the root payload cannot stop a root process unconfined: {attacked}"));
        return;
    }
    assert!(!running(&label).is_empty(), "the sandbox died of the attack itself: nothing to prove");
    let (gone, after, left) = kill_owner(child, &label);
    println!("{TEST}: attack said {attacked}; container gone {after:?} after the owner's SIGKILL: {gone}");
    assert!(gone, "a root sandbox user kept its container {BOUND:?} past its owner's death: {left:?}");
}

#[test]
fn class_08__owner_death_ends_a_sandbox_at_its_pids_limit() {
    const TEST: &str = "class_08__owner_death_ends_a_sandbox_at_its_pids_limit";
    if let Ok(label) = std::env::var("SBX_ADV_OWNER") {
        return owner_child(&label);
    }
    if !support::docker_ready(TEST) {
        return;
    }
    let label = format!("{}-bomb", std::process::id());
    let mut child = spawn_owner(module_path!(), TEST, &label, "", "bomb");
    let (id, _) = owner_said(&mut child);
    let id = id.expect("the owner created its sandbox");
    // Control: the payload holds the pids limit (no new process can start).
    if !super::class_03_pid_exhaustion::exhausted(&id, 7408) {
        let _ = child.kill();
        let _ = child.wait();
        super::docker_cli(&["rm", "-f", &id]);
        support::skip(TEST, "the payload did not exhaust the pids limit: nothing to prove");
        return;
    }
    let (gone, after, left) = kill_owner(child, &label);
    println!("{TEST}: pids exhausted; container gone {after:?} after the owner's SIGKILL: {gone}");
    assert!(gone, "a sandbox at its pids limit outlived its owner by {BOUND:?}: {left:?}");
}
