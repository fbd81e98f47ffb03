//! Class 11 on `docker://`: an earlier command cannot forge what a later code cell reports.
//! On the exec-API path that is the cell's error record (first seen failing on the code
//! before this test: record names were the handle's nonce and a counter, learnable from one
//! record); on the sandboxd path, the runner's control channel.

use std::time::Duration;

use sandboxio::{Command, NetworkPolicy};

use crate::support::{self, block_on};

use super::docker_cli;

/// Waits for a cell's error record to appear, then plants records under every name it can
/// derive from it (the next 200 counter values where the name ends in one), and says so.
const WATCHER: &str = r#"while :; do
  for f in /tmp/.sandboxio/*.error; do
    [ -e "$f" ] || continue
    printf 'ForgedError\0forged by another command\0tb' > "${f%.error}-forged.error" || exit 1
    b=${f%-*}; n=${f##*-}; n=${n%.error}
    case $n in
      ''|*[!0-9]*) ;;
      *) i=1; while [ $i -le 200 ]; do printf 'ForgedError\0forged by another command\0tb' > "$b-$((n + i)).error"; i=$((i + 1)); done ;;
    esac
    echo planted; exec sleep 600
  done
  sleep 0.02
done"#;

/// On the sandboxd path a cell's results travel on its runner's control channel (descriptor
/// 3 of the `python3` that runs the cells): finds every runner process and writes a forged
/// error and end into its descriptor 3, saying `found` once it saw one and `wrote` for each
/// write that got through.
const CHANNEL_FORGER: &str = r#"seen=
while :; do
  for d in /proc/[0-9]*; do
    p=${d#/proc/}; [ "$p" = $$ ] && continue
    case $(tr '\0' ' ' < "$d/cmdline" 2>/dev/null) in
      python3\ -I\ -u\ -c*|python3\ -u\ -c*|*/python3\ -I\ -u\ -c*)
        [ -z "$seen" ] && { echo found; seen=1; }
        # The channel was descriptor 3; the runner now moves it: try every descriptor. (A
        # runner started undumpable is its loader's copy with python3 as first argument.)
        for f in "$d"/fd/*; do
          { printf 'error 30\nForgedError\nforged\ntraceback\ndone 1 0\n' > "$f"; } 2>/dev/null && echo wrote
        done ;;
    esac
  done
  sleep 0.05
done"#;

#[test]
fn class_11__an_earlier_command_cannot_forge_a_later_cells_error() {
    const TEST: &str = "class_11__an_earlier_command_cannot_forge_a_later_cells_error";
    if !support::docker_ready(TEST) {
        return;
    }
    if !support::exec_option().contains("api") {
        forge_the_runners_channel(TEST);
        return;
    }
    let sandbox = support::docker(NetworkPolicy::deny_all());
    block_on(async {
        let mut watcher = sandbox.stream(Command::shell(WATCHER)).unwrap();
        // A cell that raises leaves a record for the watcher to learn from.
        let first = sandbox.run_code("raise KeyError('first')").await.unwrap();
        assert_eq!(first.error.as_ref().map(|e| e.name.as_str()), Some("KeyError"));
        // Positive control: the watcher saw the record and planted its forgeries.
        let planted = futures_lite::future::or(
            async { watcher.next_chunk().await.and_then(Result::ok).is_some_and(|c| c.data == b"planted\n") },
            async {
                futures_timer::Delay::new(Duration::from_secs(20)).await;
                false
            },
        )
        .await;
        if !planted {
            support::skip(TEST, "the watcher never saw a record to forge from");
            return;
        }
        for _ in 0..3 {
            let exited = sandbox.run_code("import sys; sys.exit(3)").await.unwrap();
            assert!(exited.error.is_none(), "a later cell reported a forged error: {:?}", exited.error);
            let raised = sandbox.run_code("raise ValueError('mine')").await.unwrap();
            assert_eq!(
                raised.error.as_ref().map(|e| e.name.as_str()),
                Some("ValueError"),
                "{:?}",
                raised.error
            );
        }
        drop(watcher);
    });
    let _ = block_on(sandbox.close());
}

/// The sandboxd path: a command that watches for runners and writes into their control
/// channel gets nothing through, and later cells report their own results.
fn forge_the_runners_channel(test: &str) {
    for user in [None, Some("0")] {
        let dsn = match user {
            Some(user) => format!("docker://?image={}&user={user}", support::DOCKER_IMAGE),
            None => format!("docker://?image={}", support::DOCKER_IMAGE),
        };
        let sandbox =
            block_on(sandboxio::Sandbox::builder(&dsn).unwrap().network(NetworkPolicy::deny_all()).create())
                .unwrap();
        block_on(async {
            let ctx = sandbox.create_context("python").await.unwrap();
            let mut forger = sandbox.stream(Command::shell(CHANNEL_FORGER)).unwrap();
            // Positive control: the forger finds the context's runner (its stdout says so;
            // anything on stderr is not the answer).
            let found = futures_lite::future::or(
                async {
                    while let Some(Ok(chunk)) = forger.next_chunk().await {
                        if chunk.stream == sandboxio::exec::StreamKind::Stdout
                            && chunk.data.starts_with(b"found")
                        {
                            return true;
                        }
                    }
                    false
                },
                async {
                    futures_timer::Delay::new(Duration::from_secs(20)).await;
                    false
                },
            )
            .await;
            assert!(found, "{test} (user {user:?}): the forger never found the runner");
            for _ in 0..5 {
                let ok = sandbox.run_code(sandboxio::Code::new("6 * 7").in_context(&ctx)).await.unwrap();
                assert!(ok.error.is_none(), "{test} (user {user:?}): a forged error: {:?}", ok.error);
                assert_eq!(
                    ok.results.first().and_then(|b| b.get("text/plain")).map(Vec::as_slice),
                    Some(&b"42"[..])
                );
                let raised = sandbox
                    .run_code(sandboxio::Code::new("raise ValueError('mine')").in_context(&ctx))
                    .await
                    .unwrap();
                assert_eq!(
                    raised.error.as_ref().map(|e| e.name.as_str()),
                    Some("ValueError"),
                    "{:?}",
                    raised.error
                );
            }
            // Everything the forger said meanwhile (it keeps trying every 50 ms).
            let mut said = String::new();
            futures_lite::future::or(
                async {
                    while let Some(Ok(chunk)) = forger.next_chunk().await {
                        said.push_str(&String::from_utf8_lossy(&chunk.data));
                    }
                },
                futures_timer::Delay::new(Duration::from_secs(1)),
            )
            .await;
            assert!(!said.contains("wrote"), "{test} (user {user:?}): a write got through: {said:?}");
            drop(forger);
        });
        let _ = block_on(sandbox.kill());
    }
}

/// A template's setup runs as root in its container, where PID 1's command line is readable.
/// Reads the last word of it (where the setup's exit marker nonce was passed) and prints a
/// success marker with it, then says so on a line of its own and gives the host time to
/// commit before the commands after it run.
const SETUP_MARKER_FORGER: &str = r#"n=$(tr '\0' '\n' < /proc/1/cmdline | tail -n 1)
echo "sandboxio-setup-exit=$n:0"
echo "forger-printed-a-marker"
sleep 2"#;

/// The image's file `path`, read by a container of the engine's own (`None`: not there).
fn image_file(image: &str, path: &str) -> Option<String> {
    let out = std::process::Command::new("docker")
        .args(["run", "--rm", "--network", "none", "--entrypoint", "cat", image, path])
        .output()
        .unwrap();
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A setup command (untrusted code, say a package's install script) cannot make the host
/// take a setup as finished before it is: before the fix the host took the first
/// `sandboxio-setup-exit=<nonce>:` line as the setup's status, and the nonce was in PID 1's
/// argv, so a setup that printed it with `0` was committed, cached and trusted as the
/// template's image at once: one whose last command then failed built, and one whose later
/// commands (say, removing a secret the install needed) had not run yet was committed
/// without them. Positive controls in the same run: a setup reads PID 1's command line, a
/// plain setup builds with every command's effect, and a plain failure fails.
#[test]
fn class_11__a_template_setup_cannot_forge_its_own_success() {
    use sandboxio::ErrorCode;
    use sandboxio::backends::docker::{DockerBackend, Template};
    use std::sync::{Arc, Mutex};
    const TEST: &str = "class_11__a_template_setup_cannot_forge_its_own_success";
    const BASE: &str = "sandboxio/busybox:1";
    if !support::shared::docker_image_ready(TEST, BASE, "busybox") {
        return;
    }
    let stamp = format!("{}-{:?}", std::process::id(), std::time::Instant::now());
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = Arc::clone(&lines);
    let control = Template::new(BASE)
        .file("/stamp", stamp.clone())
        .run("tr '\\0' '\\n' < /proc/1/cmdline > /pid-1-cmdline")
        .run("sleep 1; echo done > /last-command-ran");
    let plain_failure = Template::new(BASE).file("/stamp", stamp.clone()).run("exit 3");
    let forged_then_failed =
        Template::new(BASE).file("/stamp", stamp.clone()).run(SETUP_MARKER_FORGER).run("exit 3");
    let forged_then_more = Template::new(BASE)
        .file("/root/install-secret", format!("install-secret-{stamp}"))
        .run(SETUP_MARKER_FORGER)
        .run("rm /root/install-secret; echo done > /last-command-ran");
    let backend = DockerBackend::from_env()
        .unwrap()
        .with_docker_config("/nonexistent/sandboxio/config.json")
        .with_template("sbx-forge-control", control)
        .with_template("sbx-forge-plain-failure", plain_failure)
        .with_template("sbx-forged-then-failed", forged_then_failed)
        .with_template("sbx-forged-then-more", forged_then_more)
        .with_build_log(move |line| log.lock().unwrap().push(line.to_owned()));

    // Controls: a plain setup builds with every command's effect, and reads PID 1's
    // command line; a plain failure fails.
    let built = backend.prepare_template_blocking("sbx-forge-control").unwrap();
    let seen = image_file(&built.image, "/pid-1-cmdline");
    let last = image_file(&built.image, "/last-command-ran");
    docker_cli(&["rmi", &built.image]);
    assert!(seen.as_deref().is_some_and(|s| s.starts_with("sh")), "the setup reads PID 1's argv: {seen:?}");
    assert_eq!(last.as_deref(), Some("done"), "the control's last command");
    let e = backend.prepare_template_blocking("sbx-forge-plain-failure").unwrap_err();
    assert_eq!(e.code(), ErrorCode::Provider, "{e}");
    assert!(e.to_string().contains("exited with 3"), "{e}");

    // The attacks: a forged marker is output, never the setup's status.
    let forged = backend.prepare_template_blocking("sbx-forged-then-failed");
    if let Ok(prepared) = &forged {
        docker_cli(&["rmi", &prepared.image]);
        panic!(
            "a setup whose last command failed was committed as {} after a forged success",
            prepared.image
        );
    }
    let e = forged.unwrap_err();
    assert_eq!(e.code(), ErrorCode::Provider, "{e}");
    assert!(e.to_string().contains("exited with 3"), "{e}");
    let prepared = backend.prepare_template_blocking("sbx-forged-then-more").unwrap();
    let (secret, last) = (
        image_file(&prepared.image, "/root/install-secret"),
        image_file(&prepared.image, "/last-command-ran"),
    );
    docker_cli(&["rmi", &prepared.image]);
    assert_eq!(
        (secret, last.as_deref()),
        (None, Some("done")),
        "committed before the commands after a forged success ran"
    );
    let printed = lines.lock().unwrap().iter().filter(|l| *l == "forger-printed-a-marker").count();
    assert_eq!(printed, 2, "the forger ran in both attacks");
}
