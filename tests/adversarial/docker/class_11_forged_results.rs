//! Class 11 on `docker://`: an earlier command cannot plant the error record a later code
//! cell reports. First seen failing on the code before this test (record names were the
//! handle's nonce and a counter, learnable from one record).

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

#[test]
fn class_11__an_earlier_command_cannot_forge_a_later_cells_error() {
    const TEST: &str = "class_11__an_earlier_command_cannot_forge_a_later_cells_error";
    if !support::docker_ready(TEST) {
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
