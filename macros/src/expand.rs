//! The expansion of `#[blocking_facade]`, as plain functions on `proc_macro2` tokens so
//! that sandboxio's parity test can run it too.

use proc_macro2::TokenStream;
use quote::quote;
use syn::spanned::Spanned;
use syn::{
    Attribute, FnArg, GenericArgument, ImplItem, ImplItemFn, ItemImpl, Pat, PathArguments, ReceiverKind,
    ReturnType, Safety, Type, Visibility,
};

/// The async handle types and the module of their blocking twins.
pub const HANDLES: &[&str] = &["Sandbox", "ExecStream", "ExecLines", "CodeStream", "Fs", "SandboxBuilder"];

/// The one public path of an async handle, for the twin's doc link: the crate root holds
/// `Sandbox` and `SandboxBuilder`, the streams live in `exec`, `Fs` in `fs`.
fn async_path(handle: &str) -> String {
    match handle {
        "ExecStream" | "ExecLines" | "CodeStream" => format!("crate::exec::{handle}"),
        "Fs" => format!("crate::fs::{handle}"),
        _ => format!("crate::{handle}"),
    }
}

/// Expands `#[blocking_facade]` on `item`.
///
/// # Errors
///
/// A `syn::Error` naming the unsupported shape.
pub fn expand(attr: &TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    if !attr.is_empty() {
        return Err(syn::Error::new(attr.span(), "#[blocking_facade] takes no arguments"));
    }
    let block: ItemImpl = syn::parse2(item)?;
    let twin = blocking_impl(&block)?;
    Ok(quote! { #block #twin })
}

/// The blocking twin's `impl` block for an async `impl` block.
///
/// # Errors
///
/// A `syn::Error` naming the unsupported shape.
pub fn blocking_impl(block: &ItemImpl) -> syn::Result<TokenStream> {
    if let Some((path, _)) = &block.trait_ {
        return Err(syn::Error::new(
            path.span(),
            "#[blocking_facade] goes on inherent impl blocks, not trait impls",
        ));
    }
    let async_ty = &block.self_ty;
    let handle = handle_name(async_ty).ok_or_else(|| {
        syn::Error::new(async_ty.span(), format!("#[blocking_facade] works on the handle types {HANDLES:?}"))
    })?;
    let sync_ty = map_type(async_ty);
    let (impl_generics, _, where_clause) = block.generics.split_for_impl();
    let mut methods = Vec::new();
    for item in &block.items {
        if let ImplItem::Fn(f) = item
            && matches!(f.vis, Visibility::Public(_))
        {
            methods.push(blocking_method(f, async_ty, &handle)?);
        }
    }
    Ok(quote! {
        impl #impl_generics #sync_ty #where_clause {
            #(#methods)*
        }
    })
}

/// The handle a type names: `Sandbox`, or a qualified `crate::Sandbox` (not one already in
/// `sync`).
fn handle_name(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last()?;
            let name = last.ident.to_string();
            let in_sync = p.path.segments.iter().any(|s| s.ident == "sync");
            (HANDLES.contains(&name.as_str()) && !in_sync).then_some(name)
        }
        _ => None,
    }
}

/// The type with every handle replaced by its blocking twin (`Sandbox` →
/// `crate::sync::Sandbox`), generic arguments and references included.
pub fn map_type(ty: &Type) -> Type {
    match ty {
        Type::Path(p) if p.qself.is_none() => {
            let mut p = p.clone();
            for seg in &mut p.path.segments {
                if let PathArguments::AngleBracketed(args) = &mut seg.arguments {
                    for arg in &mut args.args {
                        if let GenericArgument::Type(t) = arg {
                            *t = map_type(t);
                        }
                    }
                }
            }
            if handle_name(ty).is_some() {
                let last = p.path.segments.last().cloned().expect("a handle path has a segment");
                let ident = &last.ident;
                let args = &last.arguments;
                syn::parse_quote!(crate::sync::#ident #args)
            } else {
                Type::Path(p)
            }
        }
        Type::Reference(r) => {
            let mut r = r.clone();
            r.elem = Box::new(map_type(&r.elem));
            Type::Reference(r)
        }
        other => other.clone(),
    }
}

/// Whether the type mentions a handle or `Self` anywhere, inside any type syntax.
fn mentions_handle(ty: &Type) -> bool {
    let text = quote!(#ty).to_string();
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .any(|word| word == "Self" || HANDLES.contains(&word))
        && !text.contains("sync ::")
}

/// Whether the type is a future the caller would have to poll (`impl Future`, `BoxFuture`,
/// `Pin<Box<dyn Future>>`): the facade can only forward plain values.
fn is_future(ty: &Type) -> bool {
    let text = quote!(#ty).to_string();
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .any(|word| matches!(word, "Future" | "IntoFuture" | "BoxFuture"))
}

/// How to turn the async method's result into the blocking method's.
enum Conversion {
    None,
    Into,
    MapInto,
}

fn conversion(ret: &ReturnType, name: &syn::Ident) -> syn::Result<Conversion> {
    let ReturnType::Type(_, ty) = ret else { return Ok(Conversion::None) };
    if !mentions_handle(ty) {
        return Ok(Conversion::None);
    }
    if let Type::Path(p) = &**ty {
        if handle_name(ty).is_some() || p.path.is_ident("Self") {
            return Ok(Conversion::Into);
        }
        let last = p.path.segments.last().expect("a path has a segment");
        if matches!(last.ident.to_string().as_str(), "Result" | "Option")
            && let PathArguments::AngleBracketed(args) = &last.arguments
            && let Some(GenericArgument::Type(inner)) = args.args.first()
            && (handle_name(inner).is_some() || matches!(inner, Type::Path(p) if p.path.is_ident("Self")))
        {
            return Ok(Conversion::MapInto);
        }
    }
    Err(syn::Error::new(
        ty.span(),
        format!(
            "#[blocking_facade]: `{name}` returns a handle nested deeper than Result<_> or Option<_>, which the facade cannot map"
        ),
    ))
}

/// Doc attributes without the sections that cannot apply to the twin: `# Cancel safety`
/// (blocking calls cannot be cancelled) and `# Examples` (they show the async call; the
/// twin's docs link to it). Headings inside code fences do not count.
fn docs_for_the_twin(attrs: &[Attribute]) -> Vec<Attribute> {
    const DROPPED: &[&str] = &["Cancel safety", "Examples"];
    let mut kept = Vec::new();
    let mut skipping = false;
    let mut in_fence = false;
    for attr in attrs.iter().filter(|a| a.path().is_ident("doc")) {
        let text = match &attr.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => s.value(),
                _ => String::new(),
            },
            _ => String::new(),
        };
        let line = text.trim_start();
        if line.starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence && line.starts_with("# ") {
            skipping = DROPPED.contains(&line.trim_start_matches('#').trim());
        }
        if !skipping {
            kept.push(attr.clone());
        }
    }
    kept
}

/// Attributes the twin must share: conditional compilation, deprecation, lint levels,
/// `must_use`, inlining.
fn shared_attributes(attrs: &[Attribute]) -> Vec<&Attribute> {
    const SHARED: &[&str] = &["cfg", "cfg_attr", "deprecated", "must_use", "allow", "expect", "inline"];
    attrs.iter().filter(|a| SHARED.iter().any(|s| a.path().is_ident(s))).collect()
}

#[expect(
    clippy::too_many_lines,
    reason = "one pass over the signature: each check names the shape it refuses, in order"
)]
fn blocking_method(f: &ImplItemFn, async_ty: &Type, handle: &str) -> syn::Result<TokenStream> {
    let sig = &f.sig;
    let name = &sig.ident;
    if !matches!(sig.safety, Safety::Default) || sig.abi.is_some() || sig.variadic.is_some() {
        return Err(syn::Error::new(
            sig.span(),
            format!("#[blocking_facade]: `{name}` has an unsupported signature"),
        ));
    }
    if let Some(lt) = sig.generics.lifetimes().next() {
        return Err(syn::Error::new(
            lt.span(),
            format!(
                "#[blocking_facade]: `{name}` has explicit lifetime parameters, which the facade does not support"
            ),
        ));
    }
    let mut receiver = None;
    let mut args = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(r) => {
                if matches!(r.kind, ReceiverKind::Typed(..)) {
                    return Err(syn::Error::new(
                        r.span(),
                        format!(
                            "#[blocking_facade]: `{name}` has a typed receiver; use `self`, `&self` or `&mut self`"
                        ),
                    ));
                }
                receiver = Some(r);
            }
            FnArg::Typed(pt) => {
                let Pat::Ident(ident) = &*pt.pat else {
                    return Err(syn::Error::new(
                        pt.pat.span(),
                        format!("#[blocking_facade]: `{name}` destructures an argument; name it instead"),
                    ));
                };
                if mentions_handle(&pt.ty) {
                    return Err(syn::Error::new(
                        pt.ty.span(),
                        format!(
                            "#[blocking_facade]: `{name}` takes a handle as an argument, which the facade cannot map"
                        ),
                    ));
                }
                args.push(ident.ident.clone());
            }
        }
    }
    if sig.asyncness.is_none()
        && let ReturnType::Type(_, ty) = &sig.output
        && is_future(ty)
    {
        return Err(syn::Error::new(
            ty.span(),
            format!(
                "#[blocking_facade]: `{name}` returns a future from a non-async fn; make it `async fn` so the facade can drive it"
            ),
        ));
    }
    let convert = conversion(&sig.output, name)?;
    let call = if receiver.is_some() {
        quote! { self.inner.#name(#(#args),*) }
    } else {
        quote! { <#async_ty>::#name(#(#args),*) }
    };
    let call = if sig.asyncness.is_some() {
        quote! { crate::sync::block_on(#call) }
    } else {
        call
    };
    let body = match convert {
        Conversion::None => call,
        Conversion::Into => quote! { ::core::convert::Into::into(#call) },
        Conversion::MapInto => quote! { (#call).map(::core::convert::Into::into) },
    };
    let mut blocking_sig = sig.clone();
    blocking_sig.asyncness = None;
    // The twin only forwards its arguments: `mut` bindings would be unused.
    for input in &mut blocking_sig.inputs {
        match input {
            FnArg::Receiver(r) if matches!(r.kind, ReceiverKind::Value) => r.mutability = None,
            FnArg::Typed(pt) => {
                if let Pat::Ident(ident) = &mut *pt.pat {
                    ident.mutability = None;
                }
            }
            FnArg::Receiver(_) => {}
        }
    }
    blocking_sig.output = match &sig.output {
        ReturnType::Type(arrow, ty) => ReturnType::Type(*arrow, Box::new(map_type(ty))),
        ReturnType::Default => ReturnType::Default,
    };
    let docs = docs_for_the_twin(&f.attrs);
    let shared = shared_attributes(&f.attrs);
    let twin = format!(
        "Blocking twin of [`{}::{name}`]{}: it runs on the calling thread and needs no runtime.",
        async_path(handle),
        if sig.asyncness.is_some() { ", which it drives to completion" } else { "" }
    );
    Ok(quote! {
        #(#docs)*
        #[doc = ""]
        #[doc = #twin]
        #(#shared)*
        pub #blocking_sig {
            #body
        }
    })
}
