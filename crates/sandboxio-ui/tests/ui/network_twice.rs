use sandboxio::{NetworkPolicy, Sandbox};

fn main() {
    let _ = Sandbox::builder("fake://")
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .network(NetworkPolicy::allow_all());
}
