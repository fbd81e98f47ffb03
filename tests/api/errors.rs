//! The error catalog, source chains and messages.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

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
        // The variant's constructor is its name in snake case (`IsADirectory` → `is_a_directory`).
        let constructor: String = variant
            .chars()
            .enumerate()
            .flat_map(|(i, c)| {
                let lower = c.to_ascii_lowercase();
                if c.is_ascii_uppercase() && i > 0 { vec!['_', lower] } else { vec![lower] }
            })
            .collect();
        let constructed = source.contains(&format!("Error::{variant} {{"))
            || source.contains(&format!("Error::{constructor}("))
            || match code {
                ErrorCode::CapabilityNotSupported => {
                    source.contains("Error::unsupported(") || source.contains("Error::missing_capability(")
                }
                ErrorCode::Provider => source.contains("Error::provider_message("),
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
    let limited = Error::rate_limited("e2b", Some(std::time::Duration::from_secs(3)));
    assert!(limited.is_retryable());
    assert!(limited.to_string().contains("retry after 3s"), "{limited}");
}

#[test]
fn errors__auth_error_names_the_missing_env_var() {
    let err = Error::auth("e2b", "E2B_API_KEY is not set", Some("E2B_API_KEY".into()));
    assert_eq!(err.code(), ErrorCode::Auth);
    assert!(err.to_string().contains("E2B_API_KEY"));
    assert!(matches!(&err, Error::Auth { env_var: Some(v), .. } if v == "E2B_API_KEY"), "{err:?}");
}

/// Every variant can be built from outside the crate through its constructor, with the
/// code, fields and source the constructor promises.
#[test]
fn errors__every_variant_has_a_constructor() {
    use sandboxio::{
        ExecResult,
        policy::{Capabilities, IsolationTier},
    };
    use std::time::Duration;
    let io = || std::io::Error::other("engine said no");
    let built = [
        (Error::connect("docker", "no socket"), ErrorCode::Connect),
        (Error::auth("e2b", "refused", None), ErrorCode::Auth),
        (Error::configuration("bad option"), ErrorCode::Configuration),
        (Error::unsupported("fake", "STREAM"), ErrorCode::CapabilityNotSupported),
        (Error::missing_capability("fake", Capabilities::STREAM), ErrorCode::CapabilityNotSupported),
        (Error::create_timeout(Duration::from_secs(2)), ErrorCode::CreateTimeout),
        (
            Error::execution_timeout(Duration::from_secs(1), ExecResult::new(0, "so far", "")),
            ErrorCode::ExecutionTimeout,
        ),
        (Error::sandbox_gone("sbx-1", "killed"), ErrorCode::SandboxGone),
        (
            Error::network_policy_violation("example.com:443 under deny_all"),
            ErrorCode::NetworkPolicyViolation,
        ),
        (
            Error::isolation_unsatisfied("local", IsolationTier::MicroVm, IsolationTier::Process),
            ErrorCode::IsolationUnsatisfied,
        ),
        (Error::not_found("/workspace/a"), ErrorCode::NotFound),
        (Error::permission_denied("/etc/shadow"), ErrorCode::PermissionDenied),
        (Error::is_a_directory("/workspace"), ErrorCode::IsADirectory),
        (Error::invalid_input("NUL byte"), ErrorCode::InvalidInput),
        (Error::rate_limited("e2b", None), ErrorCode::RateLimited),
        (Error::provider("docker", "exec failed", io()), ErrorCode::Provider),
        (Error::provider_message("docker", "the stream ended early"), ErrorCode::Provider),
        (Error::too_large("/workspace/big", 10, "`Fs::read_limit`"), ErrorCode::TooLarge),
        (Error::context_lost("ctx-1", "its interpreter ended"), ErrorCode::ContextLost),
    ];
    let codes: BTreeSet<ErrorCode> = built.iter().map(|(_, c)| *c).collect();
    assert_eq!(codes.len(), ErrorCode::ALL.len(), "a variant without a constructor here");
    for (err, code) in &built {
        assert_eq!(err.code(), *code, "{err}");
        assert!(err.to_string().starts_with(&format!("[{code}] ")), "{err}");
    }
    let Error::ExecutionTimeout { partial, .. } = &built[6].0 else { panic!() };
    assert_eq!(partial.stdout, b"so far");
    let Error::TooLarge { path, limit, what, .. } = &built[17].0 else { panic!() };
    assert_eq!((path.as_str(), *limit, what.as_str()), ("/workspace/big", 10, "`Fs::read_limit`"));
    let Error::IsolationUnsatisfied { required, actual, .. } = &built[9].0 else { panic!() };
    assert_eq!((*required, *actual), (IsolationTier::MicroVm, IsolationTier::Process));
}

/// A provider error without a provider error underneath has no source, rather than an
/// invented one; `with_source` keeps a real one on the variants that carry a cause.
#[test]
fn errors__provider_message_has_no_source_and_with_source_keeps_one() {
    let bare = Error::provider_message("local", "stdin is closed");
    assert!(bare.source().is_none(), "{:?}", bare.source());
    assert_eq!(bare.to_string(), "[SBX-015] the local backend failed: stdin is closed");
    for err in [
        Error::provider_message("docker", "x"),
        Error::connect("docker", "x"),
        Error::auth("e2b", "x", None),
        Error::configuration("x"),
        Error::rate_limited("e2b", None),
    ] {
        let code = err.code();
        let kept = err.with_source(std::io::Error::other("the cause"));
        assert_eq!(kept.code(), code);
        assert_eq!(kept.source().map(ToString::to_string).as_deref(), Some("the cause"), "{kept}");
    }
    let observed = Error::not_found("/workspace/a").with_source(std::io::Error::other("ignored"));
    assert!(observed.source().is_none());
    assert_eq!(observed.to_string(), "[SBX-010] not found: /workspace/a");
}
