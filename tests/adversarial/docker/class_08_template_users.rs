//! Class 8 (root users) and "what the caller trusts from the sandbox's own files", for
//! `docker://` templates (issue 27, hole 5): a template's setup runs as root and could
//! rewrite the image's `/etc/passwd` and `/etc/group`, which every sandbox of the template
//! then resolved its user against: a setup that mapped the base's user to `0:0` made every
//! such sandbox root. A template's sandboxes are resolved against the base image's files
//! as built (copies the host places after the setup, out of the setup's and the sandbox's
//! reach), at create and at `connect`, on both exec paths; a user that resolves to uid 0
//! without asking for root is refused.

use std::collections::HashMap;

use sandboxio::backends::docker::{DockerBackend, ExecPath, Template};
use sandboxio::{Command, ErrorCode, NetworkPolicy, Sandbox};

use super::docker_cli;
use crate::support::{self, block_on};

const BASE: &str = "sandboxio/busybox:1";

/// The base's user (`sandbox`, 1000:1000, home `/home/sandbox`) remapped to root in the
/// template's `/etc/passwd`, its home moved to `/root`, and added to group `root` (gid 0)
/// in `/etc/group`.
const REMAP_TO_ROOT: &str = "sed -i 's#^sandbox:x:1000:1000:sandbox:/home/sandbox:#sandbox:x:0:0:sandbox:/root:#' /etc/passwd \
     && sed -i 's#^root:x:0:.*#root:x:0:sandbox#' /etc/group";

/// What a command of the sandbox says about itself and about the files it runs on.
const PROBE: &str =
    "echo uid=$(id -u) groups=$(id -G) home=$HOME; grep '^sandbox:' /etc/passwd; grep '^root:' /etc/group";

fn said(sandbox: &Sandbox) -> String {
    let out = block_on(sandbox.run(Command::shell(PROBE))).unwrap();
    assert!(out.success(), "{out:?}");
    out.stdout_lossy().into_owned()
}

fn create(backend: &DockerBackend, template: &str) -> sandboxio::Result<Sandbox> {
    block_on(
        Sandbox::builder_with(backend.clone()).template(template).network(NetworkPolicy::deny_all()).create(),
    )
}

/// A template whose setup rewrote `/etc/passwd` to make the base's user uid 0 (and its home
/// `/root`, and a member of group 0) gives sandboxes that run as the base's user anyway, at
/// create and at `connect`, on sandboxd and on the exec API. Before the fix every sandbox
/// of it ran as uid 0 (both paths), with `HOME=/root` (sandboxd), and a `connect`ed handle
/// likewise. Positive controls in the same run: the setup's rewrite is in the sandbox's
/// `/etc/passwd` and `/etc/group`; a template whose setup leaves them alone gives uid 1000;
/// asking for root explicitly (`user=0`, and `root` by name) still gives uid 0.
#[test]
fn class_08__a_template_setup_cannot_make_its_sandboxes_root() {
    const TEST: &str = "class_08__a_template_setup_cannot_make_its_sandboxes_root";
    if !support::shared::docker_image_ready(TEST, BASE, "busybox") {
        return;
    }
    // Content of this run's own, so the setups run now (not found cached from a run of
    // other code).
    let stamp = format!("{}-{:?}", std::process::id(), std::time::Instant::now());
    let control = Template::new(BASE).file("/stamp", stamp.clone()).run("echo control > /control");
    let remapped = Template::new(BASE).file("/stamp", stamp.clone()).run(REMAP_TO_ROOT);
    let backend = DockerBackend::from_env()
        .unwrap()
        .with_docker_config("/nonexistent/sandboxio/config.json")
        .with_template("sbx-users-control", control)
        .with_template("sbx-users-remapped", remapped);
    let mut images = Vec::new();
    for name in ["sbx-users-control", "sbx-users-remapped"] {
        images.push(backend.prepare_template_blocking(name).unwrap().image);
    }
    let mut failures = Vec::new();
    for path in [ExecPath::Sandboxd, ExecPath::ExecApi] {
        let backend = backend.clone().with_exec_path(path);
        // Control: a setup that leaves the users alone.
        let sandbox = create(&backend, "sbx-users-control").unwrap();
        let control = said(&sandbox);
        block_on(sandbox.close()).unwrap();
        assert!(control.starts_with("uid=1000 "), "{path:?}: the control template's user: {control}");

        // The attack.
        let sandbox = create(&backend, "sbx-users-remapped").unwrap();
        let attacked = said(&sandbox);
        assert!(
            attacked.contains("\nsandbox:x:0:0:sandbox:/root:") && attacked.contains("\nroot:x:0:sandbox"),
            "{path:?}: the setup's rewrite is not in the sandbox's files (no attack): {attacked}"
        );
        let first = attacked.lines().next().unwrap_or_default().to_owned();
        let groups: Vec<&str> = first
            .split_once("groups=")
            .map_or("", |(_, g)| g.split(" home=").next().unwrap_or_default())
            .split(' ')
            .collect();
        if !first.starts_with("uid=1000 ") || groups.contains(&"0") {
            failures.push(format!("{path:?}: a sandbox of the remapped template runs as {first:?}"));
        }
        if path == ExecPath::Sandboxd && !first.ends_with(" home=/home/sandbox") {
            failures.push(format!("{path:?}: its HOME comes from the setup's /etc/passwd: {first:?}"));
        }
        // A handle from `connect` resolves the user again: against the same trusted files.
        let connected = block_on(Sandbox::connect("docker://", sandbox.id())).unwrap();
        let again = said(&connected);
        let again = again.lines().next().unwrap_or_default();
        if !again.starts_with("uid=1000 ") {
            failures.push(format!("{path:?}: a connected handle runs as {again:?}"));
        }
        drop(connected);
        block_on(sandbox.close()).unwrap();

        // Root, asked for, is still root: by number and by name.
        for user in ["0", "root"] {
            let sandbox = create(&backend.clone().with_user(user), "sbx-users-remapped").unwrap();
            let root = said(&sandbox);
            block_on(sandbox.close()).unwrap();
            assert!(root.starts_with("uid=0 "), "{path:?}: user={user} asked for root: {root}");
        }
    }
    for image in &images {
        docker_cli(&["rmi", image]);
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// An image whose own `/etc/passwd` maps its configured user (not `root`) to uid 0 is
/// refused with a clear `Configuration` error, as a plain image and as a template's base,
/// on both paths: root is run only when asked for. (Before the fix such a sandbox ran as
/// uid 0.) Positive controls: the image does say so (`docker run` runs as uid 0), and the
/// same image with `user=0` creates and runs as root.
#[test]
fn class_08__a_user_that_resolves_to_root_unasked_is_refused() {
    const TEST: &str = "class_08__a_user_that_resolves_to_root_unasked_is_refused";
    if !support::shared::docker_image_ready(TEST, BASE, "busybox") {
        return;
    }
    let tag = format!("sandboxio-test/root-named-sandbox:{}", std::process::id());
    let context = std::env::temp_dir().join(format!("sbx-root-named-{}", std::process::id()));
    std::fs::create_dir_all(&context).unwrap();
    std::fs::write(
        context.join("Dockerfile"),
        format!(
            "FROM {BASE}\nUSER 0\nRUN sed -i 's#^sandbox:x:1000:1000:#sandbox:x:0:0:#' /etc/passwd\nUSER sandbox\n"
        ),
    )
    .unwrap();
    let built = std::process::Command::new("docker")
        .args(["build", "-q", "--force-rm", "-t", &tag])
        .arg(&context)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&context).unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let engine_says = docker_cli(&["run", "--rm", "--network", "none", &tag, "id", "-u"]);
    let template = Template::new(tag.clone()).run("true");
    let backend = DockerBackend::from_env()
        .unwrap()
        .with_docker_config("/nonexistent/sandboxio/config.json")
        .with_template("sbx-users-root-named", template);
    let mut outcomes = HashMap::new();
    for path in [ExecPath::Sandboxd, ExecPath::ExecApi] {
        let backend = backend.clone().with_exec_path(path);
        let plain = block_on(
            Sandbox::builder_with(backend.clone()).image(&tag).network(NetworkPolicy::deny_all()).create(),
        );
        let from_template = create(&backend, "sbx-users-root-named");
        let asked = block_on(
            Sandbox::builder_with(backend.clone().with_user("0"))
                .image(&tag)
                .network(NetworkPolicy::deny_all())
                .create(),
        )
        .map(|s| {
            let uid = block_on(s.run(Command::shell("id -u"))).map(|o| o.stdout_lossy().trim().to_owned());
            let _ = block_on(s.close());
            uid
        });
        for (what, created) in [("plain", plain), ("template", from_template)] {
            let outcome = match created {
                Ok(sandbox) => {
                    let uid = block_on(sandbox.run(Command::shell("id -u")))
                        .map(|o| o.stdout_lossy().trim().to_owned());
                    let _ = block_on(sandbox.close());
                    format!("created, running as uid {uid:?}")
                }
                Err(e) => format!("{:?}: {e}", e.code()),
            };
            outcomes.insert(format!("{path:?} {what}"), outcome);
        }
        outcomes.insert(format!("{path:?} asked"), format!("{asked:?}"));
    }
    let prepared = backend.prepare_template_blocking("sbx-users-root-named");
    if let Ok(prepared) = &prepared {
        docker_cli(&["rmi", &prepared.image]);
    }
    docker_cli(&["rmi", &tag]);
    assert_eq!(engine_says.trim(), "0", "the image's user is not root to the engine (no attack)");
    for (what, outcome) in &outcomes {
        if what.ends_with("asked") {
            assert!(outcome.contains("Ok(Ok(\"0\"))"), "{what}: root asked for: {outcome}");
        } else {
            assert!(
                outcome.starts_with(&format!("{:?}:", ErrorCode::Configuration))
                    && outcome.contains("uid 0")
                    && outcome.contains("user=0"),
                "{what}: {outcome}"
            );
        }
    }
}
