//! `docker://` images: pulls from a real registry on loopback (`scripts/test-registry up`:
//! Debian's `docker-registry`, open on 127.0.0.1:5711 and with basic auth on 127.0.0.1:5712),
//! with credentials, digests and progress, and every pull failure typed: unknown image,
//! unauthorised, rate limited, registry down or silent, corrupt layer; and a dropped pull
//! cancelled in the engine. The rate-limited, silent and slow registries are small servers
//! in this file. Without an engine or the registry each test says `[skip]`;
//! `SANDBOXIO_REQUIRE_REGISTRY=1` (CI) makes that a failure.
#![cfg(feature = "docker")]
#![allow(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::Command as OsCommand;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandboxio::backends::docker::{
    DockerBackend, ImageError, ImageErrorKind, PullPolicy, PullProgress, RegistryAuth, Template,
};
use sandboxio::{Command, ErrorCode, NetworkPolicy, Sandbox};

use crate::support;

#[path = "../../src/sandboxd/sha256.rs"]
#[allow(dead_code, reason = "the test only hashes")]
mod sha256;

use support::{
    TEST_REGISTRY as PLAIN, TEST_REGISTRY_AUTH as AUTH, TEST_REGISTRY_PASSWORD as REGISTRY_PASSWORD,
    TEST_REGISTRY_USER as REGISTRY_USER,
};

/// Whether the engine, the busybox image and both test registries are here; prints why not,
/// or panics under `SANDBOXIO_REQUIRE_REGISTRY=1`.
fn registry_ready(test: &str) -> bool {
    support::docker_image_ready(test, "sandboxio/busybox:1", "busybox") && support::test_registries_up(test)
}

/// Whether the engine and the busybox image are here (the tests with their own servers).
fn docker_ready(test: &str) -> bool {
    support::docker_image_ready(test, "sandboxio/busybox:1", "busybox")
}

fn docker(args: &[&str]) -> (bool, String) {
    let out = OsCommand::new("docker").args(args).output().expect("the docker CLI");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn image_present(image: &str) -> bool {
    docker(&["image", "inspect", image]).0
}

/// Builds sandboxio/busybox:1 plus a layer of random bytes (no other image has it), pushes
/// it to the open registry as a repository of this test's own
/// (`sandboxio-test/<name>-<pid>:1`), and removes it from the engine again: a pull then
/// downloads that layer for real. Returns (name, digest).
fn private_copy(name: &str) -> (String, String) {
    let image = format!("{PLAIN}/sandboxio-test/{name}-{}:1", std::process::id());
    let context = std::env::temp_dir().join(format!("sbx-image-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&context).unwrap();
    // xorshift64: incompressible enough that the layer is as big on the wire.
    let mut state = u64::from(std::process::id()) << 8 | u64::from(name.as_bytes()[0]) | 1;
    let random: Vec<u8> = (0..300_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[3]
        })
        .collect();
    std::fs::write(context.join("blob.bin"), random).unwrap();
    std::fs::write(context.join("Dockerfile"), "FROM sandboxio/busybox:1\nCOPY blob.bin /blob.bin\n")
        .unwrap();
    let built = OsCommand::new("docker").args(["build", "-q", "-t", &image]).arg(&context).output().unwrap();
    assert!(built.status.success(), "build: {}", String::from_utf8_lossy(&built.stderr));
    std::fs::remove_dir_all(&context).unwrap();
    let out = OsCommand::new("docker").args(["push", &image]).output().unwrap();
    assert!(out.status.success(), "push: {}", String::from_utf8_lossy(&out.stderr));
    let (_, digests) = docker(&["image", "inspect", "-f", "{{json .RepoDigests}}", &image]);
    let repo = image.trim_end_matches(":1");
    let digest = digests
        .trim_matches(['[', ']'])
        .split(',')
        .map(|d| d.trim_matches('"'))
        .find_map(|d| d.strip_prefix(&format!("{repo}@")))
        .expect("a repo digest after the push")
        .to_owned();
    forget(&image);
    (image, digest)
}

/// Removes the local tag `image` (never the layers of sandboxio's own images).
fn forget(image: &str) {
    let _ = docker(&["rmi", image]);
}

/// A backend that reads no Docker config file of the machine's (so only what a test
/// gives counts).
fn backend() -> DockerBackend {
    DockerBackend::from_env().unwrap().with_docker_config("/nonexistent/sandboxio/config.json")
}

/// Runs `f` on a fresh tokio runtime (the pulls run on sandboxio's own; this only awaits).
fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    support::block_on(f)
}

/// Asserts `e` is a typed image error of `kind` with `code`, naming `image` and `registry`.
fn assert_image_error(
    e: &sandboxio::Error,
    code: ErrorCode,
    kind: ImageErrorKind,
    image: &str,
    registry: &str,
) {
    assert_eq!(e.code(), code, "{e}");
    let typed = ImageError::of(e).unwrap_or_else(|| panic!("no ImageError behind {e}"));
    assert_eq!(typed.kind(), kind, "{typed}");
    assert_eq!((typed.image(), typed.registry()), (image, registry));
    let said = format!("{e} {typed}");
    assert!(said.contains(image) && said.contains(registry), "{said}");
}

#[test]
fn images__pull_missing_creates_from_the_registry_with_progress() {
    if !registry_ready("images__pull_missing_creates_from_the_registry_with_progress") {
        return;
    }
    let (image, _) = private_copy("missing");
    assert!(!image_present(&image));
    // The default policy never pulls.
    let e = block_on(
        Sandbox::builder(&format!("docker://?image={image}"))
            .unwrap()
            .network(NetworkPolicy::deny_all())
            .create(),
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Configuration, "{e}");
    assert!(e.to_string().contains("pull policy is never"), "{e}");
    assert!(!image_present(&image), "pull=never pulled");

    let seen: Arc<Mutex<Vec<PullProgress>>> = Arc::default();
    let log = Arc::clone(&seen);
    let backend = backend()
        .with_pull(PullPolicy::Missing)
        .with_pull_progress(move |p| log.lock().unwrap().push(p.clone()));
    assert_eq!(backend.pull_policy(), PullPolicy::Missing);
    let sandbox =
        block_on(Sandbox::builder_with(backend).image(&image).network(NetworkPolicy::deny_all()).create())
            .unwrap();
    let out = block_on(sandbox.run(Command::new("echo").arg("pulled"))).unwrap();
    assert_eq!(out.stdout, b"pulled\n");
    block_on(sandbox.close()).unwrap();
    assert!(image_present(&image), "the image was not pulled");
    let seen = seen.lock().unwrap();
    let last = seen.last().expect("no progress reported");
    assert!(last.layers > 1 && last.layers_done == last.layers, "{last:?}");
    assert!(last.bytes_done > 100_000 && last.bytes_done == last.bytes_total, "{last:?}");
    assert!(seen.len() > 2, "progress came only at the end: {seen:?}");
    assert_eq!((last.image.as_str(), last.registry.as_str()), (image.as_str(), PLAIN));

    // Through the DSN too, now that the engine has it: `missing` does not pull again.
    let sandbox = block_on(
        Sandbox::builder(&format!("docker://?image={image}&pull=missing"))
            .unwrap()
            .network(NetworkPolicy::deny_all())
            .create(),
    )
    .unwrap();
    block_on(sandbox.close()).unwrap();
    forget(&image);
}

#[test]
fn images__pull_always_and_the_dsn_option() {
    if !registry_ready("images__pull_always_and_the_dsn_option") {
        return;
    }
    let (image, _) = private_copy("always");
    let sandbox = block_on(
        Sandbox::builder(&format!("docker://?image={image}&pull=always"))
            .unwrap()
            .network(NetworkPolicy::deny_all())
            .create(),
    )
    .unwrap();
    assert_eq!(block_on(sandbox.run(Command::new("true"))).unwrap().exit_code(), Some(0));
    block_on(sandbox.close()).unwrap();
    assert!(image_present(&image));
    forget(&image);
    let e = Sandbox::builder("docker://?pull=sometimes").unwrap_err();
    assert_eq!(e.code(), ErrorCode::Configuration, "{e}");
}

#[test]
fn images__a_digest_pins_the_manifest() {
    if !registry_ready("images__a_digest_pins_the_manifest") {
        return;
    }
    let (image, digest) = private_copy("digest");
    let repo = image.trim_end_matches(":1");
    let pinned = format!("{repo}@{digest}");
    let pulled = backend().pull_blocking(&pinned).unwrap();
    assert_eq!(pulled.digest.as_deref(), Some(pinned.as_str()));
    assert!(pulled.id.starts_with("sha256:"), "{pulled:?}");
    let sandbox = block_on(
        Sandbox::builder(&format!("docker://?image={pinned}&pull=missing"))
            .unwrap()
            .network(NetworkPolicy::deny_all())
            .create(),
    )
    .unwrap();
    block_on(sandbox.close()).unwrap();
    forget(&pinned);
    // A well-formed digest the registry never had.
    let other = format!("{repo}@sha256:{}", "0".repeat(64));
    let e = backend().pull_blocking(&other).unwrap_err();
    assert_image_error(&e, ErrorCode::Configuration, ImageErrorKind::NotFound, &other, PLAIN);
}

#[test]
fn images__an_unknown_image_is_not_found() {
    if !registry_ready("images__an_unknown_image_is_not_found") {
        return;
    }
    let image = format!("{PLAIN}/sandboxio-test/no-such-image:1");
    let e = backend().pull_blocking(&image).unwrap_err();
    assert_image_error(&e, ErrorCode::Configuration, ImageErrorKind::NotFound, &image, PLAIN);
    // And through `create` with pull=missing.
    let e = block_on(
        Sandbox::builder(&format!("docker://?image={image}&pull=missing"))
            .unwrap()
            .network(NetworkPolicy::deny_all())
            .create(),
    )
    .unwrap_err();
    assert_image_error(&e, ErrorCode::Configuration, ImageErrorKind::NotFound, &image, PLAIN);
}

#[test]
fn images__credentials_typed_or_from_the_config_file_and_refusals_are_auth_errors() {
    if !registry_ready("images__credentials_typed_or_from_the_config_file_and_refusals_are_auth_errors") {
        return;
    }
    let image = format!("{AUTH}/sandboxio/busybox:1");
    forget(&image);
    let e = backend().pull_blocking(&image).unwrap_err();
    assert_image_error(&e, ErrorCode::Auth, ImageErrorKind::Unauthorized, &image, AUTH);
    let wrong = backend().with_registry_auth(AUTH, RegistryAuth::basic(REGISTRY_USER, "not-the-password"));
    let e = wrong.pull_blocking(&image).unwrap_err();
    assert_image_error(&e, ErrorCode::Auth, ImageErrorKind::Unauthorized, &image, AUTH);

    let typed = backend().with_registry_auth(AUTH, RegistryAuth::basic(REGISTRY_USER, REGISTRY_PASSWORD));
    typed.pull_blocking(&image).unwrap();
    forget(&image);

    let dir = std::env::temp_dir().join(format!("sbx-docker-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let auth = base64_encode(format!("{REGISTRY_USER}:{REGISTRY_PASSWORD}").as_bytes());
    std::fs::write(dir.join("config.json"), format!(r#"{{"auths":{{"{AUTH}":{{"auth":"{auth}"}}}}}}"#))
        .unwrap();
    let from_file = DockerBackend::from_env().unwrap().with_docker_config(dir.join("config.json"));
    from_file.pull_blocking(&image).unwrap();
    forget(&image);
    std::fs::remove_dir_all(dir).unwrap();
}

fn base64_encode(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(TABLE[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn images__a_corrupt_layer_is_reported_as_such() {
    if !registry_ready("images__a_corrupt_layer_is_reported_as_such") {
        return;
    }
    let image = format!("{PLAIN}/sandboxio-test/corrupt:1");
    let e = backend().pull_blocking(&image).unwrap_err();
    assert_image_error(&e, ErrorCode::Provider, ImageErrorKind::CorruptLayer, &image, PLAIN);
    assert!(!image_present(&image));
}

/// A loopback "registry" that answers every request with `status` and `body`.
fn answering_server(status: &'static str, body: &'static str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nRetry-After: 7\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    addr
}

#[test]
fn images__a_rate_limited_registry() {
    if !docker_ready("images__a_rate_limited_registry") {
        return;
    }
    let addr = answering_server(
        "429 Too Many Requests",
        r#"{"errors":[{"code":"TOOMANYREQUESTS","message":"slow down"}]}"#,
    );
    let image = format!("{addr}/sandboxio-test/limited:1");
    let started = Instant::now();
    let e = backend().pull_blocking(&image).unwrap_err();
    assert_image_error(&e, ErrorCode::RateLimited, ImageErrorKind::RateLimited, &image, &addr);
    assert!(e.is_retryable());
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
}

#[test]
fn images__a_registry_that_is_down_or_silent_fails_without_hanging() {
    if !docker_ready("images__a_registry_that_is_down_or_silent_fails_without_hanging") {
        return;
    }
    // Down: a port nothing listens on.
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let image = format!("{addr}/sandboxio-test/down:1");
    let started = Instant::now();
    let e = backend().pull_blocking(&image).unwrap_err();
    assert_image_error(&e, ErrorCode::Connect, ImageErrorKind::RegistryDown, &image, &addr);
    assert!(e.is_retryable());
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());

    // Silent: accepts connections, never answers; the stall bound ends the pull.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&held);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            keep.lock().unwrap().push(stream);
        }
    });
    let image = format!("{addr}/sandboxio-test/silent:1");
    let started = Instant::now();
    let e = backend().with_pull_stall_timeout(Duration::from_secs(2)).pull_blocking(&image).unwrap_err();
    let took = started.elapsed();
    assert_image_error(&e, ErrorCode::Connect, ImageErrorKind::RegistryDown, &image, &addr);
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(10), "{took:?}");
    assert!(!held.lock().unwrap().is_empty(), "the engine never reached the silent registry");
}

/// A loopback registry serving one image whose only layer trickles out a byte every 50 ms:
/// reports when a layer request's connection is closed by the engine.
struct SlowRegistry {
    addr: String,
    /// Set when a layer download started, and when its connection was closed.
    layer_started: Arc<Mutex<Option<Instant>>>,
    layer_closed: Arc<Mutex<Option<Instant>>>,
}

fn slow_registry() -> SlowRegistry {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let layer = vec![7u8; 1 << 20];
    let layer_digest = format!("sha256:{}", sha256::hex_digest(&layer));
    let config = format!(
        r#"{{"architecture":"amd64","os":"linux","config":{{}},"rootfs":{{"type":"layers","diff_ids":["{layer_digest}"]}}}}"#
    );
    let config_digest = format!("sha256:{}", sha256::hex_digest(config.as_bytes()));
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{{"mediaType":"application/vnd.docker.container.image.v1+json","size":{},"digest":"{config_digest}"}},"layers":[{{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","size":{},"digest":"{layer_digest}"}}]}}"#,
        config.len(),
        layer.len()
    );
    let manifest_digest = format!("sha256:{}", sha256::hex_digest(manifest.as_bytes()));
    let (layer_started, layer_closed) = (Arc::new(Mutex::new(None)), Arc::new(Mutex::new(None)));
    let (started, closed) = (Arc::clone(&layer_started), Arc::clone(&layer_closed));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (manifest, manifest_digest, config, config_digest, layer_digest, layer) = (
                manifest.clone(),
                manifest_digest.clone(),
                config.clone(),
                config_digest.clone(),
                layer_digest.clone(),
                layer.clone(),
            );
            let (started, closed) = (Arc::clone(&started), Arc::clone(&closed));
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                let n = stream.read(&mut buf).unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).into_owned();
                let line = request.lines().next().unwrap_or_default().to_owned();
                let head = line.starts_with("HEAD ");
                let reply = |stream: &mut TcpStream, kind: &str, digest: &str, body: &[u8]| {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nDocker-Content-Digest: {digest}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    if !head {
                        let _ = stream.write_all(body);
                    }
                };
                if line.contains("/manifests/") {
                    reply(
                        &mut stream,
                        "application/vnd.docker.distribution.manifest.v2+json",
                        &manifest_digest,
                        manifest.as_bytes(),
                    );
                } else if line.contains(&format!("/blobs/{config_digest}")) {
                    reply(&mut stream, "application/octet-stream", &config_digest, config.as_bytes());
                } else if line.contains(&format!("/blobs/{layer_digest}")) && !head {
                    started.lock().unwrap().get_or_insert_with(Instant::now);
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        layer.len()
                    );
                    // A byte at a time: the download outlives any test unless the engine
                    // drops it.
                    for byte in &layer {
                        if stream.write_all(&[*byte]).is_err() {
                            closed.lock().unwrap().get_or_insert_with(Instant::now);
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                } else {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
                    );
                }
            });
        }
    });
    SlowRegistry { addr, layer_started, layer_closed }
}

#[test]
fn images__dropping_a_pull_cancels_it_in_the_engine() {
    if !docker_ready("images__dropping_a_pull_cancels_it_in_the_engine") {
        return;
    }
    let registry = slow_registry();
    let image = format!("{}/sandboxio-test/slow:1", registry.addr);
    let progressed = Arc::new(Mutex::new(0usize));
    let count = Arc::clone(&progressed);
    let backend = backend().with_pull_progress(move |_| *count.lock().unwrap() += 1);
    let pulled = block_on(futures_lite::future::or(async { Some(backend.pull(&image).await) }, async {
        // Until the layer is downloading, then drop the pull.
        let deadline = Instant::now() + Duration::from_secs(30);
        while registry.layer_started.lock().unwrap().is_none() && Instant::now() < deadline {
            futures_timer::Delay::new(Duration::from_millis(50)).await;
        }
        futures_timer::Delay::new(Duration::from_millis(500)).await;
        None
    }));
    assert!(pulled.is_none(), "the pull ended by itself: {pulled:?}");
    let dropped = Instant::now();
    assert!(registry.layer_started.lock().unwrap().is_some(), "the engine never asked for the layer");
    assert!(*progressed.lock().unwrap() > 0, "no progress while the layer downloaded");
    // The engine closes the layer's download once its client has gone.
    while registry.layer_closed.lock().unwrap().is_none() && dropped.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let closed = *registry.layer_closed.lock().unwrap();
    assert!(closed.is_some(), "the engine kept downloading for 15 s after the pull was dropped");
    assert!(!image_present(&image));
}

/// A build context under the temp directory: `files` are (relative path, contents).
fn build_context(test: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sbx-build-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, contents) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
    dir
}

#[test]
fn images__build_streams_its_log_and_honours_dockerignore() {
    if !docker_ready("images__build_streams_its_log_and_honours_dockerignore") {
        return;
    }
    let context = build_context(
        "ignore",
        &[
            ("Dockerfile", "FROM sandboxio/busybox:1\nCOPY . /ctx/\nRUN echo built-marker-51 && ls /ctx\n"),
            (".dockerignore", "secret.txt\nlogs\n**/*.tmp\n!keep/*.tmp\n"),
            ("app.py", "print(1)"),
            ("secret.txt", "no"),
            ("logs/a.log", "no"),
            ("sub/x.tmp", "no"),
            ("keep/y.tmp", "yes"),
        ],
    );
    let tag = format!("sandboxio-test/built-{}:1", std::process::id());
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = Arc::clone(&lines);
    let backend = backend().with_build_log(move |line| log.lock().unwrap().push(line.to_owned()));
    let built = backend.build_image_blocking(&context, "Dockerfile", &tag).unwrap();
    assert!(built.id.starts_with("sha256:") && built.tag == tag, "{built:?}");
    let lines = lines.lock().unwrap().clone();
    assert!(lines.iter().any(|l| l.starts_with("Step 1/3 : FROM sandboxio/busybox:1")), "{lines:?}");
    assert!(lines.iter().any(|l| l == "built-marker-51"), "{lines:?}");
    let sandbox =
        block_on(Sandbox::builder_with(backend).image(&tag).network(NetworkPolicy::deny_all()).create())
            .unwrap();
    let out = block_on(sandbox.run(Command::shell("cd /ctx && find . -type f | sort"))).unwrap();
    assert_eq!(out.stdout_lossy(), "./.dockerignore\n./Dockerfile\n./app.py\n./keep/y.tmp\n");
    block_on(sandbox.close()).unwrap();
    forget(&tag);
    std::fs::remove_dir_all(context).unwrap();
}

#[test]
fn images__a_failed_build_fails_with_the_builds_own_error_text() {
    if !docker_ready("images__a_failed_build_fails_with_the_builds_own_error_text") {
        return;
    }
    let context = build_context(
        "fail",
        &[("Dockerfile", "FROM sandboxio/busybox:1\nRUN echo about-to-fail-77; exit 3\n")],
    );
    let tag = format!("sandboxio-test/failed-{}:1", std::process::id());
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = Arc::clone(&lines);
    let e = backend()
        .with_build_log(move |line| log.lock().unwrap().push(line.to_owned()))
        .build_image_blocking(&context, "Dockerfile", &tag)
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Provider, "{e}");
    let typed = ImageError::of(&e).unwrap();
    assert_eq!(typed.kind(), ImageErrorKind::BuildFailed);
    assert!(typed.message().contains("returned a non-zero code: 3"), "{typed}");
    assert!(e.to_string().contains("returned a non-zero code: 3") && e.to_string().contains(&tag), "{e}");
    assert!(lines.lock().unwrap().iter().any(|l| l == "about-to-fail-77"));
    assert!(!image_present(&tag));
    // Checked before anything is sent.
    let e = backend().build_image_blocking(&context, "../Dockerfile", &tag).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Configuration, "{e}");
    std::fs::remove_dir_all(context).unwrap();
}

/// The size of the large build context.
const CONTEXT_MIB: u64 = 256;

/// The peak resident memory of this process, from `/proc/self/status` (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn images__a_large_context_is_streamed_in_flat_memory() {
    if !docker_ready("images__a_large_context_is_streamed_in_flat_memory") {
        return;
    }
    // The peak is the whole process's, so the build runs in a child of this binary that runs
    // nothing else: the other tests of this binary run six at a time (RUST_TEST_THREADS) and
    // their own buffers would count against this one.
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["images::large_context_child", "--exact", "--ignored", "--nocapture", "--test-threads", "1"])
        .status()
        .unwrap();
    assert!(status.success(), "the child that built the large context failed: {status}");
}

#[test]
#[ignore = "run by images__a_large_context_is_streamed_in_flat_memory in a process of its own"]
fn large_context_child() {
    let context = build_context("large", &[("Dockerfile", "FROM sandboxio/busybox:1\nRUN true\n")]);
    // Sparse on the host's disk; read (and sent) as 256 MiB of zeros.
    std::fs::File::create(context.join("large.bin")).unwrap().set_len(CONTEXT_MIB << 20).unwrap();
    let tag = format!("sandboxio-test/large-{}:1", std::process::id());
    let before = peak_rss_kib();
    backend().build_image_blocking(&context, "Dockerfile", &tag).unwrap();
    let grew_mib = (peak_rss_kib() - before) / 1024;
    assert!(grew_mib < 64, "peak memory grew by {grew_mib} MiB while sending a {CONTEXT_MIB} MiB context");
    forget(&tag);
    std::fs::remove_dir_all(context).unwrap();
}

/// Containers of template `name`'s setups still on the engine (there should be none after
/// a setup). Each test's template has a name of its own.
fn setup_containers(name: &str) -> String {
    docker(&["ps", "-aq", "--filter", &format!("name=sandboxio-template-setup-{name}-")]).1
}

#[test]
fn images__a_template_is_set_up_once_then_reused_by_content_hash() {
    if !docker_ready("images__a_template_is_set_up_once_then_reused_by_content_hash") {
        return;
    }
    let pid = std::process::id();
    // This run's own content: the first use must set it up.
    let template = Template::new("sandboxio/busybox:1")
        .file("/etc/sbx-template.conf", format!("run {pid}\n"))
        .file_with_mode("/usr/local/bin/greet", "#!/bin/sh\necho hello from the template\n", 0o755)
        .run("date +%s%N > /stamp")
        .run("echo setup-ran-42");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = Arc::clone(&lines);
    let backend = backend()
        .with_template("sbx-test", template)
        .with_build_log(move |line| log.lock().unwrap().push(line.to_owned()));
    let create = || {
        let started = Instant::now();
        let sandbox = block_on(
            Sandbox::builder_with(backend.clone())
                .template("sbx-test")
                .network(NetworkPolicy::deny_all())
                .create(),
        )
        .unwrap();
        let took = started.elapsed();
        let out =
            block_on(sandbox.run(Command::shell("cat /etc/sbx-template.conf /stamp; greet; id -u"))).unwrap();
        block_on(sandbox.close()).unwrap();
        (took, out.stdout_lossy().into_owned())
    };
    let (first, said_first) = create();
    let (second, said_second) = create();
    println!("template create: first {first:?} (setup and commit), second {second:?} (cached)");
    assert!(said_first.starts_with(&format!("run {pid}\n")), "{said_first}");
    assert!(
        said_first.ends_with("hello from the template\n1000\n"),
        "the base's user was not kept: {said_first}"
    );
    assert_eq!(said_first, said_second, "the setup ran again");
    assert_eq!(lines.lock().unwrap().iter().filter(|l| *l == "setup-ran-42").count(), 1);
    let prepared = backend.prepare_template_blocking("sbx-test").unwrap();
    assert!(prepared.cached && prepared.image.starts_with("sandboxio-template/sbx-test:"), "{prepared:?}");
    // Another backend value (as another process would) finds it by its content too.
    let again = self::backend().with_template(
        "sbx-test",
        Template::new("sandboxio/busybox:1")
            .file("/etc/sbx-template.conf", format!("run {pid}\n"))
            .file_with_mode("/usr/local/bin/greet", "#!/bin/sh\necho hello from the template\n", 0o755)
            .run("date +%s%N > /stamp")
            .run("echo setup-ran-42"),
    );
    assert_eq!(again.prepare_template_blocking("sbx-test").unwrap(), prepared);
    assert!(setup_containers("sbx-test").is_empty(), "a setup container was left behind");
    forget(&prepared.image);
}

#[test]
fn images__a_failing_template_setup_is_reported_with_its_output() {
    if !docker_ready("images__a_failing_template_setup_is_reported_with_its_output") {
        return;
    }
    let template = Template::new("sandboxio/busybox:1")
        .file("/x", std::process::id().to_string())
        .run("echo setup-fail-out-9; exit 4");
    let backend = backend().with_template("sbx-fails", template);
    let e = block_on(
        Sandbox::builder_with(backend.clone())
            .template("sbx-fails")
            .network(NetworkPolicy::deny_all())
            .create(),
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Provider, "{e}");
    assert_eq!(ImageError::of(&e).unwrap().kind(), ImageErrorKind::BuildFailed);
    assert!(e.to_string().contains("exited with 4") && e.to_string().contains("setup-fail-out-9"), "{e}");
    // The setup container goes in the background: give it a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !setup_containers("sbx-fails").is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(setup_containers("sbx-fails").is_empty(), "a setup container was left behind");

    let e = block_on(
        Sandbox::builder_with(backend.clone()).template("nope").network(NetworkPolicy::deny_all()).create(),
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Configuration, "{e}");
    assert!(e.to_string().contains("sbx-fails"), "{e}");
    let e = block_on(
        Sandbox::builder_with(backend)
            .template("sbx-fails")
            .image("sandboxio/busybox:1")
            .network(NetworkPolicy::deny_all())
            .create(),
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Configuration, "{e}");
    // A backend without templates refuses the typed option.
    let e = block_on(
        Sandbox::builder_with(self::backend()).template("x").network(NetworkPolicy::deny_all()).create(),
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::CapabilityNotSupported, "{e}");
}
