//! Class 19: what a code cell can do to later cells and to the host, run on each backend
//! whose cells run on sandboxd's runner (`local://`, `docker://`).
//!
//! - The host's memory: a cell that floods its runner's result channel (framed records
//!   written straight to it, or `display()` called in a loop) costs the host its output
//!   budget (`Code::output_limit`, 8 MiB by default), never more: measured in a child
//!   process (this binary re-run), whose peak RSS is its own, through `run_code`, a context
//!   and `run_code_stream` with a reader that stalls. The control raises the budget and sees
//!   the records arrive and the memory grow.
//! - Later cells: an earlier cell that plants Python start-up hooks (`usercustomize.py`, a
//!   `.pth` file in the user's site directory, a `sitecustomize.py` on a `PYTHONPATH` the
//!   caller set) or leaves a process holding the result channel cannot change what a later
//!   cell, or a context made later, reports. Each control shows the hook taking over a plain
//!   `python3` (or the channel forging a result when it is handed over on purpose).

use std::time::Duration;

use futures_lite::StreamExt as _;
use sandboxio::{Code, Command, Sandbox};

use crate::support::{block_on, child_figures, peak_rss_mib};

/// The host memory a flooded cell may cost, in MiB (the issue's bound).
pub const MAX_RSS_MIB: u64 = 64;

/// Writes `MIB` MiB of framed records straight to the runner's result channel: one
/// `display` bundle of one 1 MiB `text/plain` item per MiB, then prints how many it wrote.
/// The channel is descriptor 3 on the old runner and the runner's `CTRL` (reachable from
/// the `display` it gives the cells) on the new one: a cell owns its interpreter.
pub fn raw_flood(mib: usize) -> String {
    format!(
        r#"
import os
fd = display.__globals__.get("CTRL", 3)
item = b"x" * (1 << 20)
record = b"bundle display 1 0\nitem text/plain %d\n" % len(item) + item
for _ in range({mib}):
    view = memoryview(record)
    while view:
        view = view[os.write(fd, view):]
print("flooded", {mib})
"#
    )
}

/// Calls `display()` `n` times with a 64 KiB string each, then prints `n`.
pub fn display_flood(n: usize) -> String {
    format!(
        r#"
s = "y" * 65536
for _ in range({n}):
    display(s)
print("displayed", {n})
"#
    )
}

/// The bytes of rich results a cell kept.
fn kept(result: &sandboxio::CodeResult) -> u64 {
    result.results.iter().flat_map(|b| b.values()).map(|v| v.len() as u64).sum()
}

/// The child side of the flood: 512 MiB of raw records and 256 MiB of `display()`s through
/// `run_code` (default budget), the raw flood in a context whose state must survive it, and
/// through `run_code_stream` with its reader stalled for 2 s. Prints
/// `RESULT <peak RSS MiB> <MiB kept of the raw flood> <truncated flags>`.
pub fn flood_child(sbx: &Sandbox) {
    // Each result is dropped before the next cell: the budget is per cell.
    let mut flags = Vec::new();
    let raw = block_on(sbx.run_code(raw_flood(512))).unwrap();
    assert_eq!(raw.stdout, b"flooded 512\n", "{}", raw.stderr_lossy());
    assert!(raw.error.is_none(), "{:?}", raw.error);
    let raw_kept = kept(&raw) >> 20;
    flags.push(raw.truncated);
    drop(raw);
    let displayed = block_on(sbx.run_code(display_flood(4096))).unwrap();
    assert_eq!(displayed.stdout, b"displayed 4096\n", "{}", displayed.stderr_lossy());
    flags.push(displayed.truncated);
    drop(displayed);
    // In a context: it keeps its state and its runner.
    let ctx = block_on(sbx.create_context("python")).unwrap();
    block_on(sbx.run_code(Code::new("x = 41").in_context(&ctx))).unwrap();
    let in_ctx = block_on(sbx.run_code(Code::new(raw_flood(256)).in_context(&ctx))).unwrap();
    assert_eq!(in_ctx.stdout, b"flooded 256\n");
    flags.push(in_ctx.truncated);
    drop(in_ctx);
    let after = block_on(sbx.run_code(Code::new("x + 1").in_context(&ctx))).unwrap();
    assert_eq!(after.results.first().and_then(|b| b.get("text/plain")).map(Vec::as_slice), Some(&b"42"[..]));
    // Streamed, with a reader that stalls: the host buffers no more.
    let mut stream = sbx.run_code_stream(raw_flood(256)).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let mut printed = Vec::new();
    while let Some(chunk) = block_on(stream.next()) {
        printed.extend_from_slice(&chunk.unwrap().data);
    }
    assert_eq!(printed, b"flooded 256\n");
    flags.push(block_on(stream.wait()).unwrap().truncated);
    let flags: u64 = flags.iter().enumerate().map(|(i, &t)| u64::from(t) << i).sum();
    println!("RESULT {} {raw_kept} {flags}", peak_rss_mib());
}

/// The control's child: the budget raised, 96 MiB of raw records all arrive, and the host
/// holds them. Prints `RESULT <peak RSS MiB> <MiB kept>`.
pub fn flood_control_child(sbx: &Sandbox) {
    let raw = block_on(sbx.run_code(Code::new(raw_flood(96)).output_limit(usize::MAX))).unwrap();
    assert_eq!(raw.stdout, b"flooded 96\n", "{}", raw.stderr_lossy());
    println!("RESULT {} {}", peak_rss_mib(), kept(&raw) >> 20);
}

/// Runs the flood and its control as children (`child_test` with roles `role` and
/// `role-control`) and checks the figures.
pub fn flood_keeps_host_memory_flat(what: &str, child_test: &str, role: &str) {
    let control = child_figures(child_test, &format!("{role}-control"));
    println!("class_19 {what} control: budget raised, {} MiB kept, peak RSS {} MiB", control[1], control[0]);
    assert_eq!(control[1], 96, "control: the raw records did not all arrive");
    assert!(control[0] >= 96, "control: holding 96 MiB of records did not show in the peak RSS");
    let figures = child_figures(child_test, role);
    let (peak, kept, flags) = (figures[0], figures[1], figures[2]);
    println!(
        "class_19 {what}: 512 MiB of records, 256 MiB of display()s, a context and a stalled stream: {kept} MiB kept, truncated flags {flags:#06b}, peak RSS {peak} MiB"
    );
    assert!(peak < MAX_RSS_MIB, "a flooding cell took the host to {peak} MiB");
    assert!(kept <= 8, "the default budget kept {kept} MiB");
    assert_eq!(flags, 0b1111, "every flooded result is marked truncated");
}

/// A hook on `exec` and `eval` that swallows a cell's exception and writes a forged result
/// to the channel: planted where the interpreter's start-up runs it, it makes `1/0`
/// succeed with a result `FORGED`.
pub const HOOK: &str = r#"import builtins, os
def wrap(f):
    def hooked(code, *args):
        try:
            return f(code, *args)
        except BaseException:
            if not getattr(code, "co_filename", "").startswith("<cell-"):
                raise
            os.write(3, b"bundle result 1 0\nitem text/plain 6\nFORGED")
    return hooked
builtins.exec = wrap(builtins.exec)
builtins.eval = wrap(builtins.eval)
"#;

/// The cell that plants [`HOOK`]: as `usercustomize.py` in the user's site directory, or
/// as an `import` line of a `.pth` file there when `pth`.
fn plant_user_site(pth: bool) -> String {
    let write = if pth {
        format!(
            "open(os.path.join(d, 'forge.pth'), 'w').write('import builtins; exec(%r, {{}})\\n' % {HOOK:?})"
        )
    } else {
        format!("open(os.path.join(d, 'usercustomize.py'), 'w').write({HOOK:?})")
    };
    format!(
        "import site, os\nd = site.getusersitepackages()\nos.makedirs(d, exist_ok=True)\n{write}\nprint(d)\n"
    )
}

/// Whether a plain `python3` in the sandbox (not isolated) runs the planted hook: the
/// control that the plant is live.
fn hook_is_live(sbx: &Sandbox) -> bool {
    let probe = block_on(
        sbx.run(Command::new("python3").arg("-c").arg("import builtins; print(builtins.exec.__module__)")),
    )
    .unwrap();
    assert!(probe.success(), "{}", probe.stderr_lossy());
    let module = probe.stdout_lossy().trim().to_owned();
    module != "builtins"
}

/// Asserts that `1/0` reports its own `ZeroDivisionError` and no result, on a cell of its
/// own, in a context made now, and in `ctx` (made before the plant).
fn later_cells_report_their_own(sbx: &Sandbox, ctx: &sandboxio::exec::CodeContext, how: &str) {
    let fresh = block_on(sbx.create_context("python")).unwrap();
    for (where_, code) in [
        ("a cell of its own", Code::new("1/0")),
        ("a context made later", Code::new("1/0").in_context(&fresh)),
        ("a context made before", Code::new("1/0").in_context(ctx)),
    ] {
        let r = block_on(sbx.run_code(code)).unwrap();
        assert_eq!(
            r.error.as_ref().map(|e| e.name.as_str()),
            Some("ZeroDivisionError"),
            "{how}: 1/0 in {where_} came back with {:?} and results {:?}",
            r.error,
            r.results
        );
        assert!(r.results.is_empty(), "{how}: a forged result in {where_}: {:?}", r.results);
    }
}

/// An earlier cell plants `usercustomize.py` (or a `.pth` file) in the user's site
/// directory: later cells and contexts still report their own outcome.
pub fn user_site_hooks_do_not_reach_later_cells(sbx: &Sandbox, pth: bool) {
    let how = if pth { "a .pth file in the user site" } else { "usercustomize.py" };
    let before = block_on(sbx.create_context("python")).unwrap();
    let planted = block_on(sbx.run_code(plant_user_site(pth))).unwrap();
    assert!(planted.success(), "{:?} {}", planted.error, planted.stderr_lossy());
    // Positive control: a plain interpreter in the sandbox runs the hook.
    assert!(hook_is_live(sbx), "control: {how} at {} does not hook a plain python3", planted.stdout_lossy());
    later_cells_report_their_own(sbx, &before, how);
}

/// With `PYTHONPATH` set by the caller to a directory the sandbox can write, an earlier cell
/// plants `sitecustomize.py` there: later cells still report their own outcome, and can
/// still import their own modules from that path.
pub fn a_pythonpath_hook_does_not_reach_later_cells(sbx: &Sandbox, lib: &str) {
    let before = block_on(sbx.create_context("python")).unwrap();
    let plant = format!(
        "import os\nos.makedirs({lib:?}, exist_ok=True)\nopen({lib:?} + '/sitecustomize.py', 'w').write({HOOK:?})\nopen({lib:?} + '/mine.py', 'w').write('X = 7\\n')\n"
    );
    let planted = block_on(sbx.run_code(plant)).unwrap();
    assert!(planted.success(), "{:?} {}", planted.error, planted.stderr_lossy());
    assert!(hook_is_live(sbx), "control: sitecustomize.py on PYTHONPATH does not hook a plain python3");
    later_cells_report_their_own(sbx, &before, "sitecustomize.py on PYTHONPATH");
    let mine = block_on(sbx.run_code("import mine\nmine.X")).unwrap();
    assert_eq!(
        mine.results.first().and_then(|b| b.get("text/plain")).map(Vec::as_slice),
        Some(&b"7"[..]),
        "a cell no longer imports its own module from PYTHONPATH: {:?}",
        mine.error
    );
}

/// A process an earlier cell leaves behind with `os.system` writes forged records to the
/// channel (descriptor 3) while a later cell of the same context runs.
const LEAVE_WRITER: &str = r#"import os
os.system("(sleep 2; printf 'bundle result 1 0\\nitem text/plain 6\\nFORGED' >&3) >/dev/null 2>&1 &")
"#;

/// The control: the same writer, handed the channel on purpose.
const HAND_OVER_WRITER: &str = r#"import subprocess
fd = display.__globals__.get("CTRL", 3)
subprocess.Popen(["sh", "-c", "sleep 2; printf 'bundle result 1 0\\nitem text/plain 6\\nFORGED' >&%d" % fd], pass_fds=(fd,))
"#;

/// A later cell that runs while the writer writes, and returns nothing.
const LATER: &str = "import time\ntime.sleep(4)\n";

/// A process an earlier cell left running cannot write a later cell's results: the channel
/// is closed on exec, so nothing the cell runs inherits it.
pub fn a_process_left_behind_cannot_forge_a_later_cell(sbx: &Sandbox) {
    // Positive control: handed the channel, the writer does forge the later cell.
    let handed = block_on(sbx.create_context("python")).unwrap();
    block_on(sbx.run_code(Code::new(HAND_OVER_WRITER).in_context(&handed))).unwrap();
    let forged = block_on(sbx.run_code(Code::new(LATER).in_context(&handed))).unwrap();
    assert_eq!(forged.results.len(), 1, "control: the handed-over writer did not forge the later cell");
    let ctx = block_on(sbx.create_context("python")).unwrap();
    let left = block_on(sbx.run_code(Code::new(LEAVE_WRITER).in_context(&ctx))).unwrap();
    assert!(left.success(), "{:?}", left.error);
    let later = block_on(sbx.run_code(Code::new(LATER).in_context(&ctx))).unwrap();
    assert!(
        later.results.is_empty(),
        "a process left behind forged a later cell's result: {:?}",
        later.results
    );
    assert!(later.success(), "{:?}", later.error);
}

/// The payload of [`a_concurrent_command_cannot_take_over_a_live_context`].
const HIJACK: &str = include_str!("runner_hijack.py");

/// A plain process of the sandbox's user holding a socket pair, its argv marked for the
/// hijacker's `decoy` mode (the positive control's target).
const DECOY: &str = "import socket, time\npair = socket.socketpair()\ntime.sleep(30)  # DECOY-CHANNEL\n";

/// Runs the hijacker as a command of `sbx` beside `during`, which runs once the hijacker
/// logged that it found (and dealt with) the runners; returns the log and what `during`
/// returned.
fn beside_hijacker<T: Send>(sbx: &Sandbox, during: impl FnOnce() -> T + Send) -> (String, T) {
    let (log, mode) = ("/workspace/hijack-runner.log", "runner");
    std::thread::scope(|scope| {
        let hijacker = scope.spawn(|| {
            block_on(sbx.run(
                Command::new("python3").args(["-c", HIJACK, log, mode]).timeout(Duration::from_secs(40)),
            ))
            .unwrap()
        });
        // The hijacker logs `victims` once it has looked, then `stopped` or `TAKEN` per target.
        let ready = crate::support::eventually(Duration::from_secs(30), || {
            block_on(sbx.fs().read_text(log)).is_ok_and(|l| {
                l.contains("stopped") || l.contains("TAKEN") || l.contains("pidfd_") || l.contains("done")
            })
        });
        let out = during();
        let ran = hijacker.join().unwrap();
        let logged = block_on(sbx.fs().read_text(log)).unwrap_or_default();
        assert!(ready, "the hijacker never got to its targets: {logged} {}", ran.stderr_lossy());
        (format!("{logged}{}", ran.stderr_lossy()), out)
    })
}

/// A command running beside a live context (a plain command, or a cell of another context:
/// the same user in the same sandbox) cannot take that context's runner over: it cannot take
/// the runner's result channel (`pidfd_getfd`, `/proc/<pid>/fd`, ptrace), read the cells the
/// host sends, or answer for them (on `local://`, before the runner made itself undumpable,
/// it did all three). The control: the same hijacker takes the descriptors of a plain
/// process of the same user.
pub fn a_concurrent_command_cannot_take_over_a_live_context(sbx: &Sandbox) {
    // Positive control: a plain process of the sandbox's user, started by the same command
    // (on `docker://` each command has a group of its own, which already keeps commands
    // apart), is open to the hijacker.
    let control = block_on(
        sbx.run(
            Command::new("sh")
                .args([
                    "-c",
                    r#"python3 -c "$1" & exec python3 -c "$2" /workspace/hijack-decoy.log decoy"#,
                    "sh",
                    DECOY,
                    HIJACK,
                ])
                .timeout(Duration::from_secs(40)),
        ),
    )
    .unwrap();
    let decoy = block_on(sbx.fs().read_text("/workspace/hijack-decoy.log")).unwrap_or_default();
    assert!(
        decoy.contains("TAKEN"),
        "control: the hijacker could not take a plain process's descriptors: {decoy} {}",
        control.stderr_lossy()
    );
    let ctx = block_on(sbx.create_context("python")).unwrap();
    let up = block_on(sbx.run_code(Code::new("x = 1").in_context(&ctx))).unwrap();
    assert!(up.success(), "{:?}", up.error);
    let (log, cell) =
        beside_hijacker(sbx, || {
            block_on(sbx.run_code(
                Code::new("secret = 'S3CR3T'\n1/0").in_context(&ctx).timeout(Duration::from_secs(20)),
            ))
        });
    assert!(log.contains("victims ["), "the hijacker did not look for runners: {log}");
    // Whatever the cell came back with, said together with what the hijacker did.
    let (results, error) = match &cell {
        Ok(r) => (format!("{:?}", r.results), r.error.as_ref().map(|e| e.name.clone())),
        Err(e) => (String::new(), Some(format!("run_code failed: {e}"))),
    };
    let seen = format!("results {results}, error {error:?}; the hijacker: {log}");
    assert!(!log.contains("STOLEN"), "a command read a cell sent to another context's runner: {seen}");
    assert_eq!(results, "[]", "a command forged another context's cell: {seen}");
    assert_eq!(
        error.as_deref(),
        Some("ZeroDivisionError"),
        "the context's cell did not report its own error: {seen}"
    );
}

/// The payload of [`a_command_watching_for_new_runners_cannot_take_one_as_it_starts`].
const START_WATCH: &str = include_str!("runner_start_watch.py");

/// Runs the start watcher in `mode` as a command of `sbx`, runs `during` once it watches, and
/// returns what it logged (and its stderr) with what `during` returned.
fn beside_start_watcher<T: Send>(
    sbx: &Sandbox,
    dir: &str,
    mode: &str,
    during: impl FnOnce() -> T + Send,
) -> (String, T) {
    let log = format!("{dir}/start-watch-{mode}.log");
    std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            block_on(
                sbx.run(
                    Command::new("python3")
                        .args(["-c", START_WATCH, &log, mode])
                        .timeout(Duration::from_secs(40)),
                ),
            )
            .unwrap()
        });
        let watching = crate::support::eventually(Duration::from_secs(30), || {
            block_on(sbx.fs().read_text(&log)).is_ok_and(|l| l.contains("watching"))
        });
        let out = during();
        let ran = watcher.join().unwrap();
        let logged = block_on(sbx.fs().read_text(&log)).unwrap_or_default();
        assert!(watching, "the watcher never started watching: {logged} {}", ran.stderr_lossy());
        (format!("{logged}{}", ran.stderr_lossy()), out)
    })
}

/// A command already watching for new processes when a context starts cannot take the new
/// runner in its start: it stops the runner on sight (the same uid may), so a runner that made
/// itself undumpable in its first line (the protection before) never got there, and the
/// watcher took its channel at leisure, said `ready` in its place, read the first cell the
/// host sent and forged its result. Now the runner is undumpable from its `execve`. The
/// control, same run: the same watcher takes a descriptor of a process that makes itself
/// undumpable in its first line, started after the watcher. The watcher logs into `dir`
/// (`/tmp` for a root sandbox user on `docker://`, which holds no capability and may not
/// write its image user's `/workspace`).
pub fn a_command_watching_for_new_runners_cannot_take_one_as_it_starts(sbx: &Sandbox, dir: &str) {
    let (decoy, ()) = beside_start_watcher(sbx, dir, "decoy", || ());
    assert!(
        decoy.contains("TAKEN"),
        "control: the watcher did not win the start of a process undumpable from its first line: {decoy}"
    );
    // Five contexts, one after the other, each caught as it starts (on the old code the
    // watcher won the first; the control measures the odds).
    let (log, cells) = beside_start_watcher(sbx, dir, "runner", || {
        (0..5)
            .map(|_| {
                let ctx = block_on(sbx.create_context("python"));
                ctx.map(|ctx| {
                    block_on(sbx.run_code(
                        Code::new("secret = 'S3CR3T'\n1/0").in_context(&ctx).timeout(Duration::from_secs(20)),
                    ))
                })
            })
            .collect::<Vec<_>>()
    });
    let mut results = String::new();
    let mut error = None;
    for cell in &cells {
        let (r, e) = match cell {
            Ok(Ok(r)) => (format!("{:?}", r.results), r.error.as_ref().map(|e| e.name.clone())),
            Ok(Err(e)) => (String::new(), Some(format!("run_code failed: {e}"))),
            Err(e) => (String::new(), Some(format!("create_context failed: {e}"))),
        };
        if results.is_empty() || r != "[]" {
            results = r;
        }
        if error.is_none() || e.as_deref() != Some("ZeroDivisionError") {
            error = e;
        }
    }
    let seen = format!("results {results}, error {error:?}; the watcher: {log}");
    println!("class_19 start watcher: control {decoy:?}; {seen}");
    assert!(
        log.matches("stopped").count() == 5 || log.contains("STOLEN"),
        "the watcher did not catch every runner as it started: {seen}"
    );
    assert!(!log.contains("STOLEN"), "a command read a cell sent to a runner it caught starting: {seen}");
    assert!(!log.contains("FD-TAKEN"), "a command took a starting runner's channel: {seen}");
    assert!(!log.contains("MEM-OPENED"), "a command opened a starting runner's memory: {seen}");
    assert_eq!(results, "[]", "a command forged the cell of a runner it caught starting: {seen}");
    assert_eq!(
        error.as_deref(),
        Some("ZeroDivisionError"),
        "the context's cell did not report its own error: {seen}"
    );
}

/// The runner needs no module of the image's Python to be out of reach (`ctypes` made it
/// undumpable before, so a `python3` without it left its runner dumpable for its whole life):
/// a cell sees no `ctypes` among the modules the runner loaded. With the watcher test above,
/// that the protection holds from `execve` on, before any Python runs.
pub fn the_runner_needs_no_ctypes(sbx: &Sandbox) {
    let ctx = block_on(sbx.create_context("python")).unwrap();
    let loaded = "import sys\nprint(sorted(m for m in sys.modules if 'ctypes' in m))";
    let r = block_on(sbx.run_code(Code::new(loaded).in_context(&ctx))).unwrap();
    assert!(r.success(), "{:?}", r.error);
    let text = String::from_utf8_lossy(&r.stdout).trim().to_owned();
    assert_eq!(text, "[]", "the runner loaded ctypes before any cell");
    // Control: the same check sees a module once the cell imported it.
    let r = block_on(sbx.run_code(Code::new(format!("import ctypes\n{loaded}")).in_context(&ctx))).unwrap();
    let text = String::from_utf8_lossy(&r.stdout).trim().to_owned();
    assert!(text.contains("'ctypes'"), "control: an imported module is not seen: {text} {:?}", r.error);
}

/// A cell that writes its runner an error record of 524,000 two-byte lines (1 MiB, the most
/// an error keeps).
pub const ERROR_LINES: &str = r#"import os
fd = display.__globals__.get("CTRL", 3)
p = b"E\nv\n" + b"a\n" * 524000
v = memoryview(b"error %d\n" % len(p) + p)
while v:
    v = v[os.write(fd, v):]
"#;

/// An error record of many short lines costs the host a bounded number of strings: its
/// traceback keeps at most 4096 entries, the rest joined into the last, every byte kept
/// (each line was a `String` of its own: 30 MiB of host memory for a 1 MiB record, and
/// `sandboxio mcp` from 26 to 105 MiB; the server's figure is
/// `a_cell_error_of_many_lines_keeps_the_server_under_64_mib` in the CLI's tests). Positive
/// control: the error arrives, every line of it.
pub fn an_error_of_many_lines_costs_a_bounded_traceback(sbx: &Sandbox) {
    let r = block_on(sbx.run_code(ERROR_LINES)).unwrap();
    let error = r.error.expect("control: the forged error record arrives");
    assert_eq!(error.name, "E", "control: the record is the cell's error");
    let joined = error.traceback.join("\n");
    assert_eq!(joined.matches('a').count(), 524_000, "control: every line of the error arrives");
    assert!(error.traceback.len() <= 4096, "an error of many lines kept {} entries", error.traceback.len());
}
