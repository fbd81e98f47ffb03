//! The escapes and formats of `echo -e` and `printf`, on bytes so that `\xff` stays
//! byte-exact.

/// Backslash escapes as `echo -e` and `printf` read them. Returns the bytes and whether
/// `\c` (stop output) was met.
pub(super) fn unescape(s: &str) -> (Vec<u8>, bool) {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' || i + 1 == bytes.len() {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        i += 1;
        match bytes[i] {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'a' => out.push(7),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'v' => out.push(11),
            b'e' => out.push(27),
            b'\\' => out.push(b'\\'),
            b'c' => return (out, true),
            b'x' => {
                let hex: String = bytes[i + 1..]
                    .iter()
                    .take(2)
                    .take_while(|b| b.is_ascii_hexdigit())
                    .map(|b| *b as char)
                    .collect();
                if hex.is_empty() {
                    out.extend_from_slice(b"\\x");
                } else {
                    out.push(u8::from_str_radix(&hex, 16).unwrap_or(0));
                    i += hex.len();
                }
            }
            b'0'..=b'7' => {
                let start = if bytes[i] == b'0' { i + 1 } else { i };
                let oct: String = bytes[start..]
                    .iter()
                    .take(3)
                    .take_while(|b| (b'0'..=b'7').contains(b))
                    .map(|b| *b as char)
                    .collect();
                let value = u32::from_str_radix(if oct.is_empty() { "0" } else { &oct }, 8).unwrap_or(0);
                out.push(u8::try_from(value & 0xff).unwrap_or(0));
                i = start + oct.len() - 1;
                if oct.is_empty() {
                    i = start - 1;
                }
            }
            other => {
                out.push(b'\\');
                out.push(other);
            }
        }
        i += 1;
    }
    (out, false)
}

/// `printf` with `%s %d %i %b %c %x %o %%`; the format is reused while arguments remain.
/// Works on bytes, so escapes such as `\xff` stay byte-exact.
/// Returns the output and the arguments that were not valid numbers for `%d`-style
/// conversions (printed as 0, and the command exits 1, as `sh`'s printf does).
pub(super) fn printf(format: &str, args: &[String]) -> (Vec<u8>, Vec<String>) {
    let mut bad_numbers = Vec::new();
    let (fmt, _) = unescape(format);
    let mut out = Vec::new();
    let mut next = 0;
    loop {
        let mut consumed = false;
        let mut i = 0;
        while i < fmt.len() {
            let c = fmt[i];
            i += 1;
            if c != b'%' {
                out.push(c);
                continue;
            }
            let spec_start = i;
            while i < fmt.len() && (fmt[i].is_ascii_digit() || fmt[i] == b'-' || fmt[i] == b'.') {
                i += 1;
            }
            let spec = String::from_utf8_lossy(&fmt[spec_start..i]).into_owned();
            let Some(&conv) = fmt.get(i) else { break };
            i += 1;
            if conv == b'%' {
                out.push(b'%');
                continue;
            }
            let arg = args.get(next).cloned().unwrap_or_default();
            consumed |= next < args.len();
            next += 1;
            // Wider than the largest output cap is truncated output anyway.
            let width: usize = spec
                .trim_start_matches('-')
                .split('.')
                .next()
                .and_then(|w| w.parse().ok())
                .unwrap_or(0)
                .min(crate::exec::DEFAULT_OUTPUT_LIMIT + 1);
            let mut number = || {
                let trimmed = arg.trim();
                trimmed.parse::<i64>().unwrap_or_else(|_| {
                    if !trimmed.is_empty() {
                        bad_numbers.push(trimmed.to_owned());
                    }
                    0
                })
            };
            let text = match conv {
                b's' => arg.clone(),
                b'b' => {
                    out.extend_from_slice(&unescape(&arg).0);
                    continue;
                }
                b'c' => arg.chars().next().map(String::from).unwrap_or_default(),
                b'd' | b'i' => number().to_string(),
                b'x' => format!("{:x}", number()),
                b'o' => format!("{:o}", number()),
                other => format!("%{spec}{}", char::from(other)),
            };
            // Padded by hand: `format!` widths stop at 65535.
            let pad = " ".repeat(width.saturating_sub(text.chars().count()));
            let padded = if spec.starts_with('-') { format!("{text}{pad}") } else { format!("{pad}{text}") };
            out.extend_from_slice(padded.as_bytes());
        }
        if !consumed || next >= args.len() {
            break;
        }
    }
    (out, bad_numbers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_handles_hex_and_octal() {
        assert_eq!(unescape(r"a\x00\xffb\n").0, b"a\x00\xffb\n");
        assert_eq!(unescape(r"\0101\101").0, b"AA");
        assert_eq!(unescape(r"a\cb"), (b"a".to_vec(), true));
        assert_eq!(unescape(r"\q\x"), (br"\q\x".to_vec(), false));
    }

    #[test]
    fn printf_reuses_the_format_and_flags_bad_numbers() {
        assert_eq!(printf(r"%s-%d\n", &["a".into(), "7".into(), "b".into(), "8".into()]).0, b"a-7\nb-8\n");
        assert_eq!(printf(r"\x00\x01", &[]).0, b"\x00\x01");
        assert_eq!(printf("%d", &["99999999999999999999".into()]).1, ["99999999999999999999"]);
        assert_eq!(
            printf(
                "[%5s|%-3d|%x|%o|%c|%%]",
                &["ab".into(), "7".into(), "255".into(), "8".into(), "xyz".into()]
            )
            .0,
            b"[   ab|7  |ff|10|x|%]"
        );
        assert_eq!(printf("%b", &[r"a\tb".into()]).0, b"a\tb");
    }
}
