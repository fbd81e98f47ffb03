//! The fake shell's syntax: a lexer to [`Tok`]ens and a parser to list [`Item`]s.
//!
//! Compound commands and the rest of what the fake does not model are syntax errors here,
//! each with a message that says so.

/// One piece of a word, before expansion.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Seg {
    /// Unquoted text: field-split never, but it can hold `VAR=` of an assignment.
    Lit(String),
    /// Quoted text (`'…'` or the plain parts of `"…"`), kept as one field.
    Quoted(String),
    /// `$NAME`, `${NAME}` or a special parameter; `true` inside double quotes.
    Var(String, bool),
    /// `$(…)`: the script; `true` inside double quotes.
    Sub(String, bool),
}

/// A word: its pieces, joined after expansion.
pub(super) type Word = Vec<Seg>;

/// A token of the lexer.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    /// A word.
    Word(Word),
    /// An operator: `;` `\n` `&&` `||` `|` `&` `(` `)`.
    Op(&'static str),
    /// A redirection: source fd, operator (`>`, `>>`, `<`, `>&`, `&>`).
    Redir(u32, &'static str),
}

/// A redirection of a simple command.
#[derive(Debug, PartialEq)]
pub(super) struct Redir {
    pub(super) fd: u32,
    pub(super) op: &'static str,
    pub(super) target: Word,
}

/// `VAR=value cmd args > target`.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Simple {
    pub(super) assigns: Vec<(String, Word)>,
    pub(super) words: Vec<Word>,
    pub(super) redirs: Vec<Redir>,
}

/// `[!] cmd | cmd …`.
#[derive(Debug, PartialEq)]
pub(super) struct Pipeline {
    pub(super) negate: bool,
    pub(super) cmds: Vec<Simple>,
}

/// `pipeline && pipeline || …`: each later pipeline with `true` for `&&`.
#[derive(Debug, PartialEq)]
pub(super) struct AndOr {
    pub(super) first: Pipeline,
    pub(super) rest: Vec<(bool, Pipeline)>,
}

/// One list item of a script, `&`-terminated when `background`.
#[derive(Debug, PartialEq)]
pub(super) struct Item {
    pub(super) andor: AndOr,
    pub(super) background: bool,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Reads `$…` after the `$` at `chars[*i]` (already consumed); returns the segment.
fn lex_dollar(chars: &[char], i: &mut usize, quoted: bool) -> Result<Seg, String> {
    match chars.get(*i) {
        Some('{') => {
            let start = *i + 1;
            let end = chars[start..].iter().position(|c| *c == '}').ok_or("unterminated ${")?;
            *i = start + end + 1;
            Ok(Seg::Var(chars[start..start + end].iter().collect(), quoted))
        }
        Some('(') if chars.get(*i + 1) == Some(&'(') => {
            Err("arithmetic expansion `$((…))` is not modelled by the fake shell".into())
        }
        Some('(') => {
            let mut depth = 0;
            let start = *i + 1;
            let mut j = *i;
            loop {
                match chars.get(j) {
                    Some('(') => depth += 1,
                    Some(')') => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    Some(_) => {}
                    None => return Err("unterminated $(".into()),
                }
                j += 1;
            }
            *i = j + 1;
            Ok(Seg::Sub(chars[start..j].iter().collect(), quoted))
        }
        Some(c) if matches!(c, '?' | '$' | '#' | '@' | '*' | '!') || c.is_ascii_digit() => {
            *i += 1;
            Ok(Seg::Var(c.to_string(), quoted))
        }
        Some(c) if is_name_char(*c) => {
            let start = *i;
            while chars.get(*i).is_some_and(|c| is_name_char(*c)) {
                *i += 1;
            }
            Ok(Seg::Var(chars[start..*i].iter().collect(), quoted))
        }
        _ => Ok(if quoted { Seg::Quoted("$".into()) } else { Seg::Lit("$".into()) }),
    }
}

/// Reads a `"…"` string after its opening quote at `chars[*i]` (already consumed), up to
/// and past its closing quote, onto `word`.
fn lex_double_quoted(chars: &[char], i: &mut usize, word: &mut Word) -> Result<(), String> {
    let mut q = String::new();
    // An empty "" still makes a (quoted, empty) word.
    word.push(Seg::Quoted(String::new()));
    loop {
        match chars.get(*i) {
            None => return Err("unterminated quoted string".into()),
            Some('"') => {
                *i += 1;
                break;
            }
            Some('\\') if matches!(chars.get(*i + 1), Some('$' | '"' | '\\' | '`' | '\n')) => {
                if chars[*i + 1] != '\n' {
                    q.push(chars[*i + 1]);
                }
                *i += 2;
            }
            Some('$') => {
                *i += 1;
                if !q.is_empty() {
                    word.push(Seg::Quoted(std::mem::take(&mut q)));
                }
                word.push(lex_dollar(chars, i, true)?);
            }
            Some(ch) => {
                q.push(*ch);
                *i += 1;
            }
        }
    }
    if !q.is_empty() {
        word.push(Seg::Quoted(q));
    }
    Ok(())
}

/// Reads the operator that starts with `&` or `|` at `chars[*i]`, and moves past it.
fn lex_control(chars: &[char], i: &mut usize) -> Tok {
    let c = chars[*i];
    let next = chars.get(*i + 1).copied();
    if c == '&' && next == Some('>') {
        *i += 2;
        Tok::Redir(1, "&>")
    } else if next == Some(c) {
        *i += 2;
        Tok::Op(if c == '&' { "&&" } else { "||" })
    } else {
        *i += 1;
        Tok::Op(if c == '&' { "&" } else { "|" })
    }
}

/// Reads the redirection operator that starts with `>` or `<` at `chars[*i]`, and moves
/// past it.
fn lex_redirection(chars: &[char], i: &mut usize) -> &'static str {
    let op = match (chars[*i], chars.get(*i + 1)) {
        ('>', Some('>')) => ">>",
        ('>', Some('&')) => ">&",
        ('>', _) => ">",
        _ => "<",
    };
    *i += op.len();
    op
}

/// Splits a script into tokens; `Err` names the syntax error or the unmodelled syntax.
pub(super) fn lex(src: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let mut word: Word = Vec::new();
    let mut lit = String::new();
    let mut i = 0;
    let flush_lit = |lit: &mut String, word: &mut Word| {
        if !lit.is_empty() {
            word.push(Seg::Lit(std::mem::take(lit)));
        }
    };
    let flush_word = |lit: &mut String, word: &mut Word, toks: &mut Vec<Tok>| {
        if !lit.is_empty() {
            word.push(Seg::Lit(std::mem::take(lit)));
        }
        if !word.is_empty() {
            toks.push(Tok::Word(std::mem::take(word)));
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => {
                flush_word(&mut lit, &mut word, &mut toks);
                i += 1;
            }
            '#' if lit.is_empty() && word.is_empty() => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '\n' | ';' => {
                flush_word(&mut lit, &mut word, &mut toks);
                toks.push(Tok::Op(if c == ';' { ";" } else { "\n" }));
                i += 1;
            }
            '&' | '|' => {
                flush_word(&mut lit, &mut word, &mut toks);
                toks.push(lex_control(&chars, &mut i));
            }
            '>' | '<' => {
                // A word made only of digits right before the operator is its fd.
                let mut fd = u32::from(c == '>');
                if word.is_empty() && !lit.is_empty() && lit.chars().all(|d| d.is_ascii_digit()) {
                    fd = lit.parse().map_err(|_| "bad file descriptor")?;
                    lit.clear();
                } else {
                    flush_word(&mut lit, &mut word, &mut toks);
                }
                toks.push(Tok::Redir(fd, lex_redirection(&chars, &mut i)));
            }
            '(' | ')' => {
                flush_word(&mut lit, &mut word, &mut toks);
                toks.push(Tok::Op(if c == '(' { "(" } else { ")" }));
                i += 1;
            }
            '\\' => {
                match chars.get(i + 1) {
                    Some('\n') => {}
                    Some(n) => lit.push(*n),
                    None => lit.push('\\'),
                }
                i += 2;
            }
            '\'' => {
                flush_lit(&mut lit, &mut word);
                let end =
                    chars[i + 1..].iter().position(|c| *c == '\'').ok_or("unterminated quoted string")?;
                word.push(Seg::Quoted(chars[i + 1..i + 1 + end].iter().collect()));
                i += end + 2;
            }
            '"' => {
                flush_lit(&mut lit, &mut word);
                i += 1;
                lex_double_quoted(&chars, &mut i, &mut word)?;
            }
            '$' => {
                flush_lit(&mut lit, &mut word);
                i += 1;
                word.push(lex_dollar(&chars, &mut i, false)?);
            }
            '`' => return Err("backquote command substitution is not modelled; use $(…)".into()),
            _ => {
                lit.push(c);
                i += 1;
            }
        }
    }
    flush_word(&mut lit, &mut word, &mut toks);
    Ok(toks)
}

const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "function",
    "{", "}",
];

fn literal(word: &Word) -> Option<String> {
    let mut s = String::new();
    for seg in word {
        match seg {
            Seg::Lit(l) => s.push_str(l),
            _ => return None,
        }
    }
    Some(s)
}

/// Groups tokens into list items; `Err` names the syntax error or the unmodelled syntax.
pub(super) fn parse(toks: Vec<Tok>) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut it = toks.into_iter().peekable();
    loop {
        while matches!(it.peek(), Some(Tok::Op(";" | "\n"))) {
            it.next();
        }
        if it.peek().is_none() {
            break;
        }
        let mut pipelines: Vec<(bool, Pipeline)> = Vec::new();
        let mut connector = true;
        let terminator = loop {
            let mut negate = false;
            let mut cmds = Vec::new();
            let mut cmd = Simple::default();
            loop {
                match it.peek() {
                    Some(Tok::Word(w)) => {
                        let w = w.clone();
                        it.next();
                        let lit = literal(&w);
                        if cmd.words.is_empty() && cmd.assigns.is_empty() {
                            if lit.as_deref() == Some("!") && !negate {
                                negate = true;
                                continue;
                            }
                            if let Some(k) = lit.as_deref().filter(|l| KEYWORDS.contains(l)) {
                                return Err(format!("`{k}` is not modelled by the fake shell"));
                            }
                        }
                        if cmd.words.is_empty()
                            && let Some(Seg::Lit(first)) = w.first()
                            && let Some((name, value)) = first.split_once('=')
                            && !name.is_empty()
                            && name.chars().all(is_name_char)
                        {
                            let mut value_word = vec![Seg::Lit(value.to_owned())];
                            value_word.extend(w[1..].iter().cloned());
                            cmd.assigns.push((name.to_owned(), value_word));
                            continue;
                        }
                        cmd.words.push(w);
                    }
                    Some(Tok::Redir(fd, op)) => {
                        let (fd, op) = (*fd, *op);
                        it.next();
                        match it.next() {
                            Some(Tok::Word(target)) => cmd.redirs.push(Redir { fd, op, target }),
                            _ => return Err(format!("syntax error: redirection `{op}` needs a target")),
                        }
                    }
                    Some(Tok::Op("|")) => {
                        it.next();
                        if cmd.words.is_empty() && cmd.assigns.is_empty() {
                            return Err("syntax error near unexpected token `|`".into());
                        }
                        cmds.push(std::mem::take(&mut cmd));
                    }
                    Some(Tok::Op("(" | ")")) => {
                        return Err("subshells `( … )` are not modelled by the fake shell".into());
                    }
                    _ => break,
                }
            }
            if cmd.words.is_empty() && cmd.assigns.is_empty() && cmd.redirs.is_empty() {
                return Err("syntax error: missing command".into());
            }
            cmds.push(cmd);
            pipelines.push((connector, Pipeline { negate, cmds }));
            match it.next() {
                Some(Tok::Op("&&")) => connector = true,
                Some(Tok::Op("||")) => connector = false,
                other => break other,
            }
            while matches!(it.peek(), Some(Tok::Op("\n"))) {
                it.next();
            }
        };
        let background = matches!(terminator, Some(Tok::Op("&")));
        let mut pipelines = pipelines.into_iter();
        let (_, first) = pipelines.next().ok_or("syntax error: empty command")?;
        items.push(Item { andor: AndOr { first, rest: pipelines.collect() }, background });
    }
    Ok(items)
}

/// Lexes and parses a whole script.
pub(super) fn parse_script(src: &str) -> Result<Vec<Item>, String> {
    lex(src).and_then(parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> Seg {
        Seg::Lit(s.to_owned())
    }

    fn quoted(s: &str) -> Seg {
        Seg::Quoted(s.to_owned())
    }

    fn word(segs: &[Seg]) -> Tok {
        Tok::Word(segs.to_vec())
    }

    #[test]
    fn lexer_keeps_quotes_together_and_splits_operators() {
        let toks = lex("echo 'a b' \"c $X\" d>&2").unwrap();
        assert_eq!(
            toks,
            [
                word(&[lit("echo")]),
                word(&[quoted("a b")]),
                word(&[quoted(""), quoted("c "), Seg::Var("X".into(), true)]),
                word(&[lit("d")]),
                Tok::Redir(1, ">&"),
                word(&[lit("2")]),
            ]
        );
        assert_eq!(
            lex("a&&b||c|d&e;f\ng").unwrap(),
            [
                word(&[lit("a")]),
                Tok::Op("&&"),
                word(&[lit("b")]),
                Tok::Op("||"),
                word(&[lit("c")]),
                Tok::Op("|"),
                word(&[lit("d")]),
                Tok::Op("&"),
                word(&[lit("e")]),
                Tok::Op(";"),
                word(&[lit("f")]),
                Tok::Op("\n"),
                word(&[lit("g")]),
            ]
        );
    }

    #[test]
    fn lexer_reads_redirections_with_their_descriptors() {
        assert_eq!(
            lex("x 2>>log <in &>all 3>o").unwrap(),
            [
                word(&[lit("x")]),
                Tok::Redir(2, ">>"),
                word(&[lit("log")]),
                Tok::Redir(0, "<"),
                word(&[lit("in")]),
                Tok::Redir(1, "&>"),
                word(&[lit("all")]),
                Tok::Redir(3, ">"),
                word(&[lit("o")]),
            ]
        );
        // Digits glued to a longer word are part of the word, not a descriptor.
        assert_eq!(lex("a2>f").unwrap(), [word(&[lit("a2")]), Tok::Redir(1, ">"), word(&[lit("f")])]);
    }

    #[test]
    fn lexer_expands_nothing_but_marks_parameters_and_substitutions() {
        assert_eq!(
            lex("$A${B}$?$1 \"$(echo \"x\")\" $").unwrap(),
            [
                word(&[
                    Seg::Var("A".into(), false),
                    Seg::Var("B".into(), false),
                    Seg::Var("?".into(), false),
                    Seg::Var("1".into(), false),
                ]),
                word(&[quoted(""), Seg::Sub("echo \"x\"".into(), true)]),
                word(&[lit("$")]),
            ]
        );
        assert_eq!(lex(r"a\ b\$c # a comment").unwrap(), [word(&[lit("a b$c")])]);
        assert_eq!(lex("echo x#y").unwrap(), [word(&[lit("echo")]), word(&[lit("x#y")])]);
    }

    #[test]
    fn lexer_names_unterminated_and_unmodelled_syntax() {
        assert_eq!(lex("echo 'a").unwrap_err(), "unterminated quoted string");
        assert_eq!(lex("echo \"a").unwrap_err(), "unterminated quoted string");
        assert_eq!(lex("echo ${a").unwrap_err(), "unterminated ${");
        assert_eq!(lex("echo $(a").unwrap_err(), "unterminated $(");
        assert_eq!(
            lex("echo $((1+2))").unwrap_err(),
            "arithmetic expansion `$((…))` is not modelled by the fake shell"
        );
        assert_eq!(lex("echo `a`").unwrap_err(), "backquote command substitution is not modelled; use $(…)");
    }

    #[test]
    fn parser_builds_lists_of_and_or_pipelines() {
        let items = parse_script("! X=1 a b | c > f && d || e &\n\nf").unwrap();
        let simple = |words: &[&str]| Simple {
            assigns: Vec::new(),
            words: words.iter().map(|w| vec![lit(w)]).collect(),
            redirs: Vec::new(),
        };
        let first = Pipeline {
            negate: true,
            cmds: vec![
                Simple { assigns: vec![("X".into(), vec![lit("1")])], ..simple(&["a", "b"]) },
                Simple { redirs: vec![Redir { fd: 1, op: ">", target: vec![lit("f")] }], ..simple(&["c"]) },
            ],
        };
        let expected = [
            Item {
                andor: AndOr {
                    first,
                    rest: vec![
                        (true, Pipeline { negate: false, cmds: vec![simple(&["d"])] }),
                        (false, Pipeline { negate: false, cmds: vec![simple(&["e"])] }),
                    ],
                },
                background: true,
            },
            Item {
                andor: AndOr {
                    first: Pipeline { negate: false, cmds: vec![simple(&["f"])] },
                    rest: Vec::new(),
                },
                background: false,
            },
        ];
        assert_eq!(items, expected);
    }

    #[test]
    fn parser_keeps_assignment_values_whole_and_later_assignments_as_words() {
        let items = parse_script("A=x\"$B\" echo C=d").unwrap();
        let cmd = &items[0].andor.first.cmds[0];
        assert_eq!(cmd.assigns, [("A".to_owned(), vec![lit("x"), quoted(""), Seg::Var("B".into(), true)])]);
        assert_eq!(cmd.words, [vec![lit("echo")], vec![lit("C=d")]]);
        // A line continuation inside `&&` lists is allowed.
        assert_eq!(parse_script("a &&\nb").unwrap()[0].andor.rest.len(), 1);
        assert_eq!(parse_script("").unwrap(), []);
    }

    #[test]
    fn parser_rejects_syntax_errors_and_compound_commands() {
        assert_eq!(parse_script("| a").unwrap_err(), "syntax error near unexpected token `|`");
        assert_eq!(parse_script("a >").unwrap_err(), "syntax error: redirection `>` needs a target");
        assert_eq!(parse_script("a &&").unwrap_err(), "syntax error: missing command");
        // `!` after an assignment is a word, as in `sh`.
        assert_eq!(parse_script("X=1 ! a").unwrap()[0].andor.first.cmds[0].words[0], [lit("!")]);
        assert_eq!(parse_script("a ;; b").unwrap(), parse_script("a; b").unwrap());
        assert_eq!(
            parse_script("if true; then a; fi").unwrap_err(),
            "`if` is not modelled by the fake shell"
        );
        assert_eq!(
            parse_script("for x in a; do b; done").unwrap_err(),
            "`for` is not modelled by the fake shell"
        );
        assert_eq!(parse_script("{ a; }").unwrap_err(), "`{` is not modelled by the fake shell");
        assert_eq!(parse_script("(a)").unwrap_err(), "subshells `( … )` are not modelled by the fake shell");
        // A keyword that is an argument is only a word.
        assert_eq!(parse_script("echo if").unwrap()[0].andor.first.cmds[0].words.len(), 2);
    }
}
