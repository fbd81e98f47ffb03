//! Class 9: a command's own secrets (`Command::secret_env`) are invisible to the sandbox's
//! other commands. First seen failing on d269073 (main): a second command read a streaming
//! command's secret from `/proc/<pid>/environ`.

use std::time::Duration;

use sandboxio::{Command, ErrorCode, NetworkPolicy};

use crate::support::{self, block_on};

/// Reads every process's environment it can. The positive control runs first, in the same
/// command: a child of this command, of the same user, carrying a variable of its own, must
/// be readable this very way; and the victim's process (same user) must be visible in `/proc`.
const THIEF: &str = r#"SBX_OWN_CANARY=own-7711 sleep 30 & own=$!
sleep 0.3
tr '\0' '\n' < /proc/$own/environ | grep -q '^SBX_OWN_CANARY=own-7711$' && echo control-own-environ-read
me=$(id -u)
for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in
    "sleep 9901"*) grep -q "^Uid:[[:space:]]*$me[[:space:]]" $p/status && echo control-victim-visible-same-user ;;
  esac
  tr '\0' '\n' < $p/environ 2>/dev/null | grep '^SBX_CMD_SECRET='
done
kill $own
exit 0"#;

#[test]
fn class_09__a_commands_secret_is_invisible_to_other_commands() {
    const TEST: &str = "class_09__a_commands_secret_is_invisible_to_other_commands";
    if !support::docker_ready(TEST) {
        return;
    }
    // The image's user, and root (uid 0 with no capability).
    for user in ["", "0"] {
        attack(user);
    }
}

/// One victim and one thief in a sandbox whose user is `user` (empty: the image's).
fn attack(user: &str) {
    const TEST: &str = "class_09__a_commands_secret_is_invisible_to_other_commands";
    let canary = "cmd-secret-canary-3f9c";
    let dsn = if user.is_empty() {
        format!("docker://?image={}{}", support::DOCKER_IMAGE, support::exec_option())
    } else {
        format!("docker://?image={}&user={user}{}", support::DOCKER_IMAGE, support::exec_option())
    };
    let sandbox =
        block_on(sandboxio::Sandbox::builder(&dsn).unwrap().network(NetworkPolicy::deny_all()).create())
            .unwrap();
    block_on(async {
        let victim = Command::shell("echo up; exec sleep 9901").secret_env("SBX_CMD_SECRET", canary);
        let mut stream = match sandbox.stream(victim) {
            Ok(stream) => stream,
            Err(e) if e.code() == ErrorCode::CapabilityNotSupported => {
                println!(
                    "{TEST}: docker:// refuses command-scoped secrets ({e}): the class is closed by refusal"
                );
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let first = stream.next_chunk().await.expect("the victim starts");
        if let Err(e) = &first
            && e.code() == ErrorCode::CapabilityNotSupported
        {
            println!("{TEST} (user {user:?}): refused ({e}): the class is closed by refusal");
            return;
        }
        assert_eq!(first.unwrap().data, b"up\n");
        // The victim really holds the secret (it is not a sandbox-wide one).
        std::thread::sleep(Duration::from_millis(200));
        let out = sandbox.run(Command::shell(THIEF)).await.unwrap();
        let text = out.stdout_lossy();
        if !text.contains("control-own-environ-read") || !text.contains("control-victim-visible-same-user") {
            support::skip(
                TEST,
                &format!("the environ read does not work unconfined: {text} {}", out.stderr_lossy()),
            );
            return;
        }
        println!("{TEST} (user {user:?}): controls passed; the thief read: {text:?}");
        assert!(!text.contains(canary), "another command read the secret (user {user:?}): {text}");
        drop(stream);
    });
    let _ = block_on(sandbox.close());
}

/// On the sandboxd path: replaces the image's `sh` with one that appends its environment to
/// `/tmp/loot` and then runs the real one: every later `sh` a command starts (a shell
/// command, a script) hands it its environment, secrets included. Only a root sandbox user
/// can (uid 0 owns `/bin`).
const TROJAN_ANY_SH: &str = r#"set -e
real=$(readlink -f /bin/sh)
cp "$real" /bin/sh.real
printf '#!/bin/sh.real\nenv >> /tmp/loot\nexec /bin/sh.real "$@"\n' > /tmp/sh.trojan
chmod 755 /tmp/sh.trojan
rm -f /bin/sh && cp /tmp/sh.trojan /bin/sh
echo installed"#;

/// On the exec-API path: replaces the image's `sh` with one that, when it runs sandboxio's
/// wrapper, appends the decoded environment to `/tmp/loot` before starting the command.
/// Only a root sandbox user can (uid 0 owns `/bin`, and no capability is needed to write
/// what one owns).
const TROJAN: &str = r#"set -e
real=$(readlink -f /bin/sh)
cp "$real" /bin/sh.real
cat > /tmp/sh.trojan <<'T'
#!/bin/sh.real
case "$2" in *__sbx_sweep*)
  s=$(printf '%s\n' "$2" | sed 's/^("\$@")/env >> \/tmp\/loot; ("$@")/'); shift 2
  exec /bin/sh.real -c "$s" "$@" ;;
esac
exec /bin/sh.real "$@"
T
chmod 755 /tmp/sh.trojan
rm -f /bin/sh && cp /tmp/sh.trojan /bin/sh
echo installed"#;

#[test]
fn class_09__a_root_user_cannot_trojan_a_later_commands_secrets() {
    const TEST: &str = "class_09__a_root_user_cannot_trojan_a_later_commands_secrets";
    if !support::docker_ready(TEST) {
        return;
    }
    let (canary, sandbox_wide) = ("cmd-secret-canary-77ad", "sandbox-wide-canary-5e01");
    let dsn = format!("docker://?image={}&user=0{}", support::DOCKER_IMAGE, support::exec_option());
    let sandbox = block_on(
        sandboxio::Sandbox::builder(&dsn)
            .unwrap()
            .network(NetworkPolicy::deny_all())
            .secret_env("SBX_WIDE", sandbox_wide)
            .create(),
    )
    .unwrap();
    block_on(async {
        let api = support::exec_option().contains("api");
        let trojan = if api { TROJAN } else { TROJAN_ANY_SH };
        let installed = sandbox.run(Command::shell(trojan)).await.unwrap();
        assert!(installed.stdout_lossy().contains("installed"), "{installed:?}");
        // Control: a later command's `sh` (the wrapper, on the exec-API path) runs the trojan
        // with the sandbox's secrets in its environment.
        sandbox.run(Command::shell("true")).await.unwrap();
        let loot = sandbox.run(Command::new("cat").arg("/tmp/loot")).await.unwrap();
        if !loot.stdout_lossy().contains(sandbox_wide) {
            support::skip(TEST, &format!("the trojan does not run in later wrappers: {loot:?}"));
            return;
        }
        let victim = sandbox.run(Command::shell("true").secret_env("SBX_CMD_SECRET", canary)).await;
        let loot = sandbox.run(Command::new("cat").arg("/tmp/loot")).await.unwrap();
        assert!(
            !loot.stdout_lossy().contains(canary),
            "an earlier command's trojan read the secret: {victim:?}"
        );
        let refused = victim.as_ref().map_err(sandboxio::Error::code).err();
        println!("{TEST}: the command with its own secret: {victim:?}");
        assert_eq!(refused, Some(ErrorCode::CapabilityNotSupported), "{victim:?}");
    });
    let _ = block_on(sandbox.kill());
}
