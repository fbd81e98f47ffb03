//! The syntax tree the parser builds and the interpreter walks.
//!
//! Operators are kept as their source text (`"+"`, `"not in"`, …): the interpreter matches
//! on the same spelling the error messages quote.

use super::value::Value;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Expr {
    Const(Value),
    FStr(Vec<FPart>),
    Name(String),
    List(Vec<Expr>),
    Tuple(Vec<Expr>),
    Dict(Vec<(Expr, Expr)>),
    Attr(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    /// Callee, positional arguments, keyword arguments in source order.
    Call(Box<Expr>, Vec<Expr>, Vec<(String, Expr)>),
    Unary(String, Box<Expr>),
    Binary(String, Box<Expr>, Box<Expr>),
    /// `a < b <= c`: the first operand, then each operator with its right operand.
    Compare(Box<Expr>, Vec<(String, Expr)>),
    /// `true` for `and`, `false` for `or`.
    BoolOp(bool, Box<Expr>, Box<Expr>),
    /// Condition, value when true, value when false.
    IfElse(Box<Expr>, Box<Expr>, Box<Expr>),
}

/// A piece of an f-string.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum FPart {
    Lit(String),
    /// A replacement field; `true` when it ends in `!r`.
    Expr(Expr, bool),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Stmt {
    Expr(Expr),
    Assign(Expr, Expr),
    /// Target, the operator without its `=` (`"+"` for `+=`), value.
    AugAssign(Expr, String, Expr),
    /// Each module with its `as` name.
    Import(Vec<(String, Option<String>)>),
    /// The module, then each name (`*` for a star import) with its `as` name.
    FromImport(String, Vec<(String, Option<String>)>),
    Raise(Option<Expr>),
    Assert(Expr, Option<Expr>),
    Pass,
    ClassDef(std::sync::Arc<ClassDef>),
}

/// A class whose methods each return one expression: the shape of display-hook probes.
#[derive(Debug)]
pub(super) struct ClassDef {
    pub(super) name: String,
    pub(super) methods: Vec<(String, Expr)>,
}

/// A class is equal only to itself, as Python compares classes by identity.
impl PartialEq for ClassDef {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
