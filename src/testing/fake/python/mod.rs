//! The fake's Python subset.
//!
//! Modelled: simple statements (`import`, `from … import`, assignment and `+=`-style
//! assignment to names and subscripts, `pass`, `raise`, `assert`, expression statements),
//! expressions (literals including f-strings and bytes, lists, tuples, dicts, arithmetic,
//! comparisons, `and`/`or`/`not`, conditional expressions, calls, attributes, subscripts),
//! a handful of builtins, the modules `sys os time math json base64 socket urllib.request
//! random`, and classes whose methods each return one expression (the shape of `IPython`
//! display hooks). Syntax errors and runtime errors surface as Python reports them.
//!
//! Not modelled: other compound statements (`def`, `for`, `while`, `if`, `with`, `try`)
//! and third-party modules. A cell using them fails with a `NotImplementedError` saying so
//! (or `ModuleNotFoundError`), never with an invented answer; script such cells with
//! `FakeBackend::on_run_code`.
//!
//! The pipeline: [`lexer`] turns the source into tokens, [`parser`] into the statements of
//! [`ast`], and [`interp`] runs them over the values of [`value`], calling the functions of
//! [`builtins`] (one table for every callable) and the methods of [`methods`].

mod ast;
mod builtins;
mod flow;
mod interp;
mod lexer;
mod methods;
mod modules;
mod names;
mod ops;
mod parser;
mod value;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::exec::{CodeError, StreamKind};

use super::machine::Stop;
use flow::Flow;
use interp::Interp;
use value::Value;

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
    pub(crate) display: Option<crate::exec::MimeBundle>,
    pub(crate) error: Option<CodeError>,
    /// `sys.exit(n)` was called with this code.
    pub(crate) exit_code: Option<i32>,
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
    let stmts = match parser::parse(source) {
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
