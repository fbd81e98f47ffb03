//! `docker://` beyond the contract: engine errors, owner death, the sweep, and smol and
//! blocking smoke runs. Needs an engine and `sandboxio/busybox:1`
//! (`scripts/build-images busybox`); without them each test says so and returns, unless
//! `SANDBOXIO_REQUIRE_DOCKER=1` (CI), where that is a failure.
#![cfg(feature = "docker")]
#![allow(non_snake_case)] // test names read as contract clauses: `area__requirement`

use std::io::{BufRead, BufReader};
use std::process::{Command as OsCommand, Stdio};
use std::time::{Duration, Instant};

use sandboxio::backends::docker::{DockerBackend, ReapOptions};
use sandboxio::{Command, ErrorCode, NetworkPolicy, Sandbox};

const IMAGE: &str = "sandboxio/busybox:1";

/// Whether the engine and the image are here; prints why not (or panics under CI).
fn docker_ready(test: &str) -> bool {
    let ok = OsCommand::new("docker")
        .args(["image", "inspect", "-f", "{{.Id}}", IMAGE])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("SANDBOXIO_REQUIRE_DOCKER").map_or(true, |v| v != "1"),
            "{test}: no Docker engine with {IMAGE} (SANDBOXIO_REQUIRE_DOCKER=1)"
        );
        println!("[skip] {test}: no Docker engine with {IMAGE} (scripts/build-images busybox)");
    }
    ok
}

fn docker(args: &[&str]) -> String {
    let out = OsCommand::new("docker").args(args).output().expect("the docker CLI");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn container_exists(id: &str) -> bool {
    !docker(&["ps", "-aq", "--no-trunc", "--filter", &format!("id={id}")]).trim().is_empty()
}

fn wait_gone(id: &str, within: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < within {
        if !container_exists(id) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

#[tokio::test]
async fn docker__a_dead_engine_is_a_quick_connect_error_naming_the_socket() {
    let started = Instant::now();
    let err = Sandbox::builder("docker:///nonexistent/docker.sock")
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .create()
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Connect, "{err}");
    assert!(err.to_string().contains("/nonexistent/docker.sock"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());

    // A socket that exists but where nothing listens.
    let dir = std::env::temp_dir().join(format!("sbx-dead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("docker.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let err = Sandbox::builder(&format!("docker://{}", path.display()))
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .create()
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Connect, "{err}");
    assert!(err.to_string().contains(path.to_str().unwrap()), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn docker__bad_dsns_are_configuration_errors() {
    for dsn in ["docker://?runtime=kata", "docker://?colour=blue", "docker://host:1/sock/path"] {
        let err = Sandbox::builder(dsn).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Configuration, "{dsn}: {err}");
    }
}

#[tokio::test]
async fn docker__a_missing_image_is_named_and_nothing_is_pulled() {
    if !docker_ready("docker__a_missing_image_is_named_and_nothing_is_pulled") {
        return;
    }
    let err = Sandbox::builder("docker://?image=sandboxio/no-such-image:0")
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .create()
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Configuration, "{err}");
    assert!(err.to_string().contains("sandboxio/no-such-image:0"), "{err}");
}

#[tokio::test]
async fn docker__hardened_by_default() {
    if !docker_ready("docker__hardened_by_default") {
        return;
    }
    let sandbox = Sandbox::builder(&format!("docker://?image={IMAGE}"))
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .secret_env("SBX_TOKEN", "canary-8c1f-secret")
        .create()
        .await
        .unwrap();
    let inspect = docker(&["inspect", sandbox.id()]);
    assert!(inspect.contains("\"CapDrop\": [\n                \"ALL\""), "capabilities not dropped");
    assert!(inspect.contains("no-new-privileges"), "no-new-privileges missing");
    assert!(inspect.contains("\"NetworkMode\": \"none\""), "network not none");
    assert!(inspect.contains("\"PidsLimit\": 1024"), "no pids limit");
    assert!(!inspect.contains("canary-8c1f-secret"), "the secret is in docker inspect");
    let out = sandbox
        .run(Command::shell("id -u; printf %s \"$SBX_TOKEN\"; grep CapEff /proc/self/status"))
        .await
        .unwrap();
    let text = out.stdout_lossy();
    assert!(text.starts_with("1000\ncanary-8c1f-secret"), "{text}");
    assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    sandbox.close().await.unwrap();
}

/// The owner process: creates a sandbox, prints its id, then waits to be killed.
#[test]
#[ignore = "helper process of docker__owner_sigkill_removes_its_sandbox; runs only when that test starts it"]
fn docker_owner_helper() {
    let sandbox = sandboxio::sync::Sandbox::builder(&format!("docker://?image={IMAGE}"))
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .create()
        .unwrap();
    println!("SANDBOX {}", sandbox.id());
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn docker__owner_sigkill_removes_its_sandbox() {
    if !docker_ready("docker__owner_sigkill_removes_its_sandbox") {
        return;
    }
    let mut child = OsCommand::new(std::env::current_exe().unwrap())
        .args(["docker_owner_helper", "--exact", "--ignored", "--nocapture"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut id = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        if let Some(rest) = line.unwrap().strip_prefix("SANDBOX ") {
            id = Some(rest.to_owned());
            break;
        }
    }
    let id = id.expect("the helper printed its sandbox id");
    assert!(container_exists(&id));
    child.kill().unwrap(); // SIGKILL: no destructor, no teardown runs
    child.wait().unwrap();
    assert!(wait_gone(&id, Duration::from_secs(20)), "sandbox {id} outlived its SIGKILLed owner");
}

#[test]
fn docker__reap_removes_expired_and_dead_owners_only() {
    if !docker_ready("docker__reap_removes_expired_and_dead_owners_only") {
        return;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_owned();
    let far = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 3600)
        .to_string();
    let run = |labels: &[(&str, &str)]| {
        let mut args = vec!["run".to_owned(), "-d".into(), "--network".into(), "none".into()];
        for (k, v) in labels {
            args.push("--label".into());
            args.push(format!("{k}={v}"));
        }
        args.extend([IMAGE.into(), "sleep".into(), "120".into()]);
        let out = OsCommand::new("docker").args(&args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let managed = ("io.sandboxio.managed", "true");
    let expired = run(&[managed, ("io.sandboxio.expires", "1")]);
    // pid 4194304 is above Linux's pid_max: never alive.
    let dead_owner = format!("{host}:4194304:1");
    let orphan = run(&[managed, ("io.sandboxio.expires", &far), ("io.sandboxio.owner", &dead_owner)]);
    let detached = run(&[
        managed,
        ("io.sandboxio.expires", &far),
        ("io.sandboxio.owner", &dead_owner),
        ("io.sandboxio.detached", "true"),
    ]);
    let elsewhere = run(&[managed, ("io.sandboxio.expires", &far), ("io.sandboxio.owner", "other-host:1:1")]);
    let backend = DockerBackend::from_env().unwrap();

    let first = backend.reap_blocking(ReapOptions::new()).unwrap();
    assert!(first.removed.contains(&expired), "{first:?}");
    assert!(!first.removed.contains(&orphan), "{first:?}");
    let second = backend.reap_blocking(ReapOptions::new().owner_dead(true)).unwrap();
    assert!(second.removed.contains(&orphan), "{second:?}");
    for kept in [&detached, &elsewhere] {
        assert!(!second.removed.contains(kept), "{second:?}");
        assert!(container_exists(kept));
    }
    docker(&["rm", "-f", &detached, &elsewhere]);
}

#[test]
fn docker__smol_smoke() {
    if !docker_ready("docker__smol_smoke") {
        return;
    }
    smol::block_on(async {
        let sandbox = Sandbox::builder(&format!("docker://?image={IMAGE}"))
            .unwrap()
            .network(NetworkPolicy::deny_all())
            .create()
            .await
            .unwrap();
        let out = sandbox.run(Command::new("echo").arg("from smol")).await.unwrap();
        assert_eq!(out.stdout, b"from smol\n");
        sandbox.close().await.unwrap();
    });
}

#[test]
fn docker__blocking_smoke() {
    if !docker_ready("docker__blocking_smoke") {
        return;
    }
    let sandbox = sandboxio::sync::Sandbox::builder(&format!("docker://?image={IMAGE}"))
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .create()
        .unwrap();
    sandbox.fs().write("note.txt", "from sync").unwrap();
    let out = sandbox.run(Command::new("cat").arg("note.txt")).unwrap();
    assert_eq!(out.stdout, b"from sync");
    let id = sandbox.id().to_owned();
    drop(sandbox); // an owned handle's drop tears the container down
    let _ = sandboxio::sync::shutdown(Duration::from_secs(30));
    assert!(wait_gone(&id, Duration::from_secs(10)), "dropped blocking sandbox {id} left its container");
}
