use sandboxio::{ResourceLimits, Sandbox};

fn main() {
    // `None` is the one call: limits cannot be added after it.
    let _ = Sandbox::builder("fake://").unwrap().limits(None).limits(ResourceLimits::new().pids(64));
}
