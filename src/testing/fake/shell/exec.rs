//! How the fake shell runs a parsed script: expansion, redirections, pipelines, `&&`/`||`
//! lists and background jobs. The commands themselves are in [`super::builtins`].

use std::time::Duration;

use crate::exec::StreamKind;

use super::super::machine::{Proc, Stdin, Stop};
use super::super::vfs::Node;
use super::syntax::{AndOr, Pipeline, Seg, Simple, Word, parse_script};
use super::{Io, MAX_NESTING, Shell, Sink, builtins};

impl Shell<'_, '_> {
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

    pub(super) fn expand(&mut self, word: &Word) -> Result<Vec<String>, Stop> {
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
    pub(super) fn capture_script(&mut self, script: &str) -> Result<Vec<u8>, Stop> {
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
        let mut io = Io::standard(stdin);
        match self.dispatch(argv, &mut io) {
            Ok(code) | Err(Stop::Exit(code)) => Ok(code),
            Err(stop) => Err(stop),
        }
    }

    pub(super) fn run_source(&mut self, script: &str, io: Io) -> Result<i32, Stop> {
        if self.depth >= MAX_NESTING {
            self.err_line(
                &io,
                &format!("sh: scripts nested deeper than {MAX_NESTING} levels are not modelled"),
            );
            return Err(Stop::Unmodelled(2));
        }
        self.depth += 1;
        let result = self.run_source_unchecked(script, io);
        self.depth -= 1;
        result
    }

    fn run_source_unchecked(&mut self, script: &str, io: Io) -> Result<i32, Stop> {
        let items = match parse_script(script) {
            Ok(items) => items,
            Err(message) => {
                // A syntax error, or syntax the fake does not model: either way nothing of
                // this process can be trusted to go on, so it ends here with status 2.
                self.err_line(&io, &format!("sh: {message}"));
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
        let path = self.resolve(target);
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
                            self.err_line(io, &format!("sh: {target}: bad file descriptor"));
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
                    let Ok(data) = self.world.vfs.read(&self.resolve(&target)) else {
                        self.err_line(io, &format!("sh: cannot open {target}: No such file"));
                        return Ok(1);
                    };
                    io.stdin = Some(Stdin::Bytes(data));
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

    /// Runs one command by its name (the last component of `argv[0]`); an unknown one
    /// exits 127 as in `sh`.
    pub(super) fn dispatch(&mut self, argv: &[String], io: &mut Io) -> Result<i32, Stop> {
        let program = argv[0].rsplit('/').next().unwrap_or(&argv[0]);
        let Some(command) = builtins::find(program) else {
            self.err_line(io, &format!("sh: 1: {}: not found", argv[0]));
            return Ok(127);
        };
        command(self, program, &argv[1..], io)
    }
}
