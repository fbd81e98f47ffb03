//! Parity between the async API and the blocking facade, checked from the source: every
//! public method of an async handle's `impl` block must have a blocking twin with the same
//! name, receiver, parameter names, types and order, generics and `where` clause, and the
//! return type mapped handle by handle. The twins are computed by the very expansion code
//! the `#[blocking_facade]` macro runs, so a block that is not annotated, or an expansion
//! that drops or alters a method, fails here.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

#[allow(dead_code, reason = "the parity test uses part of the generator it includes")]
#[path = "../../macros/src/expand.rs"]
mod expand;

use quote::ToTokens;
use syn::{FnArg, ImplItem, Item, ItemImpl, Pat, ReturnType, Type, Visibility};

fn tokens(t: &impl ToTokens) -> String {
    t.to_token_stream().to_string()
}

fn handle_of(block: &ItemImpl) -> Option<String> {
    match &*block.self_ty {
        Type::Path(p) => {
            let name = p.path.segments.last()?.ident.to_string();
            expand::HANDLES.contains(&name.as_str()).then_some(name)
        }
        _ => None,
    }
}

fn is_facade(block: &ItemImpl) -> bool {
    block.attrs.iter().any(|a| a.path().segments.last().is_some_and(|s| s.ident == "blocking_facade"))
}

/// (receiver, [(name, type)]) of a signature, `mut` bindings ignored.
fn inputs(sig: &syn::Signature) -> (String, Vec<(String, String)>) {
    let mut receiver = "none".to_owned();
    let mut args = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(r) => {
                receiver = match &r.kind {
                    syn::ReceiverKind::Reference(_, _, Some(_)) => "&mut self".into(),
                    syn::ReceiverKind::Reference(_, _, None) => "&self".into(),
                    _ => "self".into(),
                };
            }
            FnArg::Typed(pt) => {
                let name = match &*pt.pat {
                    Pat::Ident(i) => i.ident.to_string(),
                    other => tokens(other),
                };
                args.push((name, tokens(&pt.ty)));
            }
        }
    }
    (receiver, args)
}

fn public_fns(block: &ItemImpl) -> Vec<&syn::ImplItemFn> {
    block
        .items
        .iter()
        .filter_map(|i| match i {
            ImplItem::Fn(f) if matches!(f.vis, Visibility::Public(_)) => Some(f),
            _ => None,
        })
        .collect()
}

fn async_impl_blocks() -> Vec<(String, ItemImpl)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/api");
    let mut blocks = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let file = syn::parse_file(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for item in file.items {
            if let Item::Impl(block) = item {
                blocks.push((path.display().to_string(), block));
            }
        }
    }
    blocks
}

/// The blocking twin of an async return type, derived here independently of the macro's
/// `map_type`: every handle token becomes `crate :: sync :: Handle`.
fn expected_blocking_type(async_type: &str) -> String {
    async_type
        .split(' ')
        .map(|token| {
            if expand::HANDLES.contains(&token) {
                format!("crate :: sync :: {token}")
            } else {
                token.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every problem found; empty means parity holds.
fn parity_problems(blocks: &[(String, ItemImpl)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (file, block) in blocks {
        let Some(handle) = handle_of(block) else { continue };
        if block.trait_.is_some() {
            continue;
        }
        let async_fns = public_fns(block);
        if !is_facade(block) {
            for f in async_fns {
                problems.push(format!(
                    "{file}: {handle}::{} has no blocking twin (impl block without #[blocking_facade])",
                    f.sig.ident
                ));
            }
            continue;
        }
        let twin: ItemImpl = syn::parse2(expand::blocking_impl(block).unwrap()).unwrap();
        let expected_self = tokens(&expand::map_type(&block.self_ty));
        if tokens(&twin.self_ty) != expected_self {
            problems.push(format!(
                "{file}: the twin of {handle} is {} instead of {expected_self}",
                tokens(&twin.self_ty)
            ));
        }
        let twin_fns = public_fns(&twin);
        if twin_fns.len() != async_fns.len() {
            problems.push(format!(
                "{file}: {handle} has {} public methods but its twin {}",
                async_fns.len(),
                twin_fns.len()
            ));
        }
        for f in async_fns {
            let name = f.sig.ident.to_string();
            let Some(t) = twin_fns.iter().find(|t| t.sig.ident == f.sig.ident) else {
                problems.push(format!("{file}: {handle}::{name} has no blocking twin"));
                continue;
            };
            if t.sig.asyncness.is_some() {
                problems.push(format!("{handle}::{name}: the blocking twin is async"));
            }
            if inputs(&f.sig) != inputs(&t.sig) {
                problems.push(format!(
                    "{handle}::{name}: parameters differ: {:?} vs {:?}",
                    inputs(&f.sig),
                    inputs(&t.sig)
                ));
            }
            if tokens(&f.sig.generics) != tokens(&t.sig.generics)
                || tokens(&f.sig.generics.where_clause) != tokens(&t.sig.generics.where_clause)
            {
                problems.push(format!("{handle}::{name}: generics or where clause differ"));
            }
            let expected = match &f.sig.output {
                ReturnType::Default => String::new(),
                ReturnType::Type(_, ty) => expected_blocking_type(&tokens(ty)),
            };
            let actual = match &t.sig.output {
                ReturnType::Default => String::new(),
                ReturnType::Type(_, ty) => tokens(ty),
            };
            if expected != actual {
                problems.push(format!("{handle}::{name}: returns {actual} instead of {expected}"));
            }
        }
    }
    problems
}

#[test]
fn sync_parity__every_public_async_method_has_a_blocking_twin_with_the_same_signature() {
    let blocks = async_impl_blocks();
    let checked: usize = blocks.iter().filter(|(_, b)| is_facade(b)).map(|(_, b)| public_fns(b).len()).sum();
    assert!(checked >= 40, "expected the whole public API to be checked, found only {checked} methods");
    let problems = parity_problems(&blocks);
    assert!(problems.is_empty(), "parity problems:\n{}", problems.join("\n"));
}

#[test]
fn sync_parity__the_check_fails_on_a_method_without_a_twin() {
    // Proof that the check can fail: an impl block of a handle that is not annotated.
    let rogue: ItemImpl = syn::parse_quote! {
        impl Sandbox {
            /// Added without the facade.
            pub async fn snapshot(&self) -> Result<String> { Ok(String::new()) }
        }
    };
    let problems = parity_problems(&[("rogue.rs".to_owned(), rogue)]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("Sandbox::snapshot has no blocking twin"), "{problems:?}");
}

#[test]
fn sync_parity__a_twin_keeps_the_docs_but_the_async_examples_and_cancel_safety() {
    let block: ItemImpl = syn::parse_quote! {
        impl Sandbox {
            /// Runs it.
            ///
            /// # Errors
            ///
            /// `SandboxGone`.
            ///
            /// # Examples
            ///
            /// ```
            /// # Cancel safety
            /// sandbox.run(cmd).await?;
            /// ```
            ///
            /// # Cancel safety
            ///
            /// Dropping it kills the command.
            pub async fn run(&self) -> Result<()> { Ok(()) }
        }
    };
    let twin: ItemImpl = syn::parse2(expand::blocking_impl(&block).unwrap()).unwrap();
    let ImplItem::Fn(f) = &twin.items[0] else { panic!("the twin has no method") };
    let docs: Vec<String> = f
        .attrs
        .iter()
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => Some(tokens(&nv.value)),
            _ => None,
        })
        .collect();
    let docs = docs.join("\n");
    assert!(docs.contains("Runs it.") && docs.contains("# Errors") && docs.contains("SandboxGone"), "{docs}");
    assert!(docs.contains("Blocking twin of"), "{docs}");
    for gone in ["# Examples", ".await", "# Cancel safety", "Dropping it kills"] {
        assert!(!docs.contains(gone), "the twin's docs keep {gone:?}: {docs}");
    }
}

#[test]
fn sync_parity__every_handle_has_a_twin_type() {
    let sync = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/sync/mod.rs")).unwrap();
    let file = syn::parse_file(&sync).unwrap();
    for handle in expand::HANDLES {
        let found = file.items.iter().any(
            |i| matches!(i, Item::Struct(s) if s.ident == handle && matches!(s.vis, Visibility::Public(_))),
        );
        assert!(found, "sandboxio::sync has no public struct {handle}");
    }
}
