struct Sandbox;

#[sandboxio_macros::blocking_facade(sync = "elsewhere")]
impl Sandbox {
    pub async fn run(&self) {}
}

fn main() {}
