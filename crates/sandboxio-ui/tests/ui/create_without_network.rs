use sandboxio::Sandbox;

async fn f() -> sandboxio::Result<()> {
    let _sandbox = Sandbox::builder("fake://")?.create().await?;
    Ok(())
}

fn main() {
    let _ = f();
}
