//! Class 17 on `local://`: the sandboxed code attacks sandboxd, the init of the sandbox's
//! PID namespace: it signals it and its own shepherd, reads their memory and descriptors
//! through `/proc`, rewrites or replaces the bound binary, forges frames, and puts a socket
//! of its own in the place of sandboxd's `--listen` socket. Commands run as sandboxd's own
//! uid here (the user namespace maps one), with no capability. Every refusal is paired with
//! the same operation succeeding where it is allowed.

use sandboxio::{Command, ErrorCode, NetworkPolicy, Sandbox};

use crate::sandboxd_attacks::{self, sh};
use crate::support::{block_on, local};

#[test]
fn class_17__sandboxd_cannot_be_signalled_or_read_by_the_sandbox_user() {
    let sandbox = local(NetworkPolicy::deny_all());
    let pid1 = sh(&sandbox, "cat /proc/1/comm");
    assert_eq!(pid1.stdout_lossy(), "sandboxd\n", "control: PID 1 is not sandboxd: {pid1:?}");
    sandboxd_attacks::signals_and_proc(&sandbox);
    block_on(sandbox.close()).unwrap();
}

#[test]
fn class_17__the_file_api_never_serves_sandboxds_own_process_files() {
    let sandbox = local(NetworkPolicy::deny_all());
    sandboxd_attacks::file_api_never_serves_sandboxd(&sandbox, "/workspace");
    block_on(sandbox.close()).unwrap();
}

#[test]
fn class_17__sandboxds_binary_cannot_be_changed_by_the_sandbox_user() {
    let sandbox = local(NetworkPolicy::deny_all());
    // Positive control: the user writes where it may (the workspace and /tmp).
    let control = sh(&sandbox, "echo x > sbx-control && echo x > /tmp/sbx-control && echo WROTE");
    assert!(control.stdout_lossy().contains("WROTE"), "the control write failed: {control:?}");
    let before = sh(&sandbox, "stat -c '%i %a %s' /.sandboxio/sandboxd");
    sandboxd_attacks::binary_unchanged(
        &sandbox,
        &[
            ("rename its directory", "mv /.sandboxio /.moved"),
            ("make a directory at the root", "mkdir /.sandboxio2"),
        ],
    );
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
    sandboxd_attacks::forged_frames(&sandbox);
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
