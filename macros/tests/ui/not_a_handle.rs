struct Widget;

#[sandboxio_macros::blocking_facade]
impl Widget {
    pub async fn spin(&self) {}
}

fn main() {}
