//! Streams a command's output chunk by chunk, then waits for its exit status.
//!
//! ```text
//! cargo run --example streaming
//! ```

use std::process::ExitCode;

use futures_lite::StreamExt;
use sandboxio::{Command, NetworkPolicy, Sandbox, exec::StreamKind};

fn main() -> ExitCode {
    let Err(e) = run() else { return ExitCode::SUCCESS };
    eprintln!("error: {e}"); // `Display`: the code and what happened, never `Debug`
    ExitCode::FAILURE
}

fn run() -> Result<(), sandboxio::Error> {
    futures_lite::future::block_on(async {
        let sandbox = Sandbox::builder("fake://")?.network(NetworkPolicy::deny_all()).create().await?;
        // `stream` is not async and its result is not a future: iterate it.
        let mut stream =
            sandbox.stream(Command::shell("echo step 1; sleep 1; echo warn >&2; echo step 2"))?;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            let label = if chunk.stream == StreamKind::Stdout { "out" } else { "err" };
            print!("[{label}] {}", String::from_utf8_lossy(&chunk.data));
        }
        let done = stream.wait().await?;
        println!("exited with {} after {:?} (streamed: {})", done.status, done.duration, done.streamed);
        sandbox.close().await
    })
}
