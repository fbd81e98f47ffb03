use sandboxio::{Command, Sandbox};

async fn f(sandbox: &Sandbox) {
    let mut stream = sandbox.stream(Command::new("echo")).unwrap();
    stream.close().await.unwrap();
    let _ = stream.wait().await;
}

fn main() {}
