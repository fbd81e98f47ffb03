struct Sandbox;
struct ExecStream;

#[sandboxio_macros::blocking_facade]
impl Sandbox {
    pub async fn pair(&self) -> (Sandbox, ExecStream) {
        (Sandbox, ExecStream)
    }
}

fn main() {}
