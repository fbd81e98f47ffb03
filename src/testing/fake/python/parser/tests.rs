//! Exact syntax trees for representative cells, the constructs reported as unmodelled, and
//! each syntax error with its line.

use super::super::ast::{Expr, FPart, Stmt};
use super::super::value::Value;
use super::parse;

fn statements(src: &str) -> Vec<(Stmt, usize)> {
    match parse(src) {
        Ok(Ok(stmts)) => stmts,
        other => panic!("{src:?} should parse, got {other:?}"),
    }
}

/// The one expression statement `src` holds.
fn expression(src: &str) -> Expr {
    match statements(src).as_slice() {
        [(Stmt::Expr(e), 1)] => e.clone(),
        other => panic!("{src:?} should be one expression, got {other:?}"),
    }
}

/// The first unmodelled construct and its line.
fn unmodelled(src: &str) -> (String, usize) {
    match parse(src) {
        Ok(Err(what)) => what,
        other => panic!("{src:?} should be unmodelled, got {other:?}"),
    }
}

/// The syntax error's line and message.
fn syntax_error(src: &str) -> (usize, String) {
    match parse(src) {
        Err(e) => (e.line, e.message),
        other => panic!("{src:?} should be a syntax error, got {other:?}"),
    }
}

fn name(n: &str) -> Expr {
    Expr::Name(n.to_owned())
}

fn int(n: i64) -> Expr {
    Expr::Const(Value::Int(n))
}

fn text(s: &str) -> Expr {
    Expr::Const(Value::Str(s.to_owned()))
}

fn binary(op: &str, l: Expr, r: Expr) -> Expr {
    Expr::Binary(op.to_owned(), Box::new(l), Box::new(r))
}

fn unary(op: &str, e: Expr) -> Expr {
    Expr::Unary(op.to_owned(), Box::new(e))
}

fn call(f: Expr, args: Vec<Expr>, kwargs: Vec<(&str, Expr)>) -> Expr {
    Expr::Call(Box::new(f), args, kwargs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

#[test]
fn arithmetic_binds_by_python_precedence() {
    assert_eq!(
        statements("x = 1 + 2 * 3 - 4"),
        [(Stmt::Assign(name("x"), binary("-", binary("+", int(1), binary("*", int(2), int(3))), int(4))), 1)]
    );
    // `**` binds tighter than unary minus and is right-associative.
    assert_eq!(expression("-2 ** 3 ** 2"), unary("-", binary("**", int(2), binary("**", int(3), int(2)))));
}

#[test]
fn comparisons_chain_and_boolean_operators_nest() {
    assert_eq!(
        expression("a < b <= c is not None"),
        Expr::Compare(
            Box::new(name("a")),
            vec![
                ("<".into(), name("b")),
                ("<=".into(), name("c")),
                ("is not".into(), Expr::Const(Value::None))
            ]
        )
    );
    assert_eq!(
        expression("not a and b or c not in d"),
        Expr::BoolOp(
            false,
            Box::new(Expr::BoolOp(true, Box::new(unary("not", name("a"))), Box::new(name("b")))),
            Box::new(Expr::Compare(Box::new(name("c")), vec![("not in".into(), name("d"))])),
        )
    );
    assert_eq!(
        expression("x if c else y"),
        Expr::IfElse(Box::new(name("c")), Box::new(name("x")), Box::new(name("y")))
    );
}

#[test]
fn calls_attributes_and_subscripts_chain_left_to_right() {
    assert_eq!(
        expression("print(1, 'a' 'b', sep='-')"),
        call(name("print"), vec![int(1), text("ab")], vec![("sep", text("-"))])
    );
    assert_eq!(
        expression("obj.attr(1)[0]"),
        Expr::Index(
            Box::new(call(Expr::Attr(Box::new(name("obj")), "attr".into()), vec![int(1)], vec![])),
            Box::new(int(0)),
        )
    );
}

#[test]
fn displays_and_tuples() {
    assert_eq!(
        statements("t = 1, 2\n(1,)\n[]\n{1: 'a', 'b': [True]}"),
        [
            (Stmt::Assign(name("t"), Expr::Tuple(vec![int(1), int(2)])), 1),
            (Stmt::Expr(Expr::Tuple(vec![int(1)])), 2),
            (Stmt::Expr(Expr::List(vec![])), 3),
            (
                Stmt::Expr(Expr::Dict(vec![
                    (int(1), text("a")),
                    (text("b"), Expr::List(vec![Expr::Const(Value::Bool(true))])),
                ])),
                4
            ),
        ]
    );
}

#[test]
fn f_strings_split_into_literals_and_fields() {
    assert_eq!(
        expression("f'a{x}b{y + 1!r}{{c}}'"),
        Expr::FStr(vec![
            FPart::Lit("a".into()),
            FPart::Expr(name("x"), false),
            FPart::Lit("b".into()),
            FPart::Expr(binary("+", name("y"), int(1)), true),
            FPart::Lit("{c}".into()),
        ])
    );
}

#[test]
fn simple_statements_with_their_lines() {
    let alias = |n: &str, a: Option<&str>| (n.to_owned(), a.map(str::to_owned));
    assert_eq!(
        statements(
            "import os.path as p, sys\nfrom json import (dumps, loads as l)\nd['k'] += 1; pass\n\nraise ValueError('bad')\nassert x, 'm'\nraise"
        ),
        [
            (Stmt::Import(vec![alias("os.path", Some("p")), alias("sys", None)]), 1),
            (Stmt::FromImport("json".into(), vec![alias("dumps", None), alias("loads", Some("l"))]), 2),
            (Stmt::AugAssign(Expr::Index(Box::new(name("d")), Box::new(text("k"))), "+".into(), int(1)), 3),
            (Stmt::Pass, 3),
            (Stmt::Raise(Some(call(name("ValueError"), vec![text("bad")], vec![]))), 5),
            (Stmt::Assert(name("x"), Some(text("m"))), 6),
            (Stmt::Raise(None), 7),
        ]
    );
}

#[test]
fn a_class_of_one_expression_methods_is_modelled() {
    let stmts = statements(
        "class A(object):\n    pass\n    def _repr_html_(self): return '<b>'\n    def x(self):\n        return 1\nA()",
    );
    let [(Stmt::ClassDef(class), 1), (Stmt::Expr(e), 6)] = stmts.as_slice() else {
        panic!("expected a class then an expression, got {stmts:?}");
    };
    assert_eq!(class.name, "A");
    assert_eq!(class.methods, [("_repr_html_".to_owned(), text("<b>")), ("x".to_owned(), int(1))]);
    assert_eq!(*e, call(name("A"), vec![], vec![]));
}

#[test]
fn valid_python_the_fake_does_not_model_is_reported_with_its_line() {
    assert_eq!(unmodelled("x = 1\nfor i in y:\n    pass\n"), ("`for` statements".into(), 2));
    assert_eq!(unmodelled("y = [x for x in z]"), ("`for` inside an expression".into(), 1));
    assert_eq!(unmodelled("a = b = 1"), ("chained assignment".into(), 1));
    assert_eq!(unmodelled("\nx = s[1:2]"), ("slices and set/dict comprehensions".into(), 2));
    assert_eq!(unmodelled("f(*args)"), ("star arguments".into(), 1));
    assert_eq!(unmodelled("print(1 | 2)"), ("the `|` operator".into(), 1));
    assert_eq!(unmodelled("x = 0o17"), ("hexadecimal, octal, binary and imaginary literals".into(), 1));
    assert_eq!(
        unmodelled("class A:\n    x = 1\n"),
        ("class bodies other than `def m(self): return <expr>` methods".into(), 2)
    );
    let deep = format!("{}1{}", "(".repeat(50), ")".repeat(50));
    assert_eq!(unmodelled(&deep), ("expressions nested deeper than 40 levels".into(), 1));
}

#[test]
fn syntax_errors_name_their_line() {
    assert_eq!(syntax_error("x = 1\n  y = 2\n"), (2, "unexpected indent".into()));
    assert_eq!(syntax_error("x = = 1"), (1, "invalid syntax".into()));
    assert_eq!(syntax_error("x = 1\nx = 1 2"), (2, "invalid syntax".into()));
    assert_eq!(
        syntax_error("1 = x"),
        (1, "cannot assign to expression here. Maybe you meant '==' instead of '='?".into())
    );
    assert_eq!(syntax_error("f(a=1, 2)"), (1, "positional argument follows keyword argument".into()));
    // At module level a keyword in a failed line reads as unmodelled; an f-string field is
    // parsed on its own.
    assert_eq!(unmodelled("x = 1 if y"), ("`if` inside an expression".into(), 1));
    assert_eq!(syntax_error("f'{1 if y}'"), (1, "f-string: expected 'else' after 'if' expression".into()));
    assert_eq!(syntax_error("\n\nx = f'{'"), (3, "f-string: expecting '}'".into()));
    assert_eq!(syntax_error("f'}'"), (1, "f-string: single '}' is not allowed".into()));
    assert_eq!(syntax_error("x = (1,\n"), (1, "'(' was never closed".into()));
}

#[test]
fn a_syntax_error_after_an_unmodelled_construct_still_wins() {
    assert_eq!(syntax_error("for x in y:\n    pass\nx = = 1"), (3, "invalid syntax".into()));
}
