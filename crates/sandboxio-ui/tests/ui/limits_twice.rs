use sandboxio::{ResourceLimits, Sandbox};

fn main() {
    let _ = Sandbox::builder("fake://")
        .unwrap()
        .limits(ResourceLimits::new().memory_mib(512))
        .limits(ResourceLimits::new().pids(64));
}
