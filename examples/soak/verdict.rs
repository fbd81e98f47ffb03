//! The samples' table and the verdict: flat after warm-up, nothing left behind, nothing lost.
//!
//! **Flat after warm-up.** The samples taken while the soak runs are cut in thirds; the
//! first is warm-up (allocator pools, the backends' caches, the engine's first containers).
//! The last third is compared with the second third: for RSS their floors (the lowest
//! sample of each), for the counts their medians:
//!
//! | figure | may grow by at most |
//! |---|---|
//! | RSS (floor) | 10 %, or 8 MiB if that is more |
//! | threads | [`THREAD_SLACK`] |
//! | open descriptors | [`FD_SLACK`] |
//! | descendant processes | [`PROCESS_SLACK`] |
//! | sandbox directories (local), containers (docker) | [`COUNT_SLACK`] |
//!
//! The slack covers phase noise only: a sample lands wherever the cycles happen to be (a
//! `local://` sandbox holds host threads, descriptors and processes while it lives, a
//! container exists from create to close), so two medians of the same steady state differ
//! by a few. A leak of one thread, descriptor, process or directory per cycle grows by
//! hundreds over a soak.
//!
//! RSS is judged by its floor because its peaks are work in flight: 16 sandboxes moving
//! files and cell results at once swing the host between about 40 and 100 MiB from one
//! sample to the next, so the median of ten samples moves by more than any fixed slack
//! (a CI run failed on a median of 61 MiB against 46 MiB whose floors were 39.9 and
//! 38.3). What leaks is never freed, so it lifts every sample, the lowest included.
//!
//! **Nothing left behind.** After the last close (and `sandboxio::runtime::shutdown`), the
//! descendant processes, sandbox directories and containers are back to their counts
//! before the first create.
//!
//! **Nothing lost.** Every command, cell and file operation gave exactly what it should
//! have, and every backend completed cycles.

use std::fmt::Write as _;
use std::time::Duration;

/// Threads the last third's median may exceed the second third's by.
pub const THREAD_SLACK: u64 = 8;
/// Open descriptors the last third's median may exceed the second third's by.
pub const FD_SLACK: u64 = 16;
/// Descendant processes the last third's median may exceed the second third's by.
pub const PROCESS_SLACK: u64 = 8;
/// Sandbox directories or containers the last third's median may exceed the second third's by.
pub const COUNT_SLACK: u64 = 2;
/// The fewest samples during the run that the flatness check needs (two per third).
pub const MIN_SAMPLES: usize = 6;

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Sample {
    /// `start`, `end`, or the time since the start.
    pub label: String,
    pub rss_kib: u64,
    pub threads: u64,
    pub fds: u64,
    pub processes: u64,
    /// Per backend: its sandboxes between `create()` called and `close()` returned.
    pub live: Vec<u64>,
    /// Per backend: what its sandboxes leave on the host or engine while they live (local:
    /// directories; docker: containers). `None`: could not be counted.
    pub held: Vec<Option<u64>>,
}

pub fn elapsed_label(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}", s / 60, s % 60)
}

pub fn print_header(backends: &[String]) {
    let mut line = format!("{:>7} {:>8} {:>7} {:>5} {:>5}", "t", "rss MiB", "threads", "fds", "procs");
    for b in backends {
        let held = if b.starts_with("local") { "dirs" } else { "ctrs" };
        let _ = write!(line, " | {b:>10} {:>4} {held:>4}", "live");
    }
    println!("{line}");
}

pub fn print_row(s: &Sample) {
    #[expect(clippy::cast_precision_loss, reason = "a KiB count far below 2^52")]
    let rss = s.rss_kib as f64 / 1024.0;
    let mut line = format!("{:>7} {:>8.1} {:>7} {:>5} {:>5}", s.label, rss, s.threads, s.fds, s.processes);
    for (live, held) in s.live.iter().zip(&s.held) {
        let held = held.map_or_else(|| "?".to_owned(), |h| h.to_string());
        let _ = write!(line, " | {:>10} {live:>4} {held:>4}", "");
    }
    println!("{line}");
}

/// Every rule the run broke (empty: it passed), with the figures.
pub fn judge(backends: &[String], start: &Sample, during: &[Sample], end: &Sample) -> Vec<String> {
    let mut broken = Vec::new();
    if during.len() < MIN_SAMPLES {
        broken.push(format!(
            "{} samples during the run, the flatness check needs {MIN_SAMPLES}: sample more often (--sample-every)",
            during.len()
        ));
    } else {
        let n = during.len();
        let (second, last) = (&during[n / 3..2 * n / 3], &during[2 * n / 3..]);
        let flat = |name: &str,
                    (statistic, of): (&str, fn(&[u64]) -> u64),
                    figure: fn(&Sample) -> u64,
                    slack: &dyn Fn(u64) -> u64,
                    broken: &mut Vec<String>| {
            let values = |third: &[Sample]| third.iter().map(figure).collect::<Vec<_>>();
            let (before, after) = (of(&values(second)), of(&values(last)));
            if after > before + slack(before) {
                broken.push(format!(
                    "{name} grew after warm-up: {statistic} {after} in the last third against {before} in the second (allowed +{})",
                    slack(before)
                ));
            }
        };
        let floor = ("floor", floor_of as fn(&[u64]) -> u64);
        let median = ("median", median_of as fn(&[u64]) -> u64);
        flat("RSS (KiB)", floor, |s| s.rss_kib, &|m| (m / 10).max(8 * 1024), &mut broken);
        flat("threads", median, |s| s.threads, &|_| THREAD_SLACK, &mut broken);
        flat("open descriptors", median, |s| s.fds, &|_| FD_SLACK, &mut broken);
        flat("descendant processes", median, |s| s.processes, &|_| PROCESS_SLACK, &mut broken);
        for (i, backend) in backends.iter().enumerate() {
            let held: Vec<u64> = during.iter().filter_map(|s| s.held[i]).collect();
            if held.len() < during.len() {
                broken.push(format!(
                    "{backend}: {} samples could not count what it holds",
                    during.len() - held.len()
                ));
                continue;
            }
            let (before, after) = (median_of(&held[n / 3..2 * n / 3]), median_of(&held[2 * n / 3..]));
            if after > before + COUNT_SLACK {
                broken.push(format!(
                    "{backend}: directories or containers grew after warm-up: median {after} in the last third against {before} in the second (allowed +{COUNT_SLACK})"
                ));
            }
        }
    }
    if end.processes != start.processes {
        broken.push(format!(
            "{} descendant processes after the last close, {} before the first create",
            end.processes, start.processes
        ));
    }
    for (i, backend) in backends.iter().enumerate() {
        if end.held[i] != start.held[i] {
            broken.push(format!(
                "{backend}: {:?} directories or containers after the last close, {:?} before the first create",
                end.held[i], start.held[i]
            ));
        }
    }
    broken
}

/// The lowest value (0 for none).
fn floor_of(values: &[u64]) -> u64 {
    values.iter().copied().min().unwrap_or(0)
}

fn median_of(values: &[u64]) -> u64 {
    let mut v = values.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rss_mib: &[f64]) -> Vec<String> {
        let backends = vec!["local".to_owned()];
        let sample = |label: &str, rss: f64| Sample {
            label: label.to_owned(),
            #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "test figures")]
            rss_kib: (rss * 1024.0) as u64,
            threads: 15,
            fds: 80,
            processes: 30,
            live: vec![8],
            held: vec![Some(8)],
        };
        let start = Sample { processes: 0, held: vec![Some(0)], ..sample("start", 12.6) };
        let end = Sample { processes: 0, held: vec![Some(0)], ..sample("end", 38.6) };
        let during: Vec<Sample> = rss_mib.iter().map(|&r| sample("t", r)).collect();
        judge(&backends, &start, &during, &end)
    }

    /// The RSS column of the CI run that failed on medians (61 MiB against 46 MiB): no leak,
    /// 16 sandboxes' work in flight.
    const CI_RUN_WITHOUT_A_LEAK: [f64; 30] = [
        53.5, 51.2, 43.5, 57.9, 38.2, 51.2, 45.9, 43.3, 38.3, 44.9, 38.6, 45.5, 40.8, 47.4, 39.1, 53.6, 45.0,
        44.1, 38.5, 70.2, 95.1, 51.5, 52.3, 71.4, 39.9, 59.6, 41.8, 55.1, 74.4, 102.7,
    ];

    #[test]
    fn work_in_flight_is_not_a_leak() {
        assert_eq!(run(&CI_RUN_WITHOUT_A_LEAK), Vec::<String>::new());
    }

    #[test]
    fn a_leak_lifts_the_floor_and_fails() {
        // The same swings with 1 MiB kept for good per sample (what `--leak-every` does).
        #[expect(clippy::cast_precision_loss, reason = "a small index")]
        let leaking: Vec<f64> = CI_RUN_WITHOUT_A_LEAK.iter().enumerate().map(|(i, r)| r + i as f64).collect();
        let broken = run(&leaking);
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert!(broken[0].starts_with("RSS (KiB) grew after warm-up: floor "), "{broken:?}");
    }
}
