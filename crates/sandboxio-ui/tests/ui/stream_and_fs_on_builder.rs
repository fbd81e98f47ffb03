use sandboxio::{Command, NetworkPolicy, Sandbox};

fn main() -> sandboxio::Result<()> {
    let builder = Sandbox::builder("fake://")?.network(NetworkPolicy::deny_all());
    let _ = builder.stream(Command::new("echo"));
    let _ = builder.fs();
    Ok(())
}
