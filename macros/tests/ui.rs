//! The generator's own misuse cases: each shape it cannot express is a compile error that
//! names the method and says why.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
