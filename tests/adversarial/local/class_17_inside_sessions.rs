//! Class 17 on `local://`, issue #27 hole 3: a command outlives its own timeout kill through a
//! sandboxd session of its own. Before the fix, sandboxd listened at
//! `/run/sandboxio/sandboxd.sock`, inside the sandbox: the code connected, sent `Hello`,
//! `Spawn`ed a holder there and handed the holder that session's connection (`SCM_RIGHTS`).
//! The holder ran under the session's shepherd, not the command's, so the command's timeout,
//! end or dropped stream left it running until `close()` (seen failing on `fb3f348`).
//!
//! The payload tries every session it can find, not just the old path: every socket file in
//! the sandbox's filesystem, and any listening socket among its own descriptors. The positive
//! controls in the same run: the very same payload, run on the host against sandboxd's socket
//! (the way `connect` reaches it), opens a session and spawns a process the scan sees; and
//! its descriptor scan finds a listening socket of its own.

use std::io::BufRead as _;
use std::path::PathBuf;
use std::time::Duration;

use sandboxio::{Command, ErrorCode, NetworkPolicy, Sandbox};

use crate::sandboxd_attacks::sh;
use crate::support::{block_on, eventually, local, local_root, processes_mentioning};

/// The payload. `python3 -c PAYLOAD MODE MARKER [SOCKET...]`: MODE `hang` or `exit` (inside:
/// find a session, spawn a holder in it, hand it the connection, then hang until the timeout
/// or exit) or `host` (open a session on the given sockets, spawn a process marked MARKER,
/// and keep the session until stdin ends). Says what it did on stdout and, inside, in
/// `/workspace/MARKER.log` (a timed-out command's output is not returned).
const PAYLOAD: &str = r#"import os, socket, stat, struct, sys, time
mode, marker, explicit = sys.argv[1], sys.argv[2], sys.argv[3:]
log = open("/workspace/%s.log" % marker, "a") if mode != "host" else None
def say(*words):
    line = " ".join(str(w) for w in words)
    print(line, flush=True)
    if log:
        log.write(line + "\n"); log.flush()

def frame(kind, ident, body=b""):
    return struct.pack(">IBI", len(body), kind, ident) + body
def field(b):
    return struct.pack(">I", len(b)) + b
def read_exact(s, n):
    got = b""
    while len(got) < n:
        d = s.recv(n - len(got))
        if not d:
            raise EOFError("the session ended")
        got += d
    return got
def read_frame(s):
    n, kind, ident = struct.unpack(">IBI", read_exact(s, 9))
    return kind, ident, read_exact(s, n)
def open_session(path):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(path)
    s.sendall(frame(1, 0, struct.pack(">HB", int(os.environ["SANDBOXD_PROTOCOL"]), 0)))
    kind, _, _ = read_frame(s)
    if kind != 0x81:
        raise OSError("answered 0x%x, not HelloAck" % kind)
    return s
def spawn(s, argv):
    body = struct.pack(">I", len(argv)) + b"".join(field(a.encode()) for a in argv)
    body += struct.pack(">I", 1) + field(b"PATH") + field(b"/usr/bin:/bin")
    # no secrets; no cwd, stdin null, no user, no control channel, not undumpable (version 5)
    body += struct.pack(">I", 0) + b"\0\0\0\0\0"
    s.sendall(frame(2, 1, body))
    while True:
        kind, _, b = read_frame(s)
        if kind == 0x82:
            return struct.unpack(">I", b)[0]
        if kind in (0x84, 0x85):
            raise OSError("the spawn failed: 0x%x %r" % (kind, b))

HOLDER = """import socket, sys, time
l = socket.socket(socket.AF_UNIX); l.bind("/tmp/%s.sock" % sys.argv[1]); l.listen(1)
c, _ = l.accept()
socket.recv_fds(c, 16, 4)
c.sendall(b"held")
while True:
    time.sleep(60)
"""

if mode == "host":
    for path in explicit:
        try:
            s = open_session(path)
            say("spawned", spawn(s, ["python3", "-c", "import time; time.sleep(600)", marker]), "via", path)
            sys.stdin.read()
            sys.exit(0)
        except Exception as e:
            say("no-session", path, repr(e))
    sys.exit(1)

# Listening sockets among this command's descriptors; the control: one of its own.
own = socket.socket(socket.AF_UNIX); own.bind("\0" + marker); own.listen(1)
for fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
    try:
        probe = socket.socket(fileno=os.dup(fd))
    except OSError:
        continue
    listening = probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    probe.detach()
    if listening and fd == own.fileno():
        say("control-own-listener-seen")
    elif listening:
        say("inherited-listener", fd)

candidates = list(explicit) + ["/run/sandboxio/sandboxd.sock"]
for root, dirs, files in os.walk("/"):
    if root == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "usr")]
    for name in files:
        path = os.path.join(root, name)
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode) and path not in candidates:
                candidates.append(path)
        except OSError:
            pass
say("tried", len(candidates), "sockets:", " ".join(candidates))
for path in candidates:
    try:
        s = open_session(path)
    except Exception as e:
        continue
    say("session-opened", path)
    spawn(s, ["python3", "-c", HOLDER, marker])
    holder = "/tmp/%s.sock" % marker
    for _ in range(200):
        if os.path.exists(holder):
            break
        time.sleep(0.05)
    h = socket.socket(socket.AF_UNIX); h.connect(holder)
    socket.send_fds(h, [b"x"], [s.fileno()])
    s.close()
    if h.recv(4) == b"held":
        say("handed-over", path)
    break
else:
    say("no-session")
if mode == "hang":
    time.sleep(600)
"#;

/// The host path of sandboxd's socket for `sandbox`: in its directory (or, before issue #27,
/// in its `run` directory, bound into the sandbox).
fn host_socket(sandbox: &Sandbox) -> Option<PathBuf> {
    use std::os::unix::fs::FileTypeExt as _;
    let dir = local_root().join(sandbox.id());
    [dir.join("sandboxd.sock"), dir.join("run").join("sandboxd.sock")]
        .into_iter()
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket()))
}

/// Processes (host-wide scan of argv) marked `marker`.
fn marked(marker: &str) -> Vec<(u32, String)> {
    processes_mentioning(marker)
}

/// The positive control: the same payload on the host, against sandboxd's socket, opens a
/// session and spawns a marked process the scan sees; its end ends that process.
fn host_control(sandbox: &Sandbox, marker: &str) {
    let socket = host_socket(sandbox).expect("control: sandboxd's socket is not in the sandbox's directory");
    let mut host = std::process::Command::new("python3")
        .args(["-c", PAYLOAD, "host", marker])
        .arg(&socket)
        .env("SANDBOXD_PROTOCOL", crate::support::sandboxd_protocol())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(host.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("spawned "), "control: the payload opened no session on the host: {line:?}");
    assert!(
        eventually(Duration::from_secs(5), || !marked(marker).is_empty()),
        "control: the scan does not see the process the host's session spawned ({line:?})"
    );
    drop(host.stdin.take());
    assert!(host.wait().unwrap().success());
    assert!(
        eventually(Duration::from_secs(5), || marked(marker).is_empty()),
        "control: the host session's process outlived its session: {:?}",
        marked(marker)
    );
}

/// Runs the inside payload in `mode` with `timeout`; returns what it logged.
fn inside(sandbox: &Sandbox, mode: &str, marker: &str, timeout: Duration) -> String {
    let run = block_on(
        sandbox.run(
            Command::new("python3")
                .args(["-c", PAYLOAD, mode, marker])
                .env("SANDBOXD_PROTOCOL", crate::support::sandboxd_protocol())
                .timeout(timeout),
        ),
    );
    match (mode, &run) {
        ("hang", Err(e)) => assert_eq!(e.code(), ErrorCode::ExecutionTimeout, "{e:?}"),
        ("exit", Ok(out)) => assert!(out.success(), "{out:?}"),
        _ => panic!("the payload ({mode}) ended unexpectedly: {run:?}"),
    }
    sh(sandbox, &format!("cat /workspace/{marker}.log")).stdout_lossy().into_owned()
}

#[test]
fn class_17__code_cannot_open_a_sandboxd_session_that_outlives_its_command() {
    let sandbox = local(NetworkPolicy::deny_all());
    let pid = std::process::id();
    host_control(&sandbox, &format!("sbx27-control-{pid}"));

    for (mode, timeout) in [("hang", Duration::from_secs(8)), ("exit", Duration::from_secs(30))] {
        let marker = format!("sbx27-{mode}-{pid}");
        let said = inside(&sandbox, mode, &marker, timeout);
        println!("class_17 inside sessions ({mode}): the payload said {said:?}");
        assert!(said.contains("control-own-listener-seen"), "control: the descriptor scan is blind: {said}");
        assert!(!said.contains("inherited-listener"), "a command inherited a listening socket: {said}");
        // Whatever the payload reached, nothing it started may outlive the command.
        let survived = !eventually(Duration::from_secs(3), || marked(&marker).is_empty());
        assert!(
            !survived,
            "a process the code started through a sandboxd session of its own outlived the command \
             ({mode}): {:?}; the payload said {said:?}",
            marked(&marker)
        );
        assert!(!said.contains("session-opened"), "the code opened a sandboxd session from inside: {said}");
        assert!(said.contains("no-session"), "{said}");
    }
    block_on(sandbox.close()).unwrap();
}
