//! The async API under smol instead of tokio: sandboxio assumes no runtime.
//!
//! ```text
//! cargo run --example smol
//! ```

use sandboxio::{Command, NetworkPolicy, Sandbox};

fn main() -> Result<(), sandboxio::Error> {
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
