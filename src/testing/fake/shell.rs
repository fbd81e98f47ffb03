//! The fake's POSIX shell subset and its commands.
//!
//! Modelled: simple commands, `;` `&&` `||` `|` `&` and newlines, `'…'` `"…"` and `\`
//! quoting, `$VAR` `${VAR}` `$?` `$$` `$RANDOM` `$(…)`, redirections (`>` `>>` `<` `2>`
//! `>&2` `2>&1` `&>`, `/dev/null`), `VAR=value cmd`, and the commands `echo printf cat exit
//! true false : sleep env printenv pwd cd export unset mkdir rm ls ln touch head wait sh
//! bash python3 python curl wget nc`. Compound commands (`if`, `for`, `while`, `case`, `( … )`,
//! functions) are not modelled: they fail with exit 2 and a message saying so, so that a
//! test never passes on a guess. Script such commands with `FakeBackend::on_run`.

// Lints relaxed for the simulator: the command table is long by nature, and `args`/`argv` follow sh usage.
#![allow(
    clippy::float_cmp,
    clippy::too_many_lines,
    clippy::similar_names,
    clippy::single_match_else,
    clippy::format_collect,
    clippy::collapsible_if
)]

use std::collections::BTreeMap;
use std::time::Duration;

use crate::exec::StreamKind;

use super::machine::{Proc, Stdin, Stop, World, url_host_port};
use super::python;
use super::vfs::Node;

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Lit(String),
    Quoted(String),
    Var(String, bool),
    Sub(String, bool),
}

type Word = Vec<Seg>;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(Word),
    Op(&'static str),
    /// A redirection: source fd, operator (`>`, `>>`, `<`, `>&`, `&>`).
    Redir(u32, &'static str),
}

#[derive(Debug)]
struct Redir {
    fd: u32,
    op: &'static str,
    target: Word,
}

#[derive(Debug, Default)]
struct Simple {
    assigns: Vec<(String, Word)>,
    words: Vec<Word>,
    redirs: Vec<Redir>,
}

#[derive(Debug)]
struct Pipeline {
    negate: bool,
    cmds: Vec<Simple>,
}

#[derive(Debug)]
struct AndOr {
    first: Pipeline,
    rest: Vec<(bool, Pipeline)>,
}

#[derive(Debug)]
struct Item {
    andor: AndOr,
    background: bool,
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

fn lex(src: &str) -> Result<Vec<Tok>, String> {
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
                let next = chars.get(i + 1).copied();
                if c == '&' && next == Some('>') {
                    toks.push(Tok::Redir(1, "&>"));
                    i += 2;
                } else if next == Some(c) {
                    toks.push(Tok::Op(if c == '&' { "&&" } else { "||" }));
                    i += 2;
                } else {
                    toks.push(Tok::Op(if c == '&' { "&" } else { "|" }));
                    i += 1;
                }
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
                let op = match (c, chars.get(i + 1)) {
                    ('>', Some('>')) => {
                        i += 1;
                        ">>"
                    }
                    ('>', Some('&')) => {
                        i += 1;
                        ">&"
                    }
                    ('>', _) => ">",
                    _ => "<",
                };
                toks.push(Tok::Redir(fd, op));
                i += 1;
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
                let mut q = String::new();
                let mut closed = false;
                // An empty "" still makes a (quoted, empty) word.
                word.push(Seg::Quoted(String::new()));
                while i < chars.len() {
                    match chars[i] {
                        '"' => {
                            closed = true;
                            i += 1;
                            break;
                        }
                        '\\' if matches!(chars.get(i + 1), Some('$' | '"' | '\\' | '`' | '\n')) => {
                            if chars[i + 1] != '\n' {
                                q.push(chars[i + 1]);
                            }
                            i += 2;
                        }
                        '$' => {
                            i += 1;
                            if !q.is_empty() {
                                word.push(Seg::Quoted(std::mem::take(&mut q)));
                            }
                            word.push(lex_dollar(&chars, &mut i, true)?);
                        }
                        ch => {
                            q.push(ch);
                            i += 1;
                        }
                    }
                }
                if !closed {
                    return Err("unterminated quoted string".into());
                }
                if !q.is_empty() {
                    word.push(Seg::Quoted(q));
                }
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

fn parse(toks: Vec<Tok>) -> Result<Vec<Item>, String> {
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
                        if cmd.words.is_empty() {
                            if let Some(Seg::Lit(first)) = w.first() {
                                if let Some((name, value)) = first.split_once('=') {
                                    if !name.is_empty() && name.chars().all(is_name_char) {
                                        let mut value_word = vec![Seg::Lit(value.to_owned())];
                                        value_word.extend(w[1..].iter().cloned());
                                        cmd.assigns.push((name.to_owned(), value_word));
                                        continue;
                                    }
                                }
                            }
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

/// Where a command's output goes.
#[derive(Debug, Clone, PartialEq)]
enum Sink {
    Stream(StreamKind),
    Capture,
    File(String),
    Null,
}

/// The fake shell running inside one [`Proc`].
pub(crate) struct Shell<'w, 'a> {
    pub(crate) world: &'w mut World<'a>,
    pub(crate) proc: Proc,
    last: i32,
    captures: Vec<Vec<u8>>,
    stdin_consumed: bool,
    args: Vec<String>,
    /// Nesting of scripts (`$(…)`, `sh -c`, `sh < file`), bounded by [`MAX_NESTING`].
    depth: usize,
    /// When this (background) process started, relative to the main process.
    time_base: Duration,
}

/// How deeply scripts may nest before the fake gives up (a real shell would recurse until
/// it runs out of memory; the fake must never overflow its stack).
const MAX_NESTING: usize = 32;

struct Io {
    stdin: Option<Stdin>,
    out: Sink,
    err: Sink,
}

impl<'w, 'a> Shell<'w, 'a> {
    pub(crate) fn new(world: &'w mut World<'a>, proc: Proc) -> Self {
        Shell {
            world,
            proc,
            last: 0,
            captures: Vec::new(),
            stdin_consumed: false,
            args: Vec::new(),
            depth: 0,
            time_base: Duration::ZERO,
        }
    }

    /// The file system, with the clock that stamps this process's changes set to now.
    fn vfs(&mut self) -> &mut super::vfs::Vfs {
        self.world.vfs.now = self.time_base + self.proc.elapsed;
        self.world.vfs
    }

    fn write(&mut self, sink: &Sink, data: &[u8]) {
        match sink {
            Sink::Stream(kind) => self.proc.output(*kind, data),
            Sink::Capture => {
                if let Some(buf) = self.captures.last_mut() {
                    buf.extend_from_slice(data);
                }
            }
            Sink::File(path) => {
                let _ = self.vfs().write(path, data.to_vec(), None, true);
            }
            Sink::Null => {}
        }
    }

    fn var(&self, name: &str) -> String {
        match name {
            "?" => self.last.to_string(),
            "$" => "1".into(),
            "#" => self.args.len().saturating_sub(1).to_string(),
            "@" | "*" => self.args.get(1..).unwrap_or_default().join(" "),
            "RANDOM" => String::new(),
            n if n.chars().all(|c| c.is_ascii_digit()) => {
                n.parse::<usize>().ok().and_then(|i| self.args.get(i).cloned()).unwrap_or_default()
            }
            n => self.proc.env.get(n).cloned().unwrap_or_default(),
        }
    }

    fn expand(&mut self, word: &Word) -> Result<Vec<String>, Stop> {
        let mut fields: Vec<String> = Vec::new();
        let mut cur = String::new();
        let mut has_field = false;
        for seg in word {
            let (value, split) = match seg {
                Seg::Lit(l) => (l.clone(), false),
                Seg::Quoted(q) => {
                    has_field = true;
                    (q.clone(), false)
                }
                Seg::Var(name, quoted) => {
                    let v = if name == "RANDOM" {
                        (self.world.rng.next_u64() % 32768).to_string()
                    } else {
                        self.var(name)
                    };
                    (v, !quoted)
                }
                Seg::Sub(script, quoted) => {
                    let mut out = self.capture_script(script)?;
                    while out.last() == Some(&b'\n') {
                        out.pop();
                    }
                    (String::from_utf8_lossy(&out).into_owned(), !quoted)
                }
            };
            if split {
                let mut pieces = value.split_whitespace().peekable();
                if value.starts_with(char::is_whitespace) && (has_field || !cur.is_empty()) {
                    fields.push(std::mem::take(&mut cur));
                    has_field = false;
                }
                while let Some(p) = pieces.next() {
                    cur.push_str(p);
                    has_field = true;
                    if pieces.peek().is_some() {
                        fields.push(std::mem::take(&mut cur));
                    }
                }
                if value.ends_with(char::is_whitespace) && has_field {
                    fields.push(std::mem::take(&mut cur));
                    has_field = false;
                }
            } else {
                if !value.is_empty() {
                    has_field = true;
                }
                cur.push_str(&value);
            }
        }
        if has_field || !cur.is_empty() {
            fields.push(cur);
        }
        Ok(fields)
    }

    fn expand_one(&mut self, word: &Word) -> Result<String, Stop> {
        Ok(self.expand(word)?.join(" "))
    }

    /// Runs `script` in a subshell and returns what it wrote to stdout.
    fn capture_script(&mut self, script: &str) -> Result<Vec<u8>, Stop> {
        self.captures.push(Vec::new());
        let saved = (self.proc.env.clone(), self.proc.cwd.clone());
        let io = Io {
            stdin: Some(Stdin::Bytes(Vec::new())),
            out: Sink::Capture,
            err: Sink::Stream(StreamKind::Stderr),
        };
        let result = self.run_source(script, io);
        (self.proc.env, self.proc.cwd) = saved;
        let out = self.captures.pop().unwrap_or_default();
        match result {
            Ok(_) | Err(Stop::Exit(_)) => Ok(out),
            Err(stop) => Err(stop),
        }
    }

    /// Runs an argv directly, with no shell parsing (`Command::new(..)`).
    pub(crate) fn run_argv(&mut self, argv: &[String], stdin: Stdin) -> Result<i32, Stop> {
        let mut io = Io {
            stdin: Some(stdin),
            out: Sink::Stream(StreamKind::Stdout),
            err: Sink::Stream(StreamKind::Stderr),
        };
        match self.dispatch(argv, &mut io) {
            Ok(code) | Err(Stop::Exit(code)) => Ok(code),
            Err(stop) => Err(stop),
        }
    }

    fn run_source(&mut self, script: &str, io: Io) -> Result<i32, Stop> {
        if self.depth >= MAX_NESTING {
            let err = io.err.clone();
            self.write(
                &err,
                format!("sh: scripts nested deeper than {MAX_NESTING} levels are not modelled\n").as_bytes(),
            );
            return Err(Stop::Unmodelled(2));
        }
        self.depth += 1;
        let result = self.run_source_unchecked(script, io);
        self.depth -= 1;
        result
    }

    fn run_source_unchecked(&mut self, script: &str, io: Io) -> Result<i32, Stop> {
        let items = match lex(script).and_then(parse) {
            Ok(items) => items,
            Err(message) => {
                // A syntax error, or syntax the fake does not model: either way nothing of
                // this process can be trusted to go on, so it ends here with status 2.
                let err = io.err.clone();
                self.write(&err, format!("sh: {message}\n").as_bytes());
                return Err(Stop::Unmodelled(2));
            }
        };
        let mut stdin = io.stdin;
        for item in &items {
            if item.background {
                self.spawn_background(&item.andor, &io.out, &io.err)?;
                self.last = 0;
            } else {
                let input = stdin.take();
                self.last = self.run_andor(&item.andor, input, &io.out, &io.err)?;
            }
        }
        Ok(self.last)
    }

    fn spawn_background(&mut self, andor: &AndOr, out: &Sink, err: &Sink) -> Result<(), Stop> {
        let offset = self.proc.elapsed;
        let deadline = self.proc.deadline.map(|d| d.saturating_sub(offset));
        let mut child = Proc::new(deadline, self.proc.limit, self.proc.env.clone(), self.proc.cwd.clone())
            .with_memory_limit(self.proc.memory_limit);
        std::mem::swap(&mut self.proc, &mut child);
        self.time_base += offset;
        let result = self.run_andor(andor, Some(Stdin::Bytes(Vec::new())), out, err);
        self.time_base -= offset;
        std::mem::swap(&mut self.proc, &mut child);
        self.proc.oom_killed |= child.oom_killed;
        // A background job that signals `$$` ends the main process too.
        if let Err(stop @ (Stop::NeedsStdin | Stop::Unmodelled(_) | Stop::Signal(_))) = result {
            return Err(stop);
        }
        let end = if result == Err(Stop::TimedOut) { Duration::MAX } else { offset + child.elapsed };
        let events = child
            .events
            .into_iter()
            .map(|mut e| {
                e.at += offset;
                e
            })
            .collect::<Vec<_>>();
        self.proc.children.push((events, end));
        self.proc.children.extend(child.children.into_iter().map(|(ev, end)| {
            (
                ev.into_iter()
                    .map(|mut e| {
                        e.at += offset;
                        e
                    })
                    .collect(),
                end.saturating_add(offset),
            )
        }));
        Ok(())
    }

    fn run_andor(
        &mut self,
        andor: &AndOr,
        stdin: Option<Stdin>,
        out: &Sink,
        err: &Sink,
    ) -> Result<i32, Stop> {
        let mut status = self.run_pipeline(&andor.first, stdin, out, err)?;
        for (and, pipeline) in &andor.rest {
            if (status == 0) == *and {
                status = self.run_pipeline(pipeline, None, out, err)?;
            }
            self.last = status;
        }
        Ok(status)
    }

    fn run_pipeline(
        &mut self,
        p: &Pipeline,
        stdin: Option<Stdin>,
        out: &Sink,
        err: &Sink,
    ) -> Result<i32, Stop> {
        let mut input = stdin;
        let mut status = 0;
        let n = p.cmds.len();
        for (i, cmd) in p.cmds.iter().enumerate() {
            if i + 1 < n {
                self.captures.push(Vec::new());
                let mut io = Io { stdin: input.take(), out: Sink::Capture, err: err.clone() };
                let r = self.run_simple(cmd, &mut io);
                let captured = self.captures.pop().unwrap_or_default();
                match r {
                    Ok(_) | Err(Stop::Exit(_)) => {}
                    Err(stop) => return Err(stop),
                }
                input = Some(Stdin::Bytes(captured));
            } else {
                let mut io = Io { stdin: input.take(), out: out.clone(), err: err.clone() };
                status = if n > 1 {
                    match self.run_simple(cmd, &mut io) {
                        Ok(c) | Err(Stop::Exit(c)) => c,
                        Err(stop) => return Err(stop),
                    }
                } else {
                    self.run_simple(cmd, &mut io)?
                };
            }
        }
        Ok(if p.negate { i32::from(status == 0) } else { status })
    }

    /// Opens a redirection target, as `sh` does before running the command: `None` (with
    /// the message on stderr) when it cannot be created.
    fn open_target(&mut self, target: &str, append: bool, io: &Io) -> Option<Sink> {
        if target == "/dev/null" {
            return Some(Sink::Null);
        }
        let path = crate::path::resolve(&self.proc.cwd, target);
        let opened = match self.world.vfs.get(&path) {
            Some(Node::Dir { .. }) => Err("Is a directory"),
            Some(_) if append => Ok(()),
            _ => self.vfs().write(&path, Vec::new(), None, false).map_err(|_| "Directory nonexistent"),
        };
        match opened {
            Ok(()) => Some(Sink::File(path)),
            Err(why) => {
                self.err_line(io, &format!("sh: cannot create {target}: {why}"));
                None
            }
        }
    }

    fn run_simple(&mut self, cmd: &Simple, io: &mut Io) -> Result<i32, Stop> {
        let mut assigns = Vec::new();
        for (name, value) in &cmd.assigns {
            assigns.push((name.clone(), self.expand_one(value)?));
        }
        let mut argv = Vec::new();
        for w in &cmd.words {
            argv.extend(self.expand(w)?);
        }
        for r in &cmd.redirs {
            let target = self.expand_one(&r.target)?;
            match r.op {
                ">&" => {
                    let to = match target.as_str() {
                        "1" => io.out.clone(),
                        "2" => io.err.clone(),
                        _ => {
                            let err = io.err.clone();
                            self.write(&err, format!("sh: {target}: bad file descriptor\n").as_bytes());
                            return Ok(1);
                        }
                    };
                    if r.fd == 2 {
                        io.err = to;
                    } else {
                        io.out = to;
                    }
                }
                ">" | ">>" | "&>" => {
                    let Some(sink) = self.open_target(&target, r.op == ">>", io) else {
                        return Ok(2);
                    };
                    match (r.op, r.fd) {
                        ("&>", _) => {
                            io.out = sink.clone();
                            io.err = sink;
                        }
                        (_, 2) => io.err = sink,
                        _ => io.out = sink,
                    }
                }
                _ => {
                    let path = crate::path::resolve(&self.proc.cwd, &target);
                    match self.world.vfs.read(&path) {
                        Ok(data) => io.stdin = Some(Stdin::Bytes(data)),
                        Err(_) => {
                            let err = io.err.clone();
                            self.write(&err, format!("sh: cannot open {target}: No such file\n").as_bytes());
                            return Ok(1);
                        }
                    }
                }
            }
        }
        if argv.is_empty() {
            for (name, value) in assigns {
                self.proc.env.insert(name, value);
            }
            return Ok(0);
        }
        if assigns.is_empty() {
            return self.dispatch(&argv, io);
        }
        let saved = self.proc.env.clone();
        for (name, value) in assigns {
            self.proc.env.insert(name, value);
        }
        let r = self.dispatch(&argv, io);
        self.proc.env = saved;
        r
    }

    fn read_stdin(&mut self, io: &mut Io) -> Result<Vec<u8>, Stop> {
        match io.stdin.take() {
            Some(Stdin::Bytes(b)) => Ok(b),
            Some(Stdin::Open) => Err(Stop::NeedsStdin),
            None if self.stdin_consumed => Ok(Vec::new()),
            None => {
                self.stdin_consumed = true;
                Ok(Vec::new())
            }
        }
    }

    fn err_line(&mut self, io: &Io, line: &str) {
        let sink = io.err.clone();
        self.write(&sink, format!("{line}\n").as_bytes());
    }

    #[allow(clippy::too_many_lines)]
    fn dispatch(&mut self, argv: &[String], io: &mut Io) -> Result<i32, Stop> {
        let program = argv[0].rsplit('/').next().unwrap_or(&argv[0]).to_owned();
        let args = &argv[1..];
        let out = io.out.clone();
        match program.as_str() {
            "true" | ":" => Ok(0),
            "false" => Ok(1),
            "exit" => {
                let code = args.first().map_or(Ok(self.last), |a| a.parse::<i32>()).unwrap_or(2);
                Err(Stop::Exit(code & 0xff))
            }
            "echo" => {
                let mut newline = true;
                let mut escapes = false;
                let mut rest = args;
                while let Some(flag) =
                    rest.first().filter(|a| matches!(a.as_str(), "-n" | "-e" | "-ne" | "-en"))
                {
                    newline &= !flag.contains('n');
                    escapes |= flag.contains('e');
                    rest = &rest[1..];
                }
                let text = rest.join(" ");
                let mut bytes = if escapes { unescape(&text).0 } else { text.into_bytes() };
                if newline {
                    bytes.push(b'\n');
                }
                self.write(&out, &bytes);
                Ok(0)
            }
            "printf" => {
                let Some(format) = args.first() else {
                    self.err_line(io, "printf: usage: printf format [arguments]");
                    return Ok(2);
                };
                let (bytes, bad_numbers) = printf(format, &args[1..]);
                self.write(&out, &bytes);
                for bad in &bad_numbers {
                    self.err_line(io, &format!("printf: {bad}: expected a 64-bit integer"));
                }
                Ok(i32::from(!bad_numbers.is_empty()))
            }
            "cat" => {
                if args.is_empty() || args == ["-"] {
                    let data = self.read_stdin(io)?;
                    self.write(&out, &data);
                    return Ok(0);
                }
                let mut status = 0;
                for a in args {
                    if let Some(data) = self.special_file(a, None) {
                        self.write(&out, &data);
                        if a.starts_with("/dev/") && a != "/dev/null" {
                            // An endless device: `cat` runs until its deadline kills it.
                            self.proc.sleep(Duration::MAX)?;
                        }
                        continue;
                    }
                    let path = crate::path::resolve(&self.proc.cwd, a);
                    match self.world.vfs.read(&path) {
                        Ok(data) => self.write(&out, &data),
                        Err(e) => {
                            let why = if matches!(e, crate::Error::IsADirectory { .. }) {
                                "Is a directory"
                            } else {
                                "No such file or directory"
                            };
                            self.err_line(io, &format!("cat: {a}: {why}"));
                            status = 1;
                        }
                    }
                }
                Ok(status)
            }
            "head" => {
                let (count, file) = match args {
                    [flag, n, rest @ ..] if flag == "-c" => (n.parse::<usize>().ok(), rest.first()),
                    _ => (None, None),
                };
                let Some(count) = count else {
                    self.err_line(io, "head: the fake models only `head -c N [file]`");
                    return Ok(2);
                };
                let data = match file {
                    Some(f) => {
                        match self.special_file(f, Some(count)) {
                            Some(d) => d,
                            None => {
                                match self.world.vfs.read(&crate::path::resolve(&self.proc.cwd, f)) {
                                    Ok(d) => d,
                                    Err(_) => {
                                        self.err_line(io, &format!("head: cannot open '{f}' for reading: No such file or directory"));
                                        return Ok(1);
                                    }
                                }
                            }
                        }
                    }
                    None => self.read_stdin(io)?,
                };
                self.write(&out, &data[..data.len().min(count)]);
                Ok(0)
            }
            "kill" => self.kill(args, io),
            "sleep" => {
                let Some(d) = args.first().and_then(|a| parse_duration(a)) else {
                    self.err_line(io, "sleep: invalid time interval");
                    return Ok(1);
                };
                self.proc.sleep(d)?;
                Ok(0)
            }
            "wait" => {
                let end = self.proc.children.iter().map(|(_, end)| *end).max().unwrap_or_default();
                if end > self.proc.elapsed {
                    let d = end.saturating_sub(self.proc.elapsed);
                    self.proc.sleep(d)?;
                }
                Ok(0)
            }
            "env" | "printenv" => {
                if program == "printenv" && !args.is_empty() {
                    return Ok(match self.proc.env.get(&args[0]).cloned() {
                        Some(v) => {
                            self.write(&out, format!("{v}\n").as_bytes());
                            0
                        }
                        None => 1,
                    });
                }
                if program == "env" && !args.is_empty() {
                    let mut n = 0;
                    let saved = self.proc.env.clone();
                    while let Some((k, v)) = args.get(n).and_then(|a| a.split_once('=')) {
                        self.proc.env.insert(k.to_owned(), v.to_owned());
                        n += 1;
                    }
                    let r = if n < args.len() { self.dispatch(&args[n..], io) } else { Ok(0) };
                    if n == args.len() {
                        let listing: String =
                            self.proc.env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
                        self.write(&out, listing.as_bytes());
                    }
                    self.proc.env = saved;
                    return r;
                }
                let listing: String = self.proc.env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
                self.write(&out, listing.as_bytes());
                Ok(0)
            }
            "pwd" => {
                let cwd = format!("{}\n", self.proc.cwd);
                self.write(&out, cwd.as_bytes());
                Ok(0)
            }
            "cd" => {
                let target = args.first().cloned().unwrap_or_else(|| super::vfs::WORKDIR.to_owned());
                let path = crate::path::resolve(&self.proc.cwd, &target);
                if matches!(self.world.vfs.get(&path), Some(Node::Dir { .. })) {
                    self.proc.cwd = path;
                    Ok(0)
                } else {
                    self.err_line(io, &format!("sh: cd: can't cd to {target}"));
                    Ok(2)
                }
            }
            "export" => {
                for a in args {
                    if let Some((k, v)) = a.split_once('=') {
                        self.proc.env.insert(k.to_owned(), v.to_owned());
                    }
                }
                Ok(0)
            }
            "unset" => {
                for a in args {
                    self.proc.env.remove(a);
                }
                Ok(0)
            }
            "mkdir" => {
                let mut status = 0;
                for a in args.iter().filter(|a| !a.starts_with('-')) {
                    let path = crate::path::resolve(&self.proc.cwd, a);
                    if self.vfs().mkdir_all(&path).is_err() {
                        self.err_line(io, &format!("mkdir: cannot create directory '{a}': File exists"));
                        status = 1;
                    }
                }
                Ok(status)
            }
            "ln" => {
                let positional: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
                let symbolic = args.iter().any(|a| a.starts_with('-') && a.contains('s'));
                match (symbolic, positional.as_slice()) {
                    (true, [target, link]) => {
                        let path = crate::path::resolve(&self.proc.cwd, link);
                        if self.world.vfs.get(&path).is_some() {
                            self.err_line(io, &format!("ln: {link}: File exists"));
                            return Ok(1);
                        }
                        let _ = self.vfs().symlink(&path, target);
                        Ok(0)
                    }
                    _ => {
                        self.err_line(io, "ln: the fake models only `ln -s TARGET LINK`");
                        Ok(2)
                    }
                }
            }
            "touch" => {
                for a in args {
                    let path = crate::path::resolve(&self.proc.cwd, a);
                    if self.world.vfs.get(&path).is_none() {
                        let _ = self.vfs().write(&path, Vec::new(), None, false);
                    }
                }
                Ok(0)
            }
            "rm" => {
                let recursive = args.iter().any(|a| a.starts_with('-') && a.contains('r'));
                let force = args.iter().any(|a| a.starts_with('-') && a.contains('f'));
                let mut status = 0;
                for a in args.iter().filter(|a| !a.starts_with('-')) {
                    let path = crate::path::resolve(&self.proc.cwd, a);
                    if let Err(e) = self.vfs().remove(&path, recursive) {
                        if !(force && matches!(e, crate::Error::NotFound { .. })) {
                            self.err_line(io, &format!("rm: cannot remove '{a}'"));
                            status = 1;
                        }
                    }
                }
                Ok(status)
            }
            "ls" => {
                let target = args.iter().find(|a| !a.starts_with('-')).cloned().unwrap_or_else(|| ".".into());
                let path = crate::path::resolve(&self.proc.cwd, &target);
                match self.world.vfs.list(&path) {
                    Ok(entries) => {
                        let listing: String = entries.iter().map(|e| format!("{}\n", e.name)).collect();
                        self.write(&out, listing.as_bytes());
                        Ok(0)
                    }
                    Err(_) if self.world.vfs.get(&path).is_some() => {
                        self.write(&out, format!("{target}\n").as_bytes());
                        Ok(0)
                    }
                    Err(_) => {
                        self.err_line(
                            io,
                            &format!("ls: cannot access '{target}': No such file or directory"),
                        );
                        Ok(2)
                    }
                }
            }
            "sh" | "bash" | "dash" => {
                let mut rest = args;
                let mut script_from_c = None;
                if rest.first().map(String::as_str) == Some("-c") {
                    script_from_c = rest.get(1).cloned();
                    rest = rest.get(2..).unwrap_or_default();
                }
                let script = match (script_from_c, rest.first()) {
                    (Some(s), _) => s,
                    (None, Some(file)) if !file.starts_with('-') => {
                        let path = crate::path::resolve(&self.proc.cwd, file);
                        let Ok(data) = self.world.vfs.read(&path) else {
                            self.err_line(io, &format!("{program}: 0: cannot open {file}: No such file"));
                            return Ok(2);
                        };
                        String::from_utf8_lossy(&data).into_owned()
                    }
                    _ => {
                        let data = self.read_stdin(io)?;
                        String::from_utf8_lossy(&data).into_owned()
                    }
                };
                let saved =
                    (self.proc.env.clone(), self.proc.cwd.clone(), std::mem::take(&mut self.args), self.last);
                // `sh -c script name args…` sets `$0` to `name`; otherwise `$0` is the shell.
                self.args = if rest.is_empty() { vec![program.clone()] } else { rest.to_vec() };
                let sub_io = Io { stdin: io.stdin.take(), out: io.out.clone(), err: io.err.clone() };
                let r = self.run_source(&script, sub_io);
                (self.proc.env, self.proc.cwd, self.args, self.last) = saved;
                match r {
                    Ok(c) | Err(Stop::Exit(c)) => Ok(c),
                    Err(stop) => Err(stop),
                }
            }
            "python3" | "python" => self.python(args, io),
            "curl" | "wget" => {
                let with_value: &[&str] = if program == "curl" {
                    &["-o", "-m", "--max-time", "-H", "-X", "-d", "--connect-timeout", "-u", "-A", "-e"]
                } else {
                    &["-O", "-T", "-t", "--timeout", "-U", "--header"]
                };
                let Some(url) = positional(args, with_value).into_iter().next() else {
                    self.err_line(io, &format!("{program}: no URL specified"));
                    return Ok(2);
                };
                let Some((host, port)) = url_host_port(url) else {
                    self.err_line(io, &format!("{program}: malformed URL {url}"));
                    return Ok(3);
                };
                self.proc.sleep(Duration::from_millis(1))?;
                if self.world.policy.permits(&host, port) {
                    Ok(0)
                } else if program == "curl" {
                    self.err_line(
                        io,
                        &format!("curl: (7) Failed to connect to {host} port {port}: Network is unreachable"),
                    );
                    Ok(7)
                } else {
                    self.err_line(
                        io,
                        &format!("wget: unable to connect to {host}:{port}: Network is unreachable"),
                    );
                    Ok(4)
                }
            }
            "nc" => {
                let positional = positional(args, &["-w", "-i", "-p", "-s", "-q"]);
                let (Some(host), Some(port)) =
                    (positional.first(), positional.get(1).and_then(|p| p.parse::<u16>().ok()))
                else {
                    self.err_line(io, "nc: usage: nc host port");
                    return Ok(1);
                };
                if self.world.policy.permits(host, port) {
                    Ok(0)
                } else {
                    self.err_line(
                        io,
                        &format!("nc: connect to {host} port {port} (tcp) failed: Network is unreachable"),
                    );
                    Ok(1)
                }
            }
            _ => {
                self.err_line(io, &format!("sh: 1: {}: not found", argv[0]));
                Ok(127)
            }
        }
    }

    /// `/dev/zero`, `/dev/urandom` (seeded) and `/dev/null`, read up to `limit` bytes. No
    /// more than one byte past the output cap is ever produced: the rest would be dropped.
    fn special_file(&mut self, name: &str, limit: Option<usize>) -> Option<Vec<u8>> {
        let cap = self.proc.limit.saturating_add(1);
        let n = limit.unwrap_or(cap).min(cap);
        match name {
            "/dev/zero" => Some(vec![0; n]),
            "/dev/urandom" | "/dev/random" => {
                let mut buf = vec![0; n];
                self.world.rng.fill(&mut buf);
                Some(buf)
            }
            "/dev/null" => Some(Vec::new()),
            // The command sees its own process only (`$$` is 1): as in a PID namespace of
            // its own, no other command's environment is readable.
            "/proc/self/environ" | "/proc/1/environ" => {
                let mut environ = Vec::new();
                for (k, v) in &self.proc.env {
                    environ.extend_from_slice(format!("{k}={v}\0").as_bytes());
                }
                environ.truncate(n);
                Some(environ)
            }
            _ => None,
        }
    }

    /// `kill [-N | -NAME | -s NAME] pid…`: the fake models signals to the shell itself
    /// (`$$`, which is 1) only. A fatal signal ends the command with
    /// `ExitStatus::Signal(n)`; signal 0 and the signals ignored by default do nothing.
    fn kill(&mut self, args: &[String], io: &mut Io) -> Result<i32, Stop> {
        let (signal, pids) = match args {
            [flag, name, rest @ ..] if flag == "-s" => (signal_number(name), rest),
            [flag, rest @ ..] if flag.starts_with('-') && flag.len() > 1 => (signal_number(&flag[1..]), rest),
            rest => (Some(15), rest),
        };
        let Some(signal) = signal else {
            self.err_line(io, &format!("kill: invalid signal in {args:?}"));
            return Ok(1);
        };
        if pids.is_empty() {
            self.err_line(io, "kill: usage: kill [-s sigspec | -signum] pid");
            return Ok(2);
        }
        if pids.iter().any(|p| p != "1") {
            self.err_line(io, "kill: the fake models only signals to the shell itself ($$)");
            return Err(Stop::Unmodelled(2));
        }
        match signal {
            // 0 tests for existence; CHLD, CONT, URG and WINCH are ignored by default.
            0 | 17 | 18 | 23 | 28 => Ok(0),
            // STOP, TSTP, TTIN, TTOU would stop the process: not modelled.
            19..=22 => {
                self.err_line(io, "kill: the fake does not model stopping a process");
                Err(Stop::Unmodelled(2))
            }
            n => Err(Stop::Signal(n)),
        }
    }

    fn python(&mut self, args: &[String], io: &mut Io) -> Result<i32, Stop> {
        let (source, filename) = match args {
            [flag, src, ..] if flag == "-c" => (src.clone(), "<string>".to_owned()),
            [flag, ..] if flag == "-c" => {
                self.err_line(io, "Argument expected for the -c option");
                return Ok(2);
            }
            [flag, ..] if flag == "--version" || flag == "-V" => {
                let out = io.out.clone();
                self.write(&out, format!("Python {}\n", python::VERSION).as_bytes());
                return Ok(0);
            }
            [file, ..] if file != "-" => {
                let path = crate::path::resolve(&self.proc.cwd, file);
                match self.world.vfs.read(&path) {
                    Ok(data) => (String::from_utf8_lossy(&data).into_owned(), file.clone()),
                    Err(_) => {
                        self.err_line(
                            io,
                            &format!(
                                "python3: can't open file '{file}': [Errno 2] No such file or directory"
                            ),
                        );
                        return Ok(2);
                    }
                }
            }
            _ => {
                let data = self.read_stdin(io)?;
                (String::from_utf8_lossy(&data).into_owned(), "<stdin>".to_owned())
            }
        };
        let nested = self.depth > 0;
        let mut host = PyHost { shell: self, io };
        let mut globals = python::Globals::default();
        let outcome = match python::run(&source, &filename, &mut globals, &mut host) {
            Ok(outcome) => outcome,
            // The out-of-memory killer sends SIGKILL to the interpreter. Run by a script, it
            // is the script's child: the script goes on and sees status 128 + 9, as `sh`
            // reports a child's signal death. Run as the command itself, the command dies.
            Err(Stop::OomKilled) if nested => return Ok(128 + 9),
            Err(Stop::OomKilled) => return Err(Stop::Signal(9)),
            Err(stop) => return Err(stop),
        };
        match outcome.error {
            None => Ok(outcome.exit_code.unwrap_or(0)),
            Some(error) => {
                let text = python::format_traceback(&error);
                let err = host.io.err.clone();
                host.shell.write(&err, text.as_bytes());
                Ok(1)
            }
        }
    }
}

struct PyHost<'s, 'w, 'a, 'i> {
    shell: &'s mut Shell<'w, 'a>,
    io: &'i mut Io,
}

impl python::Host for PyHost<'_, '_, '_, '_> {
    fn write(&mut self, stream: StreamKind, data: &[u8]) {
        let sink = if stream == StreamKind::Stdout { self.io.out.clone() } else { self.io.err.clone() };
        self.shell.write(&sink, data);
    }

    fn sleep(&mut self, d: Duration) -> Result<(), Stop> {
        self.shell.proc.sleep(d)
    }

    fn read_stdin(&mut self) -> Result<Vec<u8>, Stop> {
        self.shell.read_stdin(self.io)
    }

    fn env(&self) -> &BTreeMap<String, String> {
        &self.shell.proc.env
    }

    fn permits(&self, host: &str, port: u16) -> bool {
        self.shell.world.policy.permits(host, port)
    }

    fn read_file(&mut self, path: &str) -> Result<Vec<u8>, crate::Error> {
        let abs = crate::path::resolve(&self.shell.proc.cwd, path);
        self.shell.world.vfs.read(&abs)
    }

    fn write_file(&mut self, path: &str, data: &[u8], append: bool) -> Result<(), crate::Error> {
        let abs = crate::path::resolve(&self.shell.proc.cwd, path);
        self.shell.vfs().write(&abs, data.to_vec(), None, append)
    }

    fn allocate(&mut self, bytes: u64) -> Result<(), Stop> {
        self.shell.proc.allocate(bytes)
    }
}

/// A signal's number from `9`, `KILL` or `SIGKILL` (Linux numbering).
fn signal_number(spec: &str) -> Option<i32> {
    if let Ok(n) = spec.parse::<i32>() {
        return (0..=64).contains(&n).then_some(n);
    }
    let name = spec.strip_prefix("SIG").unwrap_or(spec);
    let n = match name {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "ILL" => 4,
        "TRAP" => 5,
        "ABRT" => 6,
        "BUS" => 7,
        "FPE" => 8,
        "KILL" => 9,
        "USR1" => 10,
        "SEGV" => 11,
        "USR2" => 12,
        "PIPE" => 13,
        "ALRM" => 14,
        "TERM" => 15,
        "CHLD" => 17,
        "CONT" => 18,
        "STOP" => 19,
        "TSTP" => 20,
        "TTIN" => 21,
        "TTOU" => 22,
        "URG" => 23,
        "WINCH" => 28,
        _ => return None,
    };
    Some(n)
}

/// The arguments that are neither flags nor the values of the flags in `with_value`.
fn positional<'a>(args: &'a [String], with_value: &[&str]) -> Vec<&'a String> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if std::mem::take(&mut skip) {
            continue;
        }
        if a.starts_with('-') {
            skip = with_value.contains(&a.as_str());
        } else {
            out.push(a);
        }
    }
    out
}

/// `1`, `0.5`, `2s`, `1m`.
fn parse_duration(s: &str) -> Option<Duration> {
    let (num, scale) = match s.chars().last()? {
        's' => (&s[..s.len() - 1], 1.0),
        'm' => (&s[..s.len() - 1], 60.0),
        'h' => (&s[..s.len() - 1], 3600.0),
        _ => (s, 1.0),
    };
    let secs: f64 = num.parse().ok()?;
    // A sleep too long for `Duration` is a sleep forever: it ends at the deadline.
    (secs >= 0.0).then(|| Duration::try_from_secs_f64(secs * scale).unwrap_or(Duration::MAX))
}

/// Backslash escapes as `echo -e` and `printf` read them. Returns the bytes and whether
/// `\c` (stop output) was met.
fn unescape(s: &str) -> (Vec<u8>, bool) {
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
fn printf(format: &str, args: &[String]) -> (Vec<u8>, Vec<String>) {
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
                .min(crate::DEFAULT_OUTPUT_LIMIT + 1);
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
        assert_eq!(printf(r"%s-%d\n", &["a".into(), "7".into(), "b".into(), "8".into()]).0, b"a-7\nb-8\n");
        assert_eq!(printf(r"\x00\x01", &[]).0, b"\x00\x01");
        assert_eq!(printf("%d", &["99999999999999999999".into()]).1, ["99999999999999999999"]);
    }

    #[test]
    fn lexer_keeps_quotes_together() {
        let toks = lex("echo 'a b' \"c $X\" d>&2").unwrap();
        assert_eq!(toks.len(), 6, "{toks:?}");
    }
}
