//! What the soak samples about its host: its own process (from `/proc/self`), the processes
//! it started (its descendants in `/proc`), the host directories of its `local://`
//! sandboxes, and its containers on the engine.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use sandboxio::Sandbox;

/// The soak process's own figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct Process {
    /// Resident set size, KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Threads (`Threads`).
    pub threads: u64,
    /// Open descriptors (entries of `/proc/self/fd`, the one listing it included).
    pub fds: u64,
}

pub fn process() -> Process {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    Process { rss_kib: field("VmRSS:"), threads: field("Threads:"), fds }
}

/// The processes descending from this one (bwrap, sandboxd and everything the `local://`
/// sandboxes run; `docker://` starts none on the host), zombies included: an unreaped child
/// is a leak too.
pub fn descendants() -> u64 {
    let me = std::process::id();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        // `pid (comm) state ppid …`: comm may hold spaces and parentheses, so parse after the last `)`.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some(field) = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)) else {
            continue;
        };
        if let Ok(ppid) = field.parse() {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut count = 0;
    let mut todo = vec![me];
    while let Some(pid) = todo.pop() {
        for &child in children.get(&pid).map_or(&[][..], Vec::as_slice) {
            count += 1;
            todo.push(child);
        }
    }
    count
}

/// Where `local://` keeps this user's sandbox directories: `$TMPDIR/sandboxio-local-<uid>`
/// (`scripts/soak` gives the soak a `TMPDIR` of its own, so every directory there is this
/// run's).
pub fn local_root() -> PathBuf {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|r| r.split_whitespace().next());
    std::env::temp_dir().join(format!("sandboxio-local-{}", uid.unwrap_or("0")))
}

/// The sandbox directories (`local-<id>`) under `root`.
pub fn local_dirs(root: &Path) -> u64 {
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("local-"))
        .count() as u64
}

/// This run's containers on the engine, in any state (`io.sandboxio.managed=true` and the
/// run's own label), or `None` when the engine cannot be asked.
pub async fn containers(dsn: &str, label: &(String, String)) -> Option<u64> {
    let wanted = BTreeMap::from([label.clone()]);
    Sandbox::list(dsn, &wanted).await.ok().map(|l| l.len() as u64)
}
