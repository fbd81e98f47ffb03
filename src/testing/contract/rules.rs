//! What a failing test tells its author: the contract clause it checks (from
//! `docs/contract.md`, shipped with the crate) and the section of `docs/adapter-guide.md`
//! that says how to meet it.

use std::sync::OnceLock;

use super::Row;

/// The contract page, as the crate ships it.
const CONTRACT: &str = include_str!("../../../docs/contract.md");

/// (clause, test names) of each row of the page's clause table (area, clause, since, tests).
fn clause_table() -> &'static [(&'static str, Vec<&'static str>)] {
    static TABLE: OnceLock<Vec<(&'static str, Vec<&'static str>)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        CONTRACT
            .lines()
            .skip_while(|l| !l.starts_with("| area | clause "))
            .take_while(|l| l.starts_with('|'))
            .filter(|l| l.starts_with("| ") && !l.starts_with("| area ") && !l.starts_with("|---"))
            .filter_map(|l| {
                let cols: Vec<&str> = l.split(" | ").collect();
                let [_, clause, _since, tests] = cols.as_slice() else { return None };
                Some((*clause, tests.split('`').skip(1).step_by(2).collect()))
            })
            .collect()
    })
}

/// The clauses of `docs/contract.md` that test `name` checks, joined with ` / ` (a test may
/// check more than one), or `None` for a test the page does not list (a bug of the page,
/// which `tests/api/contract_docs.rs` catches).
pub(crate) fn clause_of(name: &str) -> Option<String> {
    let clauses: Vec<&str> =
        clause_table().iter().filter(|(_, tests)| tests.contains(&name)).map(|(clause, _)| *clause).collect();
    (!clauses.is_empty()).then(|| clauses.join(" / "))
}

impl Row {
    /// The heading of `docs/adapter-guide.md` that explains how to meet this area's
    /// clauses, as a link fragment (`commands`, for `docs/adapter-guide.md#commands`).
    #[must_use]
    pub fn guide_section(self) -> &'static str {
        match self {
            Row::Lifecycle => "lifecycle-connect-detach-and-kill",
            Row::Cancellation | Row::CancellationIdentity => "cancellation-and-blocking-provider-calls",
            Row::Run | Row::Timeouts => "commands-what-an-adapter-honours",
            Row::RunCode => "code-cells",
            Row::Streaming | Row::StreamingCleanup => "streams",
            Row::Filesystem => "file-operations",
            Row::Policy => "network-policy-limits-and-connect",
            Row::Errors => "errors",
            Row::CapabilityHonesty | Row::IsolationHonesty => "1-the-traits",
            Row::Observability => "observability",
            Row::SyncParity => "the-blocking-facade",
        }
    }
}

/// The lines a failure of test `name` in `row` ends with: the clause and the guide section.
pub(crate) fn advice(name: &str, row: Row) -> String {
    let clause = clause_of(name).unwrap_or_else(|| "(not listed in docs/contract.md)".to_owned());
    format!(
        "\n  rule (docs/contract.md, The clauses): {clause}\n  how to meet it: docs/adapter-guide.md#{}",
        row.guide_section()
    )
}
