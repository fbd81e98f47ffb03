//! Class 8 on `local://` (`detach` misuse, from the attack checklist): sandboxed code cannot
//! detach its own sandbox to outlive its owner. It tries sandboxd twice over: its socket,
//! which since issue #27 is not in the sandbox's filesystem (before, sandboxd answered a
//! `Detach` there and changed nothing, since only the owner's first session decides
//! sandboxd's life: `sandboxd/tests/session.rs` still checks that for `connect`ed sessions);
//! and PID 1's stdin, the owner link itself, which sandboxd being non-dumpable keeps out of
//! reach. Held when first tried (2026-12, on sandboxd).

use std::time::Duration;

use sandboxio::backends::local::LocalBackend;
use sandboxio::{Command, NetworkPolicy, Sandbox};

use super::class_12_sweep::sandboxd_pid;
use crate::support::{block_on, eventually, local_root, skip};

/// Sends `Hello` and `Detach` to sandboxd's old socket path and says `socket-detached` when
/// sandboxd answers `Detached` (a zero-length frame of kind `0x89`), or `no-sandboxd-socket`;
/// the control for that client: the same frames reach a listener of its own
/// (`control-own-socket`). Then it writes the same `Detach` frame into PID 1's stdin (the
/// owner link), saying `wrote-owner-link` if that open succeeds; the control for that write:
/// the same open of a process of its own (`control-own-stdin`).
const DETACH_ATTACK: &str = r#"import os, socket, struct, subprocess
hello = struct.pack(">IBIHB", 3, 1, 0, 3, 0)
detach = struct.pack(">IBI", 0, 9, 0)
own = socket.socket(socket.AF_UNIX); own.bind("\0sbx-class08"); own.listen(1)
c = socket.socket(socket.AF_UNIX); c.connect("\0sbx-class08"); c.sendall(hello + detach)
a, _ = own.accept()
got = b""
while len(got) < len(hello + detach):
    got += a.recv(64)
if got == hello + detach:
    print("control-own-socket", flush=True)
try:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect("/run/sandboxio/sandboxd.sock")
    s.sendall(hello + detach)
    got = b""
    while detach[:4] + b"\x89" + detach[5:] not in got:
        d = s.recv(4096)
        if not d:
            break
        got += d
    if detach[:4] + b"\x89" + detach[5:] in got:
        print("socket-detached", flush=True)
    s.close()
except OSError:
    print("no-sandboxd-socket", flush=True)
own = subprocess.Popen(["sleep", "30"], stdin=subprocess.PIPE)
try:
    with open("/proc/%d/fd/0" % own.pid, "wb") as f:
        f.write(b"x")
    print("control-own-stdin", flush=True)
except OSError:
    pass
own.kill()
try:
    with open("/proc/1/fd/0", "wb") as f:
        f.write(detach)
    print("wrote-owner-link", flush=True)
except OSError:
    pass
"#;

/// Whether host process `pid` has ended (gone, or a zombie awaiting bwrap's wait).
fn ended(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

#[test]
fn class_08__sandboxed_code_cannot_detach_its_own_sandbox() {
    const TEST: &str = "class_08__sandboxed_code_cannot_detach_its_own_sandbox";
    let create = |detached: bool| {
        block_on(
            Sandbox::builder_with(LocalBackend::new())
                .network(NetworkPolicy::deny_all())
                .detached(detached)
                .create(),
        )
        .unwrap()
    };
    // Control for the proof: a sandbox the API detached outlives its dropped handle.
    let detached = create(true);
    let name = detached.id().to_owned();
    let sandboxd = sandboxd_pid(&local_root().join(&name));
    drop(detached);
    std::thread::sleep(Duration::from_secs(2));
    let control_alive = !ended(sandboxd);
    if let Ok(again) = block_on(Sandbox::connect("local://", &name)) {
        let _ = block_on(again.kill());
    }
    assert!(control_alive, "control: a detached sandbox ended with its handle: the proof cannot tell");

    let sandbox = create(false);
    let pid = sandboxd_pid(&local_root().join(sandbox.id()));
    let said = block_on(
        sandbox.run(Command::new("python3").args(["-c", DETACH_ATTACK]).timeout(Duration::from_secs(20))),
    )
    .unwrap();
    let said = format!("{}{}", said.stdout_lossy(), said.stderr_lossy());
    if !said.contains("control-own-socket") || !said.contains("control-own-stdin") {
        let _ = block_on(sandbox.kill());
        skip(TEST, &format!("a positive control failed: {said}"));
        return;
    }
    assert!(!said.contains("wrote-owner-link"), "the code wrote into the owner link: {said}");
    assert!(said.contains("no-sandboxd-socket"), "the code reached a sandboxd session: {said}");
    assert!(!ended(pid), "the attack ended the sandbox itself: nothing to prove ({said})");
    // The handle goes as an owner's death would: its session closes, nothing is killed.
    drop(sandbox);
    let gone = eventually(Duration::from_secs(10), || ended(pid));
    println!("{TEST}: the payload said {said:?}; sandboxd ended after its handle was dropped: {gone}");
    assert!(gone, "the sandbox outlived its owner's session (detached from inside)");
}
