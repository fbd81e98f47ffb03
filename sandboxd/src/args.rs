//! sandboxd's command line: `sandboxd [--ttl-ms N] [--listen-fd N]`, `sandboxd --version`, or
//! `sandboxd relay ADDR PATH` (`relay.rs`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// What the command line asks for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Args {
    /// Print the protocol version and exit.
    pub version: bool,
    /// How long sandboxd lives, counted from its start; forever when absent.
    pub ttl: Option<Duration>,
    /// The inherited descriptor of a bound Unix stream socket on which to accept extra
    /// sessions (`listen.rs`). There is no way to make sandboxd create a socket at a path:
    /// a path it could bind would be in the sandbox's own filesystem, reachable from inside.
    pub listen_fd: Option<i32>,
    /// `relay ADDR PATH`: relay TCP connections on `ADDR` to the Unix socket at `PATH`
    /// instead of supervising.
    pub relay: Option<(String, PathBuf)>,
}

/// Parses the arguments after the program name. `Err` says what is wrong, for stderr.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
    let mut out = Args::default();
    let mut args = args.into_iter().peekable();
    if args.peek().is_some_and(|a| a == "relay") {
        args.next();
        let (Some(addr), Some(path), None) = (args.next(), args.next(), args.next()) else {
            return Err(
                "relay takes a TCP address and a Unix socket path: relay 127.0.0.1:3128 /run/egress.sock"
                    .into(),
            );
        };
        let addr = addr.into_string().map_err(|a| format!("relay address {} is not UTF-8", a.display()))?;
        if addr.parse::<std::net::SocketAddr>().is_err() {
            return Err(format!("relay address {addr:?} is not an IP address and port"));
        }
        out.relay = Some((addr, PathBuf::from(path)));
        return Ok(out);
    }
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--version") => out.version = true,
            Some("--ttl-ms") => {
                let value = args.next().ok_or("--ttl-ms needs a number of milliseconds")?;
                let ms = decimal::<u64>(&value)
                    .ok_or_else(|| format!("--ttl-ms takes decimal milliseconds, not {}", value.display()))?;
                out.ttl = Some(Duration::from_millis(ms));
            }
            Some("--listen-fd") => {
                let value = args.next().ok_or("--listen-fd needs a descriptor number")?;
                let fd = decimal::<i32>(&value).filter(|&fd| fd > 2).ok_or_else(|| {
                    format!("--listen-fd takes a descriptor number above 2, not {}", value.display())
                })?;
                out.listen_fd = Some(fd);
            }
            _ => return Err(format!("unknown argument {}", arg.display())),
        }
    }
    Ok(out)
}

/// `value` as a number written in decimal digits only (no sign, no spaces), if it fits `T`.
fn decimal<T: std::str::FromStr>(value: &std::ffi::OsStr) -> Option<T> {
    value.to_str().filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Args, String> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn flags_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_strs(&[]), Ok(Args::default()));
        let args = parse_strs(&["--ttl-ms", "1500", "--listen-fd", "4"]).unwrap();
        assert_eq!(args.ttl, Some(Duration::from_millis(1500)));
        assert_eq!(args.listen_fd, Some(4));
        let relay = parse_strs(&["relay", "127.0.0.1:3128", "/run/e.sock"]).unwrap();
        assert_eq!(relay.relay, Some(("127.0.0.1:3128".to_owned(), PathBuf::from("/run/e.sock"))));
        for bad in [
            &["relay"][..],
            &["relay", "localhost:3128", "/s"],
            &["relay", "127.0.0.1:3128"],
            &["relay", "127.0.0.1:3128", "/s", "extra"],
            &["--ttl-ms"][..],
            &["--ttl-ms", "-5"],
            &["--ttl-ms", "1.5"],
            &["--ttl-ms", ""],
            &["--ttl-ms", "99999999999999999999999"],
            &["--listen-fd"],
            &["--listen-fd", ""],
            &["--listen-fd", "2"],
            &["--listen-fd", "-4"],
            &["--listen-fd", "4x"],
            &["--listen-fd", "99999999999"],
            // The old flag: sandboxd no longer creates a socket at a path (issue #27).
            &["--listen", "/run/s.sock"],
            &["--bogus"],
        ] {
            assert!(parse_strs(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
