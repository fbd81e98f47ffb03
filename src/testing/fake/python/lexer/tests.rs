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

#[test]
fn an_assignment_is_names_operators_and_numbers_then_a_newline() {
    assert_eq!(
        tokens("x = 1 + 2.5 * 1_000"),
        [
            (name("x"), 1),
            (op("="), 1),
            (Tok::Int(1), 1),
            (op("+"), 1),
            (Tok::Float(2.5), 1),
            (op("*"), 1),
            (Tok::Int(1000), 1),
            (Tok::Newline, 1),
        ]
    );
}

#[test]
fn operators_are_read_longest_first() {
    assert_eq!(
        tokens("a **= b // c != .5"),
        [
            (name("a"), 1),
            (op("**="), 1),
            (name("b"), 1),
            (op("//"), 1),
            (name("c"), 1),
            (op("!="), 1),
            (Tok::Float(0.5), 1),
            (Tok::Newline, 1),
        ]
    );
}

#[test]
fn string_prefixes_choose_the_token_and_whether_escapes_are_decoded() {
    assert_eq!(
        tokens(r#"'a\tb' b'\x41\n' r'\n' f"{x!r}" U"u""#),
        [
            (text("a\tb"), 1),
            (Tok::Bytes(b"A\n".to_vec()), 1),
            (text("\\n"), 1),
            (Tok::FStr("{x!r}".into()), 1),
            (text("u"), 1),
            (Tok::Newline, 1),
        ]
    );
}

#[test]
fn newlines_inside_brackets_and_after_a_backslash_join_lines() {
    assert_eq!(
        tokens("f(1,\n    2)\ny = 1 \\\n  + 2 # note\n"),
        [
            (name("f"), 1),
            (op("("), 1),
            (Tok::Int(1), 1),
            (op(","), 1),
            (Tok::Int(2), 2),
            (op(")"), 2),
            (Tok::Newline, 2),
            (name("y"), 3),
            (op("="), 3),
            (Tok::Int(1), 3),
            (op("+"), 4),
            (Tok::Int(2), 4),
            (Tok::Newline, 4),
            (Tok::Newline, 5),
        ]
    );
}

#[test]
fn a_triple_quoted_string_counts_the_lines_it_spans() {
    assert_eq!(
        tokens("s = \"\"\"a\nb\"\"\"\nt"),
        [
            (name("s"), 1),
            (op("="), 1),
            (text("a\nb"), 1),
            (Tok::Newline, 2),
            (name("t"), 3),
            (Tok::Newline, 3)
        ]
    );
}

#[test]
fn indentation_is_marked_on_code_lines_only() {
    assert_eq!(
        tokens("class A:\n    pass\n  # comment\n\t\nx"),
        [
            (name("class"), 1),
            (name("A"), 1),
            (op(":"), 1),
            (Tok::Newline, 1),
            (Tok::Indent, 2),
            (name("pass"), 2),
            (Tok::Newline, 2),
            (Tok::Newline, 3),
            (Tok::Newline, 4),
            (name("x"), 5),
            (Tok::Newline, 5),
        ]
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
