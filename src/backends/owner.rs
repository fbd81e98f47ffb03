//! Who owns a sandbox: the host, process id and process start time of the program that
//! created it, so that a sweep can tell a dead owner from a live one whose pid was reused.
//! Shared by `docker://` (a label) and `local://` (a file beside the workspace).

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// This process's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub host: String,
    pub pid: u32,
    /// The process start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start: u64,
}

impl Owner {
    pub(crate) fn current() -> &'static Owner {
        static OWNER: OnceLock<Owner> = OnceLock::new();
        OWNER.get_or_init(|| {
            let pid = std::process::id();
            Owner { host: hostname(), pid, start: process_start(pid).unwrap_or(0) }
        })
    }

    /// Process `pid` of this host, as it runs now (`None` when it does not).
    #[cfg_attr(
        not(feature = "local"),
        expect(dead_code, reason = "only local:// records a process other than its owner")
    )]
    pub(crate) fn of(pid: u32) -> Option<Owner> {
        Some(Owner { host: hostname(), pid, start: process_start(pid)? })
    }

    pub(crate) fn label(&self) -> String {
        format!("{}:{}:{}", self.host, self.pid, self.start)
    }

    pub(crate) fn parse(label: &str) -> Option<Owner> {
        let mut parts = label.rsplitn(3, ':');
        let start = parts.next()?.parse().ok()?;
        let pid = parts.next()?.parse().ok()?;
        let host = parts.next()?.to_owned();
        Some(Owner { host, pid, start })
    }

    /// Whether this owner is on this host and no longer running (its pid is gone, or now
    /// belongs to a process that started at another time). `None` for another host.
    pub(crate) fn is_dead_here(&self) -> Option<bool> {
        if self.host != hostname() {
            return None;
        }
        Some(process_start(self.pid) != Some(self.start))
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "unknown".into(), |h| h.trim().to_owned())
}

fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Unix seconds.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
