//! Sandbox-chosen text made safe for a terminal or a one-line log.
//!
//! Ids, labels, paths, runner messages and provider messages can carry bytes the sandbox
//! (or a provider's server) chose. Written raw to a terminal, `ESC ] 0 ; … BEL` retitles the
//! window, `ESC [ 2 J` clears the screen, a carriage return or backspaces overwrite what the
//! line said, a newline forges a line of its own in a log, and a bidi override (U+202E)
//! makes the text read backwards. [`escape`] and [`escape_bytes`] spell every such
//! character out instead, so the text keeps its information and loses its effect. Every
//! error message ([`Error`](crate::Error)'s `Display`) and every line of the CLI that
//! carries such bytes goes through them; a command's own output, which the caller asked
//! for, is not touched.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// Whether `c` has an effect on a terminal or a line-oriented log beyond showing a glyph:
/// C0 and C1 controls and DEL (`char::is_control`), the bidi formatting characters, and
/// the Unicode line and paragraph separators.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
                | '\u{2028}' | '\u{2029}'
        )
}

/// Writes `c` escaped: `\n`, `\r`, `\t` by name, other characters below U+0100 as `\xNN`,
/// the rest as `\u{NNNN}`.
fn push_escaped(out: &mut String, c: char) {
    let _ = match c {
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        '\t' => out.write_str("\\t"),
        c if u32::from(c) < 0x100 => write!(out, "\\x{:02x}", u32::from(c)),
        c => write!(out, "\\u{{{:04x}}}", u32::from(c)),
    };
}

/// `text` with every control character (C0, DEL, C1 U+0080 to U+009F, newlines and tabs
/// included), bidi formatting character (U+061C, U+200E, U+200F, U+202A to U+202E,
/// U+2066 to U+2069) and line or paragraph separator (U+2028, U+2029) spelled out:
/// `\n`, `\r`, `\t`, `\x1b`, `\u{202e}`. Other text, backslashes included, is unchanged,
/// and borrowed when nothing needed escaping.
///
/// ```
/// assert_eq!(sandboxio::text::escape("\x1b]0;pwned\x07a\nb"), r"\x1b]0;pwned\x07a\nb");
/// assert_eq!(sandboxio::text::escape("plain/path é"), "plain/path é");
/// ```
#[must_use]
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`escape`] for bytes that need not be UTF-8: valid UTF-8 is escaped as by [`escape`],
/// and each byte of an invalid sequence is written as `\xNN`.
///
/// ```
/// assert_eq!(sandboxio::text::escape_bytes(b"ok\xff\x1b[2J"), r"ok\xff\x1b[2J");
/// ```
#[must_use]
pub fn escape_bytes(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return escape(text);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        out.push_str(&escape(chunk.valid()));
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

/// A `Display` of a string through [`escape`], for format strings:
/// `format!("… {}", Escaped(&message))` writes no control character of `message`.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::{Escaped, escape, escape_bytes};
    use std::borrow::Cow;

    #[test]
    fn each_kind_of_control_is_spelled_out_exactly() {
        for (raw, shown) in [
            ("\x1b", r"\x1b"),
            ("\x1b[2J\x1b[31mred", r"\x1b[2J\x1b[31mred"),
            ("\x1b]0;pwned\x07", r"\x1b]0;pwned\x07"),
            ("\x07", r"\x07"),
            ("done\rfake", r"done\rfake"),
            ("abc\x08\x08\x08xyz", r"abc\x08\x08\x08xyz"),
            ("\u{7f}", r"\x7f"),
            ("\u{80}\u{9b}31m\u{9f}", r"\x80\x9b31m\x9f"),
            ("line\nforged: ok", r"line\nforged: ok"),
            ("a\tb", r"a\tb"),
            ("\0", r"\x00"),
            ("file\u{202e}txt.exe", r"file\u{202e}txt.exe"),
            ("\u{2066}\u{2069}\u{200f}\u{061c}", r"\u{2066}\u{2069}\u{200f}\u{061c}"),
            ("a\u{2028}b\u{2029}c", r"a\u{2028}b\u{2029}c"),
        ] {
            assert_eq!(escape(raw), shown, "{raw:?}");
        }
    }

    #[test]
    fn printable_text_is_kept_and_borrowed() {
        for text in ["", "sbx-1234", "/workspace/a b/c.txt", r"back\slash", "é 日本 🦀", "\u{a0}nbsp"] {
            assert!(matches!(escape(text), Cow::Borrowed(t) if t == text), "{text:?}");
        }
    }

    #[test]
    fn invalid_utf8_is_shown_byte_by_byte() {
        assert_eq!(escape_bytes(b"ok\xff\xfe"), r"ok\xff\xfe");
        assert_eq!(escape_bytes(b"\xe2\x82"), r"\xe2\x82");
        assert_eq!(escape_bytes(b"\xc3\xa9\x1b[2J\x80"), r"é\x1b[2J\x80");
        assert_eq!(escape_bytes(b"\xc2\x9b"), r"\x9b", "a C1 control encoded as UTF-8");
        assert_eq!(escape_bytes("plain".as_bytes()), "plain");
    }

    #[test]
    fn the_display_wrapper_escapes() {
        assert_eq!(format!("[{}]", Escaped("a\x1b[2Jb")), r"[a\x1b[2Jb]");
    }
}
