//! The same program against both facades: identical names, arguments and results.

use sandboxio::{Command, ExecResult, NetworkPolicy};

fn blocking() -> sandboxio::Result<ExecResult> {
    use sandboxio::sync::Sandbox;
    let sandbox = Sandbox::builder("fake://")?.network(NetworkPolicy::deny_all()).metadata("k", "v").create()?;
    sandbox.fs().write("a.txt", "x")?;
    let out = sandbox.run(Command::new("cat").arg("a.txt"))?;
    let mut stream = sandbox.stream(Command::new("echo").arg("s"))?;
    let _chunk = stream.next_chunk();
    let _done = stream.wait()?;
    sandbox.close()?;
    Ok(out)
}

async fn asynchronous() -> sandboxio::Result<ExecResult> {
    use sandboxio::Sandbox;
    let sandbox = Sandbox::builder("fake://")?.network(NetworkPolicy::deny_all()).metadata("k", "v").create().await?;
    sandbox.fs().write("a.txt", "x").await?;
    let out = sandbox.run(Command::new("cat").arg("a.txt")).await?;
    let mut stream = sandbox.stream(Command::new("echo").arg("s"))?;
    let _chunk = stream.next_chunk().await;
    let _done = stream.wait().await?;
    sandbox.close().await?;
    Ok(out)
}

fn main() {
    let a = blocking().unwrap();
    let b = futures_lite::future::block_on(asynchronous()).unwrap();
    assert_eq!(a.stdout, b.stdout);
}
