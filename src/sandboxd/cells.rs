//! The host's side of the code-cell runner's wire format (`sandboxd/src/runner.py`, whose
//! header defines it): requests out, records in, assembled into a cell's results.
//!
//! The runner lives inside the sandbox, and a cell's own code can write to its control
//! channel, so records are untrusted input: a header line is at most [`MAX_HEADER`] bytes, a
//! payload at most [`MAX_PAYLOAD`], and anything malformed is a typed error, never a panic or
//! an unbounded buffer. A cell can only forge its own results this way, which it could
//! produce honestly anyway.

use crate::exec::{CodeError, MimeBundle};

/// The longest header line accepted, in bytes.
pub(crate) const MAX_HEADER: usize = 256;

/// The largest payload accepted (one MIME item, or one error), in bytes (64 MiB).
pub(crate) const MAX_PAYLOAD: usize = 64 * 1024 * 1024;

/// The bytes that ask the runner to run `code` as the next cell.
pub(crate) fn cell_request(code: &str) -> Vec<u8> {
    let mut out = format!("cell {}\n", code.len()).into_bytes();
    out.extend_from_slice(code.as_bytes());
    out
}

/// One record from the runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    /// The runner is up and waits for cells.
    Ready,
    /// A rich result follows as `count` items: the cell's value (`result`) or a `display()`.
    Bundle { result: bool, count: usize },
    /// One MIME type of the bundle being received.
    Item { mime: String, data: Vec<u8> },
    /// The cell raised.
    Error(CodeError),
    /// The cell ended; its number in the context.
    Done(u64),
}

/// Why the runner's output could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) String);

/// Splits the runner's control stream into records, holding at most one record.
#[derive(Debug, Default)]
pub(crate) struct Records {
    buf: Vec<u8>,
}

impl Records {
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete record, `Ok(None)` when more bytes are needed.
    ///
    /// # Errors
    ///
    /// The stream is not the runner's format; the context cannot be trusted further.
    pub(crate) fn next_record(&mut self) -> Result<Option<Record>, Malformed> {
        let Some(nl) = self.buf.iter().take(MAX_HEADER + 1).position(|&b| b == b'\n') else {
            if self.buf.len() > MAX_HEADER {
                return Err(Malformed(format!("a header line longer than {MAX_HEADER} bytes")));
            }
            return Ok(None);
        };
        let header = std::str::from_utf8(&self.buf[..nl])
            .map_err(|_| Malformed("a header that is not UTF-8".into()))?;
        let words: Vec<&str> = header.split(' ').collect();
        let len: usize = words
            .last()
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| Malformed(format!("a header without a length: {header:?}")))?;
        if len > MAX_PAYLOAD {
            return Err(Malformed(format!("a payload of {len} bytes, over the {MAX_PAYLOAD}-byte limit")));
        }
        if self.buf.len() < nl + 1 + len {
            return Ok(None);
        }
        let payload = self.buf[nl + 1..nl + 1 + len].to_vec();
        let record = parse(&words, payload)?;
        self.buf.drain(..nl + 1 + len);
        Ok(Some(record))
    }
}

fn parse(words: &[&str], payload: Vec<u8>) -> Result<Record, Malformed> {
    let bad = || Malformed(format!("an unknown record: {}", words.join(" ")));
    Ok(match words {
        ["ready", "0"] => Record::Ready,
        ["bundle", kind @ ("result" | "display"), count, "0"] => {
            Record::Bundle { result: *kind == "result", count: count.parse().map_err(|_| bad())? }
        }
        ["item", mime, _] if !mime.is_empty() => Record::Item { mime: (*mime).to_owned(), data: payload },
        ["error", _] => {
            let text = String::from_utf8_lossy(&payload);
            let mut parts = text.splitn(3, '\n');
            let name = parts.next().unwrap_or_default().to_owned();
            let value = parts.next().unwrap_or_default().to_owned();
            let traceback = parts.next().unwrap_or_default().lines().map(str::to_owned).collect();
            Record::Error(CodeError::new(name, value).with_traceback(traceback))
        }
        ["done", count, "0"] => Record::Done(count.parse().map_err(|_| bad())?),
        _ => return Err(bad()),
    })
}

/// A cell's results as records arrive: bundles in arrival order and the error, if any.
#[derive(Debug, Default)]
pub(crate) struct Cell {
    /// Rich results, `display()`s and the cell's value, in the order the cell made them.
    pub(crate) results: Vec<MimeBundle>,
    /// The exception the cell raised.
    pub(crate) error: Option<CodeError>,
    /// Items still expected for the bundle being received.
    open: usize,
}

impl Cell {
    /// Takes one record; `Ok(true)` when the cell is done.
    ///
    /// # Errors
    ///
    /// A record out of place (an item outside a bundle, a bundle cut short).
    pub(crate) fn take(&mut self, record: Record) -> Result<bool, Malformed> {
        match record {
            Record::Item { mime, data } if self.open > 0 => {
                self.open -= 1;
                if let Some(bundle) = self.results.last_mut() {
                    bundle.insert(mime, data);
                }
            }
            _ if self.open > 0 => return Err(Malformed("a bundle cut short".into())),
            Record::Bundle { count, .. } => {
                self.results.push(MimeBundle::new());
                self.open = count;
            }
            Record::Error(e) => self.error = Some(e),
            Record::Done(_) => return Ok(true),
            Record::Ready | Record::Item { .. } => return Err(Malformed("a record out of place".into())),
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(bytes: &[u8], step: usize) -> Result<Vec<Record>, Malformed> {
        let mut r = Records::default();
        let mut out = Vec::new();
        for chunk in bytes.chunks(step) {
            r.push(chunk);
            while let Some(rec) = r.next_record()? {
                out.push(rec);
            }
        }
        Ok(out)
    }

    #[test]
    fn records_parse_however_the_stream_is_split() {
        let stream = b"ready 0\nbundle result 2 0\nitem text/plain 2\n42item image/png 4\n\x89PNGerror 38\nZeroDivisionError\ndivision by zero\nTB\ndone 3 0\n";
        let expected = vec![
            Record::Ready,
            Record::Bundle { result: true, count: 2 },
            Record::Item { mime: "text/plain".into(), data: b"42".to_vec() },
            Record::Item { mime: "image/png".into(), data: b"\x89PNG".to_vec() },
            Record::Error(
                CodeError::new("ZeroDivisionError", "division by zero").with_traceback(vec!["TB".into()]),
            ),
            Record::Done(3),
        ];
        for step in [1, 2, 5, 7, stream.len()] {
            assert_eq!(all(stream, step), Ok(expected.clone()), "split every {step} bytes");
        }
    }

    #[test]
    fn hostile_records_are_typed_errors() {
        assert!(all(&[b'x'; MAX_HEADER + 1], 16).unwrap_err().0.contains("longer than"));
        assert!(
            all(format!("item text/plain {}\n", MAX_PAYLOAD + 1).as_bytes(), 4)
                .unwrap_err()
                .0
                .contains("over the")
        );
        assert!(all(b"launch 0\n", 3).unwrap_err().0.contains("unknown record"));
        assert!(all(b"done x 0\n", 3).is_err());
        assert!(all(b"ready\n", 3).is_err(), "a header without a length");
        assert!(all(b"\xff\xfe 0\n", 3).is_err());
    }

    #[test]
    fn a_cell_assembles_bundles_in_order() {
        let mut cell = Cell::default();
        let records = [
            Record::Bundle { result: false, count: 1 },
            Record::Item { mime: "text/html".into(), data: b"<b>".to_vec() },
            Record::Bundle { result: true, count: 1 },
            Record::Item { mime: "text/plain".into(), data: b"1".to_vec() },
        ];
        for r in records {
            assert_eq!(cell.take(r), Ok(false));
        }
        assert_eq!(cell.take(Record::Done(1)), Ok(true));
        assert_eq!(cell.results.len(), 2);
        assert_eq!(cell.results[0]["text/html"], b"<b>");
        assert_eq!(cell.results[1]["text/plain"], b"1");
        let mut cut = Cell::default();
        cut.take(Record::Bundle { result: true, count: 2 }).unwrap();
        assert!(cut.take(Record::Done(1)).is_err(), "a bundle cut short");
        assert!(Cell::default().take(Record::Item { mime: "a".into(), data: vec![] }).is_err());
    }

    #[test]
    fn a_cell_request_is_length_prefixed() {
        assert_eq!(cell_request("x = 1\n"), b"cell 6\nx = 1\n");
        assert_eq!(cell_request("é"), "cell 2\né".as_bytes());
    }
}
