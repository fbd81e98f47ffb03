//! The file-API attacks (classes 4 to 7), written once and run against each backend by the
//! `class_NN_*` modules. Each attack first proves its payload works unconfined (the
//! positive control, in the same sandbox), else skips loudly; then runs the API call under
//! a bounded wait (an attack that holds a call forever fails the test, it never hangs it).
//! Error codes are compared as strings so that the same tests build against old code.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandboxio::{Command, ExecResult, Sandbox};

use crate::support::{block_on, skip};

/// Runs `work` on its own thread and waits at most `secs` for it: `None` while it still
/// runs (the attack held the call; the thread is abandoned and the test fails).
pub fn within<T: Send + 'static>(secs: u64, work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(work());
    });
    rx.recv_timeout(Duration::from_secs(secs)).ok()
}

/// Runs `script` in the sandbox with `sh -c`, in its working directory.
pub fn sh(sbx: &Sandbox, script: &str) -> ExecResult {
    block_on(sbx.run(Command::new("sh").arg("-c").arg(script).timeout(Duration::from_mins(1))))
        .unwrap_or_else(|e| panic!("`{script}` failed to run: {e}"))
}

fn code(result: &sandboxio::Result<impl std::fmt::Debug>) -> String {
    match result {
        Ok(v) => format!("Ok({v:?})").chars().take(200).collect(),
        Err(e) => e.code().as_str().to_owned(),
    }
}

/// A fresh host directory for one test.
pub fn host_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sandboxio-adv-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::symlink_metadata(path).map_or(0, |m| m.permissions().mode() & 0o7777)
}

/// Makes a sparse file of `bytes` at `name` and proves it claims that size.
fn sparse(test: &str, sbx: &Sandbox, name: &str, bytes: u64) -> bool {
    let out = sh(sbx, &format!("truncate -s {bytes} {name} && stat -c %s {name}"));
    if out.stdout_lossy().trim() != bytes.to_string() {
        skip(test, &format!("could not make a {bytes}-byte sparse file: {out:?}"));
        return false;
    }
    true
}

// ---- class 4: unbounded host memory and disk ----

pub fn read_of_a_huge_sparse_file_stops_at_the_read_limit(test: &str, sbx: Sandbox) {
    if !sparse(test, &sbx, "huge.bin", 1 << 30) {
        return;
    }
    let sbx = Arc::new(sbx);
    let s = Arc::clone(&sbx);
    let read = within(60, move || block_on(s.fs().read("huge.bin")).map(|d| d.len()));
    let read = read.expect("read() of a 1 GiB sparse file still running after 60 s");
    assert_eq!(code(&read), "SBX-016", "read() of a 1 GiB sparse file must stop at the read limit: {read:?}");
}

/// Links `endless` to `target` (`what` it is), proves that a reader of the sandbox user gets
/// a megabyte from it, then reads it through the file API, waiting at most 60 s: the bytes
/// read, or `None` when the control failed (the test is skipped).
fn read_endless_link(test: &str, sbx: Sandbox, target: &str, what: &str) -> Option<sandboxio::Result<usize>> {
    let control = sh(&sbx, &format!("ln -s {target} endless && head -c 1048576 endless | wc -c"));
    if control.stdout_lossy().trim() != "1048576" {
        skip(test, &format!("{what} gives the sandbox user no megabyte: {control:?}"));
        return None;
    }
    let read = within(60, move || block_on(sbx.fs().read("endless")).map(|d| d.len()));
    Some(read.unwrap_or_else(|| panic!("read() of a link to {what} still running after 60 s")))
}

pub fn read_of_a_link_to_an_endless_proc_file_ends(test: &str, sbx: Sandbox) {
    let Some(read) = read_endless_link(test, sbx, "/proc/self/pagemap", "the reader's own pagemap") else {
        return;
    };
    // The link resolves for the reader: a command (the exec-API path's script) reads its
    // own endless pagemap and stops at the read limit; sandboxd (local://, docker://'s
    // default path) never serves its own process files and refuses at once. Either way the
    // call ends, with no more than the limit read.
    let code = code(&read);
    assert!(
        code == "SBX-016" || code == "SBX-011",
        "read() of an endless file must stop at the read limit or be refused: {read:?}"
    );
}

/// A read of a link to the `pagemap` of another process of the sandbox user (a file with no
/// end that the user's own reader may open where its processes share one uid and gid, as on
/// `local://`) streams until the read limit and stops there.
pub fn read_of_a_link_to_another_processs_pagemap_stops_at_the_read_limit(test: &str, sbx: Sandbox) {
    use futures_lite::StreamExt as _;
    let mut holder = sbx.stream(Command::shell("echo $$; exec sleep 120")).unwrap();
    let mut said = Vec::new();
    while !said.contains(&b'\n') {
        match block_on(holder.next()) {
            Some(Ok(chunk)) => said.extend_from_slice(&chunk.data),
            other => panic!("the process to link to did not start: {other:?}"),
        }
    }
    let pid = String::from_utf8_lossy(&said).trim().to_owned();
    let target = format!("/proc/{pid}/pagemap");
    let read = read_endless_link(test, sbx, &target, "another process's pagemap");
    drop(holder);
    let Some(read) = read else { return };
    assert_eq!(code(&read), "SBX-016", "read() of an endless file must stop at the read limit: {read:?}");
}

pub fn download_of_a_sparse_file_never_fills_the_host_disk(test: &str, sbx: Sandbox) {
    if !sparse(test, &sbx, "sparse.bin", 3 << 29) {
        return;
    }
    let host = host_dir(test);
    let target = host.join("sparse.bin");
    let sbx = Arc::new(sbx);
    let (s, t) = (Arc::clone(&sbx), target.clone());
    let got = within(60, move || block_on(s.fs().download("sparse.bin", &t)));
    let got = got.expect("download() of a 1.5 GiB sparse file still running after 60 s");
    let on_disk = std::fs::metadata(&target).map_or(0, |m| m.len());
    let _ = std::fs::remove_dir_all(&host);
    assert_eq!(code(&got), "SBX-016", "download() of a 1.5 GiB sparse file must stop at the budget: {got:?}");
    assert_eq!(on_disk, 0, "the download left {on_disk} bytes on the host");
}

pub fn download_of_a_hard_link_bomb_never_fills_the_host_disk(test: &str, sbx: Sandbox) {
    let control = sh(
        &sbx,
        "mkdir -p bomb && head -c 8388608 /dev/urandom > bomb/f && i=0; \
         while [ $i -lt 160 ]; do ln bomb/f bomb/l$i; i=$((i+1)); done; stat -c %h bomb/f",
    );
    if control.stdout_lossy().trim() != "161" {
        skip(test, &format!("could not make 160 hard links: {control:?}"));
        return;
    }
    let host = host_dir(test);
    let target = host.join("bomb");
    let sbx = Arc::new(sbx);
    let (s, t) = (Arc::clone(&sbx), target.clone());
    let got = within(60, move || block_on(s.fs().download("bomb", &t)));
    let got = got.expect("download() of a hard-link bomb still running after 60 s");
    let left = target.exists();
    let _ = std::fs::remove_dir_all(&host);
    assert_eq!(code(&got), "SBX-016", "1.3 GiB of hard-link copies must stop at the budget: {got:?}");
    assert!(!left, "the refused download left its files on the host");
}

// ---- class 5: races in the file API ----

/// Plants `count` entries named as the old temp names (`.sandboxio-<pid>.tmp`, the pids a
/// fresh sandbox hands out first) in `dir`: FIFOs, or (with `link`) links to empty files of
/// the same names in `v/`. One process makes them all, so that planting does not use up
/// the very pids it covers.
fn plant(sbx: &Sandbox, dir: &str, link: bool, count: u32) -> ExecResult {
    let names = format!(
        "set -- && i=1; while [ $i -le {count} ]; do set -- \"$@\" .sandboxio-$i.tmp; i=$((i+1)); done"
    );
    let script = if link {
        format!(
            "mkdir -p {dir} v && cd v && {names} && for n in \"$@\"; do : > \"$n\"; done && \
             cp -s \"$PWD\"/.sandboxio-*.tmp ../{dir}/ && ls -a ../{dir} | wc -l"
        )
    } else {
        format!("mkdir -p {dir} && cd {dir} && {names} && mkfifo \"$@\" && ls -a | wc -l")
    };
    sh(sbx, &script)
}

pub fn a_fifo_planted_at_the_temp_name_never_blocks_a_write(test: &str, sbx: Sandbox, count: u32) {
    let planted = plant(&sbx, "d", false, count);
    // The control: a plain writer really blocks on one of them (bounded by a timeout).
    let plain = block_on(sbx.run(
        Command::new("sh").arg("-c").arg("echo x > d/.sandboxio-1.tmp").timeout(Duration::from_secs(2)),
    ));
    if !planted.success() || code(&plain) != "SBX-006" {
        skip(test, &format!("the FIFO does not block a plain writer: planted {planted:?}, writer {plain:?}"));
        return;
    }
    let sbx = Arc::new(sbx);
    let s = Arc::clone(&sbx);
    let wrote = within(60, move || block_on(s.fs().write("d/target.txt", "payload")));
    let wrote = wrote.expect("write() still blocked after 60 s by a FIFO planted at a temp name");
    assert!(wrote.is_ok(), "{wrote:?}");
    assert_eq!(block_on(sbx.fs().read_text("d/target.txt")).unwrap(), "payload");
}

pub fn a_link_planted_at_the_temp_name_never_diverts_a_write(test: &str, sbx: Sandbox, count: u32) {
    let control = sh(&sbx, "mkdir -p c && cd c && echo v > v && ln -s v l && echo diverted > l && cat v");
    let planted = plant(&sbx, "d", true, count);
    let linked = sh(&sbx, "[ -L d/.sandboxio-2.tmp ] && cat v/.sandboxio-*.tmp | wc -c");
    if control.stdout_lossy().trim() != "diverted"
        || !planted.success()
        || linked.stdout_lossy().trim() != "0"
    {
        skip(test, &format!("a link does not divert a plain writer: {control:?} {planted:?} {linked:?}"));
        return;
    }
    let sbx = Arc::new(sbx);
    let s = Arc::clone(&sbx);
    let wrote = within(60, move || block_on(s.fs().write("d/target.txt", "payload")));
    let wrote = wrote.expect("write() still running after 60 s");
    assert!(wrote.is_ok(), "{wrote:?}");
    let diverted = sh(&sbx, "cat v/.sandboxio-*.tmp | wc -c");
    assert_eq!(diverted.stdout_lossy().trim(), "0", "the write was diverted through a planted link");
    assert_eq!(block_on(sbx.fs().read_text("d/target.txt")).unwrap(), "payload");
}

// ---- class 6: file semantics that differ from the sandbox user's permissions ----

#[expect(
    clippy::needless_pass_by_value,
    reason = "the attack owns the sandbox it is given and drops it at the end"
)]
pub fn a_write_to_a_file_the_user_cannot_write_is_refused(test: &str, sbx: Sandbox) {
    let made = sh(&sbx, "echo orig > ro.txt && chmod 444 ro.txt");
    let own = sh(&sbx, "echo mine > ro.txt");
    if !made.success() || own.success() {
        skip(test, &format!("the sandbox user's own write to a 0444 file is not refused (root?): {own:?}"));
        return;
    }
    let wrote = block_on(sbx.fs().write("ro.txt", "new"));
    assert_eq!(code(&wrote), "SBX-011", "write() to a file the user cannot write: {wrote:?}");
    let message = wrote.unwrap_err().to_string();
    assert!(message.contains("ro.txt"), "the error names the file: {message}");
    assert_eq!(
        sh(&sbx, "cat ro.txt; stat -c %a ro.txt").stdout_lossy(),
        "orig\n444\n",
        "file or mode changed"
    );
}

/// A file only root may read (`secret`, root's and not world-readable) is refused to the
/// file API, by its path and through a link the code plants, as it is to the user's own
/// `cat`: the API reads as the sandbox user, whoever does the reading.
#[expect(
    clippy::needless_pass_by_value,
    reason = "the attack owns the sandbox it is given and drops it at the end"
)]
pub fn a_read_of_a_file_only_root_may_read_is_refused(test: &str, sbx: Sandbox, secret: &str) {
    let own = sh(&sbx, &format!("id -u; stat -c '%u %A' {secret}; cat {secret} >/dev/null && echo READ"));
    let said = own.stdout_lossy();
    let mut lines = said.lines();
    let (uid, owner) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    if uid == "0" || !owner.starts_with("0 ") || owner.ends_with('r') || said.contains("READ") {
        skip(test, &format!("no file here that root may read and the sandbox user may not: {own:?}"));
        return;
    }
    let linked = sh(&sbx, &format!("ln -s {secret} /tmp/secret-link && echo linked"));
    assert_eq!(linked.stdout_lossy(), "linked\n", "{linked:?}");
    for path in [secret, "/tmp/secret-link"] {
        let read = block_on(sbx.fs().read(path));
        assert_eq!(code(&read.map(|d| d.len())), "SBX-011", "read() of {path}, which only root may read");
    }
}

#[expect(
    clippy::needless_pass_by_value,
    reason = "the attack owns the sandbox it is given and drops it at the end"
)]
pub fn a_write_keeps_the_mode_of_an_existing_file(test: &str, sbx: Sandbox) {
    let made = sh(&sbx, "echo a > x.sh && chmod 750 x.sh && stat -c %a x.sh");
    if made.stdout_lossy().trim() != "750" {
        skip(test, &format!("could not make a 0750 file: {made:?}"));
        return;
    }
    block_on(sbx.fs().write("x.sh", "b")).unwrap();
    assert_eq!(
        sh(&sbx, "cat x.sh; stat -c %a x.sh").stdout_lossy(),
        "b750\n",
        "content and mode after write"
    );
}

#[expect(
    clippy::needless_pass_by_value,
    reason = "the attack owns the sandbox it is given and drops it at the end"
)]
pub fn a_write_through_a_link_follows_it_inside_the_sandbox(test: &str, sbx: Sandbox) {
    let made = sh(&sbx, "echo a > real.txt && ln -s real.txt link && [ -L link ] && cat link");
    if made.stdout_lossy().trim() != "a" {
        skip(test, &format!("could not make a link: {made:?}"));
        return;
    }
    block_on(sbx.fs().write("link", "through")).unwrap();
    let after = sh(&sbx, "[ -L link ] && echo link; cat real.txt");
    assert_eq!(after.stdout_lossy(), "link\nthrough", "the link must stay a link and its target be written");
}

// ---- class 7: host tampering on download ----

#[expect(
    clippy::needless_pass_by_value,
    reason = "the attack owns the sandbox it is given and drops it at the end"
)]
pub fn a_download_never_loosens_host_permissions(test: &str, sbx: Sandbox) {
    use std::os::unix::fs::PermissionsExt as _;
    let host = host_dir(test);
    let dst = host.join("private");
    std::fs::create_dir(&dst).unwrap();
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o700)).unwrap();
    let made =
        sh(&sbx, "mkdir -p out && echo x > out/f && chmod 4777 out/f && chmod 777 out && stat -c %a out");
    if mode(&dst) != 0o700 || made.stdout_lossy().trim() != "777" {
        skip(test, &format!("no 0700 host dir or 0777 sandbox dir: {:o} {made:?}", mode(&dst)));
        let _ = std::fs::remove_dir_all(&host);
        return;
    }
    let got = block_on(sbx.fs().download("out", &dst));
    let (dir_mode, file_mode) = (mode(&dst), mode(&dst.join("f")));
    let _ = std::fs::remove_dir_all(&host);
    assert!(got.is_ok(), "{got:?}");
    assert_eq!(dir_mode, 0o700, "the existing host directory's mode changed to {dir_mode:o}");
    assert_eq!(file_mode & 0o7022, 0, "a new host file got mode {file_mode:o} from the sandbox");
}

// ---- class 4: client memory stays flat, measured in a child process ----

/// Set in a child process of this test binary: which measured operation it does
/// (`read` or `transfer`); unset, [`rss_child`] does nothing.
pub const CHILD: &str = "SANDBOXIO_FS_RSS_CHILD";

/// Bytes moved by the memory test: 256 MiB in CI, `SANDBOXIO_FS_STRESS_BYTES` on demand
/// (`scripts/stress-fs` sets 2 GiB).
pub fn stress_bytes() -> u64 {
    std::env::var("SANDBOXIO_FS_STRESS_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(256 << 20)
}

/// The most resident memory the child may have used, at its peak.
pub const RSS_BOUND_KB: u64 = 128 * 1024;

fn vm_hwm_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(u64::MAX)
}

/// The child's side: one measured operation in a fresh process, then its peak resident
/// memory (`VmHWM`) printed as `RSS_CHILD <mode> ok VmHWM_kB=<n>`.
pub fn rss_child(make: impl FnOnce() -> Sandbox) {
    let Ok(mode) = std::env::var(CHILD) else { return };
    let sbx = make();
    match mode.as_str() {
        "read" => {
            // A 3 GiB sparse file: the read must stop at the read limit with the typed error.
            let sparse = sh(&sbx, "truncate -s 3221225472 huge.bin && stat -c %s huge.bin");
            assert_eq!(sparse.stdout_lossy().trim(), "3221225472", "the control: a 3 GiB sparse file");
            let read = block_on(sbx.fs().read("huge.bin"));
            assert_eq!(code(&read.map(|d| d.len())), "SBX-016", "read of 3 GiB");
        }
        "transfer" => {
            let bytes = stress_bytes();
            let host = host_dir(&format!("rss-{}", std::process::id()));
            let source = host.join("big.bin");
            // Sparse on the host too: the upload reads `bytes` zeros without the host's disk.
            std::fs::File::create(&source).unwrap().set_len(bytes).unwrap();
            let fs = sbx.fs().timeout(Duration::from_mins(10)).download_limit(bytes + (1 << 20));
            block_on(fs.upload(&source, "big.bin")).expect("upload");
            let size = sh(&sbx, "stat -c %s big.bin");
            assert_eq!(size.stdout_lossy().trim(), bytes.to_string(), "the uploaded size in the sandbox");
            let back = host.join("back.bin");
            block_on(fs.download("big.bin", &back)).expect("download");
            let got = std::fs::metadata(&back).map_or(0, |m| m.len());
            let _ = std::fs::remove_dir_all(&host);
            assert_eq!(got, bytes, "the downloaded size on the host");
        }
        other => panic!("unknown child mode {other}"),
    }
    println!("RSS_CHILD {mode} ok VmHWM_kB={}", vm_hwm_kb());
}

/// The parent's side: runs `child_test` (the full libtest name of a test that calls
/// [`rss_child`]) in a child process per mode and checks each finished and stayed under
/// [`RSS_BOUND_KB`] at its peak.
pub fn client_memory_stays_flat(test: &str, child_test: &str) {
    for mode in ["read", "transfer"] {
        let started = std::time::Instant::now();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", child_test, "--nocapture", "--test-threads", "1"])
            .env(CHILD, mode)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().find(|l| l.contains(&format!("RSS_CHILD {mode} ok")));
        let Some(line) = line else {
            panic!(
                "{test}: the {mode} child did not finish: {}\n{}",
                stdout,
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let kb: u64 = line.rsplit('=').next().and_then(|v| v.parse().ok()).unwrap();
        println!(
            "{test}: {mode} ({} MiB moved) peak RSS {} MiB in {:?}",
            if mode == "read" { 64 } else { stress_bytes() >> 20 },
            kb / 1024,
            started.elapsed()
        );
        assert!(kb < RSS_BOUND_KB, "{test}: the {mode} child peaked at {} MiB (bound 128 MiB)", kb / 1024);
    }
}

// ---- class 5: every file operation has a deadline, and its process ends with it ----

/// A write of 256 MiB given 200 ms (past the process's start-up, so that what is shown is
/// the deadline, not the start-up race of class 3): the call ends with `ExecutionTimeout`
/// at its deadline, and `leftover` (how many of the operation's processes still run)
/// reaches 0 soon after.
#[expect(
    clippy::needless_pass_by_value,
    reason = "the attack owns the sandbox it is given and drops it at the end"
)]
pub fn a_file_operation_past_its_deadline_is_stopped_with_its_process(
    test: &str,
    sbx: Sandbox,
    leftover: impl Fn(&Sandbox) -> Option<usize>,
) {
    if leftover(&sbx).is_none() {
        skip(test, "cannot count the sandbox's file processes here");
        return;
    }
    let data = vec![0u8; 256 << 20];
    // 256 MiB in 20 ms is past any backend here (sandboxd's own writes on `local://` took
    // 200 ms at times). The deadline is a timer raced against the write: on a machine so
    // loaded that the timer's thread is not scheduled until the write has ended, the write
    // wins and nothing was past its deadline. That says nothing about what this test proves
    // (a deadline that fires stops the write and its process), so such a run is tried again,
    // up to three times, and said; three in a row fail.
    let mut tries = 0;
    let (wrote, took) = loop {
        tries += 1;
        let started = std::time::Instant::now();
        let wrote = block_on(sbx.fs().timeout(Duration::from_millis(20)).write("slow.bin", data.clone()));
        let took = started.elapsed();
        if wrote.is_ok() && tries < 3 {
            eprintln!("[{test}] the write ended ({took:?}) before its 20 ms timer was seen: again");
            continue;
        }
        break (wrote, took);
    };
    assert_eq!(code(&wrote), "SBX-006", "a write past its 20 ms deadline ({tries} tries): {wrote:?}");
    assert!(took < Duration::from_secs(5), "the deadline was not kept: {took:?}");
    let gone = crate::support::eventually(Duration::from_secs(10), || leftover(&sbx) == Some(0));
    assert!(gone, "the write's process outlived its deadline: {:?} left", leftover(&sbx));
    // The sandbox still works, and the next call with the default deadline succeeds.
    block_on(sbx.fs().write("after.txt", "ok")).unwrap();
}

// ---- class 4: a hostile `tar` in an image whose user is root ----

#[cfg(feature = "docker")]
/// A download from a sandbox whose `tar` was replaced by one that sends a GNU long-name
/// header claiming 3 GiB, then zeros forever: the host refuses the header at once.
pub fn a_hostile_tar_cannot_make_the_host_read_a_huge_header(test: &str, sbx: Sandbox) {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::GNULongName);
    header.set_size(3 << 30);
    header.as_gnu_mut().unwrap().name[..13].copy_from_slice(b"././@LongLink");
    header.set_cksum();
    block_on(sbx.fs().write("/tmp/evil-header", header.as_bytes().to_vec())).unwrap();
    // The control: uid 0 inside, `tar` replaced, and the replacement is what runs.
    let replaced = sh(
        &sbx,
        "id -u && t=$(command -v tar) && rm -f \"$t\" && \
         printf '#!/bin/sh\\ncat /tmp/evil-header\\nexec cat /dev/zero\\n' > \"$t\" && chmod 755 \"$t\" && \
         mkdir -p /tmp/out && echo x > /tmp/out/f && tar -cf - /tmp/out | head -c 512 | cmp -s - /tmp/evil-header && echo replaced",
    );
    if replaced.stdout_lossy() != "0\nreplaced\n" {
        skip(test, &format!("the sandbox user cannot replace tar (not root?): {replaced:?}"));
        return;
    }
    let host = host_dir(test);
    let sbx = Arc::new(sbx);
    let (s, t) = (Arc::clone(&sbx), host.join("out"));
    let got = within(60, move || block_on(s.fs().download("/tmp/out", &t)));
    let got = got.expect("download() from a hostile tar still running after 60 s");
    let left = host.join("out").exists();
    let _ = std::fs::remove_dir_all(&host);
    assert_eq!(code(&got), "SBX-016", "a 3 GiB long-name header must be refused: {got:?}");
    assert!(!left, "the refused download left files on the host");
}

/// What is left in the sandbox of an interrupted file operation on `slow.bin` in its working
/// directory: processes of the file API's scripts (`sh -c <script> sandboxio-fs ...`, the
/// exec-API path's and the archives'), and temporary files of sandboxd's writes
/// (`.slow.bin.sandboxd-<random>`), counted from inside. `None` when they cannot be counted;
/// the counter first proves it sees a planted temporary name.
pub fn fs_leftovers_inside(sbx: &Sandbox) -> Option<usize> {
    let count = |extra: &str| {
        let out = sh(
            sbx,
            &format!(
                "{extra}p=$(for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '[s]andboxio-fs'); \
                 t=$(ls -a | grep -c '^\\.slow\\.bin\\.sandboxd-'); echo $((p + t))"
            ),
        );
        out.stdout_lossy().trim().parse::<usize>().ok()
    };
    // The control: a planted temporary name is counted.
    let planted = count(": > .slow.bin.sandboxd-control; ")?;
    let after = count("rm -f .slow.bin.sandboxd-control; ")?;
    (planted == after + 1).then_some(after)
}

// ---- class 4: a download of very many tiny entries ----

/// How many plain files the download of [`a_download_of_many_tiny_entries_stays_bounded`]
/// carries in the directory `tar` sends first.
pub const TINY_FILES: u32 = 20_000;
/// How many more names of eight files it carries after them (hard-link entries).
pub const TINY_LINKS: u32 = 50_000;

/// Makes, under `many/`, [`TINY_FILES`] empty files in the subdirectory `tar` visits first
/// and eight empty files with [`TINY_LINKS`] more names in the one it visits last (the
/// directory's own order, from `os.listdir`; a file takes at most 65000 names on ext4 and
/// overlayfs). Every name has six characters, so that the host paths all have one length.
/// Prints how many entries the two subdirectories hold.
const TINY_TREE: &str = r#"import os
os.makedirs("many/a"); os.makedirs("many/b")
first, last = ["many/" + n for n in os.listdir("many")]
for i in range(FILES):
    open("%s/f%05d" % (first, i), "w").close()
for k in range(8):
    open("%s/q%05d" % (last, k), "w").close()
for i in range(LINKS):
    os.link("%s/q%05d" % (last, i % 8), "%s/p%05d" % (last, i))
print(len(os.listdir(first)) + len(os.listdir(last)))
"#;

/// A download of [`TINY_TREE`] into a host directory 3 KiB deep. `tar` sends the first
/// name of each of the eight files as a file and every other name as a hard link to it,
/// which the host copies once it finds the source among the files the download made: it
/// must do that in time linear in the entries (a list of the made paths, scanned from the
/// start for each link, cost the number of files made before the source, each comparison
/// as long as the host path: quadratic, and a few million entries fit the default budget),
/// and charge every entry to the budget.
pub fn a_download_of_many_tiny_entries_stays_bounded(test: &str, sbx: Sandbox) {
    let script = TINY_TREE
        .replace("range(FILES)", &format!("range({TINY_FILES})"))
        .replace("range(LINKS)", &format!("range({TINY_LINKS})"));
    let control =
        block_on(sbx.run(Command::new("python3").args(["-c", &script]).timeout(Duration::from_mins(2))));
    let expected = (TINY_FILES + TINY_LINKS + 8).to_string();
    match &control {
        Ok(out) if out.stdout_lossy().trim() == expected => {}
        _ => {
            skip(test, &format!("could not make the entries: {control:?}"));
            return;
        }
    }
    let host = host_dir(test);
    let target = host.join(vec!["d".repeat(200); 15].join("/")).join("many");
    let sbx = Arc::new(sbx);
    let started = std::time::Instant::now();
    let (s, t) = (Arc::clone(&sbx), target.clone());
    let got = within(400, move || block_on(s.fs().timeout(Duration::from_mins(10)).download("many", &t)));
    let took = started.elapsed();
    let made = count_files(&target);
    // The budget counts every entry (512 bytes of header apiece, at least): the same tree
    // under a budget of 256 bytes per entry is refused.
    let (s, t) = (Arc::clone(&sbx), host.join("small"));
    let small = within(240, move || {
        block_on(s.fs().download_limit(u64::from(TINY_FILES + TINY_LINKS) * 256).download("many", &t))
    });
    let small_left = host.join("small").exists();
    let _ = std::fs::remove_dir_all(&host);
    println!(
        "{test}: {expected} entries downloaded in {took:?}: {made} files; under a small budget: {small:?}"
    );
    let got =
        got.unwrap_or_else(|| panic!("download() of {expected} tiny entries still running after 400 s"));
    assert!(got.is_ok(), "{got:?}");
    assert_eq!(made, (TINY_FILES + TINY_LINKS + 8) as usize);
    assert!(took < Duration::from_secs(100), "{expected} tiny entries took {took:?}");
    let small = small.expect("download() under a small budget still running after 240 s");
    assert_eq!(code(&small), "SBX-016", "the entries must be charged to the budget: {small:?}");
    assert!(!small_left, "the refused download left its files on the host");
}

/// The regular files under `dir`, at any depth.
fn count_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => count_files(&e.path()),
            Ok(t) if t.is_file() => 1,
            _ => 0,
        })
        .sum()
}

// ---- class 7: a hostile `tar` aims a download outside its target ----

/// One raw tar entry: `name` and `link` written into the header as they are (the `tar`
/// crate refuses `..` and absolute names, a hostile `tar` does not), then `data`.
#[cfg(feature = "docker")]
fn raw_entry(name: &str, kind: tar::EntryType, link: &str, data: &[u8]) -> Vec<u8> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    let gnu = header.as_gnu_mut().unwrap();
    gnu.name[..name.len()].copy_from_slice(name.as_bytes());
    gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
    header.set_cksum();
    let mut bytes = header.as_bytes().to_vec();
    bytes.extend_from_slice(data);
    bytes.resize(bytes.len().div_ceil(512) * 512, 0);
    bytes
}

/// Downloads `/tmp/out` from a sandbox whose `tar` sends `archive` instead.
#[cfg(feature = "docker")]
fn hostile_download(sbx: &Arc<Sandbox>, archive: Vec<u8>, target: &Path) -> sandboxio::Result<()> {
    let mut archive = archive;
    archive.extend_from_slice(&[0u8; 1024]);
    block_on(sbx.fs().write("/tmp/evil.tar", archive)).unwrap();
    let (s, t) = (Arc::clone(sbx), target.to_path_buf());
    within(60, move || block_on(s.fs().download("/tmp/out", &t)))
        .expect("a hostile download still running after 60 s")
}

#[cfg(feature = "docker")]
/// A sandbox whose user is root replaces `tar` by one that sends hand-made archives aimed
/// at a canary directory beside the download target: entries through `..`, absolute
/// names, a symlink out followed by a file below it, hard links to host files, a device
/// and a FIFO. Nothing lands outside the target, no link is made or followed on the host,
/// and the plain entries still arrive.
pub fn a_hostile_tar_cannot_write_outside_the_target(test: &str, sbx: Sandbox) {
    use tar::EntryType as E;
    // The control: uid 0 inside, `tar` replaced, and the replacement is what runs.
    let replaced = sh(
        &sbx,
        "id -u && t=$(command -v tar) && rm -f \"$t\" && \
         printf '#!/bin/sh\\nexec cat /tmp/evil.tar\\n' > \"$t\" && chmod 755 \"$t\" && \
         echo probe > /tmp/evil.tar && mkdir -p /tmp/out && [ \"$(tar -cf - /tmp/out)\" = probe ] && echo replaced",
    );
    if replaced.stdout_lossy() != "0\nreplaced\n" {
        skip(test, &format!("the sandbox user cannot replace tar (not root?): {replaced:?}"));
        return;
    }
    let host = host_dir(test);
    let canary = host.join("canary");
    std::fs::create_dir(&canary).unwrap();
    std::fs::write(canary.join("keep"), "keep").unwrap();
    let (target, canary_abs) = (host.join("out"), canary.to_str().unwrap().to_owned());
    let sbx = Arc::new(sbx);
    let mut tricks = raw_entry("out/", E::Directory, "", b"");
    tricks.extend(raw_entry("out/ok", E::Regular, "", b"fine"));
    tricks.extend(raw_entry("out/l", E::Symlink, &canary_abs, b""));
    tricks.extend(raw_entry("out/l/pwned", E::Regular, "", b"pwned"));
    tricks.extend(raw_entry("out/h", E::Link, &format!("{canary_abs}/keep"), b""));
    tricks.extend(raw_entry("out/h2", E::Link, "out/../canary/keep", b""));
    tricks.extend(raw_entry("out/dev", E::Char, "", b""));
    tricks.extend(raw_entry("out/fifo", E::Fifo, "", b""));
    let tricked = hostile_download(&sbx, tricks, &target);
    let kept = std::fs::read_to_string(target.join("ok")).ok();
    let link_made = std::fs::symlink_metadata(target.join("l")).is_ok_and(|m| m.file_type().is_symlink());
    let others: Vec<bool> = ["h", "h2", "dev", "fifo"]
        .iter()
        .map(|n| std::fs::symlink_metadata(target.join(n)).is_ok())
        .collect();
    let _ = std::fs::remove_dir_all(&target);
    let mut dotdot = raw_entry("out/", E::Directory, "", b"");
    dotdot.extend(raw_entry("out/../canary/pwned", E::Regular, "", b"pwned"));
    let by_dotdot = hostile_download(&sbx, dotdot, &target);
    let mut absolute = raw_entry("out/", E::Directory, "", b"");
    absolute.extend(raw_entry(&format!("{canary_abs}/pwned"), E::Regular, "", b"pwned"));
    let by_absolute = hostile_download(&sbx, absolute, &target);
    let left_target = target.exists();
    let canary_now: Vec<String> = std::fs::read_dir(&canary)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let keep_now = std::fs::read_to_string(canary.join("keep")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&host);
    println!("{test}: tricks {tricked:?}; `..` {by_dotdot:?}; absolute {by_absolute:?}");
    assert_eq!(canary_now, vec!["keep".to_owned()], "a hostile archive wrote beside the target");
    assert_eq!(keep_now, "keep", "a hostile archive changed a host file beside the target");
    assert!(tricked.is_ok(), "{tricked:?}");
    assert_eq!(kept.as_deref(), Some("fine"), "the plain entry of the hostile archive is missing");
    assert!(!link_made, "a symlink from the sandbox was made on the host");
    assert_eq!(others, vec![false; 4], "a hard link out, a device or a FIFO was made on the host");
    let invalid = sandboxio::ErrorCode::InvalidInput.as_str();
    assert_eq!(code(&by_dotdot), invalid, "an entry through `..`: {by_dotdot:?}");
    assert_eq!(code(&by_absolute), invalid, "an absolute entry: {by_absolute:?}");
    assert!(!left_target, "a refused download left its files on the host");
}

// ---- class 4: a file that grows while it is downloaded ----

/// A download of a file another command keeps growing (as fast as `head` writes zeros,
/// for 30 s): the host writes no more than the budget and the call ends. The control:
/// the file really grows while the download starts.
pub fn a_download_of_a_growing_file_stays_within_its_budget(test: &str, sbx: Sandbox) {
    let budget: u64 = 64 << 20;
    let sbx = Arc::new(sbx);
    let grower = {
        let s = Arc::clone(&sbx);
        std::thread::spawn(move || {
            block_on(s.run(
                Command::shell("mkdir -p grow && timeout 30 sh -c 'while :; do head -c 1048576 /dev/zero; done' > grow/f")
                    .timeout(Duration::from_secs(40)),
            ))
        })
    };
    let size = || {
        sh(&sbx, "stat -c %s grow/f 2>/dev/null || echo 0").stdout_lossy().trim().parse::<u64>().unwrap_or(0)
    };
    let first = size();
    std::thread::sleep(Duration::from_millis(500));
    let second = size();
    if second <= first {
        skip(test, &format!("the file does not grow: {first} then {second} bytes"));
        return;
    }
    let host = host_dir(test);
    let (s, t) = (Arc::clone(&sbx), host.join("grow"));
    let got = within(60, move || block_on(s.fs().download_limit(budget).download("grow", &t)));
    let on_disk = std::fs::metadata(host.join("grow/f")).map_or(0, |m| m.len());
    let _ = std::fs::remove_dir_all(&host);
    let _ = grower.join();
    println!(
        "{test}: the file grew from {first} to {second} bytes in 0.5 s; download gave {got:?}, {on_disk} bytes on the host"
    );
    let got = got.expect("download() of a growing file still running after 60 s");
    assert!(on_disk <= budget, "{on_disk} bytes on the host, over the budget of {budget}");
    if got.is_err() {
        assert_eq!(on_disk, 0, "a failed download left {on_disk} bytes on the host");
    }
}
