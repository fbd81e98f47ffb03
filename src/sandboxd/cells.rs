//! The host's side of the code-cell runner's wire format (`sandboxd/src/runner.py`, whose
//! header defines it): requests out, records in, assembled into a cell's results.
//!
//! The runner lives inside the sandbox, and a cell's own code can write to its control
//! channel, so records are untrusted input: a header line is at most [`MAX_HEADER`] bytes,
//! and anything malformed is a typed error, never a panic or an unbounded buffer. What a
//! record's payload costs the host is decided from its header, before any of it is held:
//! an item is kept only if the cell's [`OutputBudget`] admits it, else its bytes are read
//! and dropped as they arrive; an error keeps at most [`MAX_ERROR`] bytes. So a cell that
//! floods its channel costs the host its budget, never more, and the runner goes on. A cell
//! can only forge its own results this way, which it could produce honestly anyway.

use crate::backend::OutputBudget;
use crate::backend::cell_stream::{BUNDLE_COST, ITEM_COST};
use crate::exec::{CodeError, MimeBundle};

/// The longest header line accepted, in bytes.
pub(crate) const MAX_HEADER: usize = 256;

/// The most bytes of an error record kept, in bytes (1 MiB, outside the output budget, so a
/// cell that used its budget up still says why it failed); the rest is dropped.
pub(crate) const MAX_ERROR: usize = 1024 * 1024;

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
    /// One MIME type of the bundle being received, over the budget: its bytes are dropped
    /// as they arrive.
    Dropped,
    /// The cell raised.
    Error(CodeError),
    /// The cell ended; its number in the context.
    Done(u64),
}

/// Why the runner's output could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) String);

/// The payload being received.
#[derive(Debug)]
enum Payload {
    /// An item kept: its MIME type and the bytes so far (allocated once, at its length).
    Item { mime: String, data: Vec<u8> },
    /// An item or the tail of an error, dropped.
    Skip,
    /// An error record: the bytes kept so far (at most [`MAX_ERROR`]).
    Error { data: Vec<u8> },
}

/// Splits the runner's control stream into records. It holds the bytes pushed and not yet
/// parsed (at most one pushed chunk and one header) and the payload being received (at most
/// what the budget admitted, or [`MAX_ERROR`]).
#[derive(Debug, Default)]
pub(crate) struct Records {
    buf: Vec<u8>,
    /// Where the unparsed bytes of `buf` start.
    pos: usize,
    /// The payload being received and its bytes still to come.
    payload: Option<(Payload, usize)>,
}

impl Records {
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete record, `Ok(None)` when more bytes are needed. `admit(cost)` is
    /// asked, when an item's header arrives, whether the host may keep `cost` bytes for it
    /// (and counts them if so); an item not admitted comes out at once as
    /// [`Record::Dropped`], its bytes dropped as they arrive.
    ///
    /// # Errors
    ///
    /// The stream is not the runner's format; the context cannot be trusted further.
    pub(crate) fn next_record(
        &mut self,
        admit: &mut dyn FnMut(usize) -> bool,
    ) -> Result<Option<Record>, Malformed> {
        loop {
            let Some((mut payload, mut left)) = self.payload.take() else { return self.header(admit) };
            let take = left.min(self.buf.len() - self.pos);
            let bytes = &self.buf[self.pos..self.pos + take];
            match &mut payload {
                Payload::Item { data, .. } => data.extend_from_slice(bytes),
                Payload::Error { data } => {
                    let room = MAX_ERROR.saturating_sub(data.len());
                    data.extend_from_slice(&bytes[..bytes.len().min(room)]);
                }
                Payload::Skip => {}
            }
            self.pos += take;
            left -= take;
            if left > 0 {
                self.payload = Some((payload, left));
                return Ok(None);
            }
            match payload {
                Payload::Item { mime, data } => return Ok(Some(Record::Item { mime, data })),
                Payload::Error { data } => return Ok(Some(Record::Error(error_of(&data)))),
                Payload::Skip => {}
            }
        }
    }

    /// Parses the next header, starting its payload if it has one.
    fn header(&mut self, admit: &mut dyn FnMut(usize) -> bool) -> Result<Option<Record>, Malformed> {
        let rest = &self.buf[self.pos..];
        let Some(nl) = rest.iter().take(MAX_HEADER + 1).position(|&b| b == b'\n') else {
            if rest.len() > MAX_HEADER {
                return Err(Malformed(format!("a header line longer than {MAX_HEADER} bytes")));
            }
            return Ok(None);
        };
        let header =
            std::str::from_utf8(&rest[..nl]).map_err(|_| Malformed("a header that is not UTF-8".into()))?;
        let words: Vec<&str> = header.split(' ').collect();
        let len: usize = words
            .last()
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| Malformed(format!("a header without a length: {header:?}")))?;
        let bad = || Malformed(format!("an unknown record: {}", words.join(" ")));
        let (record, payload) = match words.as_slice() {
            ["ready", "0"] => (Some(Record::Ready), None),
            ["bundle", kind @ ("result" | "display"), count, "0"] => {
                let count = count.parse().map_err(|_| bad())?;
                (Some(Record::Bundle { result: *kind == "result", count }), None)
            }
            ["done", count, "0"] => (Some(Record::Done(count.parse().map_err(|_| bad())?)), None),
            ["item", mime, _] if !mime.is_empty() => {
                let cost = ITEM_COST.saturating_add(mime.len()).saturating_add(len);
                if admit(cost) {
                    let mut data = Vec::new();
                    data.reserve_exact(len);
                    (None, Some(Payload::Item { mime: (*mime).to_owned(), data }))
                } else {
                    (Some(Record::Dropped), Some(Payload::Skip))
                }
            }
            ["error", _] => {
                let mut data = Vec::new();
                data.reserve_exact(len.min(MAX_ERROR));
                (None, Some(Payload::Error { data }))
            }
            _ => return Err(bad()),
        };
        self.pos += nl + 1;
        if let Some(payload) = payload {
            self.payload = Some((payload, len));
        }
        match record {
            Some(record) => Ok(Some(record)),
            // A payload follows: the record comes out once it is complete.
            None => self.next_record(admit),
        }
    }
}

/// An error record's payload: name, value and traceback, one per line (the traceback's
/// lines after the second newline).
fn error_of(payload: &[u8]) -> CodeError {
    let text = String::from_utf8_lossy(payload);
    let mut parts = text.splitn(3, '\n');
    let name = parts.next().unwrap_or_default().to_owned();
    let value = parts.next().unwrap_or_default().to_owned();
    let traceback = crate::exec::traceback_of(parts.next().unwrap_or_default().lines());
    CodeError::new(name, value).with_traceback(traceback)
}

/// A cell's results as records arrive: bundles in arrival order and the error, if any,
/// kept within the cell's budget.
#[derive(Debug)]
pub(crate) struct Cell {
    /// Rich results, `display()`s and the cell's value, in the order the cell made them.
    pub(crate) results: Vec<MimeBundle>,
    /// The exception the cell raised.
    pub(crate) error: Option<CodeError>,
    /// Items still expected for the bundle being received.
    open: usize,
    /// Whether the bundle being received is kept (it fitted the budget).
    keeping: bool,
    /// Whether a bundle was dropped: no later one is kept, so the results are a prefix.
    stopped: bool,
    budget: OutputBudget,
}

impl Cell {
    /// A cell whose results are kept within `budget`.
    pub(crate) fn new(budget: OutputBudget) -> Self {
        Cell { results: Vec::new(), error: None, open: 0, keeping: false, stopped: false, budget }
    }

    /// Whether an item costing `cost` bytes is kept (counted against the budget if so):
    /// the `admit` of [`Records::next_record`].
    pub(crate) fn admit(&mut self, cost: usize) -> bool {
        self.open > 0 && self.keeping && self.budget.keep(cost)
    }

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
            Record::Dropped if self.open > 0 => {
                self.open -= 1;
                // A bundle with a part missing is not kept, nor anything after it.
                if self.keeping {
                    self.keeping = false;
                    self.results.pop();
                }
                self.stopped = true;
                self.budget.truncate();
            }
            _ if self.open > 0 => return Err(Malformed("a bundle cut short".into())),
            Record::Bundle { count, .. } => {
                self.keeping = !self.stopped && self.budget.keep(BUNDLE_COST);
                if !self.keeping {
                    self.stopped = true;
                    self.budget.truncate();
                }
                if self.keeping {
                    self.results.push(MimeBundle::new());
                }
                self.open = count;
            }
            Record::Error(e) => self.error = Some(e),
            Record::Done(_) => return Ok(true),
            Record::Ready | Record::Item { .. } | Record::Dropped => {
                return Err(Malformed("a record out of place".into()));
            }
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
            while let Some(rec) = r.next_record(&mut |_| true)? {
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
        assert!(all(b"ready 5\nhello", 3).unwrap_err().0.contains("unknown record"), "a payload on ready");
        assert!(all(b"launch 0\n", 3).unwrap_err().0.contains("unknown record"));
        assert!(all(b"done x 0\n", 3).is_err());
        assert!(all(b"ready\n", 3).is_err(), "a header without a length");
        assert!(all(b"\xff\xfe 0\n", 3).is_err());
    }

    /// Feeds `stream` through a cell with `budget`, `step` bytes at a time, returning the
    /// cell and the most bytes the parser held at once.
    fn through(stream: &[u8], step: usize, budget: &OutputBudget) -> Result<(Cell, usize), Malformed> {
        let (mut records, mut cell, mut held) = (Records::default(), Cell::new(budget.clone()), 0);
        for chunk in stream.chunks(step) {
            records.push(chunk);
            while let Some(record) = records.next_record(&mut |cost| cell.admit(cost))? {
                cell.take(record)?;
            }
            let payload = match &records.payload {
                Some((Payload::Item { data, .. } | Payload::Error { data }, _)) => data.capacity(),
                _ => 0,
            };
            held = held.max(records.buf.capacity() + payload);
        }
        Ok((cell, held))
    }

    #[test]
    fn a_flood_of_records_costs_the_budget_and_no_more() {
        // 1000 displays of 64 KiB each (62.5 MiB), then one item claiming 1 GiB that never
        // comes: the budget of 1 MiB keeps the first 15 and drops the rest as they arrive.
        let mut stream = Vec::new();
        for _ in 0..1000 {
            stream.extend_from_slice(b"bundle display 1 0\nitem text/plain 65536\n");
            stream.resize(stream.len() + 65536, b'x');
        }
        stream.extend_from_slice(b"error 9\nE\nv\nline\n");
        let budget = OutputBudget::new(1 << 20);
        let (cell, held) = through(&stream, 65536, &budget).unwrap();
        let cost = BUNDLE_COST + ITEM_COST + "text/plain".len() + 65536;
        assert_eq!(cell.results.len(), (1 << 20) / cost);
        assert!(budget.is_truncated());
        assert!(held < 3 * 65536, "the parser held {held} bytes");
        assert_eq!(cell.error.as_ref().map(|e| e.name.as_str()), Some("E"), "the error is kept");
        // Without a limit every record arrives (the control: the flood is real).
        let unlimited = OutputBudget::new(usize::MAX);
        assert_eq!(through(&stream, 65536, &unlimited).unwrap().0.results.len(), 1000);
        assert!(!unlimited.is_truncated());
        // An item over the budget is dropped before its bytes arrive.
        let small = OutputBudget::new(1000);
        let huge = b"bundle result 1 0\nitem text/plain 1073741824\nxxxx";
        let (cell, held) = through(huge, 2, &small).unwrap();
        assert!(cell.results.is_empty() && small.is_truncated() && held < 1024);
        // Empty bundles cost their overhead.
        let empties = b"bundle display 0 0\n".repeat(10_000);
        let few = OutputBudget::new(100 * BUNDLE_COST);
        assert_eq!(through(&empties, 4096, &few).unwrap().0.results.len(), 100);
    }

    #[test]
    fn an_error_keeps_its_first_mib() {
        let mut stream = format!("error {}\nBigError\nvalue\n", 3 * MAX_ERROR).into_bytes();
        stream.resize(stream.len() + 3 * MAX_ERROR - "BigError\nvalue\n".len(), b'y');
        stream.extend_from_slice(b"done 1 0\n");
        let (cell, held) = through(&stream, 65536, &OutputBudget::new(0)).unwrap();
        let error = cell.error.unwrap();
        assert_eq!((error.name.as_str(), error.value.as_str()), ("BigError", "value"));
        assert!(held <= MAX_ERROR + 2 * 65536, "held {held}");
    }

    #[test]
    fn an_error_of_many_short_lines_keeps_a_bounded_number_of_entries_and_every_byte() {
        let lines = "a\n".repeat(524_000);
        let mut stream = format!("error {}\nE\nv\n", 4 + lines.len()).into_bytes();
        stream.extend_from_slice(lines.as_bytes());
        stream.extend_from_slice(b"done 1 0\n");
        let (cell, _) = through(&stream, 65536, &OutputBudget::new(0)).unwrap();
        let error = cell.error.unwrap();
        assert_eq!(error.traceback.len(), crate::exec::MAX_TRACEBACK_LINES);
        assert_eq!(error.traceback.join("\n"), lines.trim_end(), "a byte of the traceback was lost");
    }

    #[test]
    fn a_bundle_with_a_part_dropped_is_not_kept() {
        let budget = OutputBudget::new(BUNDLE_COST + ITEM_COST + 20);
        let stream = b"bundle display 2 0\nitem text/plain 1\nxitem text/html 100\n".to_vec();
        let mut stream = stream;
        stream.extend_from_slice(&[b'h'; 100]);
        stream.extend_from_slice(b"bundle display 1 0\nitem text/plain 1\nzdone 1 0\n");
        let (cell, _) = through(&stream, 7, &budget).unwrap();
        assert!(cell.results.is_empty(), "{:?}", cell.results);
        assert!(budget.is_truncated());
    }

    #[test]
    fn a_cell_assembles_bundles_in_order() {
        let mut cell = Cell::new(OutputBudget::new(usize::MAX));
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
        let mut cut = Cell::new(OutputBudget::default());
        cut.take(Record::Bundle { result: true, count: 2 }).unwrap();
        assert!(cut.take(Record::Done(1)).is_err(), "a bundle cut short");
        let mut outside = Cell::new(OutputBudget::default());
        assert!(outside.take(Record::Item { mime: "a".into(), data: vec![] }).is_err());
        assert!(outside.take(Record::Dropped).is_err());
    }

    #[test]
    fn a_cell_request_is_length_prefixed() {
        assert_eq!(cell_request("x = 1\n"), b"cell 6\nx = 1\n");
        assert_eq!(cell_request("é"), "cell 2\né".as_bytes());
    }
}
