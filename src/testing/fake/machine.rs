//! What a simulated process does: timed output events, virtual sleeps, an exit status.
//!
//! Programs (the fake shell, the fake Python) run eagerly against a [`SandboxView`] and a
//! [`Proc`], producing a [`Trace`]; the fake sandbox then delivers the trace step by step
//! on the virtual clock, yielding between steps so that a caller can cancel mid-operation.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::exec::StreamKind;
use crate::policy::NetworkPolicy;

use super::vfs::Vfs;

/// A seeded, deterministic generator (`SplitMix64`).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// Why a program stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// `exit n` (unwinds to the nearest process boundary).
    Exit(i32),
    /// The process reached its deadline and was killed.
    TimedOut,
    /// It read stdin that is still open; run it again once stdin is closed.
    NeedsStdin,
    /// It met something the fake does not model: the whole process ends with this exit
    /// code (its message is already on stderr), so no test passes on a guess.
    Unmodelled(i32),
    /// The command's main process (the shell, `$$`) received this fatal signal: the
    /// command ends with `ExitStatus::Signal(n)`.
    Signal(i32),
    /// The process allocating memory went past the sandbox's memory limit: the
    /// out-of-memory killer sends it `SIGKILL`.
    OomKilled,
}

/// One piece of output, stamped with the virtual time since the process started.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub(crate) at: Duration,
    pub(crate) stream: StreamKind,
    pub(crate) data: Vec<u8>,
}

/// A finished simulation.
#[derive(Debug, Clone)]
pub(crate) struct Trace {
    pub(crate) events: Vec<Event>,
    /// Virtual run time of the main process.
    pub(crate) elapsed: Duration,
    /// `None` when the process was killed at its deadline.
    pub(crate) exit: Option<crate::ExitStatus>,
    pub(crate) truncated: bool,
    /// Background children still running when the main process exited (killed with its
    /// process group).
    pub(crate) killed_children: usize,
    /// File-system changes, stamped with when the process made them.
    pub(crate) effects: Vec<(Duration, super::vfs::Effect)>,
    /// Whether the out-of-memory killer killed a process of the command.
    pub(crate) oom_killed: bool,
}

/// What a program sees of its sandbox: the files, the network policy, the randomness.
pub(crate) struct SandboxView<'a> {
    pub(crate) vfs: &'a mut Vfs,
    pub(crate) policy: &'a NetworkPolicy,
    pub(crate) rng: &'a mut Rng,
}

/// Where a process's stdin comes from.
#[derive(Debug, Clone)]
pub(crate) enum Stdin {
    /// Fixed bytes followed by end-of-file.
    Bytes(Vec<u8>),
    /// A pipe still open for writing: reading it needs the whole input first.
    Open,
}

/// The running state of one process.
#[derive(Debug)]
pub(crate) struct Proc {
    pub(crate) elapsed: Duration,
    pub(crate) deadline: Option<Duration>,
    pub(crate) events: Vec<Event>,
    pub(crate) limit: usize,
    written: [usize; 2],
    pub(crate) truncated: bool,
    /// Background jobs: their events (already offset) and when they end.
    pub(crate) children: Vec<(Vec<Event>, Duration)>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: String,
    /// The sandbox's memory limit in bytes (`ResourceLimits::memory_mib`), if any.
    pub(crate) memory_limit: Option<u64>,
    /// Whether the out-of-memory killer killed this process or one it started.
    pub(crate) oom_killed: bool,
}

/// The largest single allocation the fake performs for real (in the test's own memory):
/// 16 MiB. A larger one under the sandbox's memory limit is not modelled (it fails loudly).
pub(crate) const MAX_REAL_ALLOCATION: u64 = 16 * 1024 * 1024;

impl Proc {
    pub(crate) fn new(
        deadline: Option<Duration>,
        limit: usize,
        env: BTreeMap<String, String>,
        cwd: String,
    ) -> Self {
        Proc {
            elapsed: Duration::ZERO,
            deadline,
            events: Vec::new(),
            limit,
            written: [0, 0],
            truncated: false,
            children: Vec::new(),
            env,
            cwd,
            memory_limit: None,
            oom_killed: false,
        }
    }

    /// The same process under a memory limit of `bytes`.
    pub(crate) fn with_memory_limit(mut self, bytes: Option<u64>) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// Holds `bytes` more bytes of memory at once: past the sandbox's memory limit the
    /// out-of-memory killer ends the process ([`Stop::OomKilled`]). The fake counts each
    /// allocation on its own (it has no heap): enough for the one-big-buffer programs that
    /// the contract's probes run.
    pub(crate) fn allocate(&mut self, bytes: u64) -> Result<(), Stop> {
        match self.memory_limit {
            Some(limit) if bytes > limit => {
                self.oom_killed = true;
                Err(Stop::OomKilled)
            }
            _ => Ok(()),
        }
    }

    /// Appends output, keeping at most `limit` bytes per stream.
    pub(crate) fn output(&mut self, stream: StreamKind, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let slot = usize::from(stream == StreamKind::Stderr);
        let room = self.limit.saturating_sub(self.written[slot]);
        let kept = &data[..data.len().min(room)];
        if kept.len() < data.len() {
            self.truncated = true;
        }
        self.written[slot] += kept.len();
        if !kept.is_empty() {
            self.events.push(Event { at: self.elapsed, stream, data: kept.to_vec() });
        }
    }

    /// Advances virtual time; a sleep past the deadline stops the process there.
    pub(crate) fn sleep(&mut self, d: Duration) -> Result<(), Stop> {
        let wake = self.elapsed.saturating_add(d);
        match self.deadline {
            Some(deadline) if wake > deadline => {
                self.elapsed = deadline;
                Err(Stop::TimedOut)
            }
            _ => {
                self.elapsed = wake;
                Ok(())
            }
        }
    }

    /// Merges the background jobs' output that happened before the main process ended,
    /// and counts the jobs its exit killed.
    pub(crate) fn finish(self, exit: Option<i32>) -> Trace {
        self.finish_with(exit.map(crate::ExitStatus::Code))
    }

    /// As [`Proc::finish`], with any status (a signal death).
    pub(crate) fn finish_with(mut self, exit: Option<crate::ExitStatus>) -> Trace {
        let end = self.elapsed;
        let mut killed = 0;
        for (events, job_end) in std::mem::take(&mut self.children) {
            if job_end > end {
                killed += 1;
            }
            self.events.extend(events.into_iter().filter(|e| e.at <= end));
        }
        self.events.sort_by_key(|e| e.at);
        // Background output counts against the same per-stream caps.
        let mut written = [0usize; 2];
        let mut truncated = self.truncated;
        let limit = self.limit;
        self.events.retain_mut(|e| {
            let slot = usize::from(e.stream == StreamKind::Stderr);
            let room = limit.saturating_sub(written[slot]);
            if e.data.len() > room {
                truncated = true;
                e.data.truncate(room);
            }
            written[slot] += e.data.len();
            !e.data.is_empty()
        });
        Trace {
            events: self.events,
            elapsed: end,
            exit,
            truncated,
            killed_children: killed,
            effects: Vec::new(),
            oom_killed: self.oom_killed,
        }
    }
}

/// `host` and `port` of a URL such as `https://pypi.org/simple` (default ports 80/443).
pub(crate) fn url_host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let default_port = if scheme.eq_ignore_ascii_case("https") { 443 } else { 80 };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    if authority.is_empty() {
        return None;
    }
    if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        let port = after.strip_prefix(':').map_or(Some(default_port), |p| p.parse().ok())?;
        return Some((host.to_owned(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_owned(), port.parse().ok()?)),
        None => Some((authority.to_owned(), default_port)),
    }
}
