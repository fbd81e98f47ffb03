//! `ls`, `reap` and `extend` through the built binary, on `local://` (each test has its
//! own `TMPDIR`, so the local backend's workspace root is the test's own) and on
//! `docker://` with the `sandboxio/busybox:1` test image (skipped, saying why, without an
//! engine or the image; `SANDBOXIO_REQUIRE_DOCKER=1` makes that a failure). The Docker test
//! reaps with `--label` only: the engine is shared, and an unfiltered sweep would take
//! other programs' orphans too. An owner killed by SIGKILL leaves no container there (it ends with
//! the owner's attach stream), so the orphan it sweeps is one the test labels as
//! sandboxio's, with a dead owner.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Scratch, text};

const DOCKER_DSN: &str = "docker://?image=sandboxio/busybox:1";

/// One JSON object from stdout.
fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// The sandboxes `ls --json` reports on `dsn` with label `test=<tag>`.
fn listed(s: &Scratch, dsn: &str, tag: &str) -> Vec<Value> {
    let label = format!("test={tag}");
    let out = s.run(&["ls", "--dsn", dsn, "--label", &label, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    json_of(&out)["sandboxes"].as_array().unwrap().clone()
}

/// `sandboxio run --label test=<tag> -- sh -c 'echo ready; sleep 120'` on `dsn`, once it
/// printed `ready` (so its sandbox exists).
fn running(s: &Scratch, dsn: &str, tag: &str) -> Child {
    running_labelled(s, dsn, tag, &[])
}

/// As [`running`], with more `--label KEY=VALUE` arguments.
fn running_labelled(s: &Scratch, dsn: &str, tag: &str, more: &[&str]) -> Child {
    let label = format!("test={tag}");
    let mut args = vec!["run", "--dsn", dsn, "--label", &label];
    for extra in more {
        args.extend(["--label", extra]);
    }
    args.extend(["--", "sh", "-c", "echo ready; sleep 120"]);
    let mut child = s.cmd(&args).stdin(Stdio::null()).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    child
}

/// Waits (up to 10 s) until the kernel reaped `child` after a SIGKILL.
fn sigkill(child: &mut Child) {
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
}

fn removed(report: &Value) -> Vec<String> {
    report["backends"][0]["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn local_ls_sees_what_runs_and_reap_removes_what_a_sigkilled_owner_left() {
    let s = Scratch::new("inv-local");
    let tag = format!("inv-{}", std::process::id());
    let mut child = running(&s, "local://", &tag);
    let found = listed(&s, "local://", &tag);
    assert_eq!(found.len(), 1, "{found:?}");
    let info = &found[0];
    let id = info["id"].as_str().unwrap().to_owned();
    assert_eq!(info["backend"], "local");
    assert_eq!(info["owner_alive"], true);
    assert_eq!(info["detached"], false);
    assert_eq!(info["labels"], serde_json::json!({ "test": tag }));
    assert!(info["age_s"].as_u64().unwrap() < 60, "{info}");
    let ttl = info["ttl_left_s"].as_u64().unwrap();
    assert!((500..=600).contains(&ttl), "the default TTL, 10 minutes: {info}");
    assert!(listed(&s, "local://", "another-tag").is_empty(), "the label filters");

    // The table names the same sandbox.
    let out = s.run(&["ls", "--dsn", "local://"]);
    let table = text(&out.stdout);
    assert!(table.starts_with("ID "), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&id) && l.contains(" alive ") && l.ends_with(&format!("test={tag}"))),
        "{table}"
    );

    // A live owner's sandbox is never reaped, even with --owner-dead.
    let out = s.run(&["reap", "--dsn", "local://", "--owner-dead", "--json"]);
    assert_eq!(removed(&json_of(&out)), Vec::<String>::new(), "{out:?}");
    assert_eq!(s.leftovers(), [id.as_str()]);

    sigkill(&mut child);
    let found = listed(&s, "local://", &tag);
    assert_eq!(found[0]["owner_alive"], false, "{found:?}");

    let out = s.run(&["reap", "--dsn", "local://", "--json"]);
    assert_eq!(removed(&json_of(&out)), Vec::<String>::new(), "not expired, and --owner-dead not given");
    let out = s.run(&["reap", "--dsn", "local://", "--owner-dead", "--dry-run", "--json"]);
    let report = json_of(&out);
    assert_eq!(report["dry_run"], true);
    assert_eq!(removed(&report), [id.as_str()]);
    assert_eq!(s.leftovers(), [id.as_str()], "a dry run removes nothing");
    let out = s.run(&["reap", "--dsn", "local://", "--owner-dead", "--label", "test=another-tag", "--json"]);
    assert_eq!(removed(&json_of(&out)), Vec::<String>::new(), "--label keeps the sweep to what it names");
    let out = s.run(&["reap", "--dsn", "local://", "--owner-dead"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), format!("removed {id} (local://)\n"));
    assert_eq!(s.leftovers(), Vec::<String>::new());
    assert!(listed(&s, "local://", &tag).is_empty());
}

/// Class 20: ids and labels are whoever made the sandbox's (on `docker://`, anyone with the
/// engine's socket), and `ls` prints them in the CLI's own table: a label holding a window
/// title, a BEL, a screen clear and a newline is shown escaped, one row per sandbox.
/// Positive control: `ls --json` reports the label as it is, raw bytes included.
#[test]
fn ls_shows_a_label_with_terminal_escapes_escaped() {
    const PAYLOAD: &str = "\x1b]0;pwned\x07\x1b[2J\nforged-row";
    let s = Scratch::new("inv-escapes");
    let tag = format!("esc-{}", std::process::id());
    let evil = format!("evil={PAYLOAD}");
    let mut child = running_labelled(&s, "local://", &tag, &[&evil]);
    let found = listed(&s, "local://", &tag);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["labels"]["evil"], PAYLOAD, "control: the label is held raw");
    let out = s.run(&["ls", "--dsn", "local://", "--label", &format!("test={tag}")]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let table = text(&out.stdout);
    assert!(!out.stdout.iter().any(|b| matches!(b, 0x1b | 0x07)), "raw escapes in ls: {table:?}");
    assert!(table.contains(r"evil=\x1b]0;pwned\x07\x1b[2J\nforged-row"), "{table:?}");
    assert_eq!(table.lines().count(), 2, "a header and one row: {table:?}");
    sigkill(&mut child);
}

#[test]
fn extend_is_refused_where_the_ttl_is_fixed_and_ls_reports_a_bad_dsn() {
    let s = Scratch::new("inv-extend");
    let out = s.run(&["create", "--detach", "--ttl", "120", "--label", "test=extend"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let id = text(&out.stdout).trim().to_owned();
    let out = s.run(&["extend", "--json", &id, "2h"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let v = json_of(&out);
    assert_eq!(v["error"]["code"], "SBX-004", "CapabilityNotSupported: {v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("EXTEND_TTL"), "{v}");
    let out = s.run(&["extend", &id, "soon"]);
    assert_eq!(out.status.code(), Some(2), "clap refuses a malformed duration: {out:?}");
    let found = listed(&s, "local://", "extend");
    assert_eq!((found.len(), &found[0]["detached"]), (1, &Value::Bool(true)), "{found:?}");
    assert!(found[0]["ttl_left_s"].as_u64().unwrap() <= 120);
    assert_eq!(s.run(&["kill", &id]).status.code(), Some(0));

    let out = s.run(&["ls", "--dsn", "nosuch://", "--json"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let v = json_of(&out);
    assert_eq!(v["errors"][0]["dsn"], "nosuch://", "{v}");
    assert_eq!(v["errors"][0]["error"]["code"], "SBX-003", "{v}");
    assert_eq!(s.leftovers(), Vec::<String>::new());
}

/// Why Docker tests cannot run here, or `None` when they can.
fn docker_missing() -> Option<String> {
    let out = std::process::Command::new("docker").args(["image", "inspect", "sandboxio/busybox:1"]).output();
    match out {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!("no engine or no image sandboxio/busybox:1: {}", text(&out.stderr).trim())),
        Err(e) => Some(format!("no docker command: {e}")),
    }
}

/// Removes this test's own container (by its id) however the test ends.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker").args(["rm", "-f", &self.0]).output();
    }
}

/// Polls `ls` on `docker://` for label `test=<tag>` until it lists `n` sandboxes, for up to
/// 15 s; returns the last listing.
fn until_listed(s: &Scratch, tag: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let found = listed(s, "docker://", tag);
        if found.len() == n || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A container labelled as sandboxio labels its own, whose owner is this host's process
/// `std::process::id()` started at another time (so dead, as a reused pid reads): what an
/// owner leaves when its engine was not told it died.
fn orphan(tag: &str) -> RemoveOnDrop {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_owned();
    let expires = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 600;
    let labels = [
        "io.sandboxio.managed=true".to_owned(),
        format!("io.sandboxio.owner={host}:{}:1", std::process::id()),
        format!("io.sandboxio.expires={expires}"),
        "io.sandboxio.detached=false".to_owned(),
        format!("test={tag}"),
    ];
    let mut argv = vec!["run".to_owned(), "-d".to_owned()];
    for label in labels {
        argv.extend(["--label".to_owned(), label]);
    }
    argv.extend(["sandboxio/busybox:1", "sleep", "120"].map(str::to_owned));
    let out = std::process::Command::new("docker").args(&argv).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    RemoveOnDrop(text(&out.stdout).trim().to_owned())
}

#[test]
fn docker_ls_sees_what_runs_and_reap_removes_what_a_dead_owner_left() {
    if let Some(why) = docker_missing() {
        assert!(
            std::env::var_os("SANDBOXIO_REQUIRE_DOCKER").is_none(),
            "SANDBOXIO_REQUIRE_DOCKER is set: {why}"
        );
        eprintln!("[skip] {why}");
        return;
    }
    let s = Scratch::new("inv-docker");
    let tag = format!("inv-docker-{}", std::process::id());
    let mut child = running(&s, DOCKER_DSN, &tag);
    let found = listed(&s, "docker://", &tag);
    assert_eq!(found.len(), 1, "{found:?}");
    let _cleanup = RemoveOnDrop(found[0]["id"].as_str().unwrap().to_owned());
    assert_eq!(
        (found[0]["backend"].as_str(), found[0]["owner_alive"].as_bool()),
        (Some("docker"), Some(true))
    );
    assert_eq!(found[0]["labels"], serde_json::json!({ "test": tag }));
    assert_eq!(found[0]["detached"], false);
    // A SIGKILLed owner's container ends with its attach stream and the engine removes it.
    sigkill(&mut child);
    assert_eq!(until_listed(&s, &tag, 0), Vec::<Value>::new(), "nothing is left of a SIGKILLed owner's run");

    let tag = format!("inv-orphan-{}", std::process::id());
    let orphaned = orphan(&tag);
    let id = orphaned.0.clone();
    let found = listed(&s, "docker://", &tag);
    assert_eq!(
        (found.len(), &found[0]["id"], &found[0]["owner_alive"]),
        (1, &Value::from(id.clone()), &Value::Bool(false))
    );
    let label = format!("test={tag}");
    let reap = |extra: &[&str]| {
        let mut argv = vec!["reap", "--dsn", "docker://", "--label", &label, "--json"];
        argv.extend(extra);
        json_of(&s.run(&argv))
    };
    assert_eq!(removed(&reap(&[])), Vec::<String>::new(), "not expired, and --owner-dead not given");
    assert_eq!(removed(&reap(&["--owner-dead", "--dry-run"])), [id.as_str()]);
    assert_eq!(listed(&s, "docker://", &tag).len(), 1, "a dry run removes nothing");
    let report = reap(&["--owner-dead"]);
    assert_eq!(removed(&report), [id.as_str()]);
    assert_eq!(report["backends"][0]["kept"], 0, "other sandboxes are not looked at: {report}");
    assert!(listed(&s, "docker://", &tag).is_empty(), "after the sweep");
}
