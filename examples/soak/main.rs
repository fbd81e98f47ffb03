//! The soak: for a while, on each backend, keep N sandboxes cycling at once (create →
//! commands → code cells → files → close, every result checked exactly), sample the host
//! as it goes, and judge at the end that nothing grew after warm-up, nothing was left
//! behind and nothing was lost. `scripts/soak` builds and runs it; see `verdict.rs` for the
//! rules.
//!
//! ```text
//! scripts/soak --duration 5m --sample-every 10s
//! cargo run --release --example soak --features local,docker -- --help
//! ```
//!
//! Run it with a `TMPDIR` of its own (`scripts/soak` does): the `local://` sandbox
//! directories it counts live there, and another program's would be counted too.
//! Exits 0 when the verdict is a pass, 1 otherwise, 2 on a usage error.

mod probe;
mod verdict;
mod workload;

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Parser;

use verdict::Sample;
use workload::{Cycle, Done};

/// Soak sandboxio's backends: N sandboxes cycling at once per backend for a while, the host
/// sampled as it goes; fails on any leak or any lost or misreported result.
#[derive(Debug, Parser)]
struct Args {
    /// How long to cycle (`90s`, `5m`, `1h`).
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    duration: Duration,
    /// The backends, comma-separated: `local`, `docker` (the sandboxd path), `docker-api`
    /// (the exec-API path); `all` is `local,docker`.
    #[arg(long, default_value = "all", value_delimiter = ',')]
    backend: Vec<String>,
    /// Sandboxes cycling at once on each backend.
    #[arg(long, default_value_t = 8)]
    concurrency: u32,
    /// How often to sample the host (`10s`, `1m`).
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    sample_every: Duration,
    /// A pause after each cycle, to make the soak cheaper (`0s`: none).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pause: Duration,
    /// The size of the file each cycle writes and reads back, in MiB.
    #[arg(long, default_value_t = 3)]
    file_mib: usize,
    /// The image of the `docker://` sandboxes.
    #[arg(long, default_value = "sandboxio/python:2")]
    image: String,
    /// The positive control: every Nth cycle of each worker leaks on purpose (detaches its
    /// sandbox instead of closing it, and keeps 1 MiB, a descriptor and a thread), and the
    /// verdict must be a FAIL. 0: never.
    #[arg(long, default_value_t = 0)]
    leak_every: u64,
    /// The longest one cycle may take before it counts as hung.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    cycle_limit: Duration,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| format!("{text:?}: a number then s, m or h (`90s`, `5m`)"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m or h)")),
    }
}

/// One backend's soak: its DSN, the shared settings of its cycles, and its totals.
struct Soaked {
    name: String,
    cycle: Cycle,
    live: AtomicU64,
    cycles: AtomicU64,
    commands: AtomicU64,
    cells: AtomicU64,
    file_ops: AtomicU64,
    failures: Mutex<Vec<String>>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let run_id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
    );
    let mut names: Vec<String> = Vec::new();
    for b in &args.backend {
        match b.as_str() {
            "all" => names.extend(["local".to_owned(), "docker".to_owned()]),
            "local" | "docker" | "docker-api" => names.push(b.clone()),
            other => {
                eprintln!("unknown backend {other:?}: local, docker, docker-api or all");
                return ExitCode::from(2);
            }
        }
    }
    names.dedup();
    let backends: Vec<Arc<Soaked>> = names
        .iter()
        .map(|name| {
            let dsn = match name.as_str() {
                "local" => "local://".to_owned(),
                "docker" => format!("docker://?image={}", args.image),
                _ => format!("docker://?image={}&exec=api", args.image),
            };
            Arc::new(Soaked {
                name: name.clone(),
                cycle: Cycle {
                    dsn,
                    label: ("sandboxio-soak".to_owned(), format!("{run_id}-{name}")),
                    file_bytes: args.file_mib * 1024 * 1024,
                    seq_lines: 500_000,
                },
                live: AtomicU64::new(0),
                cycles: AtomicU64::new(0),
                commands: AtomicU64::new(0),
                cells: AtomicU64::new(0),
                file_ops: AtomicU64::new(0),
                failures: Mutex::new(Vec::new()),
            })
        })
        .collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if runtime.block_on(soak(&args, &names, &backends)) { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

async fn soak(args: &Args, names: &[String], backends: &[Arc<Soaked>]) -> bool {
    let local_root = probe::local_root();
    println!(
        "soak: {} for {:?}, {} at once each, sampled every {:?}; label sandboxio-soak={}; local root {}",
        names.join(", "),
        args.duration,
        args.concurrency,
        args.sample_every,
        backends[0].cycle.label.1.strip_suffix(&backends[0].name).unwrap_or_default().to_owned()
            + "<backend>",
        local_root.display()
    );
    match std::env::var("MALLOC_MMAP_THRESHOLD_") {
        Ok(bytes) => {
            println!("malloc: glibc's mmap threshold fixed at {bytes} bytes (RSS follows live memory)");
        }
        Err(_) => println!("malloc: glibc's defaults (RSS includes what its heaps keep after frees)"),
    }
    let start = sample("start", backends, &local_root).await;
    verdict::print_header(names);
    verdict::print_row(&start);

    let started = Instant::now();
    let deadline = started + args.duration;
    let workers = spawn_workers(args, backends, deadline);

    let mut during = Vec::new();
    let mut next = started + args.sample_every;
    while next <= deadline {
        tokio::time::sleep_until(next.into()).await;
        let s = sample(&verdict::elapsed_label(started.elapsed()), backends, &local_root).await;
        verdict::print_row(&s);
        during.push(s);
        next += args.sample_every;
    }
    for w in workers {
        let _ = w.await;
    }
    let left = sandboxio::runtime::shutdown(Duration::from_secs(30)).await;
    // Teardown ends asynchronously on the engine (auto-removal) and in /proc (reaping): give
    // what should go a bounded moment to go, then take the last sample.
    let mut end = sample("end", backends, &local_root).await;
    for _ in 0..30 {
        if end.processes == start.processes && end.held == start.held {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        end = sample("end", backends, &local_root).await;
    }
    verdict::print_row(&end);

    println!();
    let mut broken = verdict::judge(names, &start, &during, &end);
    if left > 0 {
        broken.push(format!("{left} background teardowns still running 30 s after the last close"));
    }
    println!("peak RSS {:.1} MiB; wall {:.0} s", peak_rss_mib(), started.elapsed().as_secs_f64());
    report(backends, broken)
}

/// `concurrency` workers per backend, each cycling until `deadline`.
fn spawn_workers(
    args: &Args,
    backends: &[Arc<Soaked>],
    deadline: Instant,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut workers = Vec::new();
    for soaked in backends {
        for worker in 0..u64::from(args.concurrency) {
            let (soaked, pause, limit, leak_every) =
                (Arc::clone(soaked), args.pause, args.cycle_limit, args.leak_every);
            workers.push(tokio::spawn(async move {
                let mut n = worker;
                for round in 1.. {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let leak = leak_every > 0 && round % leak_every == 0;
                    if leak {
                        leak_on_purpose();
                    }
                    cycle(&soaked, n, leak, limit).await;
                    n += u64::from(u32::MAX); // a different number for every cycle of every worker
                    tokio::time::sleep(pause).await;
                }
            }));
        }
    }
    workers
}

/// Prints each backend's totals and failures and the verdict; whether it passed.
fn report(backends: &[Arc<Soaked>], mut broken: Vec<String>) -> bool {
    for soaked in backends {
        let failures = soaked.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let cycles = soaked.cycles.load(Ordering::Relaxed);
        println!(
            "{}: {cycles} cycles, {} commands, {} cells, {} file operations, {} failed",
            soaked.name,
            soaked.commands.load(Ordering::Relaxed),
            soaked.cells.load(Ordering::Relaxed),
            soaked.file_ops.load(Ordering::Relaxed),
            failures.len()
        );
        for f in failures.iter().take(20) {
            println!("    {f}");
        }
        if !failures.is_empty() {
            broken.push(format!("{}: {} cycles lost or misreported a result", soaked.name, failures.len()));
        }
        if cycles == 0 {
            broken.push(format!("{}: no cycle completed", soaked.name));
        }
    }
    if broken.is_empty() {
        println!("verdict: PASS (flat after warm-up, nothing left behind, nothing lost)");
        true
    } else {
        println!("verdict: FAIL");
        for b in &broken {
            println!("  - {b}");
        }
        false
    }
}

/// The positive control's host-side leaks: 1 MiB kept, a descriptor never closed, a thread
/// that never ends.
fn leak_on_purpose() {
    std::hint::black_box(Box::leak(vec![1_u8; 1024 * 1024].into_boxed_slice()));
    if let Ok(file) = std::fs::File::open("/dev/null") {
        std::mem::forget(file);
    }
    let _ = std::thread::Builder::new().name("soak-leak".into()).spawn(|| {
        loop {
            std::thread::park();
        }
    });
}

/// One cycle, its outcome added to the backend's totals; a cycle past `limit` counts as hung.
async fn cycle(soaked: &Soaked, n: u64, leak: bool, limit: Duration) {
    let mut done = Done::default();
    soaked.live.fetch_add(1, Ordering::Relaxed);
    let outcome = tokio::time::timeout(limit, workload::run(&soaked.cycle, n, leak, &mut done)).await;
    soaked.live.fetch_sub(1, Ordering::Relaxed);
    soaked.commands.fetch_add(done.commands, Ordering::Relaxed);
    soaked.cells.fetch_add(done.cells, Ordering::Relaxed);
    soaked.file_ops.fetch_add(done.file_ops, Ordering::Relaxed);
    let failure = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(f)) => Some(format!("cycle {n}: {}: {}", f.step, f.what)),
        Err(_) => Some(format!("cycle {n}: hung for {limit:?} (dropped)")),
    };
    match failure {
        None => {
            soaked.cycles.fetch_add(1, Ordering::Relaxed);
        }
        Some(f) => {
            eprintln!("{}: {f}", soaked.name);
            soaked.failures.lock().unwrap_or_else(PoisonError::into_inner).push(f);
        }
    }
}

async fn sample(label: &str, backends: &[Arc<Soaked>], local_root: &std::path::Path) -> Sample {
    let me = probe::process();
    let mut held = Vec::new();
    for soaked in backends {
        held.push(if soaked.name == "local" {
            Some(probe::local_dirs(local_root))
        } else {
            probe::containers(&soaked.cycle.dsn, &soaked.cycle.label).await
        });
    }
    Sample {
        label: label.to_owned(),
        rss_kib: me.rss_kib,
        threads: me.threads,
        fds: me.fds,
        processes: probe::descendants(),
        live: backends.iter().map(|s| s.live.load(Ordering::Relaxed)).collect(),
        held,
    }
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    #[expect(clippy::cast_precision_loss, reason = "a KiB count far below 2^52")]
    let mib = kib as f64 / 1024.0;
    mib
}
