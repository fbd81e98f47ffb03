struct Sandbox;

#[sandboxio_macros::blocking_facade]
impl Sandbox {
    pub async fn many(&self) -> Vec<Sandbox> {
        Vec::new()
    }
}

fn main() {}
