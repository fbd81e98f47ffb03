//! sandboxd: the supervisor sandboxio runs as the first process of every sandbox.
//!
//! It speaks the protocol of `proto/` on its stdin and stdout with the sandboxio process
//! that owns the sandbox, runs each command under a shepherd (`shepherd.rs`), and ends every
//! command and itself when that stream ends, unless the owner detached. Run it as the init of
//! the sandbox's PID namespace: then nothing in the sandbox can signal it, and its death ends
//! every process in the sandbox. `docs/adr/0006-sandboxd.md` records the design.
//!
//! `sandboxd relay ADDR PATH` relays TCP connections on `ADDR` to the Unix socket `PATH`
//! (`relay.rs`: the sandbox's way to the egress gate), and needs nothing else.
//! `sandboxd --version` prints the protocol version. `sandboxd [--ttl-ms N] [--listen-fd N]`
//! runs one session on stdio; `--ttl-ms` ends sandboxd N milliseconds after its start whatever
//! happens, and `--listen-fd` serves extra sessions on the bound Unix socket the host handed
//! over as descriptor N (`listen.rs`: never a socket in the sandbox's own filesystem).
//! Exit status: 0 when the owner left or the TTL passed, 1 when sandboxd could not start, 2
//! when a session broke the protocol, 64 for a bad command line.

#![forbid(unsafe_op_in_unsafe_fn)]

mod args;
mod fs;
mod listen;
#[expect(dead_code, reason = "the host-side half of the protocol is compiled here too")]
mod proto;
mod relay;
mod session;
mod shepherd;
#[expect(unsafe_code, reason = "the Linux calls std lacks, each unsafe block with its SAFETY comment")]
mod sys;
mod undumpable;

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::time::Instant;

/// `EX_USAGE` from `sysexits.h`: the command line was wrong.
const EXIT_USAGE: u8 = 64;

/// The pipe buffer sandboxd asks for on its session's stream, in bytes (1 MiB, the default
/// `/proc/sys/fs/pipe-max-size`: one [`proto::MAX_FILE_CHUNK`] frame fits).
const PIPE_BUF_WANTED: i32 = 1024 * 1024;

fn main() -> ExitCode {
    let start = Instant::now();
    let args = match args::parse(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(why) => {
            let _ = writeln!(
                std::io::stderr(),
                "sandboxd: {why}\nusage: sandboxd [--ttl-ms N] [--listen-fd N] | sandboxd relay ADDR PATH"
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if args.version {
        println!("sandboxd protocol {}", proto::VERSION);
        return ExitCode::SUCCESS;
    }
    if let Some((addr, path)) = &args.relay {
        let e = relay::run(addr, path).err().unwrap_or_else(|| std::io::Error::other("the relay stopped"));
        let _ = writeln!(std::io::stderr(), "sandboxd relay: {e}");
        return ExitCode::from(1);
    }
    match serve(start, &args) {
        Ok(session::End::HostGone) => ExitCode::SUCCESS,
        Ok(session::End::Ttl) => {
            let _ = writeln!(std::io::stderr(), "sandboxd: TTL reached");
            ExitCode::SUCCESS
        }
        Ok(end) => {
            let _ = writeln!(std::io::stderr(), "sandboxd: session ended: {end}");
            ExitCode::from(2)
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "sandboxd: cannot start: {e}");
            ExitCode::from(1)
        }
    }
}

fn serve(start: Instant, args: &args::Args) -> std::io::Result<session::End> {
    // No ptrace, no /proc/<pid>/mem or environ for the sandbox's code, even under the same uid.
    sys::become_undumpable()?;
    // Outside a PID namespace of its own, orphans of a killed shepherd still come here.
    sys::become_subreaper()?;
    // Listening before the first frame is answered: once the host has its HelloAck, it may connect.
    let listener = args.listen_fd.map(listen::Listener::adopt).transpose()?;
    // A TTL too large for the clock is no TTL.
    let deadline = args.ttl.and_then(|ttl| start.checked_add(ttl));
    let children = File::from(sys::child_events()?);
    // The protocol stream moves off 0 and 1 (close-on-exec copies), and 0 and 1 become
    // /dev/null, so no process sandboxd starts can hold the session's stream.
    let input = File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let output = File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    // Non-blocking, so that a host that stops reading holds a write only until the TTL
    // (`Session::flush`).
    sys::set_nonblocking(&output)?;
    // Where the stream is a pipe (local://'s, a container's FIFOs), a MiB of buffer lets a
    // file data frame pass in one write and one wake-up instead of sixteen of 64 KiB.
    sys::grow_pipe(&input, PIPE_BUF_WANTED);
    sys::grow_pipe(&output, PIPE_BUF_WANTED);
    let null = File::options().read(true).write(true).open("/dev/null")?;
    sys::dup_to(std::os::fd::AsRawFd::as_raw_fd(&null), 0)?;
    sys::dup_to(std::os::fd::AsRawFd::as_raw_fd(&null), 1)?;
    let lifetime = session::Lifetime { deadline, listener };
    Ok(session::Session::first(input, output, children, lifetime).run())
}
