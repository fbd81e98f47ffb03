//! Class 11 on `docker://`: an earlier command cannot forge what a later code cell reports.
//! On the exec-API path that is the cell's error record (first seen failing on the code
//! before this test: record names were the handle's nonce and a counter, learnable from one
//! record); on the sandboxd path, the runner's control channel.

use std::time::Duration;

use sandboxio::{Command, NetworkPolicy};

use crate::support::{self, block_on};

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
      python3\ -u\ -c*)
        [ -z "$seen" ] && { echo found; seen=1; }
        { printf 'error 30\nForgedError\nforged\ntraceback\ndone 1 0\n' > "$d/fd/3"; } 2>/dev/null && echo wrote ;;
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
                        if chunk.stream == sandboxio::StreamKind::Stdout && chunk.data.starts_with(b"found") {
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
