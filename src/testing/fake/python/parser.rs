//! Tokens to statements: the module level, imports, assignments and the one class shape the
//! fake models. Expressions are parsed in [`expr`].
//!
//! Valid Python the fake does not model is not a syntax error: the parser skips it and
//! remembers the first such construct, so the cell fails with `NotImplementedError` naming
//! it, after any real syntax error later in the cell has had its say.

mod expr;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use super::ast::{ClassDef, Expr, Stmt};
use super::lexer::{SyntaxError, Tok, syntax, tokenize};

/// How deeply expressions may nest in the fake (`CPython` allows 200 parentheses; the fake
/// stops earlier rather than overflow its stack).
const MAX_DEPTH: usize = 40;

/// A parsed module: its statements with their lines, or the first unmodelled construct
/// and its line.
pub(super) type Parsed = Result<Vec<(Stmt, usize)>, (String, usize)>;

/// Parses a cell. A construct the fake does not model comes back as `Ok(Err(..))` whether
/// the lexer or the parser met it; `Err` is a real syntax error.
pub(super) fn parse(source: &str) -> Result<Parsed, SyntaxError> {
    let parsed =
        tokenize(source).and_then(|toks| Parser { toks, pos: 0, unsupported: None, depth: 0 }.module());
    match parsed {
        Err(e) if e.unmodelled => Ok(Err((e.message, e.line))),
        other => other,
    }
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    /// The first construct met that the fake does not model, and its line.
    unsupported: Option<(String, usize)>,
    /// Current expression nesting, bounded by [`MAX_DEPTH`].
    depth: usize,
}

/// Keywords that open a statement the fake does not model (or may appear only inside one).
const COMPOUND: &[&str] = &[
    "def", "class", "for", "while", "if", "elif", "else", "with", "try", "except", "finally", "async",
    "match", "lambda", "return", "yield", "global", "nonlocal", "del", "break", "continue",
];

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].0
    }

    fn line(&self) -> usize {
        self.toks[self.pos].1
    }

    fn next(&mut self) -> Tok {
        let t = self.toks[self.pos].0.clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Tok::Op(o) if o == op)
    }

    fn is_name(&self, name: &str) -> bool {
        matches!(self.peek(), Tok::Name(n) if n == name)
    }

    fn eat_name(&mut self, name: &str) -> bool {
        let found = self.is_name(name);
        if found {
            self.next();
        }
        found
    }

    /// Consumes the keyword `name`, or fails with `message`.
    fn expect_name(&mut self, name: &str, message: &str) -> Result<(), SyntaxError> {
        if self.eat_name(name) { Ok(()) } else { syntax(self.line(), message) }
    }

    fn eat_op(&mut self, op: &str) -> bool {
        if self.is_op(op) {
            self.next();
            true
        } else {
            false
        }
    }

    fn expect_op(&mut self, op: &str) -> Result<(), SyntaxError> {
        if self.eat_op(op) { Ok(()) } else { syntax(self.line(), "invalid syntax") }
    }

    fn name(&mut self) -> Result<String, SyntaxError> {
        match self.next() {
            Tok::Name(n) => Ok(n),
            _ => syntax(self.line(), "invalid syntax"),
        }
    }

    fn dotted(&mut self) -> Result<String, SyntaxError> {
        let mut name = self.name()?;
        while self.eat_op(".") {
            name.push('.');
            name.push_str(&self.name()?);
        }
        Ok(name)
    }

    /// Parses the whole module. `Err(Ok(keyword))` means a compound statement was met.
    fn module(&mut self) -> Result<Parsed, SyntaxError> {
        let mut stmts = Vec::new();
        loop {
            while matches!(self.peek(), Tok::Newline) {
                if self.pos + 1 >= self.toks.len() {
                    return Ok(match self.unsupported.take() {
                        Some(u) => Err(u),
                        None => Ok(stmts),
                    });
                }
                self.next();
            }
            if matches!(self.peek(), Tok::Indent) {
                if self.unsupported.is_none() {
                    return syntax(self.line(), "unexpected indent");
                }
                // The body of an unmodelled compound statement.
                while !matches!(self.peek(), Tok::Newline) {
                    self.next();
                }
                continue;
            }
            if self.is_name("class") && self.unsupported.is_none() {
                let line = self.line();
                if let Some(class) = self.class_def()? {
                    stmts.push((Stmt::ClassDef(Arc::new(class)), line));
                }
                continue;
            }
            if let Tok::Name(n) = self.peek()
                && COMPOUND.contains(&n.as_str())
            {
                // Skip the rest of the construct; remember the first one met.
                let first = (format!("`{n}` statements"), self.line());
                self.unsupported.get_or_insert(first);
                while !matches!(self.peek(), Tok::Newline) {
                    self.next();
                }
                continue;
            }
            let line = self.line();
            let start = self.pos;
            match self.statement() {
                Ok(stmt) => stmts.push((stmt, line)),
                Err(e) => match self.unmodelled_in_line(start) {
                    // Valid Python the fake cannot parse must not be called a SyntaxError.
                    Some(what) => {
                        self.unsupported.get_or_insert((what, line));
                        while !matches!(self.peek(), Tok::Newline) {
                            self.next();
                        }
                        continue;
                    }
                    None => return Err(e),
                },
            }
            if !self.eat_op(";") && !matches!(self.peek(), Tok::Newline) {
                return syntax(self.line(), "invalid syntax");
            }
        }
    }

    /// The first construct of the logical line starting at `start` that the fake does not
    /// model, if any: keywords inside expressions (comprehensions, `lambda`, …), slices,
    /// bitwise and matrix operators, star arguments, the walrus operator.
    fn unmodelled_in_line(&self, start: usize) -> Option<String> {
        let mut depth = 0usize;
        let line = self.toks[start..].iter().map(|(t, _)| t).take_while(|t| !matches!(t, Tok::Newline));
        for (i, tok) in line.enumerate() {
            match tok {
                Tok::Name(n) if COMPOUND.contains(&n.as_str()) || matches!(n.as_str(), "await") => {
                    return Some(format!("`{n}` inside an expression"));
                }
                Tok::Op(o) if matches!(o.as_str(), "(" | "[" | "{") => depth += 1,
                Tok::Op(o) if matches!(o.as_str(), ")" | "]" | "}") => depth = depth.saturating_sub(1),
                Tok::Op(o) if o == ":" && depth > 0 => {
                    return Some("slices and set/dict comprehensions".into());
                }
                Tok::Op(o)
                    if matches!(o.as_str(), "|" | "&" | "^" | "~" | "<<" | ">>" | "@" | ":=" | "->") =>
                {
                    return Some(format!("the `{o}` operator"));
                }
                Tok::Op(o) if (o == "*" || o == "**") && i > 0 && depth > 0 => {
                    let prev = &self.toks[start + i - 1].0;
                    if matches!(prev, Tok::Op(p) if p == "(" || p == "," || p == "[") {
                        return Some("star arguments".into());
                    }
                }
                _ => {}
            }
        }
        None
    }

    fn at_end(&self) -> bool {
        self.pos + 1 >= self.toks.len()
    }

    /// `class Name[(bases)]:` whose body is methods `def m(self): return <expr>` (on one line
    /// or two). Any other body marks the cell unsupported and returns `None`.
    fn class_def(&mut self) -> Result<Option<ClassDef>, SyntaxError> {
        self.next();
        let name = self.name()?;
        if self.eat_op("(") {
            while !self.is_op(")") && !matches!(self.peek(), Tok::Newline) {
                self.next();
            }
            self.expect_op(")")?;
        }
        self.expect_op(":")?;
        if !matches!(self.peek(), Tok::Newline) {
            return syntax(self.line(), "the fake Python expects a class body on the following lines");
        }
        let mut methods = Vec::new();
        loop {
            while matches!(self.peek(), Tok::Newline) && !self.at_end() {
                self.next();
            }
            if !matches!(self.peek(), Tok::Indent) {
                break;
            }
            self.next();
            let line = self.line();
            if self.is_name("pass") {
                self.next();
                continue;
            }
            if !self.is_name("def") {
                return self
                    .unsupported_block("class bodies other than `def m(self): return <expr>` methods", line);
            }
            self.next();
            let method = self.name()?;
            self.expect_op("(")?;
            while !self.is_op(")") && !matches!(self.peek(), Tok::Newline) {
                self.next();
            }
            self.expect_op(")")?;
            self.expect_op(":")?;
            if matches!(self.peek(), Tok::Newline) {
                self.next();
                if !matches!(self.peek(), Tok::Indent) {
                    return syntax(self.line(), "expected an indented block");
                }
                self.next();
            }
            if !self.is_name("return") {
                return self.unsupported_block("method bodies other than one `return <expr>`", line);
            }
            self.next();
            let body = self.expr()?;
            if !matches!(self.peek(), Tok::Newline) {
                return self.unsupported_block("method bodies other than one `return <expr>`", line);
            }
            methods.push((method, body));
        }
        Ok(Some(ClassDef { name, methods }))
    }

    /// Records an unmodelled construct and skips the rest of its block.
    fn unsupported_block<T>(&mut self, what: &str, line: usize) -> Result<Option<T>, SyntaxError> {
        self.unsupported.get_or_insert((what.to_owned(), line));
        loop {
            while !matches!(self.peek(), Tok::Newline) {
                self.next();
            }
            if self.at_end() {
                return Ok(None);
            }
            self.next();
            if !matches!(self.peek(), Tok::Indent) {
                return Ok(None);
            }
        }
    }

    /// `from module import a [as b], …`, optionally in parentheses, or `*`.
    fn import_from(&mut self) -> Result<Stmt, SyntaxError> {
        let module = self.dotted()?;
        self.expect_name("import", "invalid syntax")?;
        let paren = self.eat_op("(");
        let mut names = Vec::new();
        loop {
            if self.eat_op("*") {
                names.push(("*".to_owned(), None));
            } else {
                names.push((self.name()?, self.alias()?));
            }
            if !self.eat_op(",") {
                break;
            }
        }
        if paren {
            self.expect_op(")")?;
        }
        Ok(Stmt::FromImport(module, names))
    }

    /// An optional `as name`.
    fn alias(&mut self) -> Result<Option<String>, SyntaxError> {
        if self.eat_name("as") { self.name().map(Some) } else { Ok(None) }
    }

    fn statement(&mut self) -> Result<Stmt, SyntaxError> {
        if self.eat_name("import") {
            let mut names = vec![(self.dotted()?, self.alias()?)];
            while self.eat_op(",") {
                names.push((self.dotted()?, self.alias()?));
            }
            return Ok(Stmt::Import(names));
        }
        if self.eat_name("from") {
            return self.import_from();
        }
        if self.eat_name("pass") {
            return Ok(Stmt::Pass);
        }
        if self.eat_name("raise") {
            if matches!(self.peek(), Tok::Newline) || self.is_op(";") {
                return Ok(Stmt::Raise(None));
            }
            return Ok(Stmt::Raise(Some(self.expr()?)));
        }
        if self.eat_name("assert") {
            let cond = self.expr()?;
            let msg = if self.eat_op(",") { Some(self.expr()?) } else { None };
            return Ok(Stmt::Assert(cond, msg));
        }
        let target = self.expr_list()?;
        if self.eat_op("=") {
            if !matches!(target, Expr::Name(_) | Expr::Index(..) | Expr::Attr(..)) {
                return syntax(
                    self.line(),
                    "cannot assign to expression here. Maybe you meant '==' instead of '='?",
                );
            }
            let value = self.expr_list()?;
            if self.is_op("=") {
                self.unsupported.get_or_insert(("chained assignment".to_owned(), self.line()));
                while !matches!(self.peek(), Tok::Newline) {
                    self.next();
                }
            }
            return Ok(Stmt::Assign(target, value));
        }
        for op in ["+=", "-=", "*=", "/=", "//=", "%=", "**="] {
            if self.eat_op(op) {
                let value = self.expr()?;
                return Ok(Stmt::AugAssign(target, op.trim_end_matches('=').to_owned(), value));
            }
        }
        Ok(Stmt::Expr(target))
    }
}
