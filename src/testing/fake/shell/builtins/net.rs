//! `curl`, `wget` and `nc`: simulated egress, allowed or refused by the sandbox's network
//! policy. No byte leaves the process; an allowed connection succeeds with no output.

use std::time::Duration;

use super::super::super::machine::{Stop, url_host_port};
use super::super::{Io, Shell};

/// `curl URL` / `wget URL`: exit 0 when the policy permits the URL's host and port, else
/// the tool's own "unreachable" status (7 for curl, 4 for wget).
pub(super) fn curl_or_wget(
    sh: &mut Shell<'_, '_>,
    program: &str,
    args: &[String],
    io: &mut Io,
) -> Result<i32, Stop> {
    let with_value: &[&str] = if program == "curl" {
        &["-o", "-m", "--max-time", "-H", "-X", "-d", "--connect-timeout", "-u", "-A", "-e"]
    } else {
        &["-O", "-T", "-t", "--timeout", "-U", "--header"]
    };
    let Some(url) = positional(args, with_value).into_iter().next() else {
        sh.err_line(io, &format!("{program}: no URL specified"));
        return Ok(2);
    };
    let Some((host, port)) = url_host_port(url) else {
        sh.err_line(io, &format!("{program}: malformed URL {url}"));
        return Ok(3);
    };
    sh.proc.sleep(Duration::from_millis(1))?;
    if sh.world.policy.permits(&host, port) {
        Ok(0)
    } else if program == "curl" {
        sh.err_line(
            io,
            &format!("curl: (7) Failed to connect to {host} port {port}: Network is unreachable"),
        );
        Ok(7)
    } else {
        sh.err_line(io, &format!("wget: unable to connect to {host}:{port}: Network is unreachable"));
        Ok(4)
    }
}

/// `nc HOST PORT`: exit 0 when the policy permits it, else 1.
pub(super) fn nc(sh: &mut Shell<'_, '_>, _: &str, args: &[String], io: &mut Io) -> Result<i32, Stop> {
    let positional = positional(args, &["-w", "-i", "-p", "-s", "-q"]);
    let (Some(host), Some(port)) =
        (positional.first(), positional.get(1).and_then(|p| p.parse::<u16>().ok()))
    else {
        sh.err_line(io, "nc: usage: nc host port");
        return Ok(1);
    };
    if sh.world.policy.permits(host, port) {
        Ok(0)
    } else {
        sh.err_line(io, &format!("nc: connect to {host} port {port} (tcp) failed: Network is unreachable"));
        Ok(1)
    }
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
