//! sandboxd: the supervisor sandboxio runs as the first process of every sandbox.
//!
//! It speaks the protocol of `proto/` on its stdin and stdout with the sandboxio process
//! that owns the sandbox, runs each command under a shepherd (`shepherd.rs`), and ends every
//! command and itself when that stream ends. Run it as the init of the sandbox's PID namespace:
//! then nothing in the sandbox can signal it, and its death ends every process in the sandbox.
//! `docs/adr/0006-sandboxd.md` records the design.
//!
//! `sandboxd --version` prints the protocol version; `sandboxd` runs one session on stdio.

#![forbid(unsafe_op_in_unsafe_fn)]

mod fs;
#[expect(dead_code, reason = "the host-side half of the protocol is compiled here too")]
mod proto;
mod session;
mod shepherd;
#[expect(unsafe_code, reason = "the Linux calls std lacks, each unsafe block with its SAFETY comment")]
mod sys;

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::process::ExitCode;

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("sandboxd protocol {}", proto::VERSION);
        return ExitCode::SUCCESS;
    }
    match serve() {
        Ok(session::End::HostGone) => ExitCode::SUCCESS,
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

fn serve() -> std::io::Result<session::End> {
    // No ptrace, no /proc/<pid>/mem or environ for the sandbox's code, even under the same uid.
    sys::become_undumpable()?;
    // Outside a PID namespace of its own, orphans of a killed shepherd still come here.
    sys::become_subreaper()?;
    let children = File::from(sys::child_events()?);
    // The protocol stream moves off 0 and 1 (close-on-exec copies), and 0 and 1 become
    // /dev/null, so no process sandboxd starts can hold the session's stream.
    let input = File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let output = File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let null = File::options().read(true).write(true).open("/dev/null")?;
    sys::dup_to(std::os::fd::AsRawFd::as_raw_fd(&null), 0)?;
    sys::dup_to(std::os::fd::AsRawFd::as_raw_fd(&null), 1)?;
    Ok(session::Session::new(input, output, children).run())
}
