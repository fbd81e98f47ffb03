//! `docker://` templates as the attack review of issue 19 asked: the setup container is a
//! sandbox (labels, owner link, limits, no network) that `Sandbox::list` sees and that
//! ends with its owner; concurrent creates from one uncached template make one image; a
//! template's sandbox runs on both exec paths; a re-pointed tag is not trusted; old images
//! are pruned. Without an engine and the busybox image each test says `[skip]`.
#![cfg(feature = "docker")]
#![allow(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use std::collections::BTreeMap;
use std::process::{Command as OsCommand, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandboxio::backends::docker::{
    DockerBackend, ExecPath, TEMPLATE_HASH_LABEL, TEMPLATE_SETUP_LABEL, Template,
};
use sandboxio::{Command, NetworkPolicy, ResourceLimits, Sandbox};

use crate::support;

const BASE: &str = "sandboxio/busybox:1";

fn docker_ready(test: &str) -> bool {
    support::docker_image_ready(test, BASE, "busybox")
}

fn docker(args: &[&str]) -> (bool, String) {
    let out = OsCommand::new("docker").args(args).output().expect("the docker CLI");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Running setup containers of template `name` (each test's template has a name of its own).
fn setup_containers(name: &str) -> Vec<String> {
    let (_, ids) =
        docker(&["ps", "-q", "--no-trunc", "--filter", &format!("name=sandboxio-template-setup-{name}-")]);
    ids.lines().map(str::to_owned).collect()
}

fn wait_for(what: impl Fn() -> bool, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if what() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    what()
}

/// A deny-all sandbox from template `name` of `backend`.
fn create_from(backend: DockerBackend, name: &str) -> Sandbox {
    support::block_on(
        Sandbox::builder_with(backend).template(name).network(NetworkPolicy::deny_all()).create(),
    )
    .unwrap()
}

fn backend() -> DockerBackend {
    DockerBackend::from_env().unwrap().with_docker_config("/nonexistent/sandboxio/config.json")
}

/// The template whose setup sleeps, for the owner test: content of this run's own.
fn sleeping_template(marker: &str) -> Template {
    Template::new(BASE)
        .file("/marker", marker.to_owned())
        .run("echo setup-sleeping")
        .run("sleep 600")
        .setup_limits(ResourceLimits::new().memory_mib(128))
}

/// The owner process of `templates__the_setup_is_a_sandbox_and_ends_with_its_owner`: starts
/// the sleeping setup (its marker from `SBX_TEMPLATE_MARKER`) and never returns.
#[test]
#[ignore = "helper process of templates__the_setup_is_a_sandbox_and_ends_with_its_owner"]
fn template_owner_helper() {
    let marker = std::env::var("SBX_TEMPLATE_MARKER").unwrap();
    let backend = backend().with_template("sbx-owner", sleeping_template(&marker));
    let _ = backend.prepare_template_blocking("sbx-owner");
    std::thread::sleep(Duration::from_mins(10));
}

#[test]
fn templates__the_setup_is_a_sandbox_and_ends_with_its_owner() {
    if !docker_ready("templates__the_setup_is_a_sandbox_and_ends_with_its_owner") {
        return;
    }
    let marker = format!("owner-{}-{:?}", std::process::id(), Instant::now());
    let mut child = OsCommand::new(std::env::current_exe().unwrap())
        .args(["templates::template_owner_helper", "--exact", "--ignored", "--nocapture"])
        .env("SBX_TEMPLATE_MARKER", &marker)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let found = wait_for(|| setup_containers("sbx-owner").len() == 1, Duration::from_mins(1));
    assert!(found, "the owner's setup did not start: {:?}", setup_containers("sbx-owner"));
    let id = setup_containers("sbx-owner").remove(0);
    // It is a sandbox: listed, labelled as a template's setup, limited, without network.
    let listed = support::block_on(Sandbox::list("docker://", &BTreeMap::new())).unwrap();
    let info = listed.iter().find(|i| i.id == id).unwrap_or_else(|| panic!("Sandbox::list misses {id}"));
    assert_eq!(info.owner_alive, Some(true), "{info:?}");
    assert!(info.ttl_left.is_some_and(|t| t > Duration::from_mins(9)), "{info:?}");
    let (_, inspected) = docker(&[
        "inspect",
        "-f",
        &format!(
            "{{{{index .Config.Labels \"{TEMPLATE_SETUP_LABEL}\"}}}} {{{{.HostConfig.PidsLimit}}}} {{{{.HostConfig.Memory}}}} {{{{.HostConfig.NetworkMode}}}} {{{{.HostConfig.SecurityOpt}}}}"
        ),
        &id,
    ]);
    assert_eq!(inspected, format!("sbx-owner 1024 {} none [no-new-privileges]", 128 << 20));
    // Listed as a sandbox, but no handle to it is given out (its commands run as root).
    let e = support::block_on(Sandbox::connect("docker://", &id)).unwrap_err();
    assert!(e.to_string().contains("template's setup"), "{e}");
    // Positive control: while its owner lives, the setup goes on.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(setup_containers("sbx-owner"), vec![id.clone()], "the setup ended with its owner alive");
    child.kill().unwrap(); // SIGKILL: no destructor, no teardown runs
    child.wait().unwrap();
    // The same bound as a sandbox's (tests/docker/main.rs, the adversarial suite: 10 s to end).
    let gone = wait_for(|| !docker(&["inspect", &id]).0, Duration::from_secs(20));
    assert!(gone, "setup container {id} outlived its SIGKILLed owner");
}

#[test]
fn templates__concurrent_creates_of_one_uncached_template_make_one_image() {
    if !docker_ready("templates__concurrent_creates_of_one_uncached_template_make_one_image") {
        return;
    }
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = Arc::clone(&lines);
    let stamp = format!("{}-{:?}", std::process::id(), Instant::now());
    let template = Template::new(BASE)
        .file("/run-stamp", stamp.clone())
        .run("sleep 1; date +%s%N > /built-at")
        .run("echo concurrent-setup-ran");
    let backend = backend()
        .with_template("sbx-concurrent", template)
        .with_build_log(move |line| log.lock().unwrap().push(line.to_owned()));
    let creates: Vec<_> = (0..2)
        .map(|_| {
            let backend = backend.clone();
            std::thread::spawn(move || {
                let sandbox = create_from(backend, "sbx-concurrent");
                let out = support::block_on(sandbox.run(Command::shell("cat /run-stamp /built-at"))).unwrap();
                support::block_on(sandbox.close()).unwrap();
                out.stdout_lossy().into_owned()
            })
        })
        .collect();
    let said: Vec<String> = creates.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(said[0].starts_with(&stamp), "{said:?}");
    assert_eq!(said[0], said[1], "the two sandboxes came from two different setups");
    let ran = lines.lock().unwrap().iter().filter(|l| *l == "concurrent-setup-ran").count();
    assert_eq!(ran, 1, "the setup ran {ran} times");
    let prepared = backend.prepare_template_blocking("sbx-concurrent").unwrap();
    assert!(prepared.cached, "{prepared:?}");
    docker(&["rmi", &prepared.image]);
}

#[test]
fn templates__a_template_sandbox_runs_on_sandboxd_and_on_the_exec_api() {
    if !docker_ready("templates__a_template_sandbox_runs_on_sandboxd_and_on_the_exec_api") {
        return;
    }
    let stamp = format!("paths-{}", std::process::id());
    // The setup (root) also replaces the base's sandboxd: the image must not keep it.
    let template = Template::new(BASE)
        .file("/etc/sbx-paths", stamp.clone())
        .run("mkdir -p /opt/t && echo made > /opt/t/f")
        .run("echo tampered > /.sandboxio/sandboxd && cp /.sandboxio/sandboxd /tampered-copy");
    let backend = backend().with_template("sbx-paths", template);
    let prepared = backend.prepare_template_blocking("sbx-paths").unwrap();
    let sandboxd_digest =
        sandboxio::backends::docker::sandboxd_id().unwrap().split_once(':').unwrap().1.to_owned();
    for path in [ExecPath::Sandboxd, ExecPath::ExecApi] {
        let backend = backend.clone().with_exec_path(path);
        let sandbox = create_from(backend.clone(), "sbx-paths");
        let out = support::block_on(sandbox.run(Command::shell(
            "cat /etc/sbx-paths /opt/t/f /tampered-copy; id -u; sha256sum /.sandboxio/sandboxd",
        )))
        .unwrap();
        let said = out.stdout_lossy();
        assert!(said.starts_with(&format!("{stamp}made\ntampered\n1000\n")), "{path:?}: {said}");
        // The control: the setup did replace the file; the image holds this build's again.
        assert!(said.contains(&format!("{sandboxd_digest}  /.sandboxio/sandboxd")), "{path:?}: {said}");
        support::block_on(sandbox.fs().write("/tmp/x", b"written".to_vec())).unwrap();
        assert_eq!(support::block_on(sandbox.fs().read("/tmp/x")).unwrap(), b"written", "{path:?}");
        let labels = support::block_on(backend.container_labels(sandbox.id())).unwrap();
        assert_eq!(labels.get("io.sandboxio.exec").map(String::as_str), Some(path.as_str()), "{labels:?}");
        assert_eq!(labels.get(TEMPLATE_SETUP_LABEL).map(String::as_str), Some(""), "{labels:?}");
        support::block_on(sandbox.close()).unwrap();
    }
    // The baked-sandboxd label (`baked.rs`) counts only at the layers it names: the base's
    // holds there, and so does the template image's own, written with the binary placed
    // after the setup (checked above: the setup's replacement is gone).
    let baked = |image: &str| {
        let format = "{{index .Config.Labels \"io.sandboxio.image.sandboxd\"}} {{len .RootFS.Layers}}";
        let (_, said) = docker(&["image", "inspect", "-f", format, image]);
        let (label, layers) = said.rsplit_once(' ').unwrap();
        label.rsplit_once(':').is_some_and(|(_, at)| at == layers)
    };
    assert!(baked(BASE), "the base image's label does not match its layers");
    assert!(baked(&prepared.image), "the template image is not labelled as holding sandboxd");
    // The image carries its hash, and none of its setup container's sandbox labels: a plain
    // `docker run` of it is no sandboxio sandbox.
    let (_, labels) = docker(&["image", "inspect", "-f", "{{json .Config.Labels}}", &prepared.image]);
    assert!(labels.contains(TEMPLATE_HASH_LABEL), "{labels}");
    assert!(labels.contains("\"io.sandboxio.managed\":\"\""), "{labels}");
    assert!(labels.contains("\"io.sandboxio.owner\":\"\""), "{labels}");
    docker(&["rmi", &prepared.image]);
}

#[test]
fn templates__a_re_pointed_tag_is_set_up_again_and_old_images_are_pruned() {
    if !docker_ready("templates__a_re_pointed_tag_is_set_up_again_and_old_images_are_pruned") {
        return;
    }
    let pid = std::process::id();
    let template =
        |version: &str| Template::new(BASE).file("/version", format!("{pid}-{version}")).run("true");
    let current = backend().with_template("sbx-trust", template("2"));
    let genuine = current.prepare_template_blocking("sbx-trust").unwrap();
    // Positive control: an untouched tag is trusted.
    assert!(current.prepare_template_blocking("sbx-trust").unwrap().cached);
    let (_, hash) = docker(&[
        "image",
        "inspect",
        "-f",
        &format!("{{{{index .Config.Labels \"{TEMPLATE_HASH_LABEL}\"}}}}"),
        &genuine.image,
    ]);
    assert_eq!(hash.len(), 64, "{hash}");
    // Someone re-points the tag at an image of their own that copies the label.
    let context = std::env::temp_dir().join(format!("sbx-forged-{pid}"));
    std::fs::create_dir_all(&context).unwrap();
    std::fs::write(
        context.join("Dockerfile"),
        format!("FROM {BASE}\nUSER 0\nLABEL {TEMPLATE_HASH_LABEL}={hash}\nRUN echo forged > /forged\nRUN echo forged > /version\n"),
    )
    .unwrap();
    let built = OsCommand::new("docker")
        .args(["build", "-q", "--force-rm", "-t", &genuine.image])
        .arg(&context)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&context).unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let again = current.prepare_template_blocking("sbx-trust").unwrap();
    assert!(!again.cached, "the re-pointed tag was trusted: {again:?}");
    let sandbox = create_from(current.clone(), "sbx-trust");
    let out = support::block_on(sandbox.run(Command::shell("cat /version; test -e /forged && echo FORGED")))
        .unwrap();
    assert_eq!(out.stdout_lossy(), format!("{pid}-2"));
    support::block_on(sandbox.close()).unwrap();
    let forged = String::from_utf8_lossy(&built.stdout).trim().to_owned();
    docker(&["rmi", &forged]);

    // An older version of the template, still used by a live sandbox, then not.
    let old = backend().with_template("sbx-trust", template("1"));
    let old_image = old.prepare_template_blocking("sbx-trust").unwrap();
    assert_ne!(old_image.image, again.image);
    let user = create_from(old.clone(), "sbx-trust");
    let pruned = current.prune_templates_blocking().unwrap();
    assert!(pruned.kept.contains(&old_image.image) && pruned.kept.contains(&again.image), "{pruned:?}");
    // The first genuine image lost its tag to the forged one: untagged, it goes.
    assert!(pruned.removed.contains(&genuine.id), "{pruned:?}");
    assert!(docker(&["image", "inspect", &old_image.image]).0);
    support::block_on(user.close()).unwrap();
    let pruned = current.prune_templates_blocking().unwrap();
    assert_eq!(pruned.removed, vec![old_image.image.clone()], "{pruned:?}");
    assert!(!docker(&["image", "inspect", &old_image.image]).0, "the old image is still there");
    // The current one stays, and is still found by its content.
    assert!(current.prepare_template_blocking("sbx-trust").unwrap().cached);
    docker(&["rmi", &again.image]);
}
