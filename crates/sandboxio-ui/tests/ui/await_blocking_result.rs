use sandboxio::NetworkPolicy;

async fn f() -> sandboxio::Result<()> {
    let _sandbox = sandboxio::sync::Sandbox::builder("fake://")?.network(NetworkPolicy::deny_all()).create().await?;
    Ok(())
}

fn main() {
    let _ = f();
}
