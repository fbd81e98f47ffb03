use sandboxio::{Command, Sandbox};

async fn f(sandbox: &Sandbox) {
    let _ = sandbox.stream(Command::new("echo")).unwrap().await;
}

fn main() {}
