//! Hygiene gates on the source: no provider or catch-all error type in a public signature,
//! and unsafe code nowhere.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use quote::ToTokens;
use syn::visit::Visit;

const FORBIDDEN: &[&str] = &["bollard", "reqwest", "hyper", "tonic", "kube", "anyhow", "eyre"];

#[derive(Default)]
struct PublicSignatures {
    found: Vec<String>,
}

impl<'ast> Visit<'ast> for PublicSignatures {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if matches!(f.vis, syn::Visibility::Public(_)) {
            self.found.push(f.sig.to_token_stream().to_string());
        }
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if matches!(f.vis, syn::Visibility::Public(_)) {
            self.found.push(f.sig.to_token_stream().to_string());
        }
    }
    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        self.found.push(f.sig.to_token_stream().to_string());
    }
    fn visit_item_struct(&mut self, s: &'ast syn::ItemStruct) {
        for field in &s.fields {
            if matches!(field.vis, syn::Visibility::Public(_)) {
                self.found.push(field.ty.to_token_stream().to_string());
            }
        }
    }
    fn visit_item_enum(&mut self, e: &'ast syn::ItemEnum) {
        if matches!(e.vis, syn::Visibility::Public(_)) {
            self.found.push(e.variants.to_token_stream().to_string());
        }
    }
    fn visit_item_type(&mut self, t: &'ast syn::ItemType) {
        if matches!(t.vis, syn::Visibility::Public(_)) {
            self.found.push(t.ty.to_token_stream().to_string());
        }
    }
}

fn sources() -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    out
}

fn offending(signatures: &[String]) -> Vec<String> {
    signatures
        .iter()
        .filter(|sig| {
            sig.split(|c: char| !c.is_alphanumeric() && c != '_').any(|word| FORBIDDEN.contains(&word))
        })
        .cloned()
        .collect()
}

#[test]
fn hygiene__no_public_signature_mentions_a_provider_or_catch_all_error_type() {
    let mut visitor = PublicSignatures::default();
    for (_, text) in sources() {
        visitor.visit_file(&syn::parse_file(&text).unwrap());
    }
    assert!(visitor.found.len() > 100, "expected to scan the public API, saw {} items", visitor.found.len());
    let bad = offending(&visitor.found);
    assert!(bad.is_empty(), "public signatures naming provider crates: {bad:#?}");
}

#[test]
fn hygiene__the_signature_check_can_fail() {
    let bad =
        offending(&["fn connect (docker : bollard :: Docker) -> Result < () , anyhow :: Error >".to_owned()]);
    assert_eq!(bad.len(), 1);
}

#[test]
fn hygiene__no_unsafe_code_anywhere() {
    for (path, text) in sources() {
        let file = syn::parse_file(&text).unwrap();
        let tokens = file.to_token_stream().to_string();
        assert!(!tokens.split_whitespace().any(|t| t == "unsafe"), "{} contains unsafe code", path.display());
    }
    // And the compiler refuses any that is added: both crates take the workspace's lints,
    // which forbid it.
    let manifest =
        |path: &str| std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let root = manifest("Cargo.toml");
    let rust_lints = root.split("[workspace.lints.rust]").nth(1).expect("[workspace.lints.rust]");
    let rust_lints = rust_lints.split("\n[").next().unwrap();
    assert!(rust_lints.lines().any(|l| l.trim() == "unsafe_code = \"forbid\""), "{rust_lints}");
    for crate_manifest in [root.as_str(), &manifest("macros/Cargo.toml")] {
        assert!(
            crate_manifest.contains("[lints]\nworkspace = true\n"),
            "a crate without the workspace's lints"
        );
    }
}
