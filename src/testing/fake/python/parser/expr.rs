//! Expressions, by precedence from the conditional expression down to atoms, and the
//! replacement fields of f-strings.

use super::super::ast::{Expr, FPart};
use super::super::lexer::{SyntaxError, Tok, syntax, tokenize, unmodelled};
use super::super::value::Value;
use super::{COMPOUND, MAX_DEPTH, Parser};

impl Parser {
    pub(super) fn expr_list(&mut self) -> Result<Expr, SyntaxError> {
        let first = self.expr()?;
        if !self.is_op(",") {
            return Ok(first);
        }
        let mut items = vec![first];
        while self.eat_op(",") {
            if matches!(self.peek(), Tok::Newline) || self.is_op("=") || self.is_op(";") {
                break;
            }
            items.push(self.expr()?);
        }
        Ok(Expr::Tuple(items))
    }

    /// Runs `parse` one nesting level deeper, refusing to go beyond [`MAX_DEPTH`].
    fn nested<T>(
        &mut self,
        parse: impl FnOnce(&mut Self) -> Result<T, SyntaxError>,
    ) -> Result<T, SyntaxError> {
        if self.depth >= MAX_DEPTH {
            return unmodelled(self.line(), format!("expressions nested deeper than {MAX_DEPTH} levels"));
        }
        self.depth += 1;
        let result = parse(self);
        self.depth -= 1;
        result
    }

    pub(super) fn expr(&mut self) -> Result<Expr, SyntaxError> {
        self.nested(Self::expr_unchecked)
    }

    fn expr_unchecked(&mut self) -> Result<Expr, SyntaxError> {
        let body = self.or_expr()?;
        if self.eat_name("if") {
            let cond = self.or_expr()?;
            self.expect_name("else", "expected 'else' after 'if' expression")?;
            let other = self.expr()?;
            return Ok(Expr::IfElse(Box::new(cond), Box::new(body), Box::new(other)));
        }
        Ok(body)
    }

    fn or_expr(&mut self) -> Result<Expr, SyntaxError> {
        self.bool_chain("or", Self::and_expr)
    }

    fn and_expr(&mut self) -> Result<Expr, SyntaxError> {
        self.bool_chain("and", Self::not_expr)
    }

    /// `operand (keyword operand)*`, grouped to the left.
    fn bool_chain(
        &mut self,
        keyword: &str,
        operand: fn(&mut Self) -> Result<Expr, SyntaxError>,
    ) -> Result<Expr, SyntaxError> {
        let mut left = operand(self)?;
        while self.eat_name(keyword) {
            left = Expr::BoolOp(keyword == "and", Box::new(left), Box::new(operand(self)?));
        }
        Ok(left)
    }

    fn not_expr(&mut self) -> Result<Expr, SyntaxError> {
        if self.eat_name("not") {
            return Ok(Expr::Unary("not".into(), Box::new(self.nested(Self::not_expr)?)));
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, SyntaxError> {
        let left = self.arith()?;
        let mut ops = Vec::new();
        loop {
            let op = match self.peek() {
                Tok::Op(o) if matches!(o.as_str(), "==" | "!=" | "<" | ">" | "<=" | ">=") => o.clone(),
                Tok::Name(n) if n == "in" => "in".into(),
                Tok::Name(n) if n == "is" => {
                    self.next();
                    let op = if self.eat_name("not") { "is not" } else { "is" };
                    ops.push((op.to_owned(), self.arith()?));
                    continue;
                }
                Tok::Name(n) if n == "not" => {
                    self.next();
                    self.expect_name("in", "invalid syntax")?;
                    ops.push(("not in".to_owned(), self.arith()?));
                    continue;
                }
                _ => break,
            };
            self.next();
            ops.push((op, self.arith()?));
        }
        Ok(if ops.is_empty() { left } else { Expr::Compare(Box::new(left), ops) })
    }

    fn arith(&mut self) -> Result<Expr, SyntaxError> {
        self.binary_chain(&["+", "-"], Self::term)
    }

    fn term(&mut self) -> Result<Expr, SyntaxError> {
        self.binary_chain(&["*", "/", "//", "%"], Self::unary)
    }

    /// `operand (op operand)*` for the operators `ops` of one precedence, grouped to the left.
    fn binary_chain(
        &mut self,
        ops: &[&str],
        operand: fn(&mut Self) -> Result<Expr, SyntaxError>,
    ) -> Result<Expr, SyntaxError> {
        let mut left = operand(self)?;
        while let Tok::Op(o) = self.peek()
            && ops.contains(&o.as_str())
        {
            let op = o.clone();
            self.next();
            left = Expr::Binary(op, Box::new(left), Box::new(operand(self)?));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, SyntaxError> {
        if self.is_op("-") || self.is_op("+") || self.is_op("~") {
            let Tok::Op(op) = self.next() else { unreachable!() };
            return Ok(Expr::Unary(op, Box::new(self.nested(Self::unary)?)));
        }
        self.power()
    }

    fn power(&mut self) -> Result<Expr, SyntaxError> {
        let base = self.postfix()?;
        if self.eat_op("**") {
            return Ok(Expr::Binary("**".into(), Box::new(base), Box::new(self.unary()?)));
        }
        Ok(base)
    }

    fn postfix(&mut self) -> Result<Expr, SyntaxError> {
        let mut e = self.atom()?;
        loop {
            if self.eat_op(".") {
                e = Expr::Attr(Box::new(e), self.name()?);
            } else if self.eat_op("(") {
                let mut args = Vec::new();
                let mut kwargs = Vec::new();
                while !self.is_op(")") {
                    if let (Tok::Name(n), Some((Tok::Op(eq), _))) =
                        (self.peek().clone(), self.toks.get(self.pos + 1))
                        && eq == "="
                    {
                        self.next();
                        self.next();
                        kwargs.push((n, self.expr()?));
                        if !self.eat_op(",") {
                            break;
                        }
                        continue;
                    }
                    if !kwargs.is_empty() {
                        return syntax(self.line(), "positional argument follows keyword argument");
                    }
                    args.push(self.expr()?);
                    if !self.eat_op(",") {
                        break;
                    }
                }
                self.expect_op(")")?;
                e = Expr::Call(Box::new(e), args, kwargs);
            } else if self.eat_op("[") {
                let index = self.expr_list()?;
                self.expect_op("]")?;
                e = Expr::Index(Box::new(e), Box::new(index));
            } else {
                return Ok(e);
            }
        }
    }

    fn atom(&mut self) -> Result<Expr, SyntaxError> {
        let line = self.line();
        match self.next() {
            Tok::Int(n) => Ok(Expr::Const(Value::Int(n))),
            Tok::Float(f) => Ok(Expr::Const(Value::Float(f))),
            Tok::Str(mut s) => {
                while let Tok::Str(more) = self.peek() {
                    s.push_str(more);
                    self.next();
                }
                Ok(Expr::Const(Value::Str(s)))
            }
            Tok::Bytes(b) => Ok(Expr::Const(Value::Bytes(b))),
            Tok::FStr(s) => Ok(Expr::FStr(parse_fstring(&s, line)?)),
            Tok::Name(n) => match n.as_str() {
                "True" => Ok(Expr::Const(Value::Bool(true))),
                "False" => Ok(Expr::Const(Value::Bool(false))),
                "None" => Ok(Expr::Const(Value::None)),
                kw if COMPOUND.contains(&kw)
                    || matches!(
                        kw,
                        "import"
                            | "from"
                            | "pass"
                            | "raise"
                            | "in"
                            | "is"
                            | "and"
                            | "or"
                            | "not"
                            | "as"
                            | "assert"
                    ) =>
                {
                    syntax(line, "invalid syntax")
                }
                _ => Ok(Expr::Name(n)),
            },
            Tok::Op(o) if o == "(" => {
                if self.eat_op(")") {
                    return Ok(Expr::Tuple(Vec::new()));
                }
                let first = self.expr()?;
                if self.eat_op(")") {
                    return Ok(first);
                }
                let mut items = vec![first];
                while self.eat_op(",") {
                    if self.is_op(")") {
                        break;
                    }
                    items.push(self.expr()?);
                }
                self.expect_op(")")?;
                Ok(Expr::Tuple(items))
            }
            Tok::Op(o) if o == "[" => {
                let mut items = Vec::new();
                while !self.is_op("]") {
                    items.push(self.expr()?);
                    if !self.eat_op(",") {
                        break;
                    }
                }
                self.expect_op("]")?;
                Ok(Expr::List(items))
            }
            Tok::Op(o) if o == "{" => {
                let mut items = Vec::new();
                while !self.is_op("}") {
                    let k = self.expr()?;
                    self.expect_op(":")?;
                    items.push((k, self.expr()?));
                    if !self.eat_op(",") {
                        break;
                    }
                }
                self.expect_op("}")?;
                Ok(Expr::Dict(items))
            }
            _ => syntax(line, "invalid syntax"),
        }
    }
}

/// The literal text and replacement fields of an f-string body; errors are reported at the
/// f-string's `line`.
fn parse_fstring(s: &str, line: usize) -> Result<Vec<FPart>, SyntaxError> {
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                lit.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                lit.push('}');
            }
            '{' => {
                let mut inner = String::new();
                let mut depth = 0;
                loop {
                    match chars.next() {
                        Some('}') if depth == 0 => break,
                        Some(c) => {
                            if "([{".contains(c) {
                                depth += 1;
                            } else if ")]}".contains(c) {
                                depth -= 1;
                            }
                            inner.push(c);
                        }
                        None => return syntax(line, "f-string: expecting '}'"),
                    }
                }
                let (inner, want_repr) = match inner.strip_suffix("!r") {
                    Some(i) => (i.to_owned(), true),
                    None => (inner, false),
                };
                if !lit.is_empty() {
                    parts.push(FPart::Lit(std::mem::take(&mut lit)));
                }
                let toks = tokenize(&inner).map_err(|e| SyntaxError { line, ..e })?;
                let mut p = Parser { toks, pos: 0, unsupported: None, depth: 0 };
                let e = p.expr().map_err(|e| SyntaxError {
                    line,
                    message: format!("f-string: {}", e.message),
                    ..e
                })?;
                if !matches!(p.peek(), Tok::Newline) {
                    return syntax(line, "f-string: expecting '}'");
                }
                parts.push(FPart::Expr(e, want_repr));
            }
            '}' => return syntax(line, "f-string: single '}' is not allowed"),
            c => lit.push(c),
        }
    }
    if !lit.is_empty() {
        parts.push(FPart::Lit(lit));
    }
    Ok(parts)
}
