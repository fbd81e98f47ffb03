//! The one [`python::Host`]: the fake Python runs as a process of the fake shell, whether
//! a script runs `python3` or a code cell runs on its own (`Sandbox::run_code`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::exec::StreamKind;

use super::super::machine::{Stdin, Stop};
use super::super::python::{self, Host as _};
use super::{Io, Shell};

/// The interpreter's view of its process: output through the shell's redirections, files
/// relative to the process's working directory, stdin as the shell passes it.
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
        let abs = self.shell.resolve(path);
        self.shell.world.vfs.read(&abs)
    }

    fn write_file(&mut self, path: &str, data: &[u8], append: bool) -> Result<(), crate::Error> {
        let abs = self.shell.resolve(path);
        self.shell.vfs().write(&abs, data.to_vec(), None, append)
    }

    fn allocate(&mut self, bytes: u64) -> Result<(), Stop> {
        self.shell.proc.allocate(bytes)
    }
}

impl Shell<'_, '_> {
    /// Runs a code cell as this process's only program: its output on the process's own
    /// streams, an empty stdin, `globals` as its module namespace. The caller maps a
    /// [`Stop`] (a deadline, a signal, the out-of-memory killer) to the cell's result.
    pub(crate) fn run_cell(
        &mut self,
        source: &str,
        globals: &mut python::Globals,
    ) -> Result<python::Outcome, Stop> {
        let mut io = Io::standard(Stdin::Bytes(Vec::new()));
        python::run(source, "<cell>", globals, &mut PyHost { shell: self, io: &mut io })
    }
}

/// `python3 -c SOURCE`, `python3 FILE`, `python3 --version`, or `python3` reading its
/// program from stdin. An uncaught exception prints its traceback and exits 1.
pub(super) fn python(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let (source, filename) = match args {
        [flag, src, ..] if flag == "-c" => (src.clone(), "<string>".to_owned()),
        [flag, ..] if flag == "-c" => {
            sh.err_line(io, "Argument expected for the -c option");
            return Ok(2);
        }
        [flag, ..] if flag == "--version" || flag == "-V" => {
            sh.out(io, format!("Python {}\n", python::VERSION).as_bytes());
            return Ok(0);
        }
        [file, ..] if file != "-" => {
            let Ok(data) = sh.world.vfs.read(&sh.resolve(file)) else {
                sh.err_line(
                    io,
                    &format!("python3: can't open file '{file}': [Errno 2] No such file or directory"),
                );
                return Ok(2);
            };
            (String::from_utf8_lossy(&data).into_owned(), file.clone())
        }
        _ => {
            let data = sh.read_stdin(io)?;
            (String::from_utf8_lossy(&data).into_owned(), "<stdin>".to_owned())
        }
    };
    let nested = sh.depth > 0;
    let mut host = PyHost { shell: sh, io };
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
            host.write(StreamKind::Stderr, text.as_bytes());
            Ok(1)
        }
    }
}
