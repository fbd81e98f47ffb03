//! The async API under smol instead of tokio: sandboxio assumes no runtime.
//!
//! ```text
//! cargo run --example smol
//! ```

use std::process::ExitCode;

use sandboxio::{Command, NetworkPolicy, Sandbox};

fn main() -> ExitCode {
    let Err(e) = run() else { return ExitCode::SUCCESS };
    eprintln!("error: {e}"); // `Display`: the code and what happened, never `Debug`
    ExitCode::FAILURE
}

fn run() -> Result<(), sandboxio::Error> {
    smol::block_on(async {
        let sandbox = Sandbox::builder("fake://")?.network(NetworkPolicy::deny_all()).create().await?;
        // Two commands at once on smol's executor.
        let (a, b) = futures_lite::future::zip(
            sandbox.run(Command::shell("sleep 2; echo slow")),
            sandbox.run(Command::shell("echo fast")),
        )
        .await;
        print!("{}{}", a?.stdout_lossy(), b?.stdout_lossy());
        sandbox.close().await
    })
}
