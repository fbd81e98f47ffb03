//! What an agent reads of a command's or a cell's output: at most the operator's budget
//! per stream (`--output-limit`), its head and its tail, with one line saying how much was
//! cut between them and where the whole of it can be read (a file in the sandbox).
//!
//! A [`Capture`] holds the head and a ring of the tail in memory (twice the budget at most,
//! whatever the command prints) and, once the output outgrows the budget, spools all of it
//! to a host temporary file of at most [`SPOOL_LIMIT`] bytes, which the server then copies
//! into the sandbox. [`render`] turns a capture into the text the tool returns: a pure
//! function, tested on exact output.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// `--output-limit`'s default, in KiB: about 8,000 tokens of text per stream.
pub const DEFAULT_OUTPUT_LIMIT_KIB: u64 = 32;

/// The most of one stream spooled (and copied into the sandbox) when it is cut, in bytes.
pub const SPOOL_LIMIT: u64 = 256 * 1024 * 1024;

/// Where the whole of a cut stream is put in the sandbox: under its working directory,
/// where every backend's file API may write (`local://` confines it there) and where
/// `run_command` starts, so the relative path works as given.
pub const SAVED_DIR: &str = ".sandboxio-output";

/// Numbers the spool files and the files saved in sandboxes, per server process.
static NEXT: AtomicU64 = AtomicU64::new(1);

/// One stream's output as an agent will read it.
#[derive(Debug)]
pub struct Capture {
    limit: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    spool: Option<Spool>,
    /// Whether a stream that outgrows the budget is spooled (not for a file that is in the
    /// sandbox already).
    spools: bool,
}

/// The whole of a stream that outgrew its budget, on the host's disk until it is copied.
#[derive(Debug)]
pub struct Spool {
    path: PathBuf,
    file: Option<std::fs::File>,
    written: u64,
    /// Why the spool stopped short of the whole stream (its limit, a host error).
    stopped: Option<String>,
}

impl Spool {
    /// The host file holding the spooled bytes.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// How many bytes it holds.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Why it holds less than the whole stream, if it does.
    pub fn stopped(&self) -> Option<&str> {
        self.stopped.as_deref()
    }

    fn write(&mut self, bytes: &[u8]) {
        if self.stopped.is_some() {
            return;
        }
        let room = SPOOL_LIMIT.saturating_sub(self.written);
        let take = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let Some(file) = self.file.as_mut() else { return };
        if let Err(e) = file.write_all(&bytes[..take]) {
            self.stopped = Some(format!("the host could not spool it: {e}"));
            return;
        }
        self.written += take as u64;
        if take < bytes.len() {
            self.stopped = Some(format!("only its first {SPOOL_LIMIT} bytes were kept"));
        }
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        drop(self.file.take());
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Capture {
    /// An empty capture keeping `limit` bytes (half head, half tail).
    pub fn new(limit: usize) -> Self {
        Capture { limit, head: Vec::new(), tail: VecDeque::new(), total: 0, spool: None, spools: true }
    }

    /// The same, never spooling: for bytes whose whole is kept elsewhere (a file read).
    pub fn unspooled(limit: usize) -> Self {
        Capture { spools: false, ..Capture::new(limit) }
    }

    /// Adds output as it arrives.
    pub fn push(&mut self, bytes: &[u8]) {
        let before = self.total;
        self.total += bytes.len() as u64;
        if self.spools && self.spool.is_none() && self.total > self.limit as u64 {
            // The output outgrows the budget now: until this chunk, head and tail hold all
            // of it, so the spool starts with them.
            let mut spool = open_spool();
            spool.write(&self.head);
            let (a, b) = self.tail.as_slices();
            spool.write(a);
            spool.write(b);
            debug_assert!(spool.stopped.is_some() || spool.written == before);
            self.spool = Some(spool);
        }
        if let Some(spool) = self.spool.as_mut() {
            spool.write(bytes);
        }
        let head_room = (self.limit / 2).saturating_sub(self.head.len());
        let (to_head, rest) = bytes.split_at(bytes.len().min(head_room));
        self.head.extend_from_slice(to_head);
        let tail_size = self.limit - self.limit / 2;
        if rest.len() >= tail_size {
            self.tail.clear();
            self.tail.extend(&rest[rest.len() - tail_size..]);
        } else {
            let overflow = (self.tail.len() + rest.len()).saturating_sub(tail_size);
            self.tail.drain(..overflow);
            self.tail.extend(rest);
        }
    }

    /// How many bytes the stream carried in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Whether bytes were cut between head and tail.
    pub fn cut(&self) -> bool {
        self.total > (self.head.len() + self.tail.len()) as u64
    }

    /// The spool of a stream that outgrew its budget.
    pub fn spool(&self) -> Option<&Spool> {
        self.spool.as_ref()
    }

    /// Every byte kept, head then tail (the whole stream when nothing was cut).
    pub fn kept(&self) -> Vec<u8> {
        let mut all = self.head.clone();
        all.extend(self.tail.iter());
        all
    }
}

fn open_spool() -> Spool {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("sandboxio-mcp-{}-{n}.out", std::process::id()));
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(file) => Spool { path, file: Some(file), written: 0, stopped: None },
        Err(e) => {
            Spool { path, file: None, written: 0, stopped: Some(format!("the host could not spool it: {e}")) }
        }
    }
}

/// A fresh name for a stream's file in the sandbox: `.sandboxio-output/7.stdout`.
pub fn saved_path(stream: &str) -> String {
    format!("{SAVED_DIR}/{}.{stream}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Where the whole of a cut stream went, as the marker line says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Saved {
    /// Copied into the sandbox at this path, all of it.
    Whole(String),
    /// Copied into the sandbox at this path, its first `bytes` only, for this reason.
    Part { path: String, bytes: u64, why: String },
    /// Not copied, for this reason.
    Nowhere(String),
}

/// The stream under a header naming it, cut in the middle when it outgrew its budget:
///
/// ```text
/// --- stdout ---
/// <head>
/// [... 1200 bytes cut here: stdout was 1300 bytes, of which the first 50 and the last 50 are shown. All of it is in .sandboxio-output/3.stdout in the sandbox: read parts of it with run_command (sed -n '1,100p' FILE, grep -n PATTERN FILE, tail -c 2000 FILE).]
/// <tail>
/// ```
///
/// Text is cut on character boundaries (a character split by the budget is dropped whole),
/// and invalid UTF-8 shows as U+FFFD.
pub fn render(stream: &str, capture: &Capture, saved: Option<&Saved>) -> String {
    let mut text = format!("--- {stream} ---\n");
    if !capture.cut() {
        text.push_str(&String::from_utf8_lossy(&capture.kept()));
        return text;
    }
    let head = String::from_utf8_lossy(&capture.head);
    let tail: Vec<u8> = capture.tail.iter().copied().collect();
    let tail = String::from_utf8_lossy(&tail);
    // A character cut in two by the head's end or the tail's start is dropped whole.
    let head = head.trim_end_matches('\u{fffd}');
    let tail = tail.trim_start_matches('\u{fffd}');
    let (shown_head, shown_tail) = (capture.head.len(), capture.tail.len());
    let cut = capture.total - (shown_head + shown_tail) as u64;
    let whereabouts = match saved {
        Some(Saved::Whole(path)) => format!(
            "All of it is in {path} in the sandbox: read parts of it with run_command (sed -n '1,100p' {path}, grep -n PATTERN {path}, tail -c 2000 {path})."
        ),
        Some(Saved::Part { path, bytes, why }) => format!(
            "Its first {bytes} bytes are in {path} in the sandbox ({why}): read parts of it with run_command (sed -n '1,100p' {path}, grep -n PATTERN {path})."
        ),
        Some(Saved::Nowhere(why)) => format!(
            "The whole of it could not be kept ({why}): run the command again with its output redirected to a file in the sandbox, and read parts of that file."
        ),
        None => "The whole of it was not kept.".to_owned(),
    };
    text.push_str(head);
    if !head.is_empty() && !head.ends_with('\n') {
        text.push('\n');
    }
    let _ = writeln!(
        text,
        "[... {cut} bytes cut here: {stream} was {} bytes, of which the first {shown_head} and the last {shown_tail} are shown. {whereabouts}]",
        capture.total
    );
    text.push_str(tail);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured(limit: usize, chunks: &[&[u8]]) -> Capture {
        let mut c = Capture::new(limit);
        for chunk in chunks {
            c.push(chunk);
        }
        c
    }

    #[test]
    fn output_within_the_budget_comes_back_whole_and_nothing_is_spooled() {
        let c = captured(10, &[b"hello ", b"you\n"]);
        assert!(!c.cut() && c.spool().is_none());
        assert_eq!(render("stdout", &c, None), "--- stdout ---\nhello you\n");
        let exact = captured(10, &[b"0123456789"]);
        assert!(!exact.cut() && exact.spool().is_none(), "exactly the budget is not cut");
        assert_eq!(exact.kept(), b"0123456789");
    }

    #[test]
    fn a_long_output_keeps_its_head_and_tail_and_says_what_was_cut_and_where_the_rest_is() {
        // Chunk sizes that cross the head's end and the tail's ring in every way.
        let all: Vec<u8> = (0..100u8).map(|i| b'a' + i % 26).collect();
        for split in [1, 3, 7, 40, 100] {
            let chunks: Vec<&[u8]> = all.chunks(split).collect();
            let c = captured(10, &chunks);
            assert!(c.cut());
            assert_eq!(c.total(), 100);
            assert_eq!(c.kept(), [&all[..5], &all[95..]].concat(), "chunks of {split}");
            let spool = c.spool().expect("a spool once the budget is passed");
            assert_eq!(std::fs::read(spool.path()).unwrap(), all, "the spool holds everything");
            assert_eq!((spool.written(), spool.stopped()), (100, None));
        }
        let c = captured(10, &[&all]);
        let saved = Saved::Whole("/tmp/sandboxio-mcp/3.stdout".to_owned());
        assert_eq!(
            render("stdout", &c, Some(&saved)),
            "--- stdout ---\nabcde\n[... 90 bytes cut here: stdout was 100 bytes, of which the first 5 and the last 5 are shown. \
             All of it is in /tmp/sandboxio-mcp/3.stdout in the sandbox: read parts of it with run_command \
             (sed -n '1,100p' /tmp/sandboxio-mcp/3.stdout, grep -n PATTERN /tmp/sandboxio-mcp/3.stdout, \
             tail -c 2000 /tmp/sandboxio-mcp/3.stdout).]\nrstuv"
        );
        let mut file = Capture::unspooled(10);
        file.push(&all);
        assert!(file.cut() && file.spool().is_none(), "a file read is not spooled");
        assert_eq!(file.kept(), c.kept());
        let nowhere = Saved::Nowhere("the sandbox refused the copy".to_owned());
        assert!(render("stderr", &c, Some(&nowhere)).contains(
            "stderr was 100 bytes, of which the first 5 and the last 5 are shown. The whole of it could not be kept (the sandbox refused the copy)"
        ));
    }

    #[test]
    fn a_spool_removes_its_host_file_when_dropped() {
        let c = captured(4, &[b"0123456789"]);
        let path = c.spool().unwrap().path().to_owned();
        assert!(path.exists());
        drop(c);
        assert!(!path.exists(), "the host's temporary file outlived its capture");
    }

    #[test]
    fn a_character_cut_by_the_budget_is_dropped_whole() {
        // "é" is two bytes; a head of 3 bytes ends in the middle of the second one.
        let c = captured(6, &["éééééé".as_bytes()]);
        let text = render("stdout", &c, None);
        assert!(text.starts_with("--- stdout ---\né\n[... 6 bytes cut here"), "{text}");
        assert!(text.ends_with("The whole of it was not kept.]\né"), "{text}");
    }
}
