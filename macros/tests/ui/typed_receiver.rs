use std::pin::Pin;

struct Sandbox;

#[sandboxio_macros::blocking_facade]
impl Sandbox {
    pub async fn poll_me(self: Pin<&mut Self>) {}
}

fn main() {}
