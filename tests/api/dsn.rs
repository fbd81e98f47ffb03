//! DSN parsing and scheme resolution, including property tests on random input.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use crate::support;

use std::sync::Arc;

use proptest::prelude::*;
use sandboxio::backend::Backend;
use sandboxio::dsn::Dsn;
use sandboxio::testing::FakeBackend;
use sandboxio::{Command, ErrorCode, NetworkPolicy, Sandbox};
use support::block_on;

#[test]
fn dsn__malformed_dsns_are_configuration_errors_naming_the_part() {
    for (raw, needle) in [
        ("", "empty DSN"),
        ("nope://", "\"nope\""),
        ("docker//x", "starting \"docker\""),
        ("fake://?seed=abc", "seed=\"abc\""),
        ("fake://?colour=red", "\"colour\""),
        ("fake://host", "no host or path"),
    ] {
        let err = Sandbox::builder(raw).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Configuration, "{raw:?}: {err}");
        assert!(err.to_string().contains(needle), "{raw:?}: {err}");
    }
}

#[test]
fn dsn__a_scheme_whose_feature_is_off_names_the_feature() {
    let mut off = Vec::new();
    if !cfg!(feature = "modal") {
        off.push("modal");
    }
    if !cfg!(feature = "e2b") {
        off.push("e2b");
    }
    if !cfg!(feature = "local") {
        off.push("local");
    }
    if !cfg!(feature = "docker") {
        off.push("docker");
    }
    for scheme in off {
        let err = Sandbox::builder(&format!("{scheme}://")).unwrap_err();
        assert!(err.to_string().contains(&format!("feature `{scheme}`")), "{err}");
    }
}

#[test]
fn dsn__fake_dsns_share_one_world_per_seed_so_connect_finds_sandboxes() {
    let create = |dsn: &str| {
        block_on(Sandbox::builder(dsn).unwrap().network(NetworkPolicy::deny_all()).create()).unwrap()
    };
    let (a, b) = (create("fake://?seed=7"), create("fake://?seed=7"));
    assert_ne!(a.id(), b.id(), "ids are unique within a process");
    let attached = block_on(Sandbox::connect("fake://?seed=7", a.id())).unwrap();
    assert!(!attached.is_owner());
    let err = block_on(Sandbox::connect("fake://?seed=8", a.id())).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Connect, "another seed is another world");
}

#[expect(clippy::unnecessary_wraps, reason = "`register_scheme` takes a factory that can fail")]
fn fly_factory(_: &Dsn) -> sandboxio::Result<Arc<dyn Backend>> {
    Ok(Arc::new(FakeBackend::new().with_seed(99)))
}

#[test]
fn dsn__third_party_schemes_register_once() {
    sandboxio::dsn::register_scheme("flytest", fly_factory).unwrap();
    let err = sandboxio::dsn::register_scheme("flytest", fly_factory).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Configuration);
    let err = sandboxio::dsn::register_scheme("docker", fly_factory).unwrap_err();
    assert!(err.to_string().contains("reserved"), "{err}");
    let sbx = block_on(Sandbox::builder("flytest://").unwrap().network(NetworkPolicy::deny_all()).create())
        .unwrap();
    assert_eq!(block_on(sbx.run(Command::new("echo").arg("fly"))).unwrap().stdout, b"fly\n");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn dsn__random_strings_never_panic(raw in ".{0,64}") {
        match Dsn::parse(&raw) {
            Ok(dsn) => prop_assert!(!dsn.scheme().is_empty()),
            Err(e) => prop_assert_eq!(e.code(), ErrorCode::Configuration),
        }
        let _ = Sandbox::builder(&raw);
    }

    #[test]
    fn dsn__errors_never_echo_option_values_or_user_info(
        prefix in "[a-z]{0,5}(:|://|:/)?[a-z@.:/]{0,10}",
        key in "(api_key|token|secret|region|x|)",
        sep in "[?#&=]{0,2}",
    ) {
        let canary = "c4nary9secret";
        for raw in [
            format!("{prefix}?{key}={canary}{sep}"),
            format!("{prefix}{sep}{key}={canary}"),
            format!("{prefix}u:{canary}@h/p"),
        ] {
            if let Err(e) = Dsn::parse(&raw) {
                prop_assert!(!e.to_string().contains(canary), "{raw:?} -> {e}");
            }
        }
    }

    #[test]
    fn dsn__random_dsn_shaped_strings_never_panic(scheme in "[a-z0-9+.-]{0,8}", rest in "[ -~]{0,40}") {
        let raw = format!("{scheme}://{rest}");
        if let Err(e) = Sandbox::builder(&raw) {
            prop_assert!(matches!(e.code(), ErrorCode::Configuration | ErrorCode::InvalidInput), "{}", e);
        }
    }

    #[test]
    fn fake__random_argv_env_and_paths_give_results_or_typed_errors(
        argv in proptest::collection::vec(".{0,12}", 0..4),
        env_name in ".{0,8}",
        env_value in ".{0,8}",
        path in ".{0,16}",
    ) {
        let fake = FakeBackend::new();
        let sbx = block_on(Sandbox::builder_with(fake).network(NetworkPolicy::deny_all()).create()).unwrap();
        let mut cmd = match argv.split_first() {
            Some((program, args)) => Command::new(program.clone()).args(args.iter().cloned()),
            None => Command::new(""),
        };
        cmd = cmd.env(env_name, env_value).timeout(std::time::Duration::from_secs(5));
        match block_on(sbx.run(cmd)) {
            Ok(_) => {}
            Err(e) => prop_assert!(
                matches!(e.code(), ErrorCode::InvalidInput | ErrorCode::ExecutionTimeout | ErrorCode::NotFound),
                "{}", e
            ),
        }
        match block_on(sbx.fs().write(&path, "x")) {
            Ok(()) => {}
            Err(e) => prop_assert!(
                matches!(e.code(), ErrorCode::InvalidInput | ErrorCode::IsADirectory),
                "{}", e
            ),
        }
        let _ = block_on(sbx.run(Command::shell(path)));
    }
}

/// The feature tables of README.md and the crate docs list each first-party scheme of
/// `dsn::FIRST_PARTY` with its feature and whether it is released.
#[test]
fn dsn__feature_tables_follow_the_scheme_table() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let lib_table = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//! "))
        .filter(|l| l.starts_with('|'))
        .collect::<Vec<_>>()
        .join("\n");
    for (doc, text) in [("README.md", readme.as_str()), ("src/lib.rs", lib_table.as_str())] {
        let rows: Vec<Vec<&str>> = text
            .lines()
            .filter(|l| l.starts_with('|'))
            .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
            .collect();
        let header = rows.first().unwrap_or_else(|| panic!("{doc}: no table"));
        let feature_col = header.iter().position(|h| *h == "feature").unwrap();
        for entry in sandboxio::dsn::FIRST_PARTY {
            let row = rows
                .iter()
                .find(|r| r[0].starts_with(&format!("`{}://", entry.name)))
                .unwrap_or_else(|| panic!("{doc}: no row for {}://", entry.name));
            let feature = entry.feature.map_or_else(|| "always on".to_owned(), |f| format!("`{f}`"));
            assert_eq!(row[feature_col], feature, "{doc}: {}://", entry.name);
            assert_eq!(row.last() == Some(&"planned"), !entry.released, "{doc}: {}://", entry.name);
        }
        let schemes = rows.iter().filter(|r| r[0].contains("://")).count();
        assert_eq!(schemes, sandboxio::dsn::FIRST_PARTY.len(), "{doc}: a scheme row not in dsn::FIRST_PARTY");
    }
}
