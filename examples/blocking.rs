//! The blocking API: the same calls as the async quickstart, from a plain `fn main` with no
//! runtime anywhere.
//!
//! ```text
//! cargo run --example blocking
//! ```

use std::process::ExitCode;
use std::time::Duration;

use sandboxio::sync::Sandbox;
use sandboxio::{Command, NetworkPolicy};

fn main() -> ExitCode {
    let Err(e) = run() else { return ExitCode::SUCCESS };
    eprintln!("error: {e}"); // `Display`: the code and what happened, never `Debug`
    ExitCode::FAILURE
}

fn run() -> Result<(), sandboxio::Error> {
    let sandbox = Sandbox::builder("fake://")?.network(NetworkPolicy::deny_all()).create()?;

    let out = sandbox.run(Command::new("echo").arg("hello from a blocking caller"))?;
    print!("run: {}", out.stdout_lossy());

    // A blocking stream is an Iterator of output chunks.
    for chunk in sandbox.stream(Command::shell("echo one; sleep 1; echo two"))? {
        print!("stream: {}", String::from_utf8_lossy(&chunk?.data));
    }

    sandbox.fs().write("notes.txt", "kept in the sandbox")?;
    println!("fs: {}", sandbox.fs().read_text("notes.txt")?);

    let cell = sandbox.run_code("print(sum([1, 2, 3]))")?;
    print!("run_code: {}", cell.stdout_lossy());

    sandbox.close()?;
    let left = sandboxio::sync::shutdown(Duration::from_secs(5));
    println!("teardowns still running: {left}");
    Ok(())
}
