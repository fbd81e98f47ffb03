//! `docs/contract.md` states the contract: its clause table lists every suite test, the
//! page names only real tests, and every clause has at least one test. The repository's
//! docs and comments cite only what the repository holds.
#![allow(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]
#![cfg(feature = "contract")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use sandboxio::testing::contract::{ContractVersion, Row, cases};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn doc() -> String {
    std::fs::read_to_string(format!("{ROOT}/docs/contract.md")).unwrap()
}

/// (area, clause, test names) of each row of the clause table.
fn table() -> Vec<(String, String, Vec<String>)> {
    table_with_versions().into_iter().map(|(area, clause, _, names)| (area, clause, names)).collect()
}

/// (area, clause, since, test names) of each row of the clause table.
fn table_with_versions() -> Vec<(String, String, String, Vec<String>)> {
    // The clause table: from its `| area | clause |` header to the first line that is not a
    // table row (the page's other tables list capabilities, codes, controls and probes).
    doc()
        .lines()
        .skip_while(|l| !l.starts_with("| area | clause "))
        .take_while(|l| l.starts_with('|'))
        .filter(|l| l.starts_with("| ") && !l.starts_with("| area ") && !l.starts_with("|---"))
        .map(|l| {
            let cols: Vec<&str> = l.split(" | ").collect();
            assert_eq!(cols.len(), 4, "a clause row has four columns (area, clause, since, tests): {l}");
            (
                cols[0].trim_start_matches("| ").to_owned(),
                cols[1].to_owned(),
                cols[2].to_owned(),
                code_spans(cols[3]),
            )
        })
        .collect()
}

/// The text of every `code span` in `text`.
fn code_spans(text: &str) -> Vec<String> {
    text.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// Whether `name` reads as a suite test (`area__clause`) or a prefix of some (`area__clause*`).
fn looks_like_a_test_name(name: &str) -> bool {
    name.contains("__")
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '*')
}

/// Whether `name`, a `unit:` or `ui:` reference or a suite test name (or a `prefix*` of
/// some), names something that exists.
fn names_a_real_test(name: &str, suite: &BTreeSet<&str>) -> Result<(), String> {
    if let Some(ui) = name.strip_prefix("ui: ") {
        return if Path::new(&format!("{ROOT}/crates/sandboxio-ui/tests/ui/{ui}.rs")).exists() {
            Ok(())
        } else {
            Err(format!("no trybuild case crates/sandboxio-ui/tests/ui/{ui}.rs"))
        };
    }
    if let Some(unit) = name.strip_prefix("unit: ") {
        let tests = Path::new(ROOT).join("tests");
        let found = repository_texts()
            .into_iter()
            .filter(|path| path.starts_with(&tests) && path.extension().is_some_and(|x| x == "rs"))
            .any(|path| std::fs::read_to_string(path).unwrap().contains(&format!("fn {unit}(")));
        return if found { Ok(()) } else { Err(format!("no unit test fn {unit} in tests/")) };
    }
    let found = match name.strip_suffix('*') {
        Some(prefix) => suite.iter().any(|t| t.starts_with(prefix)),
        None => suite.contains(name),
    };
    if found { Ok(()) } else { Err(format!("{name} is not a suite test")) }
}

#[test]
fn contract_docs__every_suite_test_is_in_the_table() {
    let listed: BTreeSet<String> = table().into_iter().flat_map(|(_, _, names)| names).collect();
    let missing: Vec<&str> = cases().iter().map(|c| c.name).filter(|n| !listed.contains(*n)).collect();
    assert!(missing.is_empty(), "suite tests missing from docs/contract.md's clause table: {missing:?}");
}

#[test]
fn contract_docs__every_name_in_the_table_is_a_test() {
    let suite: BTreeSet<&str> = cases().iter().map(|c| c.name).collect();
    for (_, _, names) in table() {
        for name in names {
            if let Err(why) = names_a_real_test(&name, &suite) {
                panic!("docs/contract.md's clause table: {why}");
            }
        }
    }
}

#[test]
fn contract_docs__every_test_name_anywhere_on_the_page_is_a_test() {
    // The capability, error and control tables and the prose name tests too.
    let suite: BTreeSet<&str> = cases().iter().map(|c| c.name).collect();
    let named: Vec<String> = code_spans(&doc())
        .into_iter()
        .filter(|n| n.starts_with("unit: ") || n.starts_with("ui: ") || looks_like_a_test_name(n))
        .collect();
    assert!(named.len() > cases().len(), "the page names fewer tests than the suite has");
    let wrong: Vec<String> = named.iter().filter_map(|n| names_a_real_test(n, &suite).err()).collect();
    assert!(wrong.is_empty(), "docs/contract.md names tests that do not exist: {wrong:?}");
}

#[test]
fn contract_docs__the_page_check_catches_a_name_that_is_not_a_test() {
    // The checks above would pass vacuously if the matcher accepted anything.
    let suite: BTreeSet<&str> = cases().iter().map(|c| c.name).collect();
    assert!(names_a_real_test("run__no_such_clause", &suite).is_err());
    assert!(names_a_real_test("no_such_area__*", &suite).is_err());
    assert!(names_a_real_test("unit: no_such_unit_test", &suite).is_err());
    assert!(names_a_real_test("ui: no_such_case", &suite).is_err());
    assert!(names_a_real_test("streaming_cleanup__*", &suite).is_ok());
    assert!(looks_like_a_test_name("run__exit_codes_are_data_not_errors"));
    assert!(!looks_like_a_test_name("ExecResult::stdout"));
}

#[test]
fn contract_docs__every_clause_shows_the_version_its_tests_arrived_in() {
    let versions: Vec<String> = ContractVersion::ALL.iter().map(ToString::to_string).collect();
    let rows = table_with_versions();
    for (area, clause, since, names) in &rows {
        assert!(versions.contains(since), "{area} / {clause}: since {since:?} is not one of {versions:?}");
        for name in names.iter().filter(|n| !n.starts_with("ui: ") && !n.starts_with("unit: ")) {
            let case = cases().into_iter().find(|c| c.name == name.as_str()).unwrap();
            assert_eq!(
                case.since.to_string(),
                *since,
                "{name} arrived in {} but docs/contract.md lists it under {area} / {clause} as {since}",
                case.since
            );
        }
    }
    // Every version has its clauses on the page, and the check above sees a mismatch.
    for version in &versions {
        assert!(rows.iter().any(|(_, _, since, _)| since == version), "no clause of {version} on the page");
    }
    assert!(
        cases().iter().any(|c| c.since.to_string() != "v1"),
        "every clause is v1: the check proves nothing"
    );
}

#[test]
fn contract_docs__the_changelog_lists_every_clause_of_each_version_after_the_first() {
    let changelog = std::fs::read_to_string(format!("{ROOT}/CHANGELOG.md")).unwrap();
    for version in ContractVersion::ALL.iter().filter(|v| **v != ContractVersion::V1) {
        let heading = format!("#### Contract {version}: the clauses it adds");
        let start = changelog.find(&heading).unwrap_or_else(|| panic!("CHANGELOG.md has no {heading:?}"));
        let section = &changelog[start..];
        let section =
            &section[..section[heading.len()..].find("\n#").map_or(section.len(), |e| e + heading.len())];
        let missing: Vec<&str> = cases()
            .iter()
            .filter(|c| c.since == *version && !section.contains(&format!("`{}`", c.name)))
            .map(|c| c.name)
            .collect();
        assert!(missing.is_empty(), "CHANGELOG.md's {heading:?} misses {missing:?}");
    }
}

#[test]
fn contract_docs__every_suite_test_is_listed_under_its_own_area() {
    for (area, clause, names) in table() {
        for name in names.iter().filter(|n| !n.starts_with("ui: ") && !n.starts_with("unit: ")) {
            let case = cases().into_iter().find(|c| c.name == name.as_str()).unwrap();
            // The Timeouts area cites the run area's timeout test: one test checks both.
            let cited_across = area == "Timeouts" && case.row == Row::Run;
            assert!(
                case.row.title() == area || cited_across,
                "{name} is a {} test listed under {area} / {clause}",
                case.row
            );
        }
    }
}

#[test]
fn contract_docs__every_clause_has_a_test_and_every_area_appears() {
    let rows = table();
    for (area, clause, names) in &rows {
        assert!(!names.is_empty(), "{area} / {clause} has no test");
    }
    for row in Row::ALL {
        assert!(rows.iter().any(|(r, _, _)| r == row.title()), "area {row} is not in the clause table");
        assert!(cases().iter().any(|c| c.row == *row), "area {row} has no suite test");
    }
}

#[test]
fn contract_docs__the_blocking_facade_paragraph_names_exactly_the_async_only_tests() {
    let doc = doc();
    let start = doc.find("`ContractSuite::facade(Facade::Blocking)` runs every one").expect("the paragraph");
    let paragraph = &doc[start..start + doc[start..].find("\n\n").expect("its end")];
    let suite: BTreeSet<&str> = cases().iter().map(|c| c.name).collect();
    let named: BTreeSet<&str> =
        paragraph.split('`').skip(1).step_by(2).filter(|n| suite.contains(n)).collect();
    let async_only: BTreeSet<&str> =
        cases().iter().filter(|c| c.async_only.is_some()).map(|c| c.name).collect();
    assert!(!async_only.is_empty(), "no test is marked async-only");
    assert_eq!(named, async_only, "docs/contract.md's blocking-facade paragraph vs the async-only tests");
}

#[test]
fn contract_docs__suite_test_names_are_unique_clauses() {
    let mut seen = BTreeSet::new();
    for case in cases() {
        assert!(seen.insert(case.name), "duplicate test name {}", case.name);
        assert!(case.name.contains("__"), "{} does not read as `area__clause`", case.name);
    }
}

/// Text that points a reader at something outside the repository: the planning texts the
/// project started from, by path or by name. Built from pieces so this file does not match.
fn outside_citations() -> Vec<String> {
    [
        ["../", "shared"],
        ["shared/", "seed"],
        ["/work/", "shared"],
        ["research", "/"],
        ["08-", "adapter"],
        ["wave", "2"],
        ["the seed'", "s"],
        ["seed ", "page"],
        ["design ", "card"],
        ["design ", "brief"],
        ["research ", "notes"],
    ]
    .iter()
    .map(|parts| parts.concat())
    .collect()
}

/// Every text file a reader of the repository reads: the docs, README, CHANGELOG and
/// SECURITY, and the sources, tests, examples, benches, scripts and macros (their doc
/// comments and comments included).
fn repository_texts() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let root = Path::new(ROOT);
    let mut files: Vec<PathBuf> =
        ["README.md", "CHANGELOG.md", "SECURITY.md", "Cargo.toml"].iter().map(|f| root.join(f)).collect();
    for dir in [
        "docs",
        "src",
        "tests",
        "examples",
        "benches",
        "scripts",
        "macros/src",
        "sandboxd/src",
        "sandboxd/tests",
        "sandboxd/benches",
        ".ci",
    ] {
        if root.join(dir).is_dir() {
            walk(&root.join(dir), &mut files);
        }
    }
    files
}

#[test]
fn hygiene__docs_and_comments_cite_nothing_outside_the_repository() {
    let this_file = Path::new(ROOT).join(file!().trim_start_matches("./"));
    let patterns = outside_citations();
    let mut found = Vec::new();
    let files = repository_texts();
    assert!(files.len() > 100, "the walk found only {} files", files.len());
    for file in files.iter().filter(|f| **f != this_file) {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            if let Some(p) = patterns.iter().find(|p| lower.contains(p.as_str())) {
                found.push(format!("{}:{}: cites {p:?}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "state the fact or cite a file in the repository:\n{}", found.join("\n"));
}

#[test]
fn hygiene__the_citation_check_sees_a_citation() {
    // The check above would pass vacuously if its patterns matched nothing.
    let patterns = outside_citations();
    let cites = |line: &str| patterns.iter().any(|p| line.to_lowercase().contains(p.as_str()));
    assert!(cites(&["see ../", "shared/seed/08-adapter-contract.txt"].concat()));
    assert!(cites(&["as ", "research/rust-api.md §1.6 recommends"].concat()));
    assert!(cites(&["The Seed'", "s coverage map"].concat()));
    assert!(!cites("fake://?seed=7 shares one world per seed"));
}

/// The link fragment GitHub gives a heading: lower case, spaces to `-`, punctuation other
/// than `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn contract_docs__every_failure_names_a_clause_and_an_existing_guide_section() {
    let guide = std::fs::read_to_string(format!("{ROOT}/docs/adapter-guide.md")).unwrap();
    let sections: BTreeSet<String> = guide
        .lines()
        .filter_map(|l| l.strip_prefix("## ").or_else(|| l.strip_prefix("### ")))
        .map(slug)
        .collect();
    for row in Row::ALL {
        assert!(
            sections.contains(row.guide_section()),
            "{row}: docs/adapter-guide.md has no heading #{}; it has {sections:?}",
            row.guide_section()
        );
    }
    let unlisted: Vec<&str> = cases().iter().filter(|c| c.clause.is_none()).map(|c| c.name).collect();
    assert!(unlisted.is_empty(), "tests whose failure could name no clause: {unlisted:?}");
}

#[test]
fn contract_docs__every_test_name_in_the_adapter_guide_is_a_test() {
    let guide = std::fs::read_to_string(format!("{ROOT}/docs/adapter-guide.md")).unwrap();
    let suite: BTreeSet<&str> = cases().iter().map(|c| c.name).collect();
    let named: Vec<String> = code_spans(&guide).into_iter().filter(|n| looks_like_a_test_name(n)).collect();
    assert!(named.len() > 20, "the guide names tests by name; found only {named:?}");
    let wrong: Vec<String> = named.iter().filter_map(|n| names_a_real_test(n, &suite).err()).collect();
    assert!(wrong.is_empty(), "docs/adapter-guide.md names tests that do not exist: {wrong:?}");
}
