//! Proc-macros for `sandboxio`: the generator of the blocking facade, `sandboxio::sync`.
//!
//! `#[blocking_facade]` goes on an inherent `impl` block of one of sandboxio's async handle
//! types (`Sandbox`, `ExecStream`, `ExecLines`, `CodeStream`, `Fs`, `SandboxBuilder`). It keeps the block
//! as it is and emits, next to it, an `impl` block for the blocking twin (`crate::sync::Sandbox`, …) with
//! one method per `pub` method: same name, parameter names, types and order, same generics
//! and `where` clauses, the docs copied (minus `# Cancel safety` and `# Examples`, which cannot apply) with a
//! line pointing to the async twin. Async methods become blocking ones; return types that
//! mention a handle (`Sandbox`, `Result<ExecStream>`, `Self`, …) map to the blocking twin.
//! Bodies are never rewritten: each blocking method calls its async twin on the wrapped
//! value and drives it with `crate::sync::block_on`.
//!
//! Shapes it cannot express give a compile error naming the method: trait impls, typed
//! receivers (`self: Pin<&mut Self>`), explicit lifetime parameters, argument patterns,
//! handles passed as arguments, and handles nested deeper than `Result<_>` or `Option<_>`.

mod expand;

use proc_macro::TokenStream;

/// Generates the blocking twin of an async `impl` block. See the crate documentation.
#[proc_macro_attribute]
pub fn blocking_facade(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(&attr.into(), item.into()).unwrap_or_else(syn::Error::into_compile_error).into()
}
