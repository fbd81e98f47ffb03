//! Source text to tokens: one token stream per cell, each token with its 1-based line.
//!
//! Brackets are tracked here because Python joins lines inside them: a newline within
//! `(`, `[` or `{` is no statement boundary, and an unbalanced bracket is a syntax error
//! reported at the line `CPython` names.

#[cfg(test)]
mod tests;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
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

/// A cell the fake cannot parse, and the line to blame.
#[derive(Debug)]
pub(super) struct SyntaxError {
    pub(super) line: usize,
    pub(super) message: String,
    /// Valid Python the fake does not model: reported as `NotImplementedError`.
    pub(super) unmodelled: bool,
}

pub(super) fn syntax<T>(line: usize, message: impl Into<String>) -> Result<T, SyntaxError> {
    Err(SyntaxError { line, message: message.into(), unmodelled: false })
}

pub(super) fn unmodelled<T>(line: usize, message: impl Into<String>) -> Result<T, SyntaxError> {
    Err(SyntaxError { line, message: message.into(), unmodelled: true })
}

/// The operators, longest first so that `**=` is not read as `**` then `=`.
const OPS: &[&str] = &[
    "**=", "//=", "<<=", ">>=", "->", "**", "//", "<<", ">>", "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=",
    "%=", ":=", "+", "-", "*", "/", "%", "<", ">", "=", ",", ":", ".", ";", "@", "|", "&", "^", "~",
];

/// The string prefixes the fake reads (`u` is accepted and means nothing, as in Python 3).
const STRING_PREFIXES: &[&str] = &["b", "r", "f", "rb", "br", "fr", "rf", "u"];

/// Splits `src` into tokens, ending with a [`Tok::Newline`].
pub(super) fn tokenize(src: &str) -> Result<Vec<(Tok, usize)>, SyntaxError> {
    let mut lexer =
        Lexer { chars: src.chars().collect(), i: 0, line: 1, depth: Vec::new(), toks: Vec::new() };
    let mut line_start = true;
    while let Some(&c) = lexer.chars.get(lexer.i) {
        if line_start && lexer.depth.is_empty() {
            lexer.indent();
            line_start = false;
        }
        match c {
            '\n' => {
                if lexer.depth.is_empty() {
                    lexer.push(Tok::Newline);
                    line_start = true;
                }
                lexer.line += 1;
                lexer.i += 1;
            }
            ' ' | '\t' | '\r' => lexer.i += 1,
            '\\' if lexer.chars.get(lexer.i + 1) == Some(&'\n') => {
                lexer.i += 2;
                lexer.line += 1;
            }
            '#' => {
                while lexer.chars.get(lexer.i).is_some_and(|&c| c != '\n') {
                    lexer.i += 1;
                }
            }
            '0'..='9' | '.' if c != '.' || lexer.chars.get(lexer.i + 1).is_some_and(char::is_ascii_digit) => {
                lexer.number()?;
            }
            c if c.is_alphabetic() || c == '_' => lexer.word()?,
            '\'' | '"' => {
                let (body, next, newlines) = read_string(&lexer.chars, lexer.i, lexer.line)?;
                lexer.i = next;
                lexer.push(Tok::Str(decode_escapes(&body, lexer.line)?));
                lexer.line += newlines;
            }
            '(' | '[' | '{' => {
                lexer.depth.push((c, lexer.line));
                lexer.push(Tok::Op(c.to_string()));
                lexer.i += 1;
            }
            ')' | ']' | '}' => lexer.close(c)?,
            _ => lexer.operator(c)?,
        }
    }
    if let Some((open, open_line)) = lexer.depth.pop() {
        return syntax(open_line, format!("'{open}' was never closed"));
    }
    lexer.push(Tok::Newline);
    Ok(lexer.toks)
}

struct Lexer {
    chars: Vec<char>,
    /// The next character to read.
    i: usize,
    line: usize,
    /// The brackets open at `i`, with the line each was opened on.
    depth: Vec<(char, usize)>,
    toks: Vec<(Tok, usize)>,
}

impl Lexer {
    fn push(&mut self, tok: Tok) {
        self.toks.push((tok, self.line));
    }

    /// Marks a logical line that starts with whitespace (blank and comment lines do not count).
    fn indent(&mut self) {
        let mut j = self.i;
        while matches!(self.chars.get(j), Some(' ' | '\t')) {
            j += 1;
        }
        if j > self.i && self.chars.get(j).is_some_and(|&c| c != '\n' && c != '#') {
            self.push(Tok::Indent);
        }
    }

    /// An integer or float literal; `_` separators are dropped.
    fn number(&mut self) -> Result<(), SyntaxError> {
        let start = self.i;
        while self.chars.get(self.i).is_some_and(|&c| c.is_ascii_alphanumeric() || c == '.' || c == '_') {
            self.i += 1;
        }
        let text: String = self.chars[start..self.i].iter().filter(|c| **c != '_').collect();
        let lower = text.to_ascii_lowercase();
        if let Ok(n) = text.parse::<i64>() {
            self.push(Tok::Int(n));
        } else if text.bytes().all(|b| b.is_ascii_digit()) {
            return unmodelled(self.line, "integer literals beyond 64 bits");
        } else if ["0x", "0o", "0b"].iter().any(|p| lower.starts_with(p)) || lower.ends_with('j') {
            return unmodelled(self.line, "hexadecimal, octal, binary and imaginary literals");
        } else if let Ok(f) = text.parse::<f64>() {
            self.push(Tok::Float(f));
        } else {
            return syntax(self.line, "invalid decimal literal");
        }
        Ok(())
    }

    /// A name, or a prefixed string literal (`b'..'`, `f".."`, `rb'..'`, …).
    fn word(&mut self) -> Result<(), SyntaxError> {
        let start = self.i;
        while self.chars.get(self.i).is_some_and(|&c| c.is_alphanumeric() || c == '_') {
            self.i += 1;
        }
        let word: String = self.chars[start..self.i].iter().collect();
        let prefix = word.to_ascii_lowercase();
        if !matches!(self.chars.get(self.i), Some('\'' | '"')) || !STRING_PREFIXES.contains(&prefix.as_str())
        {
            self.push(Tok::Name(word));
            return Ok(());
        }
        let (body, next, newlines) = read_string(&self.chars, self.i, self.line)?;
        self.i = next;
        let text = if prefix.contains('r') { body } else { decode_escapes(&body, self.line)? };
        self.push(if prefix.contains('b') {
            Tok::Bytes(text.chars().map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?')).collect())
        } else if prefix.contains('f') {
            Tok::FStr(text)
        } else {
            Tok::Str(text)
        });
        self.line += newlines;
        Ok(())
    }

    /// A closing bracket, which must match the innermost open one.
    fn close(&mut self, c: char) -> Result<(), SyntaxError> {
        let want = match c {
            ')' => '(',
            ']' => '[',
            _ => '{',
        };
        match self.depth.pop() {
            Some((open, _)) if open == want => {}
            Some((open, _)) => {
                return syntax(
                    self.line,
                    format!("closing parenthesis '{c}' does not match opening parenthesis '{open}'"),
                );
            }
            None => return syntax(self.line, format!("unmatched '{c}'")),
        }
        self.push(Tok::Op(c.to_string()));
        self.i += 1;
        Ok(())
    }

    fn operator(&mut self, c: char) -> Result<(), SyntaxError> {
        let rest: String = self.chars[self.i..self.chars.len().min(self.i + 3)].iter().collect();
        let Some(op) = OPS.iter().find(|op| rest.starts_with(*op)) else {
            return syntax(self.line, format!("invalid character '{c}' (U+{:04X})", c as u32));
        };
        self.push(Tok::Op((*op).to_owned()));
        self.i += op.chars().count();
        Ok(())
    }
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

/// Replaces the backslash escapes the fake models; an unknown escape stays as written, as
/// in Python.
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
