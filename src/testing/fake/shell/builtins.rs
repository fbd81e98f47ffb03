//! The fake shell's commands: one function each, found by name in [`COMMANDS`].
//!
//! Each models the slice of its real counterpart that probes and users' scripts rely on,
//! and says so on stderr (exit 2) for the rest.
#![expect(
    clippy::unnecessary_wraps,
    reason = "every command has the table's signature, whether or not it can stop the process"
)]

use std::time::Duration;

use super::super::machine::Stop;
use super::super::vfs::{Node, WORKDIR};
use super::printf::{printf, unescape};
use super::{Io, Shell};

mod net;
mod process;

/// A command: the shell, the name it was called by, its arguments and its streams; the
/// exit status, or why the process stopped.
pub(super) type Command = fn(&mut Shell<'_, '_>, &str, &[String], &mut Io) -> Result<i32, Stop>;

/// Every command the fake shell knows, by name.
pub(super) const COMMANDS: &[(&str, Command)] = &[
    ("true", |_, _, _, _| Ok(0)),
    (":", |_, _, _, _| Ok(0)),
    ("false", |_, _, _, _| Ok(1)),
    ("exit", exit),
    ("echo", echo),
    ("printf", printf_command),
    ("cat", cat),
    ("head", head),
    ("kill", process::kill),
    ("sleep", process::sleep),
    ("wait", process::wait),
    ("env", env),
    ("printenv", printenv),
    ("pwd", pwd),
    ("cd", cd),
    ("export", export),
    ("unset", unset),
    ("mkdir", mkdir),
    ("ln", ln),
    ("chmod", chmod),
    ("touch", touch),
    ("rm", rm),
    ("ls", ls),
    ("sh", process::sh),
    ("bash", process::sh),
    ("dash", process::sh),
    ("python3", super::host::python),
    ("python", super::host::python),
    ("curl", net::curl_or_wget),
    ("wget", net::curl_or_wget),
    ("nc", net::nc),
];

/// The command called `name`.
pub(super) fn find(name: &str) -> Option<Command> {
    COMMANDS.iter().find(|(n, _)| *n == name).map(|(_, command)| *command)
}

fn exit(sh: &mut Shell<'_, '_>, _: &str, args: &[String], _: &mut Io) -> Result<i32, Stop> {
    let code = args.first().map_or(Ok(sh.last), |a| a.parse::<i32>()).unwrap_or(2);
    Err(Stop::Exit(code & 0xff))
}

fn echo(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let mut newline = true;
    let mut escapes = false;
    let mut rest = args;
    while let Some(flag) = rest.first().filter(|a| matches!(a.as_str(), "-n" | "-e" | "-ne" | "-en")) {
        newline &= !flag.contains('n');
        escapes |= flag.contains('e');
        rest = &rest[1..];
    }
    let text = rest.join(" ");
    let mut bytes = if escapes { unescape(&text).0 } else { text.into_bytes() };
    if newline {
        bytes.push(b'\n');
    }
    sh.out(io, &bytes);
    Ok(0)
}

fn printf_command(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let Some(format) = args.first() else {
        sh.err_line(io, "printf: usage: printf format [arguments]");
        return Ok(2);
    };
    let (bytes, bad_numbers) = printf(format, &args[1..]);
    sh.out(io, &bytes);
    for bad in &bad_numbers {
        sh.err_line(io, &format!("printf: {bad}: expected a 64-bit integer"));
    }
    Ok(i32::from(!bad_numbers.is_empty()))
}

fn cat(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    if args.is_empty() || args == ["-"] {
        let data = sh.read_stdin(io)?;
        sh.out(io, &data);
        return Ok(0);
    }
    let mut status = 0;
    for a in args {
        if let Some(data) = special_file(sh, a, None) {
            sh.out(io, &data);
            if a.starts_with("/dev/") && a != "/dev/null" {
                // An endless device: `cat` runs until its deadline kills it.
                sh.proc.sleep(Duration::MAX)?;
            }
            continue;
        }
        let path = sh.resolve(a);
        match sh.world.vfs.read(&path) {
            Ok(data) => sh.out(io, &data),
            Err(e) => {
                let why = if matches!(e, crate::Error::IsADirectory { .. }) {
                    "Is a directory"
                } else {
                    "No such file or directory"
                };
                sh.err_line(io, &format!("cat: {a}: {why}"));
                status = 1;
            }
        }
    }
    Ok(status)
}

fn head(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let (count, file) = match args {
        [flag, n, rest @ ..] if flag == "-c" => (n.parse::<usize>().ok(), rest.first()),
        _ => (None, None),
    };
    let Some(count) = count else {
        sh.err_line(io, "head: the fake models only `head -c N [file]`");
        return Ok(2);
    };
    let data = match file {
        Some(f) => {
            if let Some(d) = special_file(sh, f, Some(count)) {
                d
            } else if let Ok(d) = sh.world.vfs.read(&sh.resolve(f)) {
                d
            } else {
                sh.err_line(io, &format!("head: cannot open '{f}' for reading: No such file or directory"));
                return Ok(1);
            }
        }
        None => sh.read_stdin(io)?,
    };
    sh.out(io, &data[..data.len().min(count)]);
    Ok(0)
}

/// `/dev/zero`, `/dev/urandom` (seeded) and `/dev/null`, read up to `limit` bytes. No
/// more than one byte past the output cap is ever produced: the rest would be dropped.
fn special_file(sh: &mut Shell<'_, '_>, name: &str, limit: Option<usize>) -> Option<Vec<u8>> {
    let cap = sh.proc.limit.saturating_add(1);
    let n = limit.unwrap_or(cap).min(cap);
    match name {
        "/dev/zero" => Some(vec![0; n]),
        "/dev/urandom" | "/dev/random" => {
            let mut buf = vec![0; n];
            sh.world.rng.fill(&mut buf);
            Some(buf)
        }
        "/dev/null" => Some(Vec::new()),
        // The command sees its own process only (`$$` is 1): as in a PID namespace of
        // its own, no other command's environment is readable.
        "/proc/self/environ" | "/proc/1/environ" => {
            let mut environ = Vec::new();
            for (k, v) in &sh.proc.env {
                environ.extend_from_slice(format!("{k}={v}\0").as_bytes());
            }
            environ.truncate(n);
            Some(environ)
        }
        _ => None,
    }
}

/// `env` lists the environment; `env K=V… cmd args…` runs `cmd` with those variables.
fn env(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let saved = sh.proc.env.clone();
    let mut n = 0;
    while let Some((k, v)) = args.get(n).and_then(|a| a.split_once('=')) {
        sh.proc.env.insert(k.to_owned(), v.to_owned());
        n += 1;
    }
    let result = if n < args.len() {
        sh.dispatch(&args[n..], io)
    } else {
        list_env(sh, io);
        Ok(0)
    };
    sh.proc.env = saved;
    result
}

fn list_env(sh: &mut Shell<'_, '_>, io: &Io) {
    let mut listing = Vec::new();
    for (k, v) in &sh.proc.env {
        listing.extend_from_slice(format!("{k}={v}\n").as_bytes());
    }
    sh.out(io, &listing);
}

fn printenv(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let Some(name) = args.first() else {
        list_env(sh, io);
        return Ok(0);
    };
    match sh.proc.env.get(name).cloned() {
        Some(v) => {
            sh.out(io, format!("{v}\n").as_bytes());
            Ok(0)
        }
        None => Ok(1),
    }
}

fn pwd(sh: &mut Shell<'_, '_>, _: &str, _: &[String], io: &mut Io) -> Result<i32, Stop> {
    let cwd = format!("{}\n", sh.proc.cwd);
    sh.out(io, cwd.as_bytes());
    Ok(0)
}

fn cd(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let target = args.first().map_or(WORKDIR, String::as_str);
    let path = sh.resolve(target);
    if matches!(sh.world.vfs.get(&path), Some(Node::Dir { .. })) {
        sh.proc.cwd = path;
        Ok(0)
    } else {
        sh.err_line(io, &format!("sh: cd: can't cd to {target}"));
        Ok(2)
    }
}

fn export(sh: &mut Shell<'_, '_>, _: &str, args: &[String], _: &mut Io) -> Result<i32, Stop> {
    for (k, v) in args.iter().filter_map(|a| a.split_once('=')) {
        sh.proc.env.insert(k.to_owned(), v.to_owned());
    }
    Ok(0)
}

fn unset(sh: &mut Shell<'_, '_>, _: &str, args: &[String], _: &mut Io) -> Result<i32, Stop> {
    for a in args {
        sh.proc.env.remove(a);
    }
    Ok(0)
}

/// The arguments that are not flags.
fn operands(args: &[String]) -> impl Iterator<Item = &String> {
    args.iter().filter(|a| !a.starts_with('-'))
}

/// Whether any flag argument holds the letter `letter` (`-rf` holds `r` and `f`).
fn has_flag(args: &[String], letter: char) -> bool {
    args.iter().any(|a| a.starts_with('-') && a.contains(letter))
}

fn mkdir(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let mut status = 0;
    for a in operands(args) {
        let path = sh.resolve(a);
        if sh.vfs().mkdir_all(&path).is_err() {
            sh.err_line(io, &format!("mkdir: cannot create directory '{a}': File exists"));
            status = 1;
        }
    }
    Ok(status)
}

fn ln(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let positional: Vec<&String> = operands(args).collect();
    let [target, link] = positional.as_slice() else {
        sh.err_line(io, "ln: the fake models only `ln -s TARGET LINK`");
        return Ok(2);
    };
    if !has_flag(args, 's') {
        sh.err_line(io, "ln: the fake models only `ln -s TARGET LINK`");
        return Ok(2);
    }
    let path = sh.resolve(link);
    if sh.world.vfs.get(&path).is_some() {
        sh.err_line(io, &format!("ln: {link}: File exists"));
        return Ok(1);
    }
    // A failure past "File exists" (a missing parent) is not modelled: it is silent.
    let _ = sh.vfs().symlink(&path, target);
    Ok(0)
}

/// Octal modes only (`chmod 444 FILE...`): what the contract's permission cases need.
fn chmod(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let mut positional = operands(args);
    let Some(mode) = positional.next().and_then(|m| u32::from_str_radix(m, 8).ok()) else {
        sh.err_line(io, "chmod: the fake models only octal modes");
        return Ok(2);
    };
    let mut status = 0;
    for a in positional {
        let path = sh.resolve(a);
        if sh.vfs().chmod(&path, mode).is_err() {
            sh.err_line(io, &format!("chmod: {a}: No such file or directory"));
            status = 1;
        }
    }
    Ok(status)
}

fn touch(sh: &mut Shell<'_, '_>, _: &str, args: &[String], _: &mut Io) -> Result<i32, Stop> {
    for a in args {
        let path = sh.resolve(a);
        if sh.world.vfs.get(&path).is_none() {
            // A missing parent is not modelled: nothing is created, silently.
            let _ = sh.vfs().write(&path, Vec::new(), None, false);
        }
    }
    Ok(0)
}

fn rm(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let recursive = has_flag(args, 'r');
    let force = has_flag(args, 'f');
    let mut status = 0;
    for a in operands(args) {
        let path = sh.resolve(a);
        if let Err(e) = sh.vfs().remove(&path, recursive)
            && !(force && matches!(e, crate::Error::NotFound { .. }))
        {
            sh.err_line(io, &format!("rm: cannot remove '{a}'"));
            status = 1;
        }
    }
    Ok(status)
}

fn ls(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let target = operands(args).next().map_or(".", String::as_str);
    let path = sh.resolve(target);
    match sh.world.vfs.list(&path) {
        Ok(entries) => {
            let mut listing = Vec::new();
            for e in &entries {
                listing.extend_from_slice(format!("{}\n", e.name).as_bytes());
            }
            sh.out(io, &listing);
            Ok(0)
        }
        Err(_) if sh.world.vfs.get(&path).is_some() => {
            sh.out(io, format!("{target}\n").as_bytes());
            Ok(0)
        }
        Err(_) => {
            sh.err_line(io, &format!("ls: cannot access '{target}': No such file or directory"));
            Ok(2)
        }
    }
}
