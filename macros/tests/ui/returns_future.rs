use std::future::Future;

struct Sandbox;

#[sandboxio_macros::blocking_facade]
impl Sandbox {
    pub fn later(&self) -> impl Future<Output = ()> {
        async {}
    }
}

fn main() {}
