use sandboxio::{Command, Sandbox};

async fn f(sandbox: Sandbox) {
    sandbox.close().await.unwrap();
    let _ = sandbox.run(Command::new("echo")).await;
}

fn main() {}
