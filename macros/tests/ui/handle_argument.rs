struct Sandbox;
struct ExecStream;

#[sandboxio_macros::blocking_facade]
impl Sandbox {
    pub async fn adopt(&self, stream: ExecStream) {
        let _ = stream;
    }
}

fn main() {}
