//! The fake's Python subset.
//!
//! Modelled: simple statements (`import`, `from … import`, assignment and `+=`-style
//! assignment to names and subscripts, `pass`, `raise`, `assert`, expression statements),
//! expressions (literals including f-strings and bytes, lists, tuples, dicts, arithmetic,
//! comparisons, `and`/`or`/`not`, conditional expressions, calls, attributes, subscripts),
//! a handful of builtins, and the modules `sys os time math json socket urllib.request
//! random`. Syntax errors and runtime errors surface as Python reports them.
//!
//! Not modelled: compound statements (`def`, `class`, `for`, `while`, `if`, `with`, `try`)
//! and third-party modules. A cell using them fails with a `NotImplementedError` saying so
//! (or `ModuleNotFoundError`), never with an invented answer; script such cells with
//! `FakeBackend::on_run_code`.

// Lints relaxed for the simulator: Python semantics compare floats exactly and its dispatch tables are long by nature.
#![allow(
    clippy::float_cmp,
    clippy::too_many_lines,
    clippy::similar_names,
    clippy::single_match_else,
    clippy::format_collect,
    clippy::collapsible_if
)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use base64::Engine as _;
use std::time::Duration;

use crate::exec::{CodeError, StreamKind};

use super::machine::Stop;

/// The Python version the fake reports.
pub(crate) const VERSION: &str = "3.11.7";

/// What the interpreter needs from its process.
pub(crate) trait Host {
    fn write(&mut self, stream: StreamKind, data: &[u8]);
    fn sleep(&mut self, d: Duration) -> Result<(), Stop>;
    fn read_stdin(&mut self) -> Result<Vec<u8>, Stop>;
    fn env(&self) -> &BTreeMap<String, String>;
    fn permits(&self, host: &str, port: u16) -> bool;
    fn read_file(&mut self, path: &str) -> Result<Vec<u8>, crate::Error>;
    fn write_file(&mut self, path: &str, data: &[u8], append: bool) -> Result<(), crate::Error>;
    /// Holds `bytes` bytes of memory ([`Proc::allocate`](super::machine::Proc::allocate)).
    fn allocate(&mut self, bytes: u64) -> Result<(), Stop>;
}

/// Module-level variables (kept across cells in a code context).
#[derive(Debug, Clone, Default)]
pub(crate) struct Globals {
    vars: BTreeMap<String, Value>,
}

/// The result of a cell.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The display of the last expression statement, when it is not `None`: `text/plain`
    /// plus whatever its `_repr_*_` hooks produce.
    pub(crate) display: Option<crate::MimeBundle>,
    pub(crate) error: Option<CodeError>,
    /// `sys.exit(n)` was called with this code.
    pub(crate) exit_code: Option<i32>,
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    Module(String),
    /// A callable: a builtin function or module function, by qualified name.
    Func(String),
    /// A bound method: receiver and method name.
    Method(Box<Value>, String),
    /// An exception class.
    ExcType(String),
    /// An exception instance.
    Exc(String, String),
    /// `os.environ`.
    Environ,
    /// A file opened with `open()`: path, mode.
    File(String, String),
    /// A class defined in the cell.
    Class(Arc<ClassDef>),
    /// An instance of such a class.
    Instance(Arc<ClassDef>),
}

/// A class whose methods each return one expression: the shape of display-hook probes.
#[derive(Debug)]
struct ClassDef {
    name: String,
    methods: Vec<(String, Expr)>,
}

impl PartialEq for ClassDef {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

#[derive(Debug)]
enum Flow {
    Raise(String, String),
    Stop(Stop),
    Exit(i32),
}

impl From<Stop> for Flow {
    fn from(s: Stop) -> Self {
        Flow::Stop(s)
    }
}

fn raise<T>(name: &str, value: impl Into<String>) -> Result<T, Flow> {
    Err(Flow::Raise(name.to_owned(), value.into()))
}

// ---------------------------------------------------------------- tokens

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    FStr(String),
    Op(String),
    Newline,
    /// Leading whitespace on a logical line: legal only inside a compound statement.
    Indent,
}

#[derive(Debug)]
struct SyntaxError {
    line: usize,
    message: String,
    /// Valid Python the fake does not model: reported as `NotImplementedError`.
    unmodelled: bool,
}

fn syntax<T>(line: usize, message: impl Into<String>) -> Result<T, SyntaxError> {
    Err(SyntaxError { line, message: message.into(), unmodelled: false })
}

fn unmodelled<T>(line: usize, message: impl Into<String>) -> Result<T, SyntaxError> {
    Err(SyntaxError { line, message: message.into(), unmodelled: true })
}

/// How deeply expressions may nest in the fake (`CPython` allows 200 parentheses; the fake
/// stops earlier rather than overflow its stack).
const MAX_DEPTH: usize = 40;

fn decode_escapes(body: &str, line: usize) -> Result<String, SyntaxError> {
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('\'') => out.push('\''),
            Some('"') => out.push('"'),
            Some('\n') => {}
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                let code = u32::from_str_radix(&hex, 16).map_err(|_| SyntaxError {
                    line,
                    unmodelled: false,
                    message: "(unicode error) truncated \\xXX escape".into(),
                })?;
                out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
            }
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    Ok(out)
}

#[allow(clippy::too_many_lines)]
fn tokenize(src: &str) -> Result<Vec<(Tok, usize)>, SyntaxError> {
    let chars: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let mut depth: Vec<(char, usize)> = Vec::new();
    let mut line_start = true;
    while i < chars.len() {
        let c = chars[i];
        if line_start && depth.is_empty() {
            let mut j = i;
            while j < chars.len() && (chars[j] == ' ' || chars[j] == '\t') {
                j += 1;
            }
            if j < chars.len() && chars[j] != '\n' && chars[j] != '#' && j > i {
                toks.push((Tok::Indent, line));
            }
            line_start = false;
        }
        match c {
            '\n' => {
                if depth.is_empty() {
                    toks.push((Tok::Newline, line));
                    line_start = true;
                }
                line += 1;
                i += 1;
            }
            ' ' | '\t' | '\r' => i += 1,
            '\\' if chars.get(i + 1) == Some(&'\n') => {
                i += 2;
                line += 1;
            }
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '0'..='9' | '.' if c != '.' || chars.get(i + 1).is_some_and(char::is_ascii_digit) => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '.' || chars[i] == '_')
                {
                    i += 1;
                }
                let text: String = chars[start..i].iter().filter(|c| **c != '_').collect();
                let lower = text.to_ascii_lowercase();
                if let Ok(n) = text.parse::<i64>() {
                    toks.push((Tok::Int(n), line));
                } else if text.bytes().all(|b| b.is_ascii_digit()) {
                    return unmodelled(line, "integer literals beyond 64 bits");
                } else if ["0x", "0o", "0b"].iter().any(|p| lower.starts_with(p)) || lower.ends_with('j') {
                    return unmodelled(line, "hexadecimal, octal, binary and imaginary literals");
                } else if let Ok(f) = text.parse::<f64>() {
                    toks.push((Tok::Float(f), line));
                } else {
                    return syntax(line, "invalid decimal literal");
                }
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let prefix = word.to_ascii_lowercase();
                if matches!(chars.get(i), Some('\'' | '"'))
                    && matches!(prefix.as_str(), "b" | "r" | "f" | "rb" | "br" | "fr" | "rf" | "u")
                {
                    let (body, next, newlines) = read_string(&chars, i, line)?;
                    i = next;
                    let raw = prefix.contains('r');
                    let text = if raw { body } else { decode_escapes(&body, line)? };
                    toks.push((
                        if prefix.contains('b') {
                            Tok::Bytes(
                                text.chars().map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?')).collect(),
                            )
                        } else if prefix.contains('f') {
                            Tok::FStr(text)
                        } else {
                            Tok::Str(text)
                        },
                        line,
                    ));
                    line += newlines;
                } else {
                    toks.push((Tok::Name(word), line));
                }
            }
            '\'' | '"' => {
                let (body, next, newlines) = read_string(&chars, i, line)?;
                i = next;
                toks.push((Tok::Str(decode_escapes(&body, line)?), line));
                line += newlines;
            }
            '(' | '[' | '{' => {
                depth.push((c, line));
                toks.push((Tok::Op(c.to_string()), line));
                i += 1;
            }
            ')' | ']' | '}' => {
                let want = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                match depth.pop() {
                    Some((open, _)) if open == want => {}
                    Some((open, _)) => {
                        return syntax(
                            line,
                            format!("closing parenthesis '{c}' does not match opening parenthesis '{open}'"),
                        );
                    }
                    None => return syntax(line, format!("unmatched '{c}'")),
                }
                toks.push((Tok::Op(c.to_string()), line));
                i += 1;
            }
            _ => {
                const OPS: &[&str] = &[
                    "**=", "//=", "<<=", ">>=", "->", "**", "//", "<<", ">>", "==", "!=", "<=", ">=", "+=",
                    "-=", "*=", "/=", "%=", ":=", "+", "-", "*", "/", "%", "<", ">", "=", ",", ":", ".", ";",
                    "@", "|", "&", "^", "~",
                ];
                let rest: String = chars[i..chars.len().min(i + 3)].iter().collect();
                match OPS.iter().find(|op| rest.starts_with(*op)) {
                    Some(op) => {
                        toks.push((Tok::Op((*op).to_owned()), line));
                        i += op.chars().count();
                    }
                    None => return syntax(line, format!("invalid character '{c}' (U+{:04X})", c as u32)),
                }
            }
        }
    }
    if let Some((open, open_line)) = depth.pop() {
        return syntax(open_line, format!("'{open}' was never closed"));
    }
    toks.push((Tok::Newline, line));
    Ok(toks)
}

/// Reads a string literal starting at the quote `chars[i]`; returns the raw body, the index
/// after the closing quote, and how many newlines it spanned.
fn read_string(chars: &[char], i: usize, line: usize) -> Result<(String, usize, usize), SyntaxError> {
    let q = chars[i];
    let triple = chars.get(i + 1) == Some(&q) && chars.get(i + 2) == Some(&q);
    let mut j = if triple { i + 3 } else { i + 1 };
    let mut body = String::new();
    let mut newlines = 0;
    loop {
        let Some(&c) = chars.get(j) else {
            return syntax(
                line,
                if triple {
                    "unterminated triple-quoted string literal"
                } else {
                    "unterminated string literal"
                },
            );
        };
        if c == '\\' {
            body.push(c);
            if let Some(&n) = chars.get(j + 1) {
                body.push(n);
                if n == '\n' {
                    newlines += 1;
                }
            }
            j += 2;
            continue;
        }
        if c == '\n' {
            if !triple {
                return syntax(line, "unterminated string literal");
            }
            newlines += 1;
        }
        if c == q && (!triple || (chars.get(j + 1) == Some(&q) && chars.get(j + 2) == Some(&q))) {
            return Ok((body, if triple { j + 3 } else { j + 1 }, newlines));
        }
        body.push(c);
        j += 1;
    }
}

// ---------------------------------------------------------------- syntax tree

#[derive(Debug, Clone)]
enum Expr {
    Const(Value),
    FStr(Vec<FPart>),
    Name(String),
    List(Vec<Expr>),
    Tuple(Vec<Expr>),
    Dict(Vec<(Expr, Expr)>),
    Attr(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    Call(Box<Expr>, Vec<Expr>, Vec<(String, Expr)>),
    Unary(String, Box<Expr>),
    Binary(String, Box<Expr>, Box<Expr>),
    Compare(Box<Expr>, Vec<(String, Expr)>),
    BoolOp(bool, Box<Expr>, Box<Expr>),
    IfElse(Box<Expr>, Box<Expr>, Box<Expr>),
}

#[derive(Debug, Clone)]
enum FPart {
    Lit(String),
    Expr(Expr, bool),
}

#[derive(Debug, Clone)]
enum Stmt {
    Expr(Expr),
    Assign(Expr, Expr),
    AugAssign(Expr, String, Expr),
    Import(Vec<(String, Option<String>)>),
    FromImport(String, Vec<(String, Option<String>)>),
    Raise(Option<Expr>),
    Assert(Expr, Option<Expr>),
    Pass,
    ClassDef(Arc<ClassDef>),
}

/// A parsed module: its statements with their lines, or the first unmodelled construct
/// and its line.
type Parsed = Result<Vec<(Stmt, usize)>, (String, usize)>;

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    /// The first construct met that the fake does not model, and its line.
    unsupported: Option<(String, usize)>,
    /// Current expression nesting, bounded by [`MAX_DEPTH`].
    depth: usize,
}

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

    fn statement(&mut self) -> Result<Stmt, SyntaxError> {
        if self.is_name("import") {
            self.next();
            let mut names = Vec::new();
            loop {
                let module = self.dotted()?;
                let alias = if self.is_name("as") {
                    self.next();
                    Some(self.name()?)
                } else {
                    None
                };
                names.push((module, alias));
                if !self.eat_op(",") {
                    break;
                }
            }
            return Ok(Stmt::Import(names));
        }
        if self.is_name("from") {
            self.next();
            let module = self.dotted()?;
            if !self.is_name("import") {
                return syntax(self.line(), "invalid syntax");
            }
            self.next();
            let paren = self.eat_op("(");
            let mut names = Vec::new();
            loop {
                if self.eat_op("*") {
                    names.push(("*".to_owned(), None));
                } else {
                    let n = self.name()?;
                    let alias = if self.is_name("as") {
                        self.next();
                        Some(self.name()?)
                    } else {
                        None
                    };
                    names.push((n, alias));
                }
                if !self.eat_op(",") {
                    break;
                }
            }
            if paren {
                self.expect_op(")")?;
            }
            return Ok(Stmt::FromImport(module, names));
        }
        if self.is_name("pass") {
            self.next();
            return Ok(Stmt::Pass);
        }
        if self.is_name("raise") {
            self.next();
            if matches!(self.peek(), Tok::Newline) || self.is_op(";") {
                return Ok(Stmt::Raise(None));
            }
            return Ok(Stmt::Raise(Some(self.expr()?)));
        }
        if self.is_name("assert") {
            self.next();
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

    fn expr_list(&mut self) -> Result<Expr, SyntaxError> {
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

    fn expr(&mut self) -> Result<Expr, SyntaxError> {
        self.nested(Self::expr_unchecked)
    }

    fn expr_unchecked(&mut self) -> Result<Expr, SyntaxError> {
        let body = self.or_expr()?;
        if self.is_name("if") {
            self.next();
            let cond = self.or_expr()?;
            if !self.is_name("else") {
                return syntax(self.line(), "expected 'else' after 'if' expression");
            }
            self.next();
            let other = self.expr()?;
            return Ok(Expr::IfElse(Box::new(cond), Box::new(body), Box::new(other)));
        }
        Ok(body)
    }

    fn or_expr(&mut self) -> Result<Expr, SyntaxError> {
        let mut left = self.and_expr()?;
        while self.is_name("or") {
            self.next();
            left = Expr::BoolOp(false, Box::new(left), Box::new(self.and_expr()?));
        }
        Ok(left)
    }

    fn and_expr(&mut self) -> Result<Expr, SyntaxError> {
        let mut left = self.not_expr()?;
        while self.is_name("and") {
            self.next();
            left = Expr::BoolOp(true, Box::new(left), Box::new(self.not_expr()?));
        }
        Ok(left)
    }

    fn not_expr(&mut self) -> Result<Expr, SyntaxError> {
        if self.is_name("not") {
            self.next();
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
                    if self.is_name("not") {
                        self.next();
                        ops.push(("is not".to_owned(), self.arith()?));
                    } else {
                        ops.push(("is".to_owned(), self.arith()?));
                    }
                    continue;
                }
                Tok::Name(n) if n == "not" => {
                    self.next();
                    if !self.is_name("in") {
                        return syntax(self.line(), "invalid syntax");
                    }
                    self.next();
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
        let mut left = self.term()?;
        while let Tok::Op(o) = self.peek() {
            if o != "+" && o != "-" {
                break;
            }
            let op = o.clone();
            self.next();
            left = Expr::Binary(op, Box::new(left), Box::new(self.term()?));
        }
        Ok(left)
    }

    fn term(&mut self) -> Result<Expr, SyntaxError> {
        let mut left = self.unary()?;
        while let Tok::Op(o) = self.peek() {
            if !matches!(o.as_str(), "*" | "/" | "//" | "%") {
                break;
            }
            let op = o.clone();
            self.next();
            left = Expr::Binary(op, Box::new(left), Box::new(self.unary()?));
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

// ---------------------------------------------------------------- values

fn repr(v: &Value) -> String {
    match v {
        Value::None => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Int(n) => n.to_string(),
        Value::Float(f) => float_repr(*f),
        Value::Str(s) => {
            let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
            let mut out = String::from(quote);
            for c in s.chars() {
                match c {
                    '\n' => out.push_str("\\n"),
                    '\t' => out.push_str("\\t"),
                    '\\' => out.push_str("\\\\"),
                    c if c == quote => {
                        out.push('\\');
                        out.push(c);
                    }
                    c => out.push(c),
                }
            }
            out.push(quote);
            out
        }
        Value::Bytes(b) => {
            let mut out = String::from("b'");
            for &byte in b {
                match byte {
                    b'\n' => out.push_str("\\n"),
                    b'\'' => out.push_str("\\'"),
                    b'\\' => out.push_str("\\\\"),
                    0x20..=0x7e => out.push(byte as char),
                    _ => {
                        let _ = write!(out, "\\x{byte:02x}");
                    }
                }
            }
            out.push('\'');
            out
        }
        Value::List(items) => format!("[{}]", items.iter().map(repr).collect::<Vec<_>>().join(", ")),
        Value::Tuple(items) if items.len() == 1 => format!("({},)", repr(&items[0])),
        Value::Tuple(items) => format!("({})", items.iter().map(repr).collect::<Vec<_>>().join(", ")),
        Value::Dict(items) => {
            format!(
                "{{{}}}",
                items.iter().map(|(k, v)| format!("{}: {}", repr(k), repr(v))).collect::<Vec<_>>().join(", ")
            )
        }
        Value::Module(m) => format!("<module '{m}'>"),
        Value::Func(f) => format!("<built-in function {f}>"),
        Value::Method(_, m) => format!("<built-in method {m}>"),
        Value::ExcType(n) => format!("<class '{n}'>"),
        Value::Exc(n, m) => format!("{n}({})", repr(&Value::Str(m.clone()))),
        Value::Environ => "environ({...})".into(),
        Value::File(p, m) => format!("<_io.TextIOWrapper name='{p}' mode='{m}'>"),
        Value::Class(c) => format!("<class '__main__.{}'>", c.name),
        Value::Instance(c) => format!("<__main__.{} object>", c.name),
    }
}

fn float_repr(f: f64) -> String {
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if f.is_nan() {
        return "nan".into();
    }
    if f == f.trunc() && f.abs() < 1e16 { format!("{f:.1}") } else { format!("{f}") }
}

fn str_of(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        Value::Exc(_, m) => m.clone(),
        other => repr(other),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::None => "NoneType",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int",
        Value::Float(_) => "float",
        Value::Str(_) => "str",
        Value::Bytes(_) => "bytes",
        Value::List(_) => "list",
        Value::Tuple(_) => "tuple",
        Value::Dict(_) | Value::Environ => "dict",
        Value::Module(_) => "module",
        Value::Func(_) | Value::Method(..) => "builtin_function_or_method",
        Value::ExcType(_) | Value::Class(_) => "type",
        Value::Exc(..) => "Exception",
        Value::File(..) => "TextIOWrapper",
        Value::Instance(_) => "object",
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::None => false,
        Value::Bool(b) => *b,
        Value::Int(n) => *n != 0,
        Value::Float(f) => *f != 0.0,
        Value::Str(s) => !s.is_empty(),
        Value::Bytes(b) => !b.is_empty(),
        Value::List(i) | Value::Tuple(i) => !i.is_empty(),
        Value::Dict(d) => !d.is_empty(),
        _ => true,
    }
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        #[allow(clippy::cast_precision_loss)]
        Value::Int(n) => Some(*n as f64),
        Value::Float(f) => Some(*f),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::Bool(b) => Some(i64::from(*b)),
        _ => None,
    }
}

const KNOWN_MODULES: &[&str] = &[
    "sys",
    "os",
    "os.path",
    "time",
    "math",
    "json",
    "socket",
    "urllib",
    "urllib.request",
    "random",
    "io",
    "base64",
    "collections",
    "itertools",
    "functools",
    "re",
    "string",
    "datetime",
    "pathlib",
    "subprocess",
    "typing",
];

fn is_exception_name(n: &str) -> bool {
    n.ends_with("Error")
        || n.ends_with("Exception")
        || matches!(n, "KeyboardInterrupt" | "SystemExit" | "StopIteration")
}

// ---------------------------------------------------------------- evaluation

struct Interp<'h> {
    globals: &'h mut Globals,
    host: &'h mut dyn Host,
}

/// `IPython`'s display hooks and the MIME type each produces.
const DISPLAY_HOOKS: &[(&str, &str)] = &[
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_json_", "application/json"),
];

impl Interp<'_> {
    /// The MIME bundle of a displayed value. A hook that raises is left out, as `IPython`
    /// leaves out a failing formatter.
    fn display(&mut self, v: &Value) -> Result<crate::MimeBundle, Stop> {
        let mut bundle = crate::MimeBundle::new();
        bundle.insert("text/plain".to_owned(), repr(v).into_bytes());
        if let Value::Instance(class) = v {
            for (hook, mime) in DISPLAY_HOOKS {
                if !class.methods.iter().any(|(m, _)| m == hook) {
                    continue;
                }
                match self.call_method(v, hook, &[], &BTreeMap::new()) {
                    Ok(Value::Str(s)) => {
                        bundle.insert((*mime).to_owned(), s.into_bytes());
                    }
                    Ok(Value::Bytes(b)) => {
                        bundle.insert((*mime).to_owned(), b);
                    }
                    Ok(_) | Err(Flow::Raise(..) | Flow::Exit(_)) => {}
                    Err(Flow::Stop(stop)) => return Err(stop),
                }
            }
        }
        Ok(bundle)
    }

    fn exec(&mut self, stmt: &Stmt) -> Result<Option<Value>, Flow> {
        match stmt {
            Stmt::Pass => {}
            Stmt::ClassDef(class) => {
                self.globals.vars.insert(class.name.clone(), Value::Class(Arc::clone(class)));
            }
            Stmt::Expr(e) => return self.eval(e).map(Some),
            Stmt::Assign(target, value) => {
                let v = self.eval(value)?;
                self.assign(target, v)?;
            }
            Stmt::AugAssign(target, op, value) => {
                let current = self.eval(target)?;
                let rhs = self.eval(value)?;
                let v = binary(op, &current, &rhs)?;
                self.assign(target, v)?;
            }
            Stmt::Import(names) => {
                for (module, alias) in names {
                    check_module(module)?;
                    let top = module.split('.').next().unwrap_or(module).to_owned();
                    match alias {
                        Some(a) => self.globals.vars.insert(a.clone(), Value::Module(module.clone())),
                        None => self.globals.vars.insert(top.clone(), Value::Module(top)),
                    };
                }
            }
            Stmt::FromImport(module, names) => {
                check_module(module)?;
                for (name, alias) in names {
                    if name == "*" {
                        continue;
                    }
                    let v = attribute(&Value::Module(module.clone()), name)?;
                    self.globals.vars.insert(alias.clone().unwrap_or_else(|| name.clone()), v);
                }
            }
            Stmt::Raise(None) => return raise("RuntimeError", "No active exception to reraise"),
            Stmt::Raise(Some(e)) => {
                return match self.eval(e)? {
                    Value::Exc(n, m) => Err(Flow::Raise(n, m)),
                    Value::ExcType(n) => Err(Flow::Raise(n, String::new())),
                    _ => raise("TypeError", "exceptions must derive from BaseException"),
                };
            }
            Stmt::Assert(cond, msg) => {
                if !truthy(&self.eval(cond)?) {
                    let m = match msg {
                        Some(m) => str_of(&self.eval(m)?),
                        None => String::new(),
                    };
                    return raise("AssertionError", m);
                }
            }
        }
        Ok(None)
    }

    fn assign(&mut self, target: &Expr, v: Value) -> Result<(), Flow> {
        match target {
            Expr::Name(n) => {
                self.globals.vars.insert(n.clone(), v);
                Ok(())
            }
            Expr::Index(obj, key) => {
                let key = self.eval(key)?;
                let Expr::Name(name) = &**obj else {
                    return raise("NotImplementedError", "the fake Python assigns subscripts of names only");
                };
                let Some(container) = self.globals.vars.get_mut(name) else {
                    return raise("NameError", format!("name '{name}' is not defined"));
                };
                match container {
                    Value::Dict(items) => {
                        match items.iter_mut().find(|(k, _)| *k == key) {
                            Some(slot) => slot.1 = v,
                            None => items.push((key, v)),
                        }
                        Ok(())
                    }
                    Value::List(items) => {
                        let len = items.len();
                        let i = index_of(&key, len)?;
                        items[i] = v;
                        Ok(())
                    }
                    other => raise(
                        "TypeError",
                        format!("'{}' object does not support item assignment", type_name(other)),
                    ),
                }
            }
            _ => raise("NotImplementedError", "the fake Python does not model this assignment target"),
        }
    }

    #[allow(clippy::too_many_lines)]
    fn eval(&mut self, e: &Expr) -> Result<Value, Flow> {
        Ok(match e {
            Expr::Const(v) => v.clone(),
            Expr::FStr(parts) => {
                let mut s = String::new();
                for p in parts {
                    match p {
                        FPart::Lit(l) => s.push_str(l),
                        FPart::Expr(e, as_repr) => {
                            let v = self.eval(e)?;
                            s.push_str(&if *as_repr { repr(&v) } else { str_of(&v) });
                        }
                    }
                }
                Value::Str(s)
            }
            Expr::Name(n) => match self.globals.vars.get(n) {
                Some(v) => v.clone(),
                None => builtin_name(n)?,
            },
            Expr::List(items) => Value::List(items.iter().map(|i| self.eval(i)).collect::<Result<_, _>>()?),
            Expr::Tuple(items) => Value::Tuple(items.iter().map(|i| self.eval(i)).collect::<Result<_, _>>()?),
            Expr::Dict(items) => {
                let mut out: Vec<(Value, Value)> = Vec::new();
                for (k, v) in items {
                    let (k, v) = (self.eval(k)?, self.eval(v)?);
                    match out.iter_mut().find(|(ek, _)| *ek == k) {
                        Some(slot) => slot.1 = v,
                        None => out.push((k, v)),
                    }
                }
                Value::Dict(out)
            }
            Expr::Attr(obj, name) => {
                let obj = self.eval(obj)?;
                attribute(&obj, name)?
            }
            Expr::Index(obj, key) => {
                let obj = self.eval(obj)?;
                let key = self.eval(key)?;
                self.index(&obj, &key)?
            }
            Expr::Call(f, args, kwargs) => {
                let f = self.eval(f)?;
                let args = args.iter().map(|a| self.eval(a)).collect::<Result<Vec<_>, _>>()?;
                let mut kw = BTreeMap::new();
                for (k, v) in kwargs {
                    kw.insert(k.clone(), self.eval(v)?);
                }
                self.call(&f, &args, &kw)?
            }
            Expr::Unary(op, operand) => {
                let v = self.eval(operand)?;
                match (op.as_str(), &v) {
                    ("not", v) => Value::Bool(!truthy(v)),
                    ("-", Value::Int(n)) => Value::Int(n.checked_neg().ok_or_else(overflow)?),
                    ("-", Value::Float(f)) => Value::Float(-f),
                    ("+", Value::Int(_) | Value::Float(_)) => v.clone(),
                    ("~", Value::Int(n)) => Value::Int(!n),
                    _ => {
                        return raise(
                            "TypeError",
                            format!("bad operand type for unary {op}: '{}'", type_name(&v)),
                        );
                    }
                }
            }
            Expr::Binary(op, l, r) => {
                let (l, r) = (self.eval(l)?, self.eval(r)?);
                binary(op, &l, &r)?
            }
            Expr::Compare(first, rest) => {
                let mut left = self.eval(first)?;
                for (op, right) in rest {
                    let right = self.eval(right)?;
                    if !compare(op, &left, &right)? {
                        return Ok(Value::Bool(false));
                    }
                    left = right;
                }
                Value::Bool(true)
            }
            Expr::BoolOp(is_and, l, r) => {
                let l = self.eval(l)?;
                if truthy(&l) == *is_and { self.eval(r)? } else { l }
            }
            Expr::IfElse(cond, a, b) => {
                if truthy(&self.eval(cond)?) {
                    self.eval(a)?
                } else {
                    self.eval(b)?
                }
            }
        })
    }

    fn index(&mut self, obj: &Value, key: &Value) -> Result<Value, Flow> {
        match obj {
            Value::List(items) | Value::Tuple(items) => Ok(items[index_of(key, items.len())?].clone()),
            Value::Str(s) => {
                let chars: Vec<char> = s.chars().collect();
                Ok(Value::Str(chars[index_of(key, chars.len())?].to_string()))
            }
            Value::Bytes(b) => Ok(Value::Int(i64::from(b[index_of(key, b.len())?]))),
            Value::Dict(items) => match items.iter().find(|(k, _)| k == key) {
                Some((_, v)) => Ok(v.clone()),
                None => raise("KeyError", repr(key)),
            },
            Value::Environ => {
                let name = str_of(key);
                match self.host.env().get(&name) {
                    Some(v) => Ok(Value::Str(v.clone())),
                    None => raise("KeyError", repr(key)),
                }
            }
            other => raise("TypeError", format!("'{}' object is not subscriptable", type_name(other))),
        }
    }

    #[allow(clippy::too_many_lines)]
    fn call(&mut self, f: &Value, args: &[Value], kw: &BTreeMap<String, Value>) -> Result<Value, Flow> {
        let arg = |i: usize| args.get(i).cloned();
        match f {
            Value::ExcType(name) => {
                Ok(Value::Exc(name.clone(), args.first().map(str_of).unwrap_or_default()))
            }
            Value::Class(class) => Ok(Value::Instance(Arc::clone(class))),
            Value::Method(recv, method) => self.call_method(recv, method, args, kw),
            Value::Func(name) => match name.as_str() {
                "print" => {
                    let sep = kw.get("sep").map_or(" ".to_owned(), str_of);
                    let end = kw.get("end").map_or("\n".to_owned(), str_of);
                    let text = args.iter().map(str_of).collect::<Vec<_>>().join(&sep) + &end;
                    let stream = match kw.get("file") {
                        Some(Value::Module(m)) if m == "sys.stderr" => StreamKind::Stderr,
                        _ => StreamKind::Stdout,
                    };
                    self.host.write(stream, text.as_bytes());
                    Ok(Value::None)
                }
                "bytearray" => match arg(0) {
                    None => Ok(Value::Bytes(Vec::new())),
                    Some(Value::Bytes(b)) => Ok(Value::Bytes(b)),
                    Some(Value::Int(n)) if n < 0 => raise("ValueError", "negative count"),
                    Some(Value::Int(n)) => {
                        // CPython zero-fills the buffer, touching every page: the whole size
                        // counts against the memory limit at once.
                        let n = u64::try_from(n).unwrap_or(u64::MAX);
                        self.host.allocate(n)?;
                        if n > super::machine::MAX_REAL_ALLOCATION {
                            return raise(
                                "NotImplementedError",
                                format!(
                                    "the fake models bytearray(n) up to {} bytes under the memory limit",
                                    super::machine::MAX_REAL_ALLOCATION
                                ),
                            );
                        }
                        Ok(Value::Bytes(vec![0; usize::try_from(n).unwrap_or(usize::MAX)]))
                    }
                    Some(other) => raise(
                        "TypeError",
                        format!("cannot convert '{}' object to bytearray", type_name(&other)),
                    ),
                },
                "len" => match arg(0) {
                    Some(Value::Str(s)) => Ok(Value::Int(count(s.chars().count()))),
                    Some(Value::Bytes(b)) => Ok(Value::Int(count(b.len()))),
                    Some(Value::List(i) | Value::Tuple(i)) => Ok(Value::Int(count(i.len()))),
                    Some(Value::Dict(d)) => Ok(Value::Int(count(d.len()))),
                    Some(other) => {
                        raise("TypeError", format!("object of type '{}' has no len()", type_name(&other)))
                    }
                    None => raise("TypeError", "len() takes exactly one argument (0 given)"),
                },
                "str" => Ok(Value::Str(arg(0).map(|v| str_of(&v)).unwrap_or_default())),
                "repr" => Ok(Value::Str(arg(0).map(|v| repr(&v)).unwrap_or_default())),
                "int" => match arg(0) {
                    None => Ok(Value::Int(0)),
                    Some(Value::Str(s)) => s.trim().parse::<i64>().map(Value::Int).or_else(|_| {
                        raise(
                            "ValueError",
                            format!(
                                "invalid literal for int() with base 10: {}",
                                repr(&Value::Str(s.clone()))
                            ),
                        )
                    }),
                    Some(Value::Float(f)) if f.is_nan() => {
                        raise("ValueError", "cannot convert float NaN to integer")
                    }
                    Some(Value::Float(f)) if f.is_infinite() => {
                        raise("OverflowError", "cannot convert float infinity to integer")
                    }
                    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
                    Some(Value::Float(f)) if f.trunc().abs() < i64::MAX as f64 => {
                        Ok(Value::Int(f.trunc() as i64))
                    }
                    Some(Value::Float(_)) => Err(overflow()),
                    Some(v) => as_int(&v).map(Value::Int).map_or_else(
                        || raise("TypeError", "int() argument must be a string or a number"),
                        Ok,
                    ),
                },
                "float" => match arg(0) {
                    Some(Value::Str(s)) => s.trim().parse::<f64>().map(Value::Float).or_else(|_| {
                        raise(
                            "ValueError",
                            format!("could not convert string to float: {}", repr(&Value::Str(s.clone()))),
                        )
                    }),
                    Some(v) => as_f64(&v).map(Value::Float).map_or_else(
                        || raise("TypeError", "float() argument must be a string or a number"),
                        Ok,
                    ),
                    None => Ok(Value::Float(0.0)),
                },
                "bool" => Ok(Value::Bool(arg(0).is_some_and(|v| truthy(&v)))),
                "abs" => match arg(0) {
                    Some(Value::Int(n)) => n.checked_abs().map(Value::Int).ok_or_else(overflow),
                    Some(Value::Float(f)) => Ok(Value::Float(f.abs())),
                    _ => raise("TypeError", "bad operand type for abs()"),
                },
                "range" => {
                    let ints: Vec<i64> = args.iter().filter_map(as_int).collect();
                    let (start, stop) = match ints.as_slice() {
                        [stop] => (0, *stop),
                        [start, stop, ..] => (*start, *stop),
                        _ => return raise("TypeError", "range expected at least 1 argument"),
                    };
                    if stop.checked_sub(start).is_none_or(|n| n > 1_000_000) {
                        return raise(
                            "NotImplementedError",
                            "the fake Python models ranges of at most 1,000,000 items",
                        );
                    }
                    Ok(Value::List((start..stop).map(Value::Int).collect()))
                }
                "list" | "tuple" | "sorted" => {
                    let mut items = match arg(0) {
                        None => Vec::new(),
                        Some(Value::List(i) | Value::Tuple(i)) => i,
                        Some(Value::Str(s)) => s.chars().map(|c| Value::Str(c.to_string())).collect(),
                        Some(Value::Dict(d)) => d.into_iter().map(|(k, _)| k).collect(),
                        Some(other) => {
                            return raise(
                                "TypeError",
                                format!("'{}' object is not iterable", type_name(&other)),
                            );
                        }
                    };
                    if name == "sorted" {
                        let mut err = None;
                        items.sort_by(|a, b| match (as_f64(a), as_f64(b), a, b) {
                            (Some(x), Some(y), _, _) => {
                                x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal)
                            }
                            (_, _, Value::Str(x), Value::Str(y)) => x.cmp(y),
                            _ => {
                                err = Some(());
                                std::cmp::Ordering::Equal
                            }
                        });
                        if err.is_some() {
                            return raise("TypeError", "'<' not supported between these instances");
                        }
                    }
                    Ok(if name == "tuple" { Value::Tuple(items) } else { Value::List(items) })
                }
                "sum" | "min" | "max" => {
                    let items = match (arg(0), args.len()) {
                        (Some(Value::List(i) | Value::Tuple(i)), 1) => i,
                        _ => args.to_vec(),
                    };
                    if name == "sum" {
                        return items.iter().try_fold(Value::Int(0), |acc, v| binary("+", &acc, v));
                    }
                    let mut best: Option<Value> = None;
                    for v in items {
                        best = Some(match best {
                            None => v,
                            Some(b) => {
                                let better =
                                    if name == "min" { compare("<", &v, &b)? } else { compare(">", &v, &b)? };
                                if better { v } else { b }
                            }
                        });
                    }
                    best.map_or_else(|| raise("ValueError", format!("{name}() arg is an empty sequence")), Ok)
                }
                "input" => {
                    if let Some(prompt) = arg(0) {
                        self.host.write(StreamKind::Stdout, str_of(&prompt).as_bytes());
                    }
                    let data = self.host.read_stdin()?;
                    let text = String::from_utf8_lossy(&data);
                    match text.lines().next() {
                        Some(l) => Ok(Value::Str(l.to_owned())),
                        None => raise("EOFError", "EOF when reading a line"),
                    }
                }
                "open" => {
                    let path = arg(0).map(|v| str_of(&v)).unwrap_or_default();
                    let mode =
                        arg(1).or_else(|| kw.get("mode").cloned()).map_or("r".to_owned(), |m| str_of(&m));
                    if mode.starts_with('w') {
                        self.host.write_file(&path, b"", false).or_else(|e| io_error(&e, &path))?;
                    } else if !mode.starts_with('a') {
                        self.host.read_file(&path).or_else(|e| io_error(&e, &path).map(|()| Vec::new()))?;
                    }
                    Ok(Value::File(path, mode))
                }
                "sys.exit" => {
                    let code = match arg(0) {
                        None | Some(Value::None) => 0,
                        Some(Value::Int(n)) => i32::try_from(n).unwrap_or(1),
                        Some(other) => {
                            self.host.write(StreamKind::Stderr, format!("{}\n", str_of(&other)).as_bytes());
                            1
                        }
                    };
                    Err(Flow::Exit(code))
                }
                "time.sleep" => {
                    let secs = arg(0).as_ref().and_then(as_f64).unwrap_or(0.0);
                    if secs.is_nan() || secs < 0.0 {
                        return raise("ValueError", "sleep length must be non-negative");
                    }
                    // Too long for `Duration` is forever: the cell ends at its deadline.
                    self.host.sleep(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))?;
                    Ok(Value::None)
                }
                "time.time" => Ok(Value::Float(1_700_000_000.0)),
                "os.getenv" => {
                    let name = arg(0).map(|v| str_of(&v)).unwrap_or_default();
                    Ok(self
                        .host
                        .env()
                        .get(&name)
                        .map_or_else(|| arg(1).unwrap_or(Value::None), |v| Value::Str(v.clone())))
                }
                "os.getcwd" => Ok(Value::Str(super::vfs::WORKDIR.to_owned())),
                "math.sqrt" => {
                    let x = arg(0).as_ref().and_then(as_f64).unwrap_or(f64::NAN);
                    if x < 0.0 {
                        raise("ValueError", "math domain error")
                    } else {
                        Ok(Value::Float(x.sqrt()))
                    }
                }
                "json.dumps" => Ok(Value::Str(json_dumps(&arg(0).unwrap_or(Value::None))?)),
                "base64.b64decode" => {
                    let input = match arg(0) {
                        Some(Value::Str(s)) => s.into_bytes(),
                        Some(Value::Bytes(b)) => b,
                        _ => {
                            return raise(
                                "TypeError",
                                "argument should be a bytes-like object or ASCII string",
                            );
                        }
                    };
                    base64::engine::general_purpose::STANDARD
                        .decode(input)
                        .map(Value::Bytes)
                        .or_else(|e| raise("binascii.Error", e.to_string()))
                }
                "base64.b64encode" => match arg(0) {
                    Some(Value::Bytes(b)) => {
                        Ok(Value::Bytes(base64::engine::general_purpose::STANDARD.encode(b).into_bytes()))
                    }
                    _ => raise("TypeError", "a bytes-like object is required"),
                },
                "socket.create_connection" | "urllib.request.urlopen" => {
                    let (host, port) = match arg(0) {
                        Some(Value::Tuple(hp)) if hp.len() == 2 => {
                            (str_of(&hp[0]), as_int(&hp[1]).unwrap_or(0))
                        }
                        Some(Value::Str(url)) => match super::machine::url_host_port(&url) {
                            Some((h, p)) => (h, i64::from(p)),
                            None => {
                                return raise(
                                    "ValueError",
                                    format!("unknown url type: {}", repr(&Value::Str(url))),
                                );
                            }
                        },
                        _ => return raise("TypeError", "expected an address"),
                    };
                    let port = u16::try_from(port).unwrap_or(0);
                    self.host.sleep(Duration::from_millis(1))?;
                    if self.host.permits(&host, port) {
                        Ok(Value::None)
                    } else if name.starts_with("urllib") {
                        raise("urllib.error.URLError", "<urlopen error [Errno 101] Network is unreachable>")
                    } else {
                        raise("OSError", "[Errno 101] Network is unreachable")
                    }
                }
                other => raise("NotImplementedError", format!("the fake Python does not model {other}()")),
            },
            other => raise("TypeError", format!("'{}' object is not callable", type_name(other))),
        }
    }

    fn call_method(
        &mut self,
        recv: &Value,
        method: &str,
        args: &[Value],
        kw: &BTreeMap<String, Value>,
    ) -> Result<Value, Flow> {
        let _ = kw;
        let arg = |i: usize| args.get(i).cloned();
        match (recv, method) {
            (Value::Module(m), "write") if m == "sys.stdout" || m == "sys.stderr" => {
                let text = arg(0).map(|v| str_of(&v)).unwrap_or_default();
                let stream = if m == "sys.stdout" { StreamKind::Stdout } else { StreamKind::Stderr };
                self.host.write(stream, text.as_bytes());
                Ok(Value::Int(count(text.chars().count())))
            }
            (Value::Module(m), "write") if m == "sys.stdout.buffer" || m == "sys.stderr.buffer" => {
                let Some(Value::Bytes(data)) = arg(0) else {
                    return raise("TypeError", "a bytes-like object is required");
                };
                let stream =
                    if m.starts_with("sys.stdout") { StreamKind::Stdout } else { StreamKind::Stderr };
                self.host.write(stream, &data);
                Ok(Value::Int(count(data.len())))
            }
            (Value::Module(m), "flush") if m.starts_with("sys.std") => Ok(Value::None),
            (Value::Instance(class), m) => {
                let Some((_, body)) = class.methods.iter().find(|(name, _)| name == m) else {
                    return raise(
                        "AttributeError",
                        format!("'{}' object has no attribute '{m}'", class.name),
                    );
                };
                let saved = self.globals.vars.insert("self".to_owned(), recv.clone());
                let result = self.eval(body);
                match saved {
                    Some(v) => self.globals.vars.insert("self".to_owned(), v),
                    None => self.globals.vars.remove("self"),
                };
                result
            }
            (Value::Module(m), "read") if m == "sys.stdin" => {
                let data = self.host.read_stdin()?;
                Ok(Value::Str(String::from_utf8_lossy(&data).into_owned()))
            }
            (Value::Environ, "get") => {
                let name = arg(0).map(|v| str_of(&v)).unwrap_or_default();
                Ok(self
                    .host
                    .env()
                    .get(&name)
                    .map_or_else(|| arg(1).unwrap_or(Value::None), |v| Value::Str(v.clone())))
            }
            (Value::Dict(items), "get") => {
                let key = arg(0).unwrap_or(Value::None);
                Ok(items
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map_or_else(|| arg(1).unwrap_or(Value::None), |(_, v)| v.clone()))
            }
            (Value::Dict(items), "keys") => Ok(Value::List(items.iter().map(|(k, _)| k.clone()).collect())),
            (Value::Dict(items), "values") => Ok(Value::List(items.iter().map(|(_, v)| v.clone()).collect())),
            (Value::Str(s), "upper") => Ok(Value::Str(s.to_uppercase())),
            (Value::Str(s), "lower") => Ok(Value::Str(s.to_lowercase())),
            (Value::Str(s), "strip") => Ok(Value::Str(s.trim().to_owned())),
            (Value::Str(s), "split") => Ok(Value::List(match arg(0) {
                Some(Value::Str(sep)) => s.split(sep.as_str()).map(|p| Value::Str(p.to_owned())).collect(),
                _ => s.split_whitespace().map(|p| Value::Str(p.to_owned())).collect(),
            })),
            (Value::Str(s), "join") => match arg(0) {
                Some(Value::List(items) | Value::Tuple(items)) => {
                    Ok(Value::Str(items.iter().map(str_of).collect::<Vec<_>>().join(s)))
                }
                _ => raise("TypeError", "can only join an iterable"),
            },
            (Value::Str(s), "encode") => Ok(Value::Bytes(s.as_bytes().to_vec())),
            (Value::Str(s), "startswith") => {
                Ok(Value::Bool(arg(0).is_some_and(|p| s.starts_with(&str_of(&p)))))
            }
            (Value::Str(s), "format") => {
                let mut out = s.clone();
                for a in args {
                    out = out.replacen("{}", &str_of(a), 1);
                }
                Ok(Value::Str(out))
            }
            (Value::Bytes(b), "decode") => Ok(Value::Str(String::from_utf8_lossy(b).into_owned())),
            (Value::File(path, mode), "read") if mode.starts_with('r') => {
                let data = self.host.read_file(path).or_else(|e| io_error(&e, path).map(|()| Vec::new()))?;
                Ok(if mode.contains('b') {
                    Value::Bytes(data)
                } else {
                    Value::Str(String::from_utf8_lossy(&data).into_owned())
                })
            }
            (Value::File(path, mode), "write") if mode.starts_with('w') || mode.starts_with('a') => {
                let data = match arg(0) {
                    Some(Value::Bytes(b)) => b,
                    Some(v) => str_of(&v).into_bytes(),
                    None => Vec::new(),
                };
                self.host.write_file(path, &data, true).or_else(|e| io_error(&e, path))?;
                Ok(Value::Int(count(data.len())))
            }
            (Value::File(..), "close") => Ok(Value::None),
            (Value::List(_), "append") => {
                raise("NotImplementedError", "the fake Python does not model list mutation through methods")
            }
            (other, m) => {
                raise("AttributeError", format!("'{}' object has no attribute '{m}'", type_name(other)))
            }
        }
    }
}

fn io_error(e: &crate::Error, path: &str) -> Result<(), Flow> {
    match e {
        crate::Error::NotFound { .. } => {
            raise("FileNotFoundError", format!("[Errno 2] No such file or directory: '{path}'"))
        }
        crate::Error::IsADirectory { .. } => {
            raise("IsADirectoryError", format!("[Errno 21] Is a directory: '{path}'"))
        }
        _ => raise("OSError", format!("{path}: {e}")),
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Python integers are unbounded; the fake's are 64-bit, so going beyond is unmodelled
/// (never a wrong number).
fn overflow() -> Flow {
    Flow::Raise("NotImplementedError".into(), "the fake Python models 64-bit integers only".into())
}

fn index_of(key: &Value, len: usize) -> Result<usize, Flow> {
    let Some(i) = as_int(key) else {
        return raise("TypeError", format!("indices must be integers, not {}", type_name(key)));
    };
    let len_i = count(len);
    let j = if i < 0 { i + len_i } else { i };
    if j < 0 || j >= len_i {
        return raise("IndexError", "index out of range");
    }
    Ok(usize::try_from(j).unwrap_or(0))
}

fn check_module(module: &str) -> Result<(), Flow> {
    if KNOWN_MODULES.contains(&module) {
        Ok(())
    } else {
        let top = module.split('.').next().unwrap_or(module);
        raise("ModuleNotFoundError", format!("No module named '{top}'"))
    }
}

fn builtin_name(n: &str) -> Result<Value, Flow> {
    match n {
        "print" | "len" | "str" | "repr" | "int" | "float" | "bool" | "abs" | "range" | "list" | "tuple"
        | "sorted" | "sum" | "min" | "max" | "input" | "open" | "bytearray" => Ok(Value::Func(n.to_owned())),
        "exit" | "quit" => Ok(Value::Func("sys.exit".into())),
        n if is_exception_name(n) => Ok(Value::ExcType(n.to_owned())),
        _ => raise("NameError", format!("name '{n}' is not defined")),
    }
}

fn attribute(obj: &Value, name: &str) -> Result<Value, Flow> {
    if let Value::Module(m) = obj {
        let full = format!("{m}.{name}");
        let is_stdio = matches!(
            m.as_str(),
            "sys.stdout" | "sys.stderr" | "sys.stdin" | "sys.stdout.buffer" | "sys.stderr.buffer"
        );
        if is_stdio && matches!(name, "write" | "flush" | "read") {
            return Ok(Value::Method(Box::new(obj.clone()), name.to_owned()));
        }
        return match full.as_str() {
            "sys.stdout" | "sys.stderr" | "sys.stdin" | "sys.stdout.buffer" | "sys.stderr.buffer"
            | "os.path" | "urllib.request" => Ok(Value::Module(full)),
            "sys.version" => Ok(Value::Str(format!("{VERSION} (fake)"))),
            "sys.argv" => Ok(Value::List(vec![Value::Str("-c".into())])),
            "sys.platform" => Ok(Value::Str("linux".into())),
            "os.environ" => Ok(Value::Environ),
            "os.sep" => Ok(Value::Str("/".into())),
            "math.pi" => Ok(Value::Float(std::f64::consts::PI)),
            "math.e" => Ok(Value::Float(std::f64::consts::E)),
            "sys.exit"
            | "time.sleep"
            | "time.time"
            | "os.getenv"
            | "os.getcwd"
            | "math.sqrt"
            | "json.dumps"
            | "socket.create_connection"
            | "urllib.request.urlopen"
            | "base64.b64decode"
            | "base64.b64encode" => Ok(Value::Func(full)),
            _ if KNOWN_MODULES.contains(&m.as_str()) || m.starts_with("sys.") => {
                raise("NotImplementedError", format!("the fake Python does not model {full}"))
            }
            _ => raise("AttributeError", format!("module '{m}' has no attribute '{name}'")),
        };
    }
    match (obj, name) {
        (Value::Exc(_, m), "args") => Ok(Value::Tuple(vec![Value::Str(m.clone())])),
        (Value::Instance(class), _) if class.methods.iter().any(|(m, _)| m == name) => {
            Ok(Value::Method(Box::new(obj.clone()), name.to_owned()))
        }
        (
            Value::Str(_)
            | Value::Bytes(_)
            | Value::Dict(_)
            | Value::Environ
            | Value::File(..)
            | Value::List(_),
            _,
        ) => Ok(Value::Method(Box::new(obj.clone()), name.to_owned())),
        _ => raise("AttributeError", format!("'{}' object has no attribute '{name}'", type_name(obj))),
    }
}

#[allow(clippy::cast_precision_loss)]
fn binary(op: &str, l: &Value, r: &Value) -> Result<Value, Flow> {
    use Value::{Bytes, Float, Int, List, Str, Tuple};
    let unsupported = || {
        raise(
            "TypeError",
            format!("unsupported operand type(s) for {op}: '{}' and '{}'", type_name(l), type_name(r)),
        )
    };
    match (op, l, r) {
        ("+", Str(a), Str(b)) => Ok(Str(format!("{a}{b}"))),
        ("+", Bytes(a), Bytes(b)) => Ok(Bytes([a.as_slice(), b.as_slice()].concat())),
        ("+", List(a), List(b)) => Ok(List([a.clone(), b.clone()].concat())),
        ("+", Tuple(a), Tuple(b)) => Ok(Tuple([a.clone(), b.clone()].concat())),
        ("*", Str(s), n) | ("*", n, Str(s)) if as_int(n).is_some() => {
            let times = usize::try_from(as_int(n).unwrap_or(0)).unwrap_or(0);
            if s.len().saturating_mul(times) > 64 << 20 {
                return raise("MemoryError", "the fake Python caps strings at 64 MiB");
            }
            Ok(Str(s.repeat(times)))
        }
        ("%", Str(fmt), arg) => {
            let items = match arg {
                Tuple(items) => items.clone(),
                other => vec![other.clone()],
            };
            percent_format(fmt, &items)
        }
        (_, Int(_) | Value::Bool(_), Int(_) | Value::Bool(_)) => {
            let (a, b) = (as_int(l).unwrap_or(0), as_int(r).unwrap_or(0));
            match op {
                "+" => a.checked_add(b).map(Int).ok_or_else(overflow),
                "-" => a.checked_sub(b).map(Int).ok_or_else(overflow),
                "*" => a.checked_mul(b).map(Int).ok_or_else(overflow),
                "/" if b == 0 => raise("ZeroDivisionError", "division by zero"),
                "/" => Ok(Float(a as f64 / b as f64)),
                "//" | "%" if b == 0 => raise("ZeroDivisionError", "integer division or modulo by zero"),
                "//" => floor_div(a, b).map(Int).ok_or_else(overflow),
                "%" => floor_div(a, b)
                    .and_then(|q| q.checked_mul(b))
                    .and_then(|qb| a.checked_sub(qb))
                    .map(Int)
                    .ok_or_else(overflow),
                "**" if b < 0 => Ok(Float((a as f64).powf(b as f64))),
                "**" => u32::try_from(b).ok().and_then(|b| a.checked_pow(b)).map(Int).ok_or_else(overflow),
                _ => unsupported(),
            }
        }
        (_, a, b) if as_f64(a).is_some() && as_f64(b).is_some() => {
            let (a, b) = (as_f64(a).unwrap_or(0.0), as_f64(b).unwrap_or(0.0));
            match op {
                "+" => Ok(Float(a + b)),
                "-" => Ok(Float(a - b)),
                "*" => Ok(Float(a * b)),
                "/" | "//" | "%" if b == 0.0 => raise("ZeroDivisionError", "float division by zero"),
                "/" => Ok(Float(a / b)),
                "//" => Ok(Float((a / b).floor())),
                "%" => Ok(Float(a - b * (a / b).floor())),
                "**" => Ok(Float(a.powf(b))),
                _ => unsupported(),
            }
        }
        _ => unsupported(),
    }
}

/// `fmt % items` with the conversions `%s`, `%r`, `%d` and `%%`, left to right.
fn percent_format(fmt: &str, items: &[Value]) -> Result<Value, Flow> {
    let mut out = String::new();
    let mut items = items.iter();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let conv = chars.next();
        if conv == Some('%') {
            out.push('%');
            continue;
        }
        let Some(item) = items.next() else {
            return raise("TypeError", "not enough arguments for format string");
        };
        match conv {
            Some('s') => out.push_str(&str_of(item)),
            Some('r') => out.push_str(&repr(item)),
            Some('d' | 'i') => match item {
                Value::Int(_) | Value::Bool(_) => out.push_str(&as_int(item).unwrap_or(0).to_string()),
                #[allow(clippy::cast_possible_truncation)]
                Value::Float(f) if f.is_finite() && f.abs() < 9.0e18 => {
                    out.push_str(&(f.trunc() as i64).to_string());
                }
                other => {
                    return raise(
                        "TypeError",
                        format!("%d format: a real number is required, not {}", type_name(other)),
                    );
                }
            },
            other => {
                let shown = other.map(String::from).unwrap_or_default();
                return raise(
                    "NotImplementedError",
                    format!("the fake Python does not model the `%{shown}` conversion"),
                );
            }
        }
    }
    if items.next().is_some() {
        return raise("TypeError", "not all arguments converted during string formatting");
    }
    Ok(Value::Str(out))
}

/// Python's `//` on integers: the quotient rounded towards negative infinity.
fn floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    let inexact = a.checked_rem(b)? != 0;
    if inexact && ((a < 0) != (b < 0)) { q.checked_sub(1) } else { Some(q) }
}

fn compare(op: &str, l: &Value, r: &Value) -> Result<bool, Flow> {
    match op {
        "==" => Ok(values_equal(l, r)),
        "!=" => Ok(!values_equal(l, r)),
        "is" => Ok(l == r && matches!(l, Value::None | Value::Bool(_))),
        "is not" => Ok(!(l == r && matches!(l, Value::None | Value::Bool(_)))),
        "in" | "not in" => {
            let found = match r {
                Value::List(items) | Value::Tuple(items) => items.iter().any(|i| values_equal(i, l)),
                Value::Str(s) => s.contains(&str_of(l)),
                Value::Dict(items) => items.iter().any(|(k, _)| values_equal(k, l)),
                Value::Environ => false,
                other => {
                    return raise(
                        "TypeError",
                        format!("argument of type '{}' is not iterable", type_name(other)),
                    );
                }
            };
            Ok(found == (op == "in"))
        }
        _ => {
            let ord = match (l, r) {
                (Value::Str(a), Value::Str(b)) => a.partial_cmp(b),
                _ => match (as_f64(l), as_f64(r)) {
                    (Some(a), Some(b)) => a.partial_cmp(&b),
                    _ => None,
                },
            };
            let Some(ord) = ord else {
                return raise(
                    "TypeError",
                    format!(
                        "'{op}' not supported between instances of '{}' and '{}'",
                        type_name(l),
                        type_name(r)
                    ),
                );
            };
            Ok(match op {
                "<" => ord.is_lt(),
                ">" => ord.is_gt(),
                "<=" => ord.is_le(),
                _ => ord.is_ge(),
            })
        }
    }
}

fn values_equal(l: &Value, r: &Value) -> bool {
    match (as_f64(l), as_f64(r)) {
        (Some(a), Some(b)) => a == b,
        _ => l == r,
    }
}

fn json_dumps(v: &Value) -> Result<String, Flow> {
    Ok(match v {
        Value::None => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(n) => n.to_string(),
        Value::Float(f) => float_repr(*f),
        Value::Str(s) => format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")),
        Value::List(items) | Value::Tuple(items) => {
            format!("[{}]", items.iter().map(json_dumps).collect::<Result<Vec<_>, _>>()?.join(", "))
        }
        Value::Dict(items) => format!(
            "{{{}}}",
            items
                .iter()
                .map(|(k, v)| Ok(format!("{}: {}", json_dumps(&Value::Str(str_of(k)))?, json_dumps(v)?)))
                .collect::<Result<Vec<_>, Flow>>()?
                .join(", ")
        ),
        other => {
            return raise(
                "TypeError",
                format!("Object of type {} is not JSON serializable", type_name(other)),
            );
        }
    })
}

/// Runs `source` as a module (or a cell of a context, with its `globals`).
///
/// Returns `Err` only for a [`Stop`] (timeout, stdin needed): Python-level failures are in
/// [`Outcome::error`].
pub(crate) fn run(
    source: &str,
    filename: &str,
    globals: &mut Globals,
    host: &mut dyn Host,
) -> Result<Outcome, Stop> {
    let parsed =
        tokenize(source).and_then(|toks| Parser { toks, pos: 0, unsupported: None, depth: 0 }.module());
    let parsed = match parsed {
        Err(e) if e.unmodelled => Ok(Err((e.message, e.line))),
        other => other,
    };
    let stmts = match parsed {
        Err(e) => {
            return Ok(Outcome {
                display: None,
                error: Some(CodeError::new("SyntaxError", e.message.clone()).with_traceback(vec![
                    format!("  File \"{filename}\", line {}", e.line),
                    format!("SyntaxError: {}", e.message),
                ])),
                exit_code: None,
            });
        }
        Ok(Err((keyword, line))) => {
            let message = format!(
                "the fake Python does not model {keyword}; script this code with FakeBackend::on_run_code"
            );
            return Ok(Outcome {
                display: None,
                error: Some(CodeError::new("NotImplementedError", message.clone()).with_traceback(vec![
                    "Traceback (most recent call last):".into(),
                    format!("  File \"{filename}\", line {line}, in <module>"),
                    format!("NotImplementedError: {message}"),
                ])),
                exit_code: None,
            });
        }
        Ok(Ok(stmts)) => stmts,
    };
    let mut interp = Interp { globals, host };
    let mut display = None;
    let last = stmts.len().saturating_sub(1);
    for (i, (stmt, line)) in stmts.iter().enumerate() {
        match interp.exec(stmt) {
            Ok(value) => {
                if i == last {
                    display = match value.filter(|v| *v != Value::None) {
                        Some(v) => Some(interp.display(&v)?),
                        None => None,
                    };
                }
            }
            Err(Flow::Stop(stop)) => return Err(stop),
            Err(Flow::Exit(code)) => {
                return Ok(Outcome { display: None, error: None, exit_code: Some(code) });
            }
            Err(Flow::Raise(name, value)) => {
                let header = if value.is_empty() { name.clone() } else { format!("{name}: {value}") };
                return Ok(Outcome {
                    display: None,
                    error: Some(CodeError::new(name, value).with_traceback(vec![
                        "Traceback (most recent call last):".into(),
                        format!("  File \"{filename}\", line {line}, in <module>"),
                        header,
                    ])),
                    exit_code: None,
                });
            }
        }
    }
    Ok(Outcome { display, error: None, exit_code: None })
}

/// The traceback as the interpreter prints it to stderr.
pub(crate) fn format_traceback(error: &CodeError) -> String {
    let mut s = error.traceback.join("\n");
    s.push('\n');
    s
}
