//! Test support that ships with the crate: the in-memory [`FakeBackend`] and the
//! [`sbx_fake`] harness.
//!
//! The harness mirrors a real backend's capabilities, so a test that passes on it does not
//! rely on something its production backend lacks: [`sbx_fake`] mirrors `docker://`, the
//! widest of the shipped real backends, and [`sbx_fake_like`] mirrors the one you name.
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
#[cfg(feature = "contract")]
mod testnet;

use std::ops::Deref;

pub use fake::{DEFAULT_CREATE_LATENCY, Failure, FakeBackend, FakeCall, WORKDIR};
#[cfg(feature = "contract")]
#[cfg_attr(docsrs, doc(cfg(feature = "contract")))]
pub use testnet::{TESTNET_DESCRIPTION, TESTNET_ENV, TestNetwork};

use crate::backend::BackendOption;
use crate::backends::capabilities;
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
    /// The scheme of the backend whose capabilities (and typed builder options) the fake
    /// declares: `"docker"`, `"local"`, or `"fake"` for the fake's own full set; `None` for
    /// a backend from [`sbx_fake_with`], configured by its caller.
    pub mirrors: Option<&'static str>,
}

impl Deref for FakeHarness {
    type Target = FakeBackend;

    fn deref(&self) -> &FakeBackend {
        &self.backend
    }
}

/// A fresh [`FakeHarness`] whose fake declares what `docker://` declares
/// ([`capabilities::DOCKER`] and the `image` option): `sbx_fake_like("docker")`.
///
/// Docker is the widest of the shipped real backends (it offers everything `local://`
/// does, plus limits, connect, detach, code contexts and rich outputs), so what this fake
/// refuses no real backend offers: a test that needs an allowlist must say so with
/// `sbx_fake_like("fake")`. Only capabilities and options are mirrored: the
/// isolation tier stays [`IsolationTier::None`](crate::policy::IsolationTier::None), because the
/// fake isolates nothing.
///
/// # Panics
///
/// Never in practice: creating a fake sandbox under `deny_all` cannot fail.
#[must_use]
pub fn sbx_fake() -> FakeHarness {
    sbx_fake_like("docker")
}

/// A fresh [`FakeHarness`] whose fake declares the capabilities (and accepts the typed
/// builder options) of the first-party backend `backend` names: `"docker"`, `"local"`, or
/// `"fake"` (every capability, which no real backend has). A trailing `"://"` is accepted.
/// The backend's Cargo feature is not needed. The fake refuses everything else as the real
/// backend would, with [`Error::CapabilityNotSupported`](crate::Error::CapabilityNotSupported).
///
/// ```
/// use sandboxio::testing::sbx_fake_like;
/// use sandboxio::{ErrorCode, policy::Capabilities};
///
/// let local = sbx_fake_like("local");
/// assert!(!local.sandbox.capabilities().contains(Capabilities::COMMAND_SECRETS));
/// let secret = sandboxio::Command::new("true").secret_env("TOKEN", "x");
/// let ran = futures_lite::future::block_on(local.sandbox.run(secret));
/// assert_eq!(ran.unwrap_err().code(), ErrorCode::CapabilityNotSupported);
/// ```
///
/// # Panics
///
/// For any other name (a third-party scheme, or a misspelling), with a
/// message listing the names it knows.
#[must_use]
pub fn sbx_fake_like(backend: &str) -> FakeHarness {
    let scheme = backend.strip_suffix("://").unwrap_or(backend);
    let (Some(name), Some(caps)) =
        (capabilities::SCHEMES.iter().copied().find(|s| *s == scheme), capabilities::of_scheme(scheme))
    else {
        panic!(
            "sbx_fake_like({backend:?}): no first-party backend of that name has a known capability set; use one of {:?}",
            capabilities::SCHEMES
        );
    };
    // The typed builder options each backend accepts, as its `supports_option` says
    // (the fake's own default accepts none).
    let options: &[BackendOption] = match name {
        "docker" => &[BackendOption::Image],
        "e2b" => &[BackendOption::Template],
        _ => &[],
    };
    let mut harness = sbx_fake_with(FakeBackend::new().with_capabilities(caps).with_options(options));
    harness.mirrors = Some(name);
    harness
}

/// A [`FakeHarness`] on a backend you configured (seed, capabilities, audit sinks). It
/// mirrors no real backend: [`FakeHarness::mirrors`] is `None`.
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
    FakeHarness { sandbox, backend, mirrors: None }
}
