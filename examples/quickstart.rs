//! Runs Python code and a shell command in a sandbox with the network denied, and prints
//! what came back.
//!
//! ```text
//! cargo run --example quickstart                  # the in-memory fake:// backend
//! SANDBOXIO_DSN=fake://?seed=7 cargo run --example quickstart
//! ```
//!
//! The embedded default is `fake://` until the `local://` namespace backend lands; the
//! DSN comes from `SANDBOXIO_DSN` when set.

use std::time::Duration;

use sandboxio::{Command, NetworkPolicy, Sandbox};

fn main() -> Result<(), sandboxio::Error> {
    // sandboxio needs no particular runtime: any executor can drive it.
    futures_lite::future::block_on(async {
        let dsn = std::env::var("SANDBOXIO_DSN").unwrap_or_else(|_| "fake://".to_owned());
        let sandbox = Sandbox::builder(&dsn)?
            .network(NetworkPolicy::deny_all()) // required: there is no default policy
            .metadata("example", "quickstart")
            .ttl(Duration::from_secs(120))
            .create()
            .await?;
        println!("sandbox {} on {}:// (isolation: {})", sandbox.id(), sandbox.backend(), sandbox.isolation());

        let cell = sandbox.run_code("total = sum([1, 2, 3, 4])\nprint(f'sum = {total}')").await?;
        print!("python stdout: {}", cell.stdout_lossy());

        let out = sandbox
            .run(Command::shell(
                "echo hello from $HOSTNAME; curl -s https://example.com || echo egress blocked >&2",
            ))
            .await?;
        print!("shell stdout: {}shell stderr: {}", out.stdout_lossy(), out.stderr_lossy());
        println!("exit status: {}", out.status);

        sandbox.close().await?;
        sandboxio::shutdown(Duration::from_secs(5)).await;
        Ok(())
    })
}
