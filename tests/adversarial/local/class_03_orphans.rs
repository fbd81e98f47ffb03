//! Class 3: what a command's end, timeout, kill or dropped stream ends is everything that
//! command started (including `setsid` and double forks), and nothing outlives `close()`,
//! `kill()` or the owner's death, at whatever instant they come. Processes are counted by
//! an independent scan of `/proc` that finds them wherever they were re-parented.

use std::io::BufRead as _;
use std::time::{Duration, Instant};

use sandboxio::{Command, ErrorCode, NetworkPolicy, Sandbox};

use crate::support::{block_on, child_role, eventually, local, processes_mentioning, spawn_child};

/// A command that leaves a `setsid` child and a double-forked grandchild behind.
const ESCAPES: &str = "setsid sleep 1000 & (sleep 1000 &) ; sh -c 'sleep 1000 &' ; echo started";

/// The processes of `sbx`'s commands: every process that mentions its directory, but for
/// the sandbox's own `bwrap` and its init, sandboxd (they live as long as the sandbox; the
/// stress checks that they end with it).
fn sandbox_processes(sbx: &Sandbox) -> Vec<(u32, String)> {
    let mut found = processes_mentioning(&format!("/{}/", sbx.id()));
    found.retain(|(_, comm)| comm != "bwrap" && comm != "sandboxd");
    found
}

#[test]
fn class_03__setsid_and_double_forks_end_with_their_command() {
    let sbx = local(NetworkPolicy::deny_all());
    // Positive control: while the command lives, the scan sees its escaped children.
    let mut stream = sbx.stream(Command::shell(format!("{ESCAPES}; read x"))).unwrap();
    let first = block_on(futures_lite::StreamExt::next(&mut stream)).unwrap().unwrap();
    assert_eq!(first.data, b"started\n");
    let mut sleeping = 0;
    assert!(
        eventually(Duration::from_secs(5), || {
            sleeping = sandbox_processes(&sbx).iter().filter(|(_, c)| c == "sleep").count();
            sleeping >= 3
        }),
        "control: the scan saw {sleeping} of the 3 escaped sleeps"
    );
    drop(stream);
    assert!(
        eventually(Duration::from_secs(5), || sandbox_processes(&sbx).is_empty()),
        "a dropped stream left {:?}",
        sandbox_processes(&sbx)
    );

    // A command's normal end.
    let out = block_on(sbx.run(Command::shell(ESCAPES))).unwrap();
    assert_eq!(out.stdout, b"started\n");
    assert!(
        eventually(Duration::from_secs(5), || sandbox_processes(&sbx).is_empty()),
        "a finished command left {:?}",
        sandbox_processes(&sbx)
    );

    // A timeout: reported only once everything is dead.
    let err = block_on(
        sbx.run(Command::shell(format!("{ESCAPES}; sleep 1000")).timeout(Duration::from_millis(300))),
    )
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::ExecutionTimeout);
    assert_eq!(sandbox_processes(&sbx), Vec::new(), "processes outlived the timeout that killed them");
    block_on(sbx.close()).unwrap();
}

#[test]
fn class_03__cancellation_stress_leaves_no_survivor() {
    if child_role().is_some() {
        return;
    }
    let total = crate::support::stress_points();
    let mut rng = crate::support::StressRng::from_env(0x5eed_u64);
    let started = Instant::now();
    let mut counted = 0;
    let mut survivors = Vec::new();
    // In-process points: timeouts from 0 ms, streams dropped after k polls, kill and close
    // while commands start. Each checks the sandbox's processes right after the cancel,
    // while the sandbox is still alive, and again after it is gone.
    let in_process = total * 3 / 4;
    let mut point = 0;
    while point < in_process {
        let sbx = local(NetworkPolicy::deny_all());
        let id = sbx.id().to_owned();
        for _ in 0..10 {
            if point >= in_process {
                break;
            }
            match point % 4 {
                0 => {
                    let ms = rng.below(11);
                    let _ = block_on(sbx.run(
                        Command::shell(format!("{ESCAPES}; sleep 1000")).timeout(Duration::from_millis(ms)),
                    ));
                }
                1 => {
                    let k = usize::try_from(rng.below(6)).unwrap();
                    if let Ok(mut stream) = sbx.stream(Command::shell(format!("{ESCAPES}; sleep 1000"))) {
                        for _ in 0..k {
                            let _ = crate::support::poll_once(&mut stream);
                            std::thread::sleep(Duration::from_millis(rng.below(4)));
                        }
                        drop(stream);
                    }
                }
                2 => {
                    let k = usize::try_from(rng.below(8)).unwrap();
                    let run = sbx.run(Command::shell(format!("{ESCAPES}; sleep 1000")));
                    crate::support::shared::poll_k_times_with_pauses(run, k, Duration::from_millis(1));
                }
                _ => {
                    let code = sbx.run_code("import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(1000)\ntime.sleep(1000)");
                    let ms = rng.below(30);
                    let _ = block_on(futures_lite::future::or(async { code.await.map(drop) }, async {
                        futures_timer::Delay::new(Duration::from_millis(ms)).await;
                        Ok(())
                    }));
                }
            }
            counted += 1;
            point += 1;
            if !eventually(Duration::from_secs(3), || {
                processes_mentioning(&format!("/{id}/")).iter().all(|(_, c)| c != "sleep" && c != "python3")
            }) {
                survivors.push(format!("point {point}: {:?}", processes_mentioning(&format!("/{id}/"))));
            }
        }
        // close() or kill() while a command is starting.
        // (Errors are not the point here: what runs afterwards is.)
        let _stream = sbx.stream(Command::shell(format!("{ESCAPES}; sleep 1000")));
        if rng.below(2) == 0 {
            let _ = block_on(sbx.kill());
        } else {
            let _ = block_on(sbx.close());
        }
        counted += 1;
        if !eventually(Duration::from_secs(3), || processes_mentioning(&id).is_empty()) {
            survivors.push(format!("after close of {id}: {:?}", processes_mentioning(&id)));
        }
    }
    // Owner deaths: a child process creates sandboxes and starts commands; it is SIGKILLed
    // at a random instant (during create, during a command's start, or while it runs).
    // Its sandboxes live under its own TMPDIR, which every one of their processes mentions.
    let owners = total - in_process;
    for n in 0..owners {
        let tmp = std::env::temp_dir().join(format!("sbx-adv-owner-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        std::os::unix::fs::PermissionsExt::set_mode(
            &mut std::fs::metadata(&tmp).unwrap().permissions(),
            0o755,
        );
        let mut child = spawn_child(
            "local::class_03_orphans::class_03__owner_child",
            "owner",
            &[("TMPDIR", tmp.to_str().unwrap())],
        );
        let delay = rng.below(400);
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        counted += 1;
        let needle = tmp.file_name().unwrap().to_str().unwrap().to_owned();
        if !eventually(Duration::from_secs(3), || processes_mentioning(&needle).is_empty()) {
            survivors.push(format!("owner killed at {delay} ms: {:?}", processes_mentioning(&needle)));
        }
        let _ = std::fs::remove_dir_all(&tmp);
    }
    println!(
        "class_03 stress: {counted} cancellation points ({in_process} in process, {owners} owner SIGKILLs) in {:.1?}, {} with survivors",
        started.elapsed(),
        survivors.len()
    );
    assert!(counted >= total, "only {counted} points ran");
    assert!(survivors.is_empty(), "survivors: {survivors:#?}");
}

/// The owner child of the stress: creates sandboxes and starts commands until killed.
#[test]
fn class_03__owner_child() {
    if child_role().as_deref() != Some("owner") {
        return;
    }
    loop {
        let sbx = local(NetworkPolicy::deny_all());
        let stream = sbx.stream(Command::shell(format!("{ESCAPES}; sleep 1000"))).unwrap();
        let _ = block_on(sbx.run(Command::shell(ESCAPES)));
        // Long enough for the control to see the stream's processes: a run is some 30 ms
        // since issue #28, and 20 ms left them too briefly visible under load.
        std::thread::sleep(Duration::from_millis(100));
        drop(stream);
        std::mem::forget(sbx);
    }
}

#[test]
fn class_03__the_owner_child_mode_is_reachable() {
    // The stress's owner points prove something only if the child really creates
    // sandboxes: run one for a while and see its processes.
    if child_role().is_some() {
        return;
    }
    let tmp = std::env::temp_dir().join(format!("sbx-adv-owner-control-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut child = spawn_child(
        "local::class_03_orphans::class_03__owner_child",
        "owner",
        &[("TMPDIR", tmp.to_str().unwrap())],
    );
    let needle = tmp.file_name().unwrap().to_str().unwrap().to_owned();
    let seen = eventually(Duration::from_secs(20), || {
        processes_mentioning(&needle).iter().any(|(_, c)| c == "sleep")
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::io::BufReader::new(child.stdout.take().unwrap()).lines().count();
    assert!(seen, "control: the owner child never started a sandboxed command");
    assert!(
        eventually(Duration::from_secs(3), || processes_mentioning(&needle).is_empty()),
        "survivors of the control's owner: {:?}",
        processes_mentioning(&needle)
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
