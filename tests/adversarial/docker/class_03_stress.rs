//! Class 3 (docker side), the cancellation stress: timeouts from 0 ms, streams and futures
//! dropped after k polls, code cells dropped mid-run, `kill()`/`close()` while a command
//! starts, and owners `SIGKILLed` at random instants. After each point the command's
//! processes are counted from the engine's own process table (`docker top`, which sees
//! processes wherever they were re-parented), and owners' containers by label. CI runs a
//! bounded 100+ points; `scripts/stress-docker` runs 400+.

use std::time::{Duration, Instant};

use sandboxio::{Command, NetworkPolicy, Sandbox};

use super::{labelled, survivors};
use crate::support::{self, block_on, child_role, eventually, spawn_child};

const LABEL: &str = "sbx-adversarial-stress";

/// A command that leaves a `setsid` child and a double-forked grandchild, all named by
/// `tag` (sleep's argument) so that the host view can tell them from every other process.
fn escapes(tag: u64) -> String {
    format!("setsid sleep {tag}1 & (sleep {tag}2 &) ; sleep {tag}3")
}

fn container_exists(id: &str) -> bool {
    !super::docker_cli(&["ps", "-aq", "--no-trunc", "--filter", &format!("id={id}")]).trim().is_empty()
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one stress run, read top to bottom: set-up, the sampled points, the sweep"
)]
fn class_03__docker_cancellation_stress_leaves_no_survivor() {
    const TEST: &str = "class_03__docker_cancellation_stress_leaves_no_survivor";
    if child_role().is_some() || !support::docker_ready(TEST) {
        return;
    }
    let total = crate::support::stress_points();
    let mut rng = crate::support::StressRng::from_env(0xd0c4_u64);
    let started = Instant::now();
    let (mut counted, mut survivors_seen, mut control_seen) = (0usize, Vec::new(), false);
    let in_process = total * 3 / 4;
    let mut point = 0usize;
    // A tag per point: 9 digits, never a prefix of another point's.
    let tag = |point: usize| 700_000_000 + point as u64;
    while point < in_process {
        let sandbox = support::docker(NetworkPolicy::deny_all());
        let id = sandbox.id().to_owned();
        if !control_seen {
            // Positive control: the host view sees a command's escapees while it runs.
            let mut stream = sandbox.stream(Command::shell(escapes(tag(0)))).unwrap();
            control_seen = eventually(Duration::from_secs(10), || {
                survivors(&id, &format!("sleep {}", tag(0))).len() >= 3
            });
            let _ = support::poll_once(&mut stream);
            drop(stream);
            assert!(control_seen, "control: the host view never saw the command's three sleeps");
        }
        for _ in 0..10 {
            if point >= in_process {
                break;
            }
            point += 1;
            let command = Command::shell(escapes(tag(point)));
            match point % 4 {
                0 => {
                    let ms = rng.below(11);
                    let _ = block_on(sandbox.run(command.timeout(Duration::from_millis(ms))));
                }
                1 => {
                    let k = usize::try_from(rng.below(6)).unwrap();
                    if let Ok(mut stream) = sandbox.stream(command) {
                        for _ in 0..k {
                            let _ = support::poll_once(&mut stream);
                            std::thread::sleep(Duration::from_millis(rng.below(30)));
                        }
                    }
                }
                2 => {
                    let k = usize::try_from(rng.below(8)).unwrap();
                    support::shared::poll_k_times_with_pauses(
                        sandbox.run(command),
                        k,
                        Duration::from_millis(5),
                    );
                }
                _ => {
                    let ms = rng.below(200);
                    let cell =
                        format!("import os, time\nos.system('{} &')\ntime.sleep(1000)", escapes(tag(point)));
                    let code = sandbox.run_code(cell);
                    let _ = block_on(futures_lite::future::or(async { code.await.map(drop) }, async {
                        futures_timer::Delay::new(Duration::from_millis(ms)).await;
                        Ok(())
                    }));
                }
            }
            counted += 1;
            let marker = format!("sleep {}", tag(point));
            if !eventually(Duration::from_secs(10), || survivors(&id, &marker).is_empty()) {
                survivors_seen.push(format!("point {point}: {:?}", survivors(&id, &marker)));
            }
        }
        // kill() or close() while a command is starting.
        point += 1;
        let _stream = sandbox.stream(Command::shell(escapes(tag(point))));
        if rng.below(2) == 0 {
            let _ = block_on(sandbox.kill());
        } else {
            let _ = block_on(sandbox.close());
        }
        counted += 1;
        if !eventually(Duration::from_secs(10), || !container_exists(&id)) {
            survivors_seen.push(format!("container {id} after kill/close"));
        }
    }
    // Owners SIGKILLed at a random instant: during create, during a command's start, or while
    // it runs. Their containers carry a label naming the point.
    let owners = total.saturating_sub(counted);
    for n in 0..owners {
        let label = format!("{}-{n}", std::process::id());
        let mut child = spawn_child(
            "docker::class_03_stress::class_03__docker_owner_child",
            "docker-owner",
            &[("SBX_ADV_STRESS_LABEL", label.as_str())],
        );
        let delay = rng.below(1500);
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        counted += 1;
        let running = || labelled(LABEL, &label).into_iter().filter(|(_, state)| state != "created").count();
        if !eventually(Duration::from_secs(15), || running() == 0) {
            survivors_seen.push(format!("owner killed at {delay} ms: {} containers running", running()));
        }
        // Never-started containers are the sweep's (class 8); clean them here so the leak
        // check at the end of CI measures only what should not exist.
        for (id, _) in labelled(LABEL, &label) {
            let _ = super::docker_cli(&["rm", "-f", &id]);
        }
    }
    println!(
        "class_03 docker stress: {counted} cancellation points ({in_process} in process, {owners} owner SIGKILLs) in {:.1?}, {} with survivors",
        started.elapsed(),
        survivors_seen.len()
    );
    assert!(counted >= total, "only {counted} points ran");
    assert!(survivors_seen.is_empty(), "survivors: {survivors_seen:#?}");
}

/// The owner child of the stress: creates labelled sandboxes and starts commands until it
/// is killed.
#[test]
fn class_03__docker_owner_child() {
    if child_role().as_deref() != Some("docker-owner") {
        return;
    }
    let label = std::env::var("SBX_ADV_STRESS_LABEL").unwrap();
    loop {
        let sandbox: Sandbox = block_on(
            Sandbox::builder(&format!("docker://?image={}{}", support::DOCKER_IMAGE, support::exec_option()))
                .unwrap()
                .network(NetworkPolicy::deny_all())
                .metadata(LABEL, &label)
                .create(),
        )
        .unwrap();
        let _stream = sandbox.stream(Command::shell(escapes(800_000_000)));
        let _ = block_on(sandbox.run(Command::shell("echo hi")));
        std::mem::forget(sandbox);
    }
}
