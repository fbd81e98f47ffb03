//! Every form `limits` takes, in both facades: a value, `Some`, `None`, and an `Option`
//! chosen at run time, all giving one builder type.

use sandboxio::{NetworkPolicy, ResourceLimits, Sandbox, SandboxBuilder};
use sandboxio::builder::state::{LimitsSet, NetworkSet};

fn chosen(want: bool) -> SandboxBuilder<NetworkSet, LimitsSet> {
    let builder = Sandbox::builder("fake://").unwrap().network(NetworkPolicy::deny_all());
    // Both arms have the same type: the `if` the old signature could not express.
    if want { builder.limits(ResourceLimits::new().pids(32)) } else { builder.limits(None) }
}

fn main() {
    let limits = ResourceLimits::new().memory_mib(512);
    let _value = Sandbox::builder("fake://").unwrap().limits(limits).network(NetworkPolicy::deny_all());
    let _some = Sandbox::builder("fake://").unwrap().limits(Some(limits));
    let _none = Sandbox::builder("fake://").unwrap().limits(None);
    let _runtime = Sandbox::builder("fake://").unwrap().limits(std::env::args().nth(9).map(|_| limits));
    let _either = [chosen(true), chosen(false)];
    let sandbox = futures_lite::future::block_on(chosen(false).create()).unwrap();
    futures_lite::future::block_on(sandbox.close()).unwrap();

    use sandboxio::sync::Sandbox as Blocking;
    let _value = Blocking::builder("fake://").unwrap().limits(limits);
    let _some = Blocking::builder("fake://").unwrap().limits(Some(limits));
    let _none = Blocking::builder("fake://").unwrap().limits(None);
    let blocking = Blocking::builder("fake://")
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .limits(std::env::args().nth(9).map(|_| limits))
        .create()
        .unwrap();
    blocking.close().unwrap();
}
