//! Class 17 on `local://`: the sandboxed code attacks sandboxd, the init of the sandbox's
//! PID namespace: it signals it and its own shepherd, reads their memory and descriptors
//! through `/proc`, rewrites or replaces the bound binary, forges frames, and puts a socket
//! of its own in the place of sandboxd's `--listen` socket. Commands run as sandboxd's own
//! uid here (the user namespace maps one), with no capability. Every refusal is paired with
//! the same operation succeeding where it is allowed.

use std::time::Duration;

use sandboxio::{Command, ErrorCode, NetworkPolicy, Sandbox};

use crate::support::{block_on, local};

fn sh(sandbox: &Sandbox, script: &str) -> sandboxio::ExecResult {
    block_on(sandbox.run(Command::shell(script).timeout(Duration::from_secs(30)))).unwrap()
}

#[test]
fn class_17__sandboxd_cannot_be_signalled_or_read_by_the_sandbox_user() {
    let sandbox = local(NetworkPolicy::deny_all());
    // Positive control: a command can signal, and read the environment of, its own child.
    let own = sh(
        &sandbox,
        "sleep 100 & c=$!; sleep 0.2; tr '\\0' '\\n' < /proc/$c/environ | grep -c PATH; kill -KILL $c; wait $c; echo rc=$?",
    );
    assert!(own.stdout_lossy().contains("rc=137"), "the control cannot signal its own child: {own:?}");
    assert!(own.stdout_lossy().starts_with('1'), "the control cannot read its own child's environ: {own:?}");
    let pid1 = sh(&sandbox, "cat /proc/1/comm");
    assert_eq!(pid1.stdout_lossy(), "sandboxd\n", "control: PID 1 is not sandboxd: {pid1:?}");
    for signal in ["KILL", "TERM", "STOP", "INT", "HUP"] {
        // The shepherd is the sandbox user's too: signalling it ends this command (reported
        // as an error or a signal), and nothing else.
        let _ =
            block_on(sandbox.run(Command::shell(format!("kill -{signal} 1; kill -{signal} $PPID; exit 0"))));
        let state = sh(&sandbox, "grep '^State:' /proc/1/status");
        assert!(state.stdout_lossy().contains("State:"), "SIG{signal}: PID 1 is gone: {state:?}");
        assert!(!state.stdout_lossy().contains("stopped"), "SIG{signal} stopped PID 1: {state:?}");
    }
    for (what, script) in [
        ("PID 1's environ", "cat /proc/1/environ"),
        ("PID 1's memory", "head -c 16 /proc/1/mem"),
        ("PID 1's descriptors", "readlink /proc/1/fd/0 || readlink /proc/1/fd/1"),
        ("PID 1's session stream", "echo forged > /proc/1/fd/1"),
        ("the shepherd's environ", "cat /proc/$PPID/environ"),
        ("the shepherd's descriptors", "readlink /proc/$PPID/fd/0"),
    ] {
        let out = sh(&sandbox, &format!("{script} >/dev/null 2>&1 && echo REACHED"));
        assert!(!out.stdout_lossy().contains("REACHED"), "a command read {what}: {out:?}");
    }
    // A command holds only its standard streams: nothing of the session's pipes.
    let fds = sh(&sandbox, "ls /proc/self/fd");
    let listed: Vec<String> = fds.stdout_lossy().split_whitespace().map(str::to_owned).collect();
    assert!(listed.contains(&"2".to_owned()), "the control lists no descriptor: {fds:?}");
    assert!(listed.len() <= 4, "a command holds more than its standard streams: {listed:?}");
    let after = sh(&sandbox, "echo alive");
    assert_eq!(after.stdout_lossy(), "alive\n", "the sandbox stopped answering: {after:?}");
    block_on(sandbox.close()).unwrap();
}

#[test]
fn class_17__sandboxds_binary_cannot_be_changed_by_the_sandbox_user() {
    let sandbox = local(NetworkPolicy::deny_all());
    // Positive control: the user writes where it may (the workspace and /tmp).
    let control = sh(&sandbox, "echo x > sbx-control && echo x > /tmp/sbx-control && echo WROTE");
    assert!(control.stdout_lossy().contains("WROTE"), "the control write failed: {control:?}");
    let before = sh(&sandbox, "stat -c '%i %a %s' /.sandboxio/sandboxd");
    for (what, script) in [
        ("append to it", "echo x >> /.sandboxio/sandboxd"),
        ("truncate it", ": > /.sandboxio/sandboxd"),
        ("change its mode", "chmod 777 /.sandboxio/sandboxd"),
        ("remove it", "rm -f /.sandboxio/sandboxd"),
        ("add a file beside it", "echo x > /.sandboxio/planted"),
        ("replace it", "cp /bin/sh /.sandboxio/sandboxd"),
        ("rename its directory", "mv /.sandboxio /.moved"),
        ("make a directory at the root", "mkdir /.sandboxio2"),
    ] {
        let out = sh(&sandbox, &format!("{script} 2>/dev/null && echo CHANGED"));
        assert!(!out.stdout_lossy().contains("CHANGED"), "a command could {what}: {out:?}");
    }
    let after = sh(&sandbox, "stat -c '%i %a %s' /.sandboxio/sandboxd");
    assert!(
        before.success() && before.stdout == after.stdout,
        "sandboxd's file changed: {before:?} {after:?}"
    );
    assert!(after.stdout_lossy().contains(" 555 "), "sandboxd's file is not read-only: {after:?}");
    block_on(sandbox.close()).unwrap();
}

/// Output that looks like sandboxd's frames is output: a command cannot end itself, or
/// another command, with a forged `Exit`.
#[test]
fn class_17__frames_a_command_prints_are_its_output_not_sandboxds() {
    let sandbox = local(NetworkPolicy::deny_all());
    // A well-formed `Exit` frame for ids 1 to 8 (header: length 6, kind 0x84, id; body:
    // status code 0), printed by a command that then exits 3.
    let mut frames = Vec::new();
    for id in 1u32..=8 {
        frames.extend_from_slice(&6u32.to_be_bytes());
        frames.push(0x84);
        frames.extend_from_slice(&id.to_be_bytes());
        frames.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    let octal = frames.iter().fold(String::new(), |mut out, b| {
        use std::fmt::Write as _;
        let _ = write!(out, "\\{b:03o}");
        out
    });
    let out = sh(&sandbox, &format!("printf '{octal}'; exit 3"));
    assert_eq!(out.exit_code(), Some(3), "{out:?}");
    assert_eq!(out.stdout, frames, "the printed frames did not come back as output");
    let after = sh(&sandbox, "echo alive");
    assert_eq!(after.stdout_lossy(), "alive\n", "{after:?}");
    block_on(sandbox.close()).unwrap();
}

/// The code can reach sandboxd's socket directory (it is sandboxd's uid) and puts its own
/// listener in the socket's place: `connect` must refuse it, not speak to the code.
#[test]
fn class_17__a_socket_planted_in_sandboxds_place_is_refused_by_connect() {
    let sandbox = local(NetworkPolicy::deny_all());
    // Positive control: connect reaches the real sandboxd.
    let attached = block_on(Sandbox::connect("local://", sandbox.id())).unwrap();
    assert_eq!(block_on(attached.run(Command::new("echo").arg("real"))).unwrap().stdout, b"real\n");
    block_on(attached.close()).unwrap();
    // The attack: replace the socket with a listener that answers anything with a forged
    // `HelloAck`-shaped frame, and keep it listening.
    let planted = "import os, socket, time\n\
        p = '/run/sandboxio/sandboxd.sock'\n\
        os.rename(p, p + '.old')\n\
        s = socket.socket(socket.AF_UNIX); s.bind(p); s.listen(8)\n\
        print('planted', flush=True)\n\
        s.settimeout(20)\n\
        try:\n    c, _ = s.accept(); c.sendall(bytes(64)); time.sleep(5)\n\
        except Exception: pass\n";
    let mut stream = sandbox.stream(Command::new("python3").arg("-c").arg(planted)).unwrap();
    let first = block_on(futures_lite::StreamExt::next(&mut stream)).unwrap().unwrap();
    assert_eq!(first.data, b"planted\n", "control: the planted listener did not start");
    let refused = block_on(Sandbox::connect("local://", sandbox.id()));
    let Err(err) = refused else { panic!("connect spoke to a socket the sandboxed code planted") };
    assert_eq!(err.code(), ErrorCode::Connect, "{err:?}");
    assert!(err.to_string().contains("not its sandboxd"), "{err}");
    drop(stream);
    // The owner's session is untouched.
    let after = sh(&sandbox, "echo alive");
    assert_eq!(after.stdout_lossy(), "alive\n", "{after:?}");
    block_on(sandbox.close()).unwrap();
}
