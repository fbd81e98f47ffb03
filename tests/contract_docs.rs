//! `docs/contract.md` lists every suite test, names only real tests, and gives every
//! requirement row at least one test.
#![allow(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]
#![cfg(feature = "contract")]

use std::collections::BTreeSet;

use sandboxio::testing::contract::{Row, cases};

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/contract.md")).unwrap()
}

/// (row, requirement, test names) of each table row.
fn table() -> Vec<(String, String, Vec<String>)> {
    // The clause table: from its `| row |` header to the first line that is not a table
    // row (the page's other tables list controls and probes).
    doc()
        .lines()
        .skip_while(|l| !l.starts_with("| row "))
        .take_while(|l| l.starts_with('|'))
        .filter(|l| l.starts_with("| ") && !l.starts_with("| row ") && !l.starts_with("|---"))
        .map(|l| {
            let cols: Vec<&str> = l.split(" | ").collect();
            assert_eq!(cols.len(), 4, "a table row has four columns: {l}");
            let names =
                cols[3].trim_end_matches(" |").split('`').skip(1).step_by(2).map(str::to_owned).collect();
            (cols[0].trim_start_matches("| ").to_owned(), cols[1].to_owned(), names)
        })
        .collect()
}

#[test]
fn contract_docs__every_suite_test_is_in_the_table() {
    let listed: BTreeSet<String> = table().into_iter().flat_map(|(_, _, names)| names).collect();
    let missing: Vec<&str> = cases().iter().map(|c| c.name).filter(|n| !listed.contains(*n)).collect();
    assert!(missing.is_empty(), "suite tests missing from docs/contract.md: {missing:?}");
}

#[test]
fn contract_docs__every_name_in_the_table_is_a_test() {
    let suite: BTreeSet<&str> = cases().iter().map(|c| c.name).collect();
    let root = env!("CARGO_MANIFEST_DIR");
    for (_, _, names) in table() {
        for name in names {
            if let Some(ui) = name.strip_prefix("ui: ") {
                assert!(
                    std::path::Path::new(&format!("{root}/tests/ui/{ui}.rs")).exists(),
                    "no trybuild case {ui}"
                );
            } else if let Some(unit) = name.strip_prefix("unit: ") {
                let found = std::fs::read_dir(format!("{root}/tests"))
                    .unwrap()
                    .filter_map(Result::ok)
                    .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
                    .any(|e| std::fs::read_to_string(e.path()).unwrap().contains(&format!("fn {unit}(")));
                assert!(found, "no unit test fn {unit} in tests/");
            } else {
                assert!(suite.contains(name.as_str()), "{name} in docs/contract.md is not a suite test");
            }
        }
    }
}

#[test]
fn contract_docs__every_suite_test_is_listed_under_its_own_row() {
    for (row, requirement, names) in table() {
        for name in names.iter().filter(|n| !n.starts_with("ui: ") && !n.starts_with("unit: ")) {
            let case = cases().into_iter().find(|c| c.name == name.as_str()).unwrap();
            // The Timeouts row may cite the run row's timeout test, as the seed does.
            let cited_across = row == "Timeouts" && case.row == Row::Run
                || row == "Cancellation" && case.row == Row::Cancellation;
            assert!(
                case.row.seed_name() == row || cited_across,
                "{name} is a {} test listed under {row} / {requirement}",
                case.row
            );
        }
    }
}

#[test]
fn contract_docs__every_requirement_row_has_a_test_and_every_coverage_row_appears() {
    let rows = table();
    for (row, requirement, names) in &rows {
        assert!(!names.is_empty(), "{row} / {requirement} has no test");
    }
    for row in Row::ALL {
        assert!(rows.iter().any(|(r, _, _)| r == row.seed_name()), "coverage row {row} is not in the table");
        assert!(cases().iter().any(|c| c.row == *row), "coverage row {row} has no suite test");
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
