//! The fake's POSIX shell subset and its commands.
//!
//! Modelled: simple commands, `;` `&&` `||` `|` `&` and newlines, `'…'` `"…"` and `\`
//! quoting, `$VAR` `${VAR}` `$?` `$$` `$RANDOM` `$(…)`, redirections (`>` `>>` `<` `2>`
//! `>&2` `2>&1` `&>`, `/dev/null`), `VAR=value cmd`, and the commands of
//! [`builtins::COMMANDS`]. Compound commands (`if`, `for`, `while`, `case`, `( … )`,
//! functions) are not modelled: they fail with exit 2 and a message saying so, so that a
//! test never passes on a guess. Script such commands with `FakeBackend::on_run`.
//!
//! - [`syntax`]: lexer and parser.
//! - [`exec`]: expansion, redirections, pipelines, lists, background jobs.
//! - [`builtins`]: one function per command, found by name in a table.
//! - [`printf`]: the escapes and formats of `echo -e` and `printf`.
//! - [`host`]: the Python interpreter's view of a shell process, for `python3` and cells.

mod builtins;
mod exec;
mod host;
mod printf;
mod syntax;

use std::time::Duration;

use crate::exec::StreamKind;

use super::machine::{Proc, SandboxView, Stdin, Stop};
use super::vfs::Vfs;

/// Where a command's output goes.
#[derive(Debug, Clone, PartialEq)]
enum Sink {
    Stream(StreamKind),
    /// The innermost capture buffer (`$(…)`, or a pipe to the next command).
    Capture,
    File(String),
    Null,
}

/// A command's standard streams.
struct Io {
    /// `None` once read (or for a command with no stdin of its own).
    stdin: Option<Stdin>,
    out: Sink,
    err: Sink,
}

impl Io {
    /// The process's own streams, with this stdin.
    fn standard(stdin: Stdin) -> Self {
        Io {
            stdin: Some(stdin),
            out: Sink::Stream(StreamKind::Stdout),
            err: Sink::Stream(StreamKind::Stderr),
        }
    }
}

/// How deeply scripts may nest before the fake gives up (a real shell would recurse until
/// it runs out of memory; the fake must never overflow its stack).
const MAX_NESTING: usize = 32;

/// The fake shell running inside one [`Proc`].
pub(crate) struct Shell<'w, 'a> {
    pub(crate) world: &'w mut SandboxView<'a>,
    pub(crate) proc: Proc,
    /// `$?`.
    last: i32,
    /// Output being captured, innermost last.
    captures: Vec<Vec<u8>>,
    stdin_consumed: bool,
    /// `$0`, `$1`, ….
    args: Vec<String>,
    /// Nesting of scripts (`$(…)`, `sh -c`, `sh < file`), bounded by [`MAX_NESTING`].
    depth: usize,
    /// When this (background) process started, relative to the main process.
    time_base: Duration,
}

impl<'w, 'a> Shell<'w, 'a> {
    pub(crate) fn new(world: &'w mut SandboxView<'a>, proc: Proc) -> Self {
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
    fn vfs(&mut self) -> &mut Vfs {
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
                // A failed append is what a full disk does: the output is lost.
                let _ = self.vfs().write(path, data.to_vec(), None, true);
            }
            Sink::Null => {}
        }
    }

    /// Writes `line` and a newline to the command's stderr.
    fn err_line(&mut self, io: &Io, line: &str) {
        let sink = io.err.clone();
        self.write(&sink, format!("{line}\n").as_bytes());
    }

    /// Writes `data` to the command's stdout.
    fn out(&mut self, io: &Io, data: &[u8]) {
        let sink = io.out.clone();
        self.write(&sink, data);
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

    /// An absolute path for `path`, relative to the working directory.
    fn resolve(&self, path: &str) -> String {
        crate::path::resolve(&self.proc.cwd, path)
    }
}
