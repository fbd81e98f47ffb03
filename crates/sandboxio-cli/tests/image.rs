//! `sandboxio image build`, driven through the built binary against the Docker engine
//! (`[skip]` without an engine and `sandboxio/busybox:1`; `SANDBOXIO_REQUIRE_DOCKER=1`
//! makes that a failure): the log streamed to stderr while the build runs, `--json` with
//! the image id, and a failed build's own error text with a non-zero exit code.

mod support;

use std::io::{BufRead as _, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::{Scratch, text};

fn docker(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("docker").args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn docker_ready() -> bool {
    if docker(&["image", "inspect", "sandboxio/busybox:1"]).0 {
        return true;
    }
    assert!(
        std::env::var_os("SANDBOXIO_REQUIRE_DOCKER").is_none(),
        "SANDBOXIO_REQUIRE_DOCKER is set: no Docker engine with sandboxio/busybox:1"
    );
    eprintln!("[skip] no Docker engine with sandboxio/busybox:1 (scripts/build-images busybox)");
    false
}

/// A scratch directory and an image tag of test `name`'s own, or `None` (and `[skip]`)
/// without an engine.
fn scratch_and_tag(name: &str) -> Option<(Scratch, String)> {
    docker_ready()
        .then(|| (Scratch::new(name), format!("sandboxio-test/cli-{name}-{}:1", std::process::id())))
}

/// A build context under the scratch directory with `dockerfile` and a file its
/// `.dockerignore` excludes.
fn context(s: &Scratch, dockerfile: &str) -> String {
    let dir = s.0.join("ctx");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("Dockerfile"), dockerfile).unwrap();
    std::fs::write(dir.join("kept.txt"), "kept\n").unwrap();
    std::fs::write(dir.join("secret.txt"), "ignored\n").unwrap();
    std::fs::write(dir.join(".dockerignore"), "secret.txt\n").unwrap();
    dir.to_string_lossy().into_owned()
}

#[test]
fn image_build_streams_its_log_and_prints_the_image_id() {
    let Some((s, tag)) = scratch_and_tag("image-build") else { return };
    let ctx = context(
        &s,
        "FROM sandboxio/busybox:1\nCOPY . /ctx/\nRUN echo cli-log-first; sleep 3; echo cli-log-second\n",
    );
    let mut child = s
        .cmd(&["image", "build", "--dsn", "docker://", "-t", &tag, "--json", &ctx])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen_first = None;
    let mut log = String::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        if line.contains("cli-log-first") && !line.contains("RUN") && seen_first.is_none() {
            seen_first = Some(Instant::now());
        }
        log.push_str(&line);
        log.push('\n');
    }
    let out = child.wait_with_output().unwrap();
    let ended = Instant::now();
    assert!(out.status.success(), "{log}");
    let first = seen_first.unwrap_or_else(|| panic!("the build's output was not on stderr: {log}"));
    // Streamed: the first line arrived while the step still slept, not with the result.
    assert!(ended - first >= Duration::from_secs(2), "the log came only at the end: {log}");
    assert!(log.contains("cli-log-second"), "{log}");
    let result: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    let id = result["image"]["id"].as_str().unwrap().to_owned();
    assert_eq!(result["image"]["tag"], tag.as_str());
    assert_eq!(docker(&["image", "inspect", "-f", "{{.Id}}", &tag]).1, id);
    // The context honoured its .dockerignore.
    let (ok, listed) = docker(&["run", "--rm", "--entrypoint", "ls", &tag, "/ctx"]);
    assert!(ok && listed.contains("kept.txt") && !listed.contains("secret.txt"), "{listed}");
    // Without --json: the id alone on stdout.
    let out = s.run(&["image", "build", "-t", &tag, &ctx]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), id, "the cached build gave another image");
    docker(&["rmi", &tag]);
}

#[test]
fn image_build_fails_with_the_builds_own_error_text() {
    let Some((s, tag)) = scratch_and_tag("image-build-fails") else { return };
    let ctx = context(&s, "FROM sandboxio/busybox:1\nRUN echo about-to-fail; exit 3\n");
    let out = s.run(&["image", "build", "-t", &tag, &ctx]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let err = text(&out.stderr);
    assert!(err.contains("about-to-fail"), "the log was not streamed: {err}");
    assert!(err.contains("returned a non-zero code: 3") && err.contains("sandboxio: "), "{err}");
    let out = s.run(&["image", "build", "--json", "-t", &tag, &ctx]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let result: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    let message = result["error"]["message"].as_str().unwrap();
    assert!(message.contains("returned a non-zero code: 3"), "{result}");
    assert!(result["error"]["code"].as_str().unwrap().starts_with("SBX-"), "{result}");
    assert!(!docker(&["image", "inspect", &tag]).0, "a failed build left its tag");
    // Positive control for the refusals: a DSN of another backend, and a missing context.
    let out = s.run(&["image", "build", "--dsn", "local://", "-t", &tag, &ctx]);
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("docker://"), "{}", text(&out.stderr));
    let out = s.run(&["image", "build", "-t", &tag, "/nonexistent/sandboxio-context"]);
    assert_eq!(out.status.code(), Some(125));
}

/// Class 20: a Dockerfile's `RUN` chooses what the build log prints, and the log is the
/// CLI's own stderr, not a command's output the operator asked for: its terminal escapes
/// (here a window title, a BEL and a screen clear) are shown escaped. Positive control: the
/// escaped form is in the log, which only a raw ESC byte from the build gives (the
/// Dockerfile spells it `\033`).
#[test]
fn image_build_escapes_what_the_build_prints() {
    let Some((s, tag)) = scratch_and_tag("image-build-escapes") else { return };
    // A step of this run's own, so that the engine's cache cannot skip it.
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let ctx = context(
        &s,
        &format!("FROM sandboxio/busybox:1\nRUN printf '\\033]0;pwned\\007\\033[2J\\n' # {nonce}\n"),
    );
    let out = s.run(&["image", "build", "-t", &tag, &ctx]);
    assert!(out.status.success(), "{out:?}");
    let err = text(&out.stderr);
    assert!(!out.stderr.iter().any(|b| matches!(b, 0x1b | 0x07)), "raw escapes on the CLI's stderr: {err:?}");
    assert!(err.contains(r"\x1b]0;pwned\x07\x1b[2J"), "control: the build printed the escapes: {err:?}");
    docker(&["rmi", &tag]);
}

/// Issue #30 item 8: a command killed for memory says so on stderr (it printed nothing and
/// exited 137, as any `kill -9`), and `--json` carries `oom_killed`; control: the same
/// command without the limit succeeds.
#[test]
fn an_out_of_memory_kill_is_said() {
    let Some((s, _)) = scratch_and_tag("oom") else { return };
    let dsn = "docker://?image=sandboxio/busybox:1";
    // One process with a 100-MB buffer, far over a 32-MiB limit: the one the OOM killer
    // takes (a shell pipeline let it take another process now and then, and the command
    // then ended without being the one killed).
    let hog = ["dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1"];
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--dsn", dsn];
        args.extend_from_slice(extra);
        args.push("--");
        args.extend_from_slice(&hog);
        s.run(&args)
    };
    let out = run(&["--memory", "32"]);
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert!(text(&out.stderr).contains("killed: out of memory"), "{out:?}");
    let out = run(&["--json", "--memory", "32"]);
    let last: serde_json::Value = serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["oom_killed"], true, "{last}");
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "control: {out:?}");
}
