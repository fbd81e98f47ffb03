use sandboxio::{Command, Sandbox};

async fn f(sandbox: Sandbox) {
    let _id = sandbox.detach().await.unwrap();
    let _ = sandbox.run(Command::new("echo")).await;
}

fn main() {}
