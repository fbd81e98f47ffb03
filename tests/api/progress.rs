//! Byte progress of uploads and downloads (`Fs::on_progress`): on `fake://` (async and
//! blocking facades), `local://` (feature `local`) and `docker://` on both its exec paths
//! (feature `docker`; without an engine and `sandboxio/busybox:1` each docker test says so
//! and returns, unless `SANDBOXIO_REQUIRE_DOCKER=1`).
//!
//! What is checked, against figures computed here and not by the library: the first call
//! says 0 bytes and the total (the sum of the sizes of the files written below, a symlink
//! to the biggest one left out, for an upload; unknown for a download); the count never
//! goes back; the one last call, `done`, says exactly that sum; two calls before it are at
//! least 50 ms apart (a per-chunk callback would fail that); a transfer long enough to
//! see ticks reports between start and end; a failed download gets no last call; and a
//! transfer without the hook lands the same tree.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sandboxio::{ErrorCode, NetworkPolicy, Sandbox, fs::TransferProgress};

use crate::support;

use support::block_on;

/// The files of the tree every test uploads: (relative path, size in bytes).
fn tree_files() -> Vec<(String, usize)> {
    let mut files = vec![
        ("a.bin".to_owned(), (3 << 20) + 17),
        ("sub/b.bin".to_owned(), 2 << 20),
        ("sub/deeper/c.bin".to_owned(), (1 << 20) - 3),
        ("empty".to_owned(), 0),
        ("small.txt".to_owned(), 777),
    ];
    // Many files: on the per-file transfer (fake://) the count moves once per file, far
    // more often than the callback may be called.
    files.extend((0..48).map(|i| (format!("many/f{i:02}"), 20_000 + i)));
    files
}

/// The file bytes of [`tree_files`]: what a finished transfer of the tree must report.
fn tree_bytes() -> u64 {
    tree_files().iter().map(|(_, size)| *size as u64).sum()
}

/// Bytes that are not all alike (a sparse or compressible run could hide a miscount).
fn contents(seed: usize, size: usize) -> Vec<u8> {
    let mut x = (seed as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// A scratch directory for `label`, emptied.
fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sandboxio-progress-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes the tree under `root`, with a symlink to its biggest file (an upload skips it,
/// so its target's size must not be counted twice).
fn write_tree(root: &Path) {
    for (i, (rel, size)) in tree_files().into_iter().enumerate() {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents(i, size)).unwrap();
    }
    std::os::unix::fs::symlink(root.join("a.bin"), root.join("link-to-a")).unwrap();
}

/// The regular files under `root` and their contents, by relative path.
fn read_tree(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                walk(root, &path, out);
            } else if meta.is_file() {
                out.push((path.strip_prefix(root).unwrap().to_path_buf(), std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// Every call of a progress callback, with when it came.
#[derive(Default)]
struct Recorder(Mutex<Vec<(Instant, TransferProgress)>>);

impl Recorder {
    fn record(&self, p: TransferProgress) {
        self.0.lock().unwrap().push((Instant::now(), p));
    }

    fn calls(&self) -> Vec<(Instant, TransferProgress)> {
        self.0.lock().unwrap().clone()
    }
}

/// Checks the calls of a finished transfer that moved `bytes` file bytes, with `total`
/// announced, and that took `elapsed`. Returns how many calls came between start and end.
fn check(
    what: &str,
    calls: &[(Instant, TransferProgress)],
    total: Option<u64>,
    bytes: u64,
    elapsed: Duration,
) -> usize {
    let shown: Vec<_> = calls.iter().map(|(_, p)| (p.bytes, p.done)).collect();
    assert!(calls.len() >= 2, "{what}: a start and an end call at least: {shown:?}");
    let (first, last) = (calls[0].1, calls[calls.len() - 1].1);
    assert_eq!((first.bytes, first.done), (0, false), "{what}: the first call: {shown:?}");
    assert!(last.done, "{what}: the last call is done: {shown:?}");
    assert_eq!(last.bytes, bytes, "{what}: the last call says every file byte moved: {shown:?}");
    assert_eq!(calls.iter().filter(|(_, p)| p.done).count(), 1, "{what}: one done call: {shown:?}");
    assert!(
        calls.iter().all(|(_, p)| p.total == total),
        "{what}: every call says total {total:?}: {calls:?}"
    );
    assert!(
        calls.windows(2).all(|w| w[0].1.bytes <= w[1].1.bytes),
        "{what}: the count never goes back: {shown:?}"
    );
    let between = &calls[1..calls.len() - 1];
    assert!(
        between.windows(2).all(|w| w[0].1.bytes < w[1].1.bytes),
        "{what}: a call between start and end only when the count moved: {shown:?}"
    );
    // The rate: consecutive calls before the last are at least 50 ms apart (the timer
    // never fires early; 45 ms leaves room for the clock read in the callback).
    let before_end = &calls[..calls.len() - 1];
    for pair in before_end.windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(gap >= Duration::from_millis(45), "{what}: two calls {gap:?} apart: {shown:?}");
    }
    // A transfer that ran through several ticks while bytes moved reported in between.
    if elapsed >= Duration::from_millis(300) {
        assert!(!between.is_empty(), "{what}: {elapsed:?} long and no call between start and end: {shown:?}");
    }
    println!(
        "{what}: {} calls in {elapsed:?}, {} between start and end, ending at {bytes} bytes",
        calls.len(),
        between.len()
    );
    between.len()
}

/// Uploads the tree to `sandbox` and downloads it back, with the hook and without, and
/// checks the calls and the trees.
async fn round_trip(label: &str, sandbox: &Sandbox) {
    let dir = scratch(label);
    let src = dir.join("src");
    write_tree(&src);
    let expected = tree_bytes();
    assert!(expected > 6 << 20, "a multi-MiB tree: {expected}");

    let up = Recorder::default();
    let report = |p| up.record(p);
    let start = Instant::now();
    sandbox.fs().on_progress(&report).upload(&src, "progress-tree").await.unwrap();
    check(&format!("{label} upload"), &up.calls(), Some(expected), expected, start.elapsed());

    let down = Recorder::default();
    let report = |p| down.record(p);
    let start = Instant::now();
    sandbox.fs().on_progress(&report).download("progress-tree", dir.join("down")).await.unwrap();
    check(&format!("{label} download"), &down.calls(), None, expected, start.elapsed());

    // Without the hook: the same tree lands, and it is the source's (the link left out).
    sandbox.fs().download("progress-tree", dir.join("plain")).await.unwrap();
    let landed = read_tree(&dir.join("down"));
    assert_eq!(landed.iter().map(|(_, data)| data.len() as u64).sum::<u64>(), expected, "{label}");
    assert!(landed == read_tree(&dir.join("plain")), "{label}: the hook changed what was downloaded");
    let mut source = read_tree(&src);
    source.retain(|(rel, _)| rel != Path::new("link-to-a"));
    assert!(landed == source, "{label}: the downloaded tree is not the uploaded one");

    // A download over its budget fails: a start call, maybe ticks, never a done call.
    let failed = Recorder::default();
    let report = |p| failed.record(p);
    let err = sandbox
        .fs()
        .download_limit(1 << 20)
        .on_progress(&report)
        .download("progress-tree", dir.join("over"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::TooLarge, "{label}: {err}");
    let calls = failed.calls();
    assert!(!calls.is_empty() && calls.iter().all(|(_, p)| !p.done), "{label}: {calls:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn fake_reports_upload_and_download_bytes() {
    let (_fake, sandbox) = support::fake_sandbox();
    block_on(round_trip("fake", &sandbox));
}

#[test]
fn a_single_file_upload_counts_its_size() {
    let (_fake, sandbox) = support::fake_sandbox();
    let dir = scratch("single");
    std::fs::write(dir.join("one.bin"), contents(1, 300_001)).unwrap();
    let calls = Recorder::default();
    let report = |p| calls.record(p);
    let start = Instant::now();
    block_on(sandbox.fs().on_progress(&report).upload(dir.join("one.bin"), "one.bin")).unwrap();
    check("fake single file", &calls.calls(), Some(300_001), 300_001, start.elapsed());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_refused_upload_never_calls_the_hook() {
    let (_fake, sandbox) = support::fake_sandbox();
    let calls = Recorder::default();
    let report = |p| calls.record(p);
    let err =
        block_on(sandbox.fs().on_progress(&report).upload("/nonexistent-host-dir", "../x")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidInput, "{err}");
    assert!(calls.calls().is_empty());
    // Positive control: the same hook on a good call is called.
    let dir = scratch("refused");
    std::fs::write(dir.join("f"), b"12345").unwrap();
    block_on(sandbox.fs().on_progress(&report).upload(dir.join("f"), "f")).unwrap();
    assert_eq!(calls.calls().last().map(|(_, p)| (p.bytes, p.done)), Some((5, true)));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_blocking_facade_has_the_same_hook() {
    let fake = sandboxio::testing::FakeBackend::new();
    let sandbox =
        sandboxio::sync::Sandbox::builder_with(fake).network(NetworkPolicy::deny_all()).create().unwrap();
    let dir = scratch("blocking");
    write_tree(&dir.join("src"));
    let calls = Recorder::default();
    let report = |p| calls.record(p);
    let start = Instant::now();
    sandbox.fs().on_progress(&report).upload(dir.join("src"), "t").unwrap();
    check("blocking upload", &calls.calls(), Some(tree_bytes()), tree_bytes(), start.elapsed());
    let calls = Recorder::default();
    let report = |p| calls.record(p);
    let start = Instant::now();
    sandbox.fs().on_progress(&report).download("t", dir.join("down")).unwrap();
    check("blocking download", &calls.calls(), None, tree_bytes(), start.elapsed());
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(feature = "local")]
#[test]
fn local_reports_upload_and_download_bytes() {
    let sandbox =
        block_on(Sandbox::builder("local://").unwrap().network(NetworkPolicy::deny_all()).create()).unwrap();
    block_on(round_trip("local", &sandbox));
    block_on(sandbox.close()).unwrap();
}

#[cfg(feature = "docker")]
fn docker_round_trip(test: &str, dsn: &str) {
    if !support::docker_image_ready(test, "sandboxio/busybox:1", "busybox") {
        return;
    }
    let sandbox =
        block_on(Sandbox::builder(dsn).unwrap().network(NetworkPolicy::deny_all()).create()).unwrap();
    block_on(round_trip(test, &sandbox));
    block_on(sandbox.close()).unwrap();
}

#[cfg(feature = "docker")]
#[test]
fn docker_reports_upload_and_download_bytes() {
    docker_round_trip("docker", "docker://?image=sandboxio/busybox:1");
}

#[cfg(feature = "docker")]
#[test]
fn docker_exec_api_reports_upload_and_download_bytes() {
    docker_round_trip("docker-exec-api", "docker://?image=sandboxio/busybox:1&exec=api");
}
