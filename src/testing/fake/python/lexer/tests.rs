//! Exact token streams for representative cells, and each lexical error with its line.

use super::{SyntaxError, Tok, tokenize};

fn tokens(src: &str) -> Vec<(Tok, usize)> {
    tokenize(src).unwrap_or_else(|e| panic!("{src:?} should tokenize, got {e:?}"))
}

fn error(src: &str) -> SyntaxError {
    match tokenize(src) {
        Ok(toks) => panic!("{src:?} should not tokenize, got {toks:?}"),
        Err(e) => e,
    }
}

fn name(n: &str) -> Tok {
    Tok::Name(n.to_owned())
}

fn op(o: &str) -> Tok {
    Tok::Op(o.to_owned())
}

fn text(s: &str) -> Tok {
    Tok::Str(s.to_owned())
}

/// The stream `tokenize` should return, written line by line.
fn by_line(lines: &[(usize, &[Tok])]) -> Vec<(Tok, usize)> {
    lines.iter().flat_map(|(line, toks)| toks.iter().map(|t| (t.clone(), *line))).collect()
}

#[test]
fn an_assignment_is_names_operators_and_numbers_then_a_newline() {
    let line =
        [name("x"), op("="), Tok::Int(1), op("+"), Tok::Float(2.5), op("*"), Tok::Int(1000), Tok::Newline];
    assert_eq!(tokens("x = 1 + 2.5 * 1_000"), by_line(&[(1, &line)]));
}

#[test]
fn operators_are_read_longest_first() {
    let line =
        [name("a"), op("**="), name("b"), op("//"), name("c"), op("!="), Tok::Float(0.5), Tok::Newline];
    assert_eq!(tokens("a **= b // c != .5"), by_line(&[(1, &line)]));
}

#[test]
fn string_prefixes_choose_the_token_and_whether_escapes_are_decoded() {
    let line = [
        text("a\tb"),
        Tok::Bytes(b"A\n".to_vec()),
        text("\\n"),
        Tok::FStr("{x!r}".into()),
        text("u"),
        Tok::Newline,
    ];
    assert_eq!(tokens(r#"'a\tb' b'\x41\n' r'\n' f"{x!r}" U"u""#), by_line(&[(1, &line)]));
}

#[test]
fn newlines_inside_brackets_and_after_a_backslash_join_lines() {
    assert_eq!(
        tokens("f(1,\n    2)\ny = 1 \\\n  + 2 # note\n"),
        by_line(&[
            (1, &[name("f"), op("("), Tok::Int(1), op(",")]),
            (2, &[Tok::Int(2), op(")"), Tok::Newline]),
            (3, &[name("y"), op("="), Tok::Int(1)]),
            (4, &[op("+"), Tok::Int(2), Tok::Newline]),
            (5, &[Tok::Newline]),
        ])
    );
}

#[test]
fn a_triple_quoted_string_counts_the_lines_it_spans() {
    assert_eq!(
        tokens("s = \"\"\"a\nb\"\"\"\nt"),
        by_line(&[
            (1, &[name("s"), op("="), text("a\nb")]),
            (2, &[Tok::Newline]),
            (3, &[name("t"), Tok::Newline])
        ])
    );
}

#[test]
fn indentation_is_marked_on_code_lines_only() {
    assert_eq!(
        tokens("class A:\n    pass\n  # comment\n\t\nx"),
        by_line(&[
            (1, &[name("class"), name("A"), op(":"), Tok::Newline]),
            (2, &[Tok::Indent, name("pass"), Tok::Newline]),
            (3, &[Tok::Newline]),
            (4, &[Tok::Newline]),
            (5, &[name("x"), Tok::Newline]),
        ])
    );
}

#[test]
fn unbalanced_brackets_are_blamed_on_the_line_python_names() {
    let e = error("x = (1,\n2\n");
    assert_eq!((e.line, e.message.as_str(), e.unmodelled), (1, "'(' was never closed", false));
    let e = error("x = 1\ny = 2)\n");
    assert_eq!((e.line, e.message.as_str()), (2, "unmatched ')'"));
    let e = error("a = [1,\n 2)");
    assert_eq!(
        (e.line, e.message.as_str()),
        (2, "closing parenthesis ')' does not match opening parenthesis '['")
    );
}

#[test]
fn unterminated_strings_are_syntax_errors_at_their_line() {
    let e = error("\n\ns = 'abc\n");
    assert_eq!((e.line, e.message.as_str()), (3, "unterminated string literal"));
    let e = error("x = 1\ny = '''abc\n");
    assert_eq!((e.line, e.message.as_str()), (2, "unterminated triple-quoted string literal"));
    let e = error(r"s = '\xZZ'");
    assert_eq!((e.line, e.message.as_str()), (1, "(unicode error) truncated \\xXX escape"));
}

#[test]
fn bad_characters_and_literals_are_syntax_errors() {
    let e = error("x = 1\ny = $\n");
    assert_eq!((e.line, e.message.as_str(), e.unmodelled), (2, "invalid character '$' (U+0024)", false));
    let e = error("n = 1abc");
    assert_eq!((e.line, e.message.as_str(), e.unmodelled), (1, "invalid decimal literal", false));
}

#[test]
fn valid_literals_the_fake_does_not_model_are_marked_unmodelled() {
    let e = error("x = 1\ny = 0x1F");
    assert_eq!(
        (e.line, e.message.as_str(), e.unmodelled),
        (2, "hexadecimal, octal, binary and imaginary literals", true)
    );
    let e = error("99999999999999999999");
    assert_eq!((e.line, e.message.as_str(), e.unmodelled), (1, "integer literals beyond 64 bits", true));
}
