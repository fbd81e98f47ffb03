//! Python values and how Python shows, names and tests them (`repr`, `str`, `type`, truth).

use std::fmt::Write as _;
use std::sync::Arc;

use super::ast::ClassDef;
use super::flow::{Flow, raise};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    /// Key-value pairs in insertion order, keys unique.
    Dict(Vec<(Value, Value)>),
    Module(String),
    /// A callable: a builtin function or module function, by qualified name.
    Func(String),
    /// A bound method: receiver and method name.
    Method(Box<Value>, String),
    /// An exception class.
    ExcType(String),
    /// An exception instance: class name and message.
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

/// `repr(v)`.
pub(super) fn repr(v: &Value) -> String {
    match v {
        Value::None => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Int(n) => n.to_string(),
        Value::Float(f) => float_repr(*f),
        Value::Str(s) => str_repr(s),
        Value::Bytes(b) => bytes_repr(b),
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
        Value::Exc(n, m) => format!("{n}({})", str_repr(m)),
        Value::Environ => "environ({...})".into(),
        Value::File(p, m) => format!("<_io.TextIOWrapper name='{p}' mode='{m}'>"),
        Value::Class(c) => format!("<class '__main__.{}'>", c.name),
        Value::Instance(c) => format!("<__main__.{} object>", c.name),
    }
}

/// A string literal as `repr` writes it: single quotes unless the text has one and no
/// double quote.
fn str_repr(s: &str) -> String {
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

fn bytes_repr(b: &[u8]) -> String {
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

/// A float as Python prints it: integral values keep a `.0`.
#[expect(clippy::float_cmp, reason = "an integral float is exactly equal to its truncation")]
pub(super) fn float_repr(f: f64) -> String {
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if f.is_nan() {
        return "nan".into();
    }
    if f == f.trunc() && f.abs() < 1e16 { format!("{f:.1}") } else { format!("{f}") }
}

/// `str(v)`.
pub(super) fn str_of(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        Value::Exc(_, m) => m.clone(),
        other => repr(other),
    }
}

/// `type(v).__name__`, as error messages quote it.
pub(super) fn type_name(v: &Value) -> &'static str {
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

/// `bool(v)`.
pub(super) fn truthy(v: &Value) -> bool {
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

/// The value as a float, for the numbers (`bool` included, as in Python).
pub(super) fn as_f64(v: &Value) -> Option<f64> {
    match v {
        #[expect(clippy::cast_precision_loss, reason = "Python converts large ints to the nearest float too")]
        Value::Int(n) => Some(*n as f64),
        Value::Float(f) => Some(*f),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

/// The value as an integer, for `int` and `bool`.
pub(super) fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::Bool(b) => Some(i64::from(*b)),
        _ => None,
    }
}

/// A length as a Python `int`.
pub(super) fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The position `key` names in a sequence of `len` items (negative counts from the end).
pub(super) fn index_of(key: &Value, len: usize) -> Result<usize, Flow> {
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
