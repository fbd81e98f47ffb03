//! The error catalog, source chains and messages.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

mod support;

use std::collections::BTreeSet;
use std::error::Error as _;

use sandboxio::{Error, ErrorCode};

#[test]
fn errors__every_code_has_a_page_and_every_page_has_a_code() {
    let root = env!("CARGO_MANIFEST_DIR");
    let pages: BTreeSet<String> = std::fs::read_dir(format!("{root}/docs/errors"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let codes: BTreeSet<String> = ErrorCode::ALL.iter().map(|c| format!("{}.md", c.as_str())).collect();
    let orphan_pages: Vec<_> = pages.difference(&codes).collect();
    let missing_pages: Vec<_> = codes.difference(&pages).collect();
    assert!(orphan_pages.is_empty(), "pages without a code: {orphan_pages:?}");
    assert!(missing_pages.is_empty(), "codes without a page: {missing_pages:?}");
    for code in ErrorCode::ALL {
        let page = std::fs::read_to_string(format!("{root}/{}", code.docs_path())).unwrap();
        assert!(
            page.starts_with(&format!("# {}:", code.as_str())),
            "{} page must open with its code",
            code.as_str()
        );
    }
}

#[test]
fn errors__codes_are_unique_and_well_formed() {
    let mut seen = BTreeSet::new();
    for code in ErrorCode::ALL {
        let s = code.as_str();
        assert!(s.len() == 7 && s.starts_with("SBX-") && s[4..].chars().all(|c| c.is_ascii_digit()), "{s}");
        assert!(seen.insert(s), "duplicate code {s}");
    }
}

#[test]
fn errors__every_code_is_emitted_somewhere_in_src() {
    // rustc's tidy check, stage 4: a code nobody constructs is a dead catalog entry.
    let root = env!("CARGO_MANIFEST_DIR");
    let mut source = String::new();
    let mut stack = vec![std::path::PathBuf::from(format!("{root}/src"))];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("error.rs") {
                source.push_str(&std::fs::read_to_string(path).unwrap());
            }
        }
    }
    for code in ErrorCode::ALL {
        let variant = format!("{code:?}");
        let constructed = source.contains(&format!("Error::{variant} {{"))
            || source.contains(&format!("Error::{variant}("))
            || match code {
                ErrorCode::Configuration => source.contains("Error::configuration("),
                ErrorCode::InvalidInput => source.contains("Error::invalid_input("),
                ErrorCode::Connect => source.contains("Error::connect("),
                ErrorCode::CapabilityNotSupported => source.contains("Error::unsupported("),
                ErrorCode::Provider => source.contains("Error::provider("),
                _ => false,
            };
        assert!(constructed, "{} ({variant}) is never constructed in src/", code.as_str());
    }
}

#[test]
fn errors__display_leads_with_the_code_and_source_is_preserved() {
    let io = std::io::Error::other("socket closed");
    let err = Error::provider("docker", "exec failed", io);
    assert!(err.to_string().starts_with("[SBX-015] "), "{err}");
    let source = err.source().expect("the provider error is kept");
    assert_eq!(source.to_string(), "socket closed");
    assert!(source.downcast_ref::<std::io::Error>().is_some());
    assert!(!err.is_retryable());
    let limited = Error::RateLimited {
        backend: "e2b".into(),
        retry_after: Some(std::time::Duration::from_secs(3)),
        source: None,
    };
    assert!(limited.is_retryable());
    assert!(limited.to_string().contains("retry after 3s"), "{limited}");
}

#[test]
fn errors__auth_error_names_the_missing_env_var() {
    let err = Error::Auth {
        backend: "e2b".into(),
        message: "E2B_API_KEY is not set".into(),
        env_var: Some("E2B_API_KEY".into()),
        source: None,
    };
    assert_eq!(err.code(), ErrorCode::Auth);
    assert!(err.to_string().contains("E2B_API_KEY"));
}
