//! The operator's commands: `ls`, `reap` and `extend`. `ls` and `reap` go over every backend
//! compiled in unless `--dsn` names some; a backend whose provider is not there (no Docker
//! engine on this host) is noted on stderr and skipped, not an error.

use std::collections::BTreeMap;

use sandboxio::text::escape;
use sandboxio::{
    Error, ErrorCode, Sandbox,
    inventory::{ReapOptions, SandboxInfo},
};
use serde_json::{Value, json};

use crate::args::{Backends, ExtendArgs, LsArgs, ReapArgs, human};
use crate::commands::{EXIT_ERROR, error_json, fail};

/// The DSNs `ls` and `reap` look at without `--dsn`: one per backend compiled in.
fn compiled_in() -> Vec<String> {
    let mut dsns = Vec::new();
    if cfg!(feature = "local") {
        dsns.push("local://".to_owned());
    }
    if cfg!(feature = "docker") {
        dsns.push("docker://".to_owned());
    }
    if cfg!(feature = "e2b") && std::env::var_os("E2B_API_KEY").is_some() {
        dsns.push("e2b://".to_owned());
    }
    dsns
}

/// What went wrong on each backend: those whose provider is simply absent (`Connect`) are
/// notes, the rest errors that make the exit code non-zero.
#[derive(Default)]
struct Problems {
    notes: Vec<Value>,
    errors: Vec<Value>,
}

impl Problems {
    fn take(&mut self, json: bool, dsn: &str, e: &Error) {
        let entry = json!({ "dsn": dsn, "error": error_json(e) });
        if e.code() == ErrorCode::Connect {
            if !json {
                eprintln!("sandboxio: skipping {}: {e}", escape(dsn));
            }
            self.notes.push(entry);
        } else {
            if !json {
                eprintln!("sandboxio: {}: {e}", escape(dsn));
            }
            self.errors.push(entry);
        }
    }

    fn exit_code(&self) -> i32 {
        if self.errors.is_empty() { 0 } else { EXIT_ERROR }
    }
}

fn dsns(backends: &Backends) -> Vec<String> {
    if backends.dsn.is_empty() { compiled_in() } else { backends.dsn.clone() }
}

fn secs(d: Option<std::time::Duration>) -> Value {
    d.map_or(Value::Null, |d| json!(d.as_secs()))
}

fn info_json(info: &SandboxInfo) -> Value {
    json!({
        "id": info.id,
        "backend": info.backend,
        "age_s": secs(info.age),
        "ttl_left_s": secs(info.ttl_left),
        "owner_alive": info.owner_alive,
        "detached": info.detached,
        "labels": info.labels,
    })
}

/// The `OWNER` column: `detached` outlives its owner by design; else alive, dead or `-`.
fn owner_column(info: &SandboxInfo) -> &'static str {
    match (info.detached, info.owner_alive) {
        (Some(true), _) => "detached",
        (_, Some(true)) => "alive",
        (_, Some(false)) => "dead",
        (_, None) => "-",
    }
}

fn print_table(listed: &[SandboxInfo]) {
    let rows: Vec<[String; 6]> = listed
        .iter()
        .map(|i| {
            // Ids and labels are whoever made the sandbox's (a container's labels, anyone
            // with the engine's socket): escaped, one row per sandbox whatever they hold.
            let labels: Vec<String> =
                i.labels.iter().map(|(k, v)| format!("{}={}", escape(k), escape(v))).collect();
            [
                escape(&i.id).into_owned(),
                escape(&i.backend).into_owned(),
                i.age.map_or("-".into(), human),
                i.ttl_left.map_or("-".into(), |t| if t.is_zero() { "expired".into() } else { human(t) }),
                owner_column(i).to_owned(),
                labels.join(","),
            ]
        })
        .collect();
    let header = ["ID", "BACKEND", "AGE", "TTL", "OWNER", "LABELS"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", cells.join("  ").trim_end());
    }
}

/// `sandboxio ls`.
pub async fn ls(args: LsArgs) -> i32 {
    let json = args.backends.json;
    let labels: BTreeMap<String, String> = args.label.into_iter().collect();
    let mut listed = Vec::new();
    let mut problems = Problems::default();
    for dsn in dsns(&args.backends) {
        match Sandbox::list(&dsn, &labels).await {
            Ok(found) => listed.extend(found),
            Err(e) => problems.take(json, &dsn, &e),
        }
    }
    if json {
        let sandboxes: Vec<Value> = listed.iter().map(info_json).collect();
        println!(
            "{}",
            json!({ "sandboxes": sandboxes, "skipped": problems.notes, "errors": problems.errors })
        );
    } else {
        print_table(&listed);
    }
    problems.exit_code()
}

/// `sandboxio reap`.
pub async fn reap(args: ReapArgs) -> i32 {
    let json = args.backends.json;
    let mut options = ReapOptions::new().owner_dead(args.owner_dead).dry_run(args.dry_run);
    for (key, value) in args.label {
        options = options.label(key, value);
    }
    let mut reports = Vec::new();
    let mut problems = Problems::default();
    for dsn in dsns(&args.backends) {
        match Sandbox::reap(&dsn, options.clone()).await {
            Ok(report) => {
                if !json {
                    let verb = if args.dry_run { "would remove" } else { "removed" };
                    for id in &report.removed {
                        println!("{verb} {} ({})", escape(id), escape(&dsn));
                    }
                }
                reports.push(json!({ "dsn": dsn, "removed": report.removed, "kept": report.kept }));
            }
            Err(e) => problems.take(json, &dsn, &e),
        }
    }
    if json {
        println!(
            "{}",
            json!({
                "dry_run": args.dry_run,
                "backends": reports,
                "skipped": problems.notes,
                "errors": problems.errors,
            })
        );
    }
    problems.exit_code()
}

/// `sandboxio extend`.
pub async fn extend(args: ExtendArgs) -> i32 {
    let json = args.common.json;
    let work = async {
        let sandbox = Sandbox::connect(&args.common.dsn, &args.id).await?;
        sandbox.extend_ttl(args.duration).await
    };
    match work.await {
        Ok(()) => {
            if json {
                println!("{}", json!({ "sandbox_id": args.id, "ttl_s": args.duration.as_secs() }));
            } else {
                println!("{} now ends in {}", escape(&args.id), human(args.duration));
            }
            0
        }
        Err(e) => fail(json, &e),
    }
}
