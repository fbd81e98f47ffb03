use sandboxio::{Command, NetworkPolicy, Sandbox};

async fn f() -> sandboxio::Result<()> {
    let builder = Sandbox::builder("fake://")?.network(NetworkPolicy::deny_all());
    let _ = builder.run(Command::new("echo")).await;
    Ok(())
}

fn main() {
    let _ = f();
}
