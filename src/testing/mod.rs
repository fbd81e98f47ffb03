//! Test support that ships with the crate: the in-memory [`FakeBackend`] and the
//! [`sbx_fake`] harness.
//!
//! ```
//! use sandboxio::testing::sbx_fake;
//! use sandboxio::{ExecResult, NetworkPolicy, Sandbox};
//!
//! // The code under test takes a sandbox, whatever its backend.
//! async fn my_agent_tool(sandbox: &Sandbox, _query: &str) -> String {
//!     let out = sandbox.run_code("import pandas; print(pandas.__version__)").await.unwrap();
//!     out.stdout_lossy().into_owned()
//! }
//!
//! let sbx_fake = sbx_fake();
//! sbx_fake.on_run_code("import pandas", ExecResult::new(0, "2.2.1\n", ""));
//! let result = futures_lite::future::block_on(my_agent_tool(&sbx_fake.sandbox, "check pandas version"));
//! assert!(result.contains("2.2.1"));
//! assert_eq!(sbx_fake.calls()[0].network, NetworkPolicy::deny_all());
//! ```

#[cfg(feature = "contract")]
#[cfg_attr(docsrs, doc(cfg(feature = "contract")))]
pub mod contract;
mod fake;

use std::ops::Deref;

pub use fake::{DEFAULT_CREATE_LATENCY, Failure, FakeBackend, FakeCall, WORKDIR};

use crate::{NetworkPolicy, Sandbox};

/// A [`FakeBackend`] with one sandbox created under [`NetworkPolicy::deny_all`]. It derefs
/// to the backend, so `harness.on_run_code(..)` and `harness.calls()` work directly; the
/// sandbox's own creation is not in `calls()`.
#[derive(Debug)]
pub struct FakeHarness {
    /// The sandbox to hand to the code under test.
    pub sandbox: Sandbox,
    /// The backend behind it.
    pub backend: FakeBackend,
}

impl Deref for FakeHarness {
    type Target = FakeBackend;

    fn deref(&self) -> &FakeBackend {
        &self.backend
    }
}

/// A fresh [`FakeHarness`] on a default [`FakeBackend`].
///
/// # Panics
///
/// Never in practice: creating a fake sandbox under `deny_all` cannot fail.
#[must_use]
pub fn sbx_fake() -> FakeHarness {
    sbx_fake_with(FakeBackend::new())
}

/// A [`FakeHarness`] on a backend you configured (seed, capabilities, audit sinks).
///
/// # Panics
///
/// If the backend cannot create a sandbox under `deny_all` (one configured without
/// `NETWORK_DENY`).
#[must_use]
pub fn sbx_fake_with(backend: FakeBackend) -> FakeHarness {
    // The fake does no I/O and never waits, so blocking here is instant on any executor.
    let sandbox = futures_lite::future::block_on(
        Sandbox::builder_with(backend.clone()).network(NetworkPolicy::deny_all()).create(),
    )
    .expect("a FakeBackend declaring NETWORK_DENY creates a deny_all sandbox");
    backend.clear_calls();
    FakeHarness { sandbox, backend }
}
