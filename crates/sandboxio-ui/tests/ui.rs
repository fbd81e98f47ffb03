//! Compile-time misuse, checked by trybuild, and a program that must compile against both
//! facades. `.stderr` files are pinned to the toolchain in `rust-toolchain.toml`;
//! regenerate with `TRYBUILD=overwrite cargo test -p sandboxio-ui --test ui` and review the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
