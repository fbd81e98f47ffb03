//! Runs Python code and a shell command in a `local://` sandbox (Linux namespaces through
//! bubblewrap) with the network denied, and prints what came back.
//!
//! ```text
//! cargo run --example quickstart --features local
//! cargo run --example quickstart --features docker -- 'docker://?image=sandboxio/python:2'
//! ```
//!
//! The DSN comes from the first argument, else `SANDBOXIO_DSN`, else `local://`. The Docker
//! image must be in the engine already: `scripts/build-images python` builds it.
//!
//! `local://` needs the `bwrap` binary (Debian's `bubblewrap` package) and unprivileged user
//! namespaces; if either is missing, `create()` says which and how to fix it.

use std::process::ExitCode;
use std::time::Duration;

use sandboxio::{Command, NetworkPolicy, Sandbox};

const PYTHON: &str = r#"
import platform, socket
total = sum([1, 2, 3, 4])
print(f"sum = {total}, computed by Python {platform.python_version()}")
try:
    socket.create_connection(("1.1.1.1", 53), 2)
    print("egress: reached the internet")
except OSError as e:
    print(f"egress blocked: {e}")
"#;

fn main() -> ExitCode {
    let Err(e) = run() else { return ExitCode::SUCCESS };
    eprintln!("error: {e}"); // `Display`: the code and what happened, never `Debug`
    ExitCode::FAILURE
}

fn run() -> Result<(), sandboxio::Error> {
    // sandboxio needs no particular runtime: any executor can drive it.
    futures_lite::future::block_on(async {
        let dsn = std::env::args()
            .nth(1)
            .or_else(|| std::env::var("SANDBOXIO_DSN").ok())
            .unwrap_or_else(|| "local://".to_owned());
        let sandbox = Sandbox::builder(&dsn)?
            .network(NetworkPolicy::deny_all()) // required: there is no default policy
            .metadata("example", "quickstart")
            .ttl(Duration::from_mins(2))
            .create()
            .await?;
        println!("sandbox {} on {}:// (isolation: {})", sandbox.id(), sandbox.backend(), sandbox.isolation());

        let python = sandbox
            .run(Command::new("python3").arg("-c").arg(PYTHON).timeout(Duration::from_secs(30)))
            .await?;
        print!("python: {}", python.stdout_lossy());

        let shell = sandbox.run(Command::shell("echo hello from $(pwd); id -u; echo to stderr >&2")).await?;
        print!("shell stdout: {}shell stderr: {}", shell.stdout_lossy(), shell.stderr_lossy());
        println!("exit status: {}", shell.status);

        sandbox.close().await?;
        sandboxio::runtime::shutdown(Duration::from_secs(5)).await;
        Ok(())
    })
}
