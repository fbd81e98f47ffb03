struct Sandbox;

#[sandboxio_macros::blocking_facade]
impl Clone for Sandbox {
    fn clone(&self) -> Self {
        Sandbox
    }
}

fn main() {}
