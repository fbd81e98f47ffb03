fn main() -> sandboxio::Result<()> {
    let _sandbox = sandboxio::sync::Sandbox::builder("fake://")?.create()?;
    Ok(())
}
