//! The code interpreter's `/execute` stream (E2B's `code-interpreter` repository,
//! `template/server/api/models/{output,result}.py` and `messaging.py`): one JSON object per
//! `\n`-terminated line (`stdout`, `stderr`, `result`, `error`, `number_of_executions`,
//! `keepalive`), ending with `{"type":"end_of_execution"}`.
//!
//! Pure pieces: a bounded line splitter and the parse of one line into a [`CellLine`],
//! with rich results turned into sandboxio's [`MimeBundle`] (PNG, JPEG and PDF decoded
//! from base64).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use super::wire::WireError;
use crate::exec::{CodeError, MimeBundle};

/// An incremental splitter of `\n`-terminated lines holding at most `max` bytes of an
/// unfinished line.
#[derive(Debug)]
pub(crate) struct LineDecoder {
    buf: Vec<u8>,
    max: usize,
}

impl LineDecoder {
    /// A splitter refusing lines over `max` bytes.
    pub(crate) fn new(max: usize) -> Self {
        LineDecoder { buf: Vec::new(), max }
    }

    /// Appends bytes and returns the lines they complete (without their `\n`; empty lines
    /// dropped).
    ///
    /// # Errors
    ///
    /// [`WireError::LineTooLong`] once an unfinished line is over the bound.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<Vec<Vec<u8>>, WireError> {
        let mut lines = Vec::new();
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let complete = piece.last() == Some(&b'\n');
            let body = if complete { &piece[..piece.len() - 1] } else { piece };
            if self.buf.len() + body.len() > self.max {
                return Err(WireError::LineTooLong { max: self.max });
            }
            self.buf.extend_from_slice(body);
            if complete {
                let line = std::mem::take(&mut self.buf);
                if !line.iter().all(u8::is_ascii_whitespace) {
                    lines.push(line);
                }
            }
        }
        Ok(lines)
    }

    /// Checks the body's end: no unfinished line may be left.
    ///
    /// # Errors
    ///
    /// [`WireError::Truncated`] when the body ended inside a line.
    pub(crate) fn finish(&self) -> Result<(), WireError> {
        if self.buf.iter().all(u8::is_ascii_whitespace) {
            Ok(())
        } else {
            Err(WireError::Truncated { have: self.buf.len(), need: self.buf.len() + 1 })
        }
    }
}

/// One line of an execution, keepalives and counters already dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CellLine {
    /// Text the cell printed to stdout.
    Stdout(String),
    /// Text the cell printed to stderr.
    Stderr(String),
    /// A rich result (`is_main_result` for the cell's value, else a `display()` or plot).
    Result(MimeBundle),
    /// The exception that ended the cell.
    Error(CodeError),
    /// The last line.
    End,
}

#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    traceback: Option<serde_json::Value>,
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

/// Result fields and the MIME type each stands for (the inverse of the server's mapping
/// from Jupyter's MIME bundle); `base64` marks binary types sent as base64 text.
const RESULT_FIELDS: &[(&str, &str, bool)] = &[
    ("html", "text/html", false),
    ("markdown", "text/markdown", false),
    ("svg", "image/svg+xml", false),
    ("png", "image/png", true),
    ("jpeg", "image/jpeg", true),
    ("pdf", "application/pdf", true),
    ("latex", "text/latex", false),
    ("json", "application/json", false),
    ("javascript", "application/javascript", false),
    ("data", "e2b/data", false),
    ("chart", "e2b/chart", false),
    ("graph", "e2b/graph", false),
];

/// Parses one line: `Ok(None)` for `keepalive`, `number_of_executions` and types this
/// version does not know (the server may add some).
///
/// # Errors
///
/// [`WireError::Json`] for a line that is not a JSON object with a `type`,
/// [`WireError::Field`] for a result whose binary data is not base64.
pub(crate) fn parse_line(line: &[u8]) -> Result<Option<CellLine>, WireError> {
    let mut line: Line = serde_json::from_slice(line)?;
    Ok(match line.kind.as_str() {
        "stdout" => Some(CellLine::Stdout(line.text.unwrap_or_default())),
        "stderr" => Some(CellLine::Stderr(line.text.unwrap_or_default())),
        "error" => {
            let traceback = match line.traceback {
                Some(serde_json::Value::String(t)) => crate::exec::traceback_of(t.lines()),
                Some(serde_json::Value::Array(items)) => crate::exec::traceback_of(
                    items.iter().map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned)),
                ),
                _ => Vec::new(),
            };
            Some(CellLine::Error(
                CodeError::new(line.name.unwrap_or_default(), line.value.unwrap_or_default())
                    .with_traceback(traceback),
            ))
        }
        "result" => {
            let mut bundle = MimeBundle::new();
            if let Some(text) = line.text {
                bundle.insert("text/plain".to_owned(), text.into_bytes());
            }
            for (field, mime, base64) in RESULT_FIELDS {
                if let Some(value) = line.rest.remove(*field).filter(|v| !v.is_null()) {
                    bundle.insert((*mime).to_owned(), field_bytes(field, value, *base64)?);
                }
            }
            if let Some(serde_json::Value::Object(extra)) = line.rest.remove("extra") {
                for (mime, value) in extra {
                    let bytes = match value {
                        serde_json::Value::String(s) => s.into_bytes(),
                        other => other.to_string().into_bytes(),
                    };
                    bundle.insert(mime, bytes);
                }
            }
            Some(CellLine::Result(bundle))
        }
        "end_of_execution" => Some(CellLine::End),
        _ => None,
    })
}

fn field_bytes(field: &'static str, value: serde_json::Value, base64: bool) -> Result<Vec<u8>, WireError> {
    match value {
        serde_json::Value::String(s) if base64 => {
            STANDARD.decode(s.trim()).map_err(|e| WireError::Field { field, why: format!("not base64: {e}") })
        }
        serde_json::Value::String(s) => Ok(s.into_bytes()),
        other => Ok(other.to_string().into_bytes()),
    }
}

/// The JSON of an `/execute` request: `code` in context `context_id` when given, else in
/// the default context of `language` (the server refuses both at once).
pub(crate) fn execute_request(code: &str, context_id: Option<&str>, language: &str) -> serde_json::Value {
    match context_id {
        Some(id) => serde_json::json!({ "code": code, "context_id": id }),
        None => serde_json::json!({ "code": code, "language": language }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_whatever_the_read_boundaries() {
        let body = b"{\"type\":\"stdout\",\"text\":\"a\\n\"}\n\n{\"type\":\"end_of_execution\"}\n";
        for split in 1..=body.len() {
            let mut d = LineDecoder::new(64);
            let mut lines = Vec::new();
            for piece in body.chunks(split) {
                lines.extend(d.push(piece).unwrap());
            }
            d.finish().unwrap();
            assert_eq!(
                lines,
                [&br#"{"type":"stdout","text":"a\n"}"#[..], br#"{"type":"end_of_execution"}"#],
                "{split}"
            );
        }
    }

    #[test]
    fn a_long_or_unfinished_line_is_a_typed_error() {
        let mut d = LineDecoder::new(8);
        assert_eq!(d.push(b"12345").unwrap(), Vec::<Vec<u8>>::new());
        assert_eq!(d.push(b"6789").unwrap_err().to_string(), "a line is longer than the bound of 8 bytes");
        let mut d = LineDecoder::new(8);
        d.push(b"{\"a\"").unwrap();
        assert_eq!(d.finish().unwrap_err().to_string(), "the body ended inside a frame (4 of 5 bytes)");
    }

    #[test]
    fn the_documented_lines() {
        let png = STANDARD.encode([0x89, b'P', b'N', b'G']);
        let result = format!(
            r#"{{"type":"result","is_main_result":true,"text":"2","html":"<b>2</b>","png":"{png}","json":{{"a":1}},"extra":{{"application/x-y":"z"}},"svg":null}}"#
        );
        let expected = MimeBundle::from([
            ("text/plain".to_owned(), b"2".to_vec()),
            ("text/html".to_owned(), b"<b>2</b>".to_vec()),
            ("image/png".to_owned(), vec![0x89, b'P', b'N', b'G']),
            ("application/json".to_owned(), br#"{"a":1}"#.to_vec()),
            ("application/x-y".to_owned(), b"z".to_vec()),
        ]);
        for (line, parsed) in [
            (r#"{"type":"number_of_executions","execution_count":3}"#.to_owned(), None),
            (r#"{"type":"stdout","text":"hello\n","timestamp":"2026-01-01T00:00:00Z"}"#.to_owned(), Some(CellLine::Stdout("hello\n".into()))),
            (r#"{"type":"stderr","text":"warn\n"}"#.to_owned(), Some(CellLine::Stderr("warn\n".into()))),
            (r#"{"type":"keepalive"}"#.to_owned(), None),
            (r#"{"type":"something_new","x":1}"#.to_owned(), None),
            (r#"{"type":"end_of_execution"}"#.to_owned(), Some(CellLine::End)),
            (
                r#"{"type":"error","name":"NameError","value":"name 'x' is not defined","traceback":"line 1\nline 2"}"#.to_owned(),
                Some(CellLine::Error(
                    CodeError::new("NameError", "name 'x' is not defined").with_traceback(vec!["line 1".into(), "line 2".into()]),
                )),
            ),
            (result, Some(CellLine::Result(expected))),
        ] {
            assert_eq!(parse_line(line.as_bytes()).unwrap(), parsed, "{line}");
        }
    }

    #[test]
    fn malformed_lines_are_typed_errors() {
        for (line, message) in [
            ("{}", "malformed JSON: missing field `type` at line 1 column 2"),
            ("nope", "malformed JSON: expected ident at line 1 column 2"),
            (r#"{"type":"result","png":"%%"}"#, "field `png`: not base64: Invalid symbol 37, offset 0."),
        ] {
            assert_eq!(parse_line(line.as_bytes()).unwrap_err().to_string(), message, "{line}");
        }
    }

    #[test]
    fn execute_requests() {
        assert_eq!(
            execute_request("1+1", None, "python").to_string(),
            r#"{"code":"1+1","language":"python"}"#
        );
        assert_eq!(
            execute_request("x", Some("c1"), "python").to_string(),
            r#"{"code":"x","context_id":"c1"}"#
        );
    }
}
