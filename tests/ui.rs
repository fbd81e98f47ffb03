//! Compile-time misuse, checked by trybuild. `.stderr` files are pinned to the toolchain in
//! `rust-toolchain.toml`; regenerate with `TRYBUILD=overwrite cargo test --test ui` and
//! review the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
