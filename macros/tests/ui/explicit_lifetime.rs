struct Sandbox;

#[sandboxio_macros::blocking_facade]
impl Sandbox {
    pub async fn borrow<'a>(&'a self, text: &'a str) -> &'a str {
        text
    }
}

fn main() {}
