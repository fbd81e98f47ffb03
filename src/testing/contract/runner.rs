//! [`ContractSuite`]: builds one `libtest-mimic` trial per contract test and prints a
//! summary per contract area.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use libtest_mimic::{Arguments, Completion, Trial};

use crate::audit::RecordingSink;
use crate::backend::{Backend, BoxFuture};
use crate::builder::IntoBackend;
use crate::policy::Capabilities;

use super::Row;
use super::cases::{self, Case};
use super::ctx::Ctx;
use super::facade::Facade;
use super::probes::{DefaultProbes, ProbeKind, Probes};
use super::version::{self, ContractVersion};

/// Runs a test's future to completion. The default is `futures_lite::future::block_on`;
/// supply your own to run the suite inside tokio (either flavour) or smol.
pub type Executor = Arc<dyn Fn(BoxFuture<'static, Result<(), String>>) -> Result<(), String> + Send + Sync>;

/// The contract suite for one backend. See the [module documentation](super).
pub struct ContractSuite {
    backend: Arc<dyn Backend>,
    probes: Arc<dyn Probes>,
    audit: Option<Arc<RecordingSink>>,
    known_failures: BTreeMap<String, String>,
    executor: Executor,
    test_timeout: Duration,
    facade: Facade,
    strict: bool,
    /// The version the run holds the backend to, or why the environment's choice is not one
    /// (reported when the run starts).
    version: Result<ContractVersion, String>,
}

/// The environment variables sandboxio's own runs use to make a run strict unless
/// [`ContractSuite::strict`] says otherwise: `SANDBOXIO_STRICT=1` (CI sets it) or
/// `SANDBOXIO_REQUIRE_DOCKER=1`. Any other `SANDBOXIO_REQUIRE_*` variable set to `1` (an
/// adapter's own, `SANDBOXIO_REQUIRE_FLY=1`) makes it strict too.
pub const STRICT_ENV: &[&str] = &["SANDBOXIO_STRICT", "SANDBOXIO_REQUIRE_DOCKER"];

/// Whether the environment makes a run strict: `SANDBOXIO_STRICT=1` or any
/// `SANDBOXIO_REQUIRE_*=1`.
fn strict_from_env() -> bool {
    strict_in(std::env::vars_os())
}

fn strict_in(vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>) -> bool {
    vars.into_iter().any(|(name, value)| {
        let name = name.to_string_lossy();
        value == "1" && (STRICT_ENV.contains(&name.as_ref()) || name.starts_with("SANDBOXIO_REQUIRE_"))
    })
}

/// How long one contract test may take unless [`ContractSuite::test_timeout`] says
/// otherwise: 5 minutes. A test past it fails as a hang.
pub const DEFAULT_TEST_TIMEOUT: Duration = Duration::from_mins(5);

impl std::fmt::Debug for ContractSuite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContractSuite")
            .field("backend", &self.backend.scheme())
            .field("audit_sink", &self.audit.is_some())
            .field("known_failures", &self.known_failures)
            .field("facade", &self.facade)
            .field("strict", &self.strict)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// Why a test does not run.
#[derive(Debug, Clone)]
enum Skip {
    /// A capability the test needs is undeclared (or one it checks the absence of is
    /// declared): its counterpart runs instead.
    NotApplicable(String),
    /// The test checks behaviour of the async API only, and the run drives the blocking
    /// facade.
    AsyncOnly(String),
    /// A probe, the audit sink, or work the test waits on (`Case::pending`) is missing.
    Skipped(String),
    /// Listed by the adapter as a known failure, with its note.
    KnownFailure(String),
    /// A clause of a contract version newer than the one the run holds the backend to.
    NotYetPromised(ContractVersion),
    /// The adapter declared a probe not applicable for a reason the contract refuses: a
    /// failure, strict run or not, saying what to do instead.
    Refused(String),
}

/// The tests that did not run, each with its reason, printed after the summary.
#[derive(Debug, Default)]
struct Listed {
    /// Skipped and known failures (in a strict run, the skips are failures).
    skips: Vec<String>,
    /// Not applicable, whether for a capability, a probe declared inapplicable or the
    /// blocking facade.
    not_applicable: Vec<String>,
    /// Clauses newer than the selected contract version, with the version of each.
    not_yet: Vec<(ContractVersion, &'static str)>,
    /// Tests failed for a refused not-applicable declaration, with the refusal.
    refused: Vec<String>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    passed: usize,
    failed: usize,
    skipped: usize,
    not_applicable: usize,
    known: usize,
    /// Clauses of a newer contract version than the run's: not yet promised.
    later: usize,
}

impl ContractSuite {
    /// The suite for `backend`, with the [`DefaultProbes`], no audit sink (the
    /// Observability row skips), the `futures-lite` executor and the async API
    /// ([`Facade::Async`]).
    pub fn new(backend: impl IntoBackend) -> Self {
        ContractSuite {
            backend: backend.into_backend(),
            probes: Arc::new(DefaultProbes),
            audit: None,
            known_failures: BTreeMap::new(),
            executor: Arc::new(futures_lite::future::block_on),
            test_timeout: DEFAULT_TEST_TIMEOUT,
            facade: Facade::Async,
            strict: strict_from_env(),
            version: version::from_env(),
        }
    }

    /// Holds the backend to the contract as of `version`: the clauses that arrived in it or
    /// before run as usual; those added after it are reported ignored (kind `vN`, the
    /// version each arrived in), counted in the summary's `later` column and listed after
    /// it as not yet promised, never as passed, skipped or failed, strict run or not
    /// (`--include-ignored` runs them, to see how the backend fares). Default: the
    /// version `SANDBOXIO_CONTRACT_VERSION` names ([`CONTRACT_VERSION_ENV`](super::CONTRACT_VERSION_ENV):
    /// `1`, `v2`, `latest`), else [`ContractVersion::LATEST`]; a value of that variable that
    /// names no version fails the run before any test starts.
    ///
    /// Pin the version your adapter was written against, and move up when you have met
    /// the clauses the newer one adds (`CHANGELOG.md` lists them per version with what an
    /// adapter must do). A declared capability whose every test is newer than the selected
    /// version fails `capability_honesty__every_declared_capability_has_a_runnable_test`:
    /// select the version that tests it.
    #[must_use]
    pub fn contract_version(mut self, version: ContractVersion) -> Self {
        self.version = Ok(version);
        self
    }

    /// Whether a test that cannot run fails (`true`) or skips visibly (`false`): a test
    /// whose behaviour probe is not implemented (and not declared inapplicable with
    /// [`Probes::not_applicable`]), and a test whose positive control cannot run. A strict
    /// run counts such a test as failed in the summary and fails the exit code, in the
    /// async and the blocking runs alike.
    ///
    /// Every negative check of the suite (egress denied, no process or
    /// sandbox left, a secret unseen) first proves, in the same test, that its probe does
    /// observe the thing when it is there (the canary is reached under allow-all, the
    /// process probe sees a running command, the secret scan sees its own marker). When
    /// that control cannot run (a probe program missing from the image, a canary nobody
    /// can reach), the check would pass vacuously: the test is reported skipped with the
    /// reason, or, in a strict run, failed, so that CI cannot go green on a probe that
    /// never worked.
    ///
    /// Default: strict when the environment sets `SANDBOXIO_STRICT=1` or any
    /// `SANDBOXIO_REQUIRE_*=1` (`SANDBOXIO_REQUIRE_DOCKER=1`, [`STRICT_ENV`]).
    #[must_use]
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Uses `probes` to drive the backend.
    #[must_use]
    pub fn probes(mut self, probes: impl Probes) -> Self {
        self.probes = Arc::new(probes);
        self
    }

    /// The recording sink the backend was built with (its [`Backend::audit`]); the
    /// Observability row needs it.
    #[must_use]
    pub fn audit_sink(mut self, sink: Arc<RecordingSink>) -> Self {
        self.audit = Some(sink);
        self
    }

    /// Marks `test` as a known failure with a note saying why: it is reported as ignored
    /// and counted in the summary. An unknown test name fails the run. Run it alone with
    /// `cargo test --test contract -- --ignored <name>`: the harness takes one name filter
    /// (a substring; add `--exact` for the whole name), so run several known failures one
    /// command each or by a substring they share. `--include-ignored` runs every ignored
    /// test, and the `n/a` and skipped ones then fail, saying why they cannot run.
    #[must_use]
    pub fn known_failure(mut self, test: &str, note: &str) -> Self {
        self.known_failures.insert(test.to_owned(), note.to_owned());
        self
    }

    /// How long one test may take before it fails as a hang (default
    /// [`DEFAULT_TEST_TIMEOUT`], 5 minutes): a backend that ignores a timeout must fail,
    /// not stall the run.
    ///
    /// The bound races the test's future against a timer, so it ends a test whose future
    /// stays pending, never one whose thread is held: a blocking provider call that never
    /// returns, made inside `poll` or under [`Facade::Blocking`] (where every call blocks the
    /// test's thread), stalls the run. Give each blocking call its own deadline inside the
    /// work passed to [`run_blocking`](crate::backend::run_blocking) (a client timeout, a
    /// loop on [`CancelToken::wait`](crate::backend::CancelToken::wait)), so that it
    /// returns.
    #[must_use]
    pub fn test_timeout(mut self, timeout: Duration) -> Self {
        self.test_timeout = timeout;
        self
    }

    /// Runs each test with `executor` (for example inside a tokio runtime).
    #[must_use]
    pub fn executor(
        mut self,
        executor: impl Fn(BoxFuture<'static, Result<(), String>>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.executor = Arc::new(executor);
        self
    }

    /// Which API the tests drive: the async one (the default) or, with
    /// [`Facade::Blocking`], the blocking facade [`sandboxio::sync`](crate::sync), so that
    /// the whole suite proves the facade against the backend. Under the blocking facade,
    /// tests of async-only behaviour (cancellation by dropping a future) are reported
    /// `n/a` with the reason, and listed after the summary. The executor still runs each
    /// test (one test per thread), and the blocking calls run inside it.
    #[must_use]
    pub fn facade(mut self, facade: Facade) -> Self {
        self.facade = facade;
        self
    }

    /// Runs the suite with the command line's arguments (`cargo test` passes them through
    /// to a `harness = false` target) and prints the summary. As under libtest, the
    /// `RUST_TEST_THREADS` environment variable sets how many tests run at once when
    /// `--test-threads` is not given (libtest-mimic alone would take the number of CPUs).
    #[must_use]
    pub fn run(self) -> ExitCode {
        let mut args = Arguments::from_args();
        args.test_threads =
            args.test_threads.or_else(|| test_threads_from(std::env::var("RUST_TEST_THREADS").ok()));
        self.run_with(&args)
    }

    /// Runs the suite with explicit arguments and prints the summary.
    #[must_use]
    pub fn run_with(self, args: &Arguments) -> ExitCode {
        let all = cases::all();
        if let Err(why) = &self.version {
            eprintln!("contract suite: {why}");
            return ExitCode::FAILURE;
        }
        let unknown: Vec<&String> =
            self.known_failures.keys().filter(|k| !all.iter().any(|c| c.name == *k)).collect();
        if !unknown.is_empty() {
            eprintln!("contract suite: known_failure names tests that do not exist: {unknown:?}");
            return ExitCode::FAILURE;
        }
        let results: Arc<Mutex<BTreeMap<Row, Counts>>> = Arc::default();
        let runtime_skips: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut listed = Listed::default();
        let mut trials = Vec::new();
        for case in all {
            match self.skip_reason(case) {
                Some(skip) => {
                    if is_selected(case.name, args) {
                        let mut r = results.lock().unwrap_or_else(PoisonError::into_inner);
                        self.tally(case, &skip, r.entry(case.row).or_default(), &mut listed);
                    }
                    trials.push(self.skipped_trial(case, &skip));
                }
                None => trials.push(self.trial(case, Arc::clone(&results), Arc::clone(&runtime_skips))),
            }
        }
        let conclusion = libtest_mimic::run(args, trials);
        listed.skips.extend(runtime_skips.lock().unwrap_or_else(PoisonError::into_inner).drain(..));
        if !args.list {
            println!("{}", self.summary(&results.lock().unwrap_or_else(PoisonError::into_inner), &listed));
        }
        if conclusion.has_failed() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
    }

    /// Counts a test that does not run in its row, and lists it with its reason for after
    /// the summary. Alike for the async and the blocking runs: a skip in a strict run is a
    /// failure, and every n/a is listed with its reason.
    fn tally(&self, case: &Case, skip: &Skip, counts: &mut Counts, listed: &mut Listed) {
        match skip {
            Skip::NotApplicable(why) => {
                counts.not_applicable += 1;
                listed.not_applicable.push(format!("{}: {why}", case.name));
            }
            Skip::AsyncOnly(why) => {
                counts.not_applicable += 1;
                listed.not_applicable.push(format!("{}: {}", case.name, async_only_reason(why)));
            }
            Skip::Skipped(why) if self.strict => {
                counts.failed += 1;
                listed.skips.push(format!("{}: {why} (a failure: this run is strict)", case.name));
            }
            Skip::Skipped(why) => {
                counts.skipped += 1;
                listed.skips.push(format!("{}: {why}", case.name));
            }
            Skip::KnownFailure(note) => {
                counts.known += 1;
                listed.skips.push(format!("{} (known failure): {note}", case.name));
            }
            Skip::NotYetPromised(since) => {
                counts.later += 1;
                listed.not_yet.push((*since, case.name));
            }
            Skip::Refused(why) => {
                counts.failed += 1;
                listed.refused.push(format!("{}: {why}", case.name));
            }
        }
    }

    fn skip_reason(&self, case: &Case) -> Option<Skip> {
        let caps = self.backend.capabilities();
        if let Some(why) = case.pending {
            return Some(Skip::Skipped(why.to_owned()));
        }
        if self.facade == Facade::Blocking
            && let Some(why) = case.async_only
        {
            return Some(Skip::AsyncOnly(why.to_owned()));
        }
        if !caps.contains(case.requires) {
            let missing = case.requires - caps;
            return Some(Skip::NotApplicable(format!("needs {missing}, which the backend does not declare")));
        }
        if !case.requires_any.is_empty() && !caps.intersects(case.requires_any) {
            return Some(Skip::NotApplicable(format!("needs one of {}, none declared", case.requires_any)));
        }
        if !case.absent_any.is_empty() && caps.contains(case.absent_any) {
            return Some(Skip::NotApplicable(format!(
                "checks one of {} is undeclared, all are declared",
                case.absent_any
            )));
        }
        if caps.intersects(case.requires_absent) {
            let present = case.requires_absent & caps;
            return Some(Skip::NotApplicable(format!(
                "checks that {present} is undeclared, but it is declared"
            )));
        }
        if let Some(why) = case.not_applicable.and_then(|decide| decide(&*self.backend)) {
            return Some(Skip::NotApplicable(why));
        }
        // After the capability checks (a newer clause the backend's declarations make n/a
        // is not one it would have to meet), before the probe checks (a newer clause's
        // missing probe is no failure of the version selected).
        if let Ok(version) = self.version
            && case.since > version
        {
            return Some(Skip::NotYetPromised(case.since));
        }
        if case.probes.contains(&ProbeKind::MissingCredentials)
            && let Some(why) = self.probes.no_credentials()
        {
            return Some(Skip::NotApplicable(format!("the backend takes no credentials: {why}")));
        }
        if let Some(probe) = case.probes.iter().find(|p| !super::probes::implemented(&*self.probes, **p)) {
            return Some(match self.probes.not_applicable(*probe) {
                Some(reason) => match super::inapplicable::refusal(*probe, reason, &*self.backend) {
                    Some(refused) => Skip::Refused(refused),
                    None => Skip::NotApplicable(format!("probe {} does not apply: {reason}", probe.name())),
                },
                None => Skip::Skipped(format!(
                    "probe {} is not implemented (implement it, or give Probes::not_applicable a reason)",
                    probe.name()
                )),
            });
        }
        if case.needs_audit && self.audit.is_none() {
            return Some(Skip::Skipped("no recording sink given (ContractSuite::audit_sink)".to_owned()));
        }
        self.known_failures.get(case.name).map(|note| Skip::KnownFailure(note.clone()))
    }

    fn skipped_trial(&self, case: &'static Case, skip: &Skip) -> Trial {
        let (kind, why) = match skip {
            Skip::NotApplicable(why) => ("n/a", why.clone()),
            Skip::AsyncOnly(why) => ("n/a", async_only_reason(why)),
            Skip::Skipped(why) => ("skip", why.clone()),
            Skip::KnownFailure(note) => ("known failure", note.clone()),
            Skip::NotYetPromised(since) => ("", format!("a clause of contract {since}")),
            Skip::Refused(why) => ("refused n/a", why.clone()),
        };
        let scheme = self.label();
        if let Skip::Refused(_) = skip {
            // Not ignored, strict run or not: the declaration is the adapter's error.
            let advice = super::rules::advice(case.name, case.row);
            return Trial::test(case.name, move || {
                Err(format!("[{scheme}] {} ({} row): cannot run: {why}{advice}", case.name, case.row).into())
            })
            .with_kind(kind);
        }
        if let Skip::NotYetPromised(since) = skip {
            // Run on request (`--include-ignored`), to see how the backend fares on it.
            return self
                .trial(case, Arc::default(), Arc::default())
                .with_kind(since.to_string())
                .with_ignored_flag(true);
        }
        if let Skip::Skipped(_) = skip
            && self.strict
        {
            // Not ignored: a strict run fails a test that cannot run, in the exit code too.
            let advice = super::rules::advice(case.name, case.row);
            return Trial::test(case.name, move || {
                Err(format!(
                    "[{scheme}] {} ({} row): cannot run, and this run is strict \
                     (SANDBOXIO_STRICT=1 or a SANDBOXIO_REQUIRE_*=1 switch): {why}{advice}",
                    case.name, case.row
                )
                .into())
            })
            .with_kind("skip");
        }
        let trial = if let Skip::KnownFailure(_) = skip {
            // Run on request (`--include-ignored`), to see whether it is fixed.
            self.trial(case, Arc::default(), Arc::default())
        } else {
            Trial::test(case.name, move || Err(format!("[{scheme}] {}: cannot run: {why}", case.name).into()))
        };
        trial.with_kind(kind).with_ignored_flag(true)
    }

    fn trial(
        &self,
        case: &'static Case,
        results: Arc<Mutex<BTreeMap<Row, Counts>>>,
        runtime_skips: Arc<Mutex<Vec<String>>>,
    ) -> Trial {
        let backend = Arc::clone(&self.backend);
        let probes = Arc::clone(&self.probes);
        let audit = self.audit.clone();
        let executor = Arc::clone(&self.executor);
        let limit = self.test_timeout;
        let facade = self.facade;
        let strict = self.strict;
        let version = self.version.clone().unwrap_or(ContractVersion::LATEST);
        let scheme = self.label();
        Trial::ignorable_test(case.name, move || {
            let ctx = Arc::new(Ctx::new(backend, probes, audit, facade, version, case.name));
            let bounded = futures_lite::future::or((case.run)(Arc::clone(&ctx)), async move {
                futures_timer::Delay::new(limit).await;
                Err(format!("did not finish within {limit:?}: a hang (ContractSuite::test_timeout)"))
            });
            let verdict = executor(Box::pin(bounded));
            // A control that could not run makes the verdict meaningless either way.
            let control = ctx.control_skip();
            let mut r = results.lock().unwrap_or_else(PoisonError::into_inner);
            let counts = r.entry(case.row).or_default();
            match (&control, &verdict) {
                (Some(_), _) if !strict => counts.skipped += 1,
                (None, Ok(())) => counts.passed += 1,
                _ => counts.failed += 1,
            }
            drop(r);
            match control {
                Some(why) if strict => Err(format!(
                    "[{scheme}] {} ({} row): its positive control could not run, and this run is strict \
                     (SANDBOXIO_STRICT=1 or a SANDBOXIO_REQUIRE_*=1 switch): {why}{}",
                    case.name,
                    case.row,
                    super::rules::advice(case.name, case.row)
                )
                .into()),
                Some(why) => {
                    runtime_skips
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(format!("{}: positive control could not run: {why}", case.name));
                    Ok(Completion::ignored_with(format!("skip: positive control could not run: {why}")))
                }
                None => verdict.map(|()| Completion::Completed).map_err(|e| {
                    format!(
                        "[{scheme}] {} ({} row): {e}{}",
                        case.name,
                        case.row,
                        super::rules::advice(case.name, case.row)
                    )
                    .into()
                }),
            }
        })
    }

    /// The backend's scheme, and the facade when it is not the default: `fake` or
    /// `fake, blocking facade`.
    fn label(&self) -> String {
        match self.facade {
            Facade::Async => self.backend.scheme().to_owned(),
            Facade::Blocking => format!("{}, blocking facade", self.backend.scheme()),
        }
    }

    fn summary(&self, results: &BTreeMap<Row, Counts>, listed: &Listed) -> String {
        let through = match self.facade {
            Facade::Async => "",
            Facade::Blocking => " through the blocking facade (sandboxio::sync)",
        };
        let version = match &self.version {
            Ok(v) if *v == ContractVersion::LATEST => format!("contract {v}, the latest"),
            Ok(v) => format!("contract {v}; the latest is {}", ContractVersion::LATEST),
            Err(why) => why.clone(),
        };
        let mut out = format!(
            "\ncontract summary for {}://{through} ({version}; tier {}, declares {}){}\n",
            self.backend.scheme(),
            self.backend.isolation(),
            self.backend.capabilities() & Capabilities::all(),
            if self.strict { ", strict: a test that cannot run fails" } else { "" }
        );
        let _ = writeln!(
            out,
            "{:<24} {:>6} {:>6} {:>7} {:>4} {:>6} {:>6}",
            "row", "passed", "failed", "skipped", "n/a", "known", "later"
        );
        let mut total = Counts::default();
        for row in Row::ALL {
            let c = results.get(row).copied().unwrap_or_default();
            let _ = writeln!(
                out,
                "{:<24} {:>6} {:>6} {:>7} {:>4} {:>6} {:>6}",
                row.title(),
                c.passed,
                c.failed,
                c.skipped,
                c.not_applicable,
                c.known,
                c.later
            );
            total.passed += c.passed;
            total.failed += c.failed;
            total.skipped += c.skipped;
            total.not_applicable += c.not_applicable;
            total.known += c.known;
            total.later += c.later;
        }
        let _ = writeln!(
            out,
            "{:<24} {:>6} {:>6} {:>7} {:>4} {:>6} {:>6}",
            "total",
            total.passed,
            total.failed,
            total.skipped,
            total.not_applicable,
            total.known,
            total.later
        );
        if !listed.refused.is_empty() {
            let _ = writeln!(out, "refused not-applicable declarations (each a failure, strict run or not):");
            for s in &listed.refused {
                let _ = writeln!(out, "  - {s}");
            }
        }
        if !listed.skips.is_empty() {
            let _ = writeln!(out, "skipped (never counted as passed):");
            for s in &listed.skips {
                let _ = writeln!(out, "  - {s}");
            }
        }
        if !listed.not_applicable.is_empty() {
            let _ = writeln!(out, "n/a (never counted as passed):");
            for s in &listed.not_applicable {
                let _ = writeln!(out, "  - {s}");
            }
        }
        out.push_str(&not_yet_promised(&listed.not_yet));
        out
    }
}

/// The list of clauses newer than the selected version, per version: "not yet promised: N
/// clauses added in v2: …", or nothing.
fn not_yet_promised(not_yet: &[(ContractVersion, &'static str)]) -> String {
    let mut out = String::new();
    if not_yet.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "not yet promised (newer than the contract version selected; neither passed nor skipped; \
         --include-ignored runs them):"
    );
    for version in ContractVersion::ALL {
        let names: Vec<&str> = not_yet.iter().filter(|(v, _)| v == version).map(|(_, n)| *n).collect();
        if names.is_empty() {
            continue;
        }
        let _ = writeln!(out, "  {} clauses added in {version}:", names.len());
        for name in names {
            let _ = writeln!(out, "  - {name}");
        }
    }
    out
}

/// Why an async-only test is n/a under the blocking facade, as the test list and the
/// summary both say it.
fn async_only_reason(why: &str) -> String {
    format!("async-only, and the run drives the blocking facade: {why}")
}

/// Whether libtest-mimic will consider this test (mirrors its name filter and `--skip`).
/// `RUST_TEST_THREADS` as libtest reads it: a positive whole number, anything else ignored.
fn test_threads_from(value: Option<String>) -> Option<usize> {
    value?.trim().parse().ok().filter(|&n: &usize| n > 0)
}

fn is_selected(name: &str, args: &Arguments) -> bool {
    let filtered_in = match &args.filter {
        None => true,
        Some(f) if args.exact => name == f,
        Some(f) => name.contains(f.as_str()),
    };
    let skipped = args.skip.iter().any(|s| if args.exact { name == s } else { name.contains(s.as_str()) });
    filtered_in && !skipped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeBackend;
    use crate::testing::contract::{FakeProbes, Inapplicable};

    fn vars(pairs: &[(&str, &str)]) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    #[test]
    fn any_require_switch_makes_a_run_strict() {
        assert!(strict_in(vars(&[("SANDBOXIO_STRICT", "1")])));
        assert!(strict_in(vars(&[("SANDBOXIO_REQUIRE_DOCKER", "1")])));
        assert!(strict_in(vars(&[("SANDBOXIO_REQUIRE_FLY", "1")])));
        assert!(!strict_in(vars(&[("SANDBOXIO_REQUIRE_FLY", "0"), ("PATH", "1")])));
        assert!(!strict_in(vars(&[])));
    }

    #[test]
    fn rust_test_threads_is_read_as_libtest_reads_it() {
        assert_eq!(test_threads_from(Some("6".into())), Some(6));
        assert_eq!(test_threads_from(Some(" 3\n".into())), Some(3));
        assert_eq!(test_threads_from(Some("0".into())), None);
        assert_eq!(test_threads_from(Some("many".into())), None);
        assert_eq!(test_threads_from(None), None);
    }

    /// The fake's probes, for a backend that says it takes no credentials.
    struct NoCredentials(FakeProbes);

    impl Probes for NoCredentials {
        fn no_credentials(&self) -> Option<String> {
            Some("it runs on this host".to_owned())
        }

        fn missing_credentials(&self) -> Option<(Arc<dyn Backend>, String)> {
            self.0.missing_credentials()
        }
    }

    #[test]
    fn a_backend_without_credentials_makes_the_credentials_test_not_applicable() {
        let case =
            cases::all().iter().find(|c| c.name == "errors__auth_error_names_the_missing_env_var").unwrap();
        let fake = FakeBackend::new();
        let suite = ContractSuite::new(fake.clone()).probes(NoCredentials(FakeProbes::new(fake.clone())));
        match suite.skip_reason(case) {
            Some(Skip::NotApplicable(why)) => assert!(why.contains("it runs on this host"), "{why}"),
            other => panic!("expected n/a with the reason, observed {other:?}"),
        }
        let suite = ContractSuite::new(fake.clone()).probes(FakeProbes::new(fake));
        assert!(suite.skip_reason(case).is_none(), "expected the test to run with missing_credentials");
    }

    /// The fake's probes without `expire_sandbox`, optionally declaring it inapplicable.
    struct NoExpiry(FakeProbes, Option<Inapplicable>);

    impl Probes for NoExpiry {
        fn not_applicable(&self, probe: ProbeKind) -> Option<Inapplicable> {
            (probe == ProbeKind::ExpireSandbox).then_some(self.1).flatten()
        }

        fn live_sandboxes(
            &self,
            key: &str,
            value: &str,
        ) -> Option<crate::testing::contract::ProbeFuture<Vec<String>>> {
            self.0.live_sandboxes(key, value)
        }
    }

    fn expiry_case() -> &'static Case {
        cases::all().iter().find(|c| c.probes.contains(&ProbeKind::ExpireSandbox)).unwrap()
    }

    #[test]
    fn an_unimplemented_probe_is_a_skip_that_a_strict_run_counts_as_failed() {
        let fake = FakeBackend::new();
        let case = expiry_case();
        for (strict, facade) in [(false, Facade::Async), (true, Facade::Async), (true, Facade::Blocking)] {
            let suite = ContractSuite::new(fake.clone())
                .probes(NoExpiry(FakeProbes::new(fake.clone()), None))
                .strict(strict)
                .facade(facade);
            let skip = suite.skip_reason(case).unwrap();
            assert!(matches!(&skip, Skip::Skipped(why) if why.contains("expire_sandbox")), "{skip:?}");
            let (mut counts, mut listed) = (Counts::default(), Listed::default());
            suite.tally(case, &skip, &mut counts, &mut listed);
            assert_eq!((counts.failed, counts.skipped), if strict { (1, 0) } else { (0, 1) }, "{facade:?}");
            assert!(listed.skips[0].contains("expire_sandbox"), "{listed:?}");
        }
    }

    #[test]
    fn a_probe_declared_not_applicable_is_n_a_with_its_reason_listed_in_both_runs() {
        let fake = FakeBackend::new();
        let case = expiry_case();
        for facade in [Facade::Async, Facade::Blocking] {
            let suite = ContractSuite::new(fake.clone().with_capabilities(Capabilities::RUN))
                .probes(NoExpiry(FakeProbes::new(fake.clone()), Some(Inapplicable::ExpiryCannotBeForced)))
                .strict(true)
                .facade(facade);
            let skip = suite.skip_reason(case).unwrap();
            let (mut counts, mut listed) = (Counts::default(), Listed::default());
            suite.tally(case, &skip, &mut counts, &mut listed);
            assert_eq!((counts.not_applicable, counts.failed), (1, 0), "{facade:?}");
            let summary = suite.summary(&BTreeMap::new(), &listed);
            assert!(
                summary.contains(&format!(
                    "  - {}: probe expire_sandbox does not apply: {}",
                    case.name,
                    Inapplicable::ExpiryCannotBeForced
                )),
                "{facade:?}: {summary}"
            );
        }
    }

    #[test]
    fn a_failure_names_its_clause_and_the_guide_section() {
        let advice = super::super::rules::advice("run__exit_codes_are_data_not_errors", Row::Run);
        assert!(advice.contains("rule (docs/contract.md, The clauses): "), "{advice}");
        assert!(advice.contains("docs/adapter-guide.md#commands-what-an-adapter-honours"), "{advice}");
        assert!(!advice.contains("not listed"), "{advice}");
    }
}
