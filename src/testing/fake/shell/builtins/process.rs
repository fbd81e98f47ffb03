//! Commands about the process itself: `sleep`, `wait`, `kill`, and `sh` running a script.

use std::time::Duration;

use super::super::super::machine::Stop;
use super::super::{Io, Shell};

pub(super) fn sleep(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let Some(d) = args.first().and_then(|a| parse_duration(a)) else {
        sh.err_line(io, "sleep: invalid time interval");
        return Ok(1);
    };
    sh.proc.sleep(d)?;
    Ok(0)
}

/// `wait`: sleeps until the last background job ends.
pub(super) fn wait(sh: &mut Shell<'_, '_>, _: &str, _: &[String], _: &mut Io) -> Result<i32, Stop> {
    let end = sh.proc.children.iter().map(|(_, end)| *end).max().unwrap_or_default();
    if end > sh.proc.elapsed {
        let d = end.saturating_sub(sh.proc.elapsed);
        sh.proc.sleep(d)?;
    }
    Ok(0)
}

/// `sh -c SCRIPT [NAME ARGS…]`, `sh FILE [ARGS…]`, or `sh` reading its script from stdin;
/// the script runs with its own `$0…`, `$?`, environment and working directory.
pub(super) fn sh(sh: &mut Shell<'_, '_>, program: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let mut rest = args;
    let mut script_from_c = None;
    if rest.first().map(String::as_str) == Some("-c") {
        script_from_c = rest.get(1).cloned();
        rest = rest.get(2..).unwrap_or_default();
    }
    let script = match (script_from_c, rest.first()) {
        (Some(s), _) => s,
        (None, Some(file)) if !file.starts_with('-') => {
            let Ok(data) = sh.world.vfs.read(&sh.resolve(file)) else {
                sh.err_line(io, &format!("{program}: 0: cannot open {file}: No such file"));
                return Ok(2);
            };
            String::from_utf8_lossy(&data).into_owned()
        }
        _ => {
            let data = sh.read_stdin(io)?;
            String::from_utf8_lossy(&data).into_owned()
        }
    };
    let saved = (sh.proc.env.clone(), sh.proc.cwd.clone(), std::mem::take(&mut sh.args), sh.last);
    // `sh -c script name args…` sets `$0` to `name`; otherwise `$0` is the shell.
    sh.args = if rest.is_empty() { vec![program.to_owned()] } else { rest.to_vec() };
    let sub_io = Io { stdin: io.stdin.take(), out: io.out.clone(), err: io.err.clone() };
    let r = sh.run_source(&script, sub_io);
    (sh.proc.env, sh.proc.cwd, sh.args, sh.last) = saved;
    match r {
        Ok(c) | Err(Stop::Exit(c)) => Ok(c),
        Err(stop) => Err(stop),
    }
}

/// `kill [-N | -NAME | -s NAME] pid…`: the fake models signals to the shell itself
/// (`$$`, which is 1) only. A fatal signal ends the command with
/// `ExitStatus::Signal(n)`; signal 0 and the signals ignored by default do nothing.
pub(super) fn kill(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let (signal, pids) = match args {
        [flag, name, rest @ ..] if flag == "-s" => (signal_number(name), rest),
        [flag, rest @ ..] if flag.starts_with('-') && flag.len() > 1 => (signal_number(&flag[1..]), rest),
        rest => (Some(15), rest),
    };
    let Some(signal) = signal else {
        sh.err_line(io, &format!("kill: invalid signal in {args:?}"));
        return Ok(1);
    };
    if pids.is_empty() {
        sh.err_line(io, "kill: usage: kill [-s sigspec | -signum] pid");
        return Ok(2);
    }
    if pids.iter().any(|p| p != "1") {
        sh.err_line(io, "kill: the fake models only signals to the shell itself ($$)");
        return Err(Stop::Unmodelled(2));
    }
    match signal {
        // 0 tests for existence; CHLD, CONT, URG and WINCH are ignored by default.
        0 | 17 | 18 | 23 | 28 => Ok(0),
        // STOP, TSTP, TTIN, TTOU would stop the process: not modelled.
        19..=22 => {
            sh.err_line(io, "kill: the fake does not model stopping a process");
            Err(Stop::Unmodelled(2))
        }
        n => Err(Stop::Signal(n)),
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
