//! The E2B stub checked against E2B's official Python packages (`e2b`,
//! `e2b-code-interpreter`): `tests/support/e2b_official_client.py` drives the stub with
//! them (create, list, commands, stdin, a code cell with a PNG, contexts, files both ways,
//! kill), so the stub and sandboxio's adapter cannot share one misreading of the protocol.
//!
//! Opt-in (`test = false`): `scripts/e2b-client-check` installs the packages in a venv and
//! runs this, and `.ci/run` calls that script. The SDK reaches the stub over real TLS (the
//! stub's CA through `SSL_CERT_FILE`, which the SDK's transport reads as the system
//! bundle) through a loopback `CONNECT` proxy given with the SDK's own `proxy` option,
//! which stands in for name resolution (see `tests/support/e2b_stub/proxy.rs`). Without
//! the venv it says `[skip]`; with `SANDBOXIO_STRICT=1` that is a failure.

#![cfg(all(feature = "e2b", feature = "local", feature = "contract"))]

#[path = "support/e2b_stub/mod.rs"]
mod e2b_stub;
#[path = "support/official_client.rs"]
mod official_client;

use std::time::Duration;

use official_client::Client;

/// E2B's packages, in the venv `scripts/e2b-client-check` installs (the run takes about 10 s).
const E2B: Client = Client {
    env_var: "SANDBOXIO_E2B_PYTHON",
    python: "/opt/sandboxio-e2b-client/bin/python3",
    modules: "e2b, e2b_code_interpreter",
    missing: "E2B's Python packages are not installed (scripts/e2b-client-check installs them)",
    bound: Duration::from_mins(3),
};

#[test]
fn the_official_python_client_drives_the_stub() {
    let Some(python) = E2B.python_or_skip() else { return };
    let stub = e2b_stub::Stub::start();
    let proxy = stub.connect_proxy();
    let scratch = official_client::Scratch::with_ca("e2b-client", &stub.ca_pem);
    let mut command = official_client::script_command(&python, "e2b_official_client.py");
    command
        .env("E2B_API_KEY", e2b_stub::API_KEY)
        .env("E2B_DOMAIN", e2b_stub::DOMAIN)
        .env("SSL_CERT_FILE", &scratch.ca)
        .env("SANDBOXIO_E2B_PROXY", format!("http://{proxy}"));
    E2B.expect_passed(command);
    assert!(stub.state.sandboxes.lock().unwrap().is_empty(), "the client's sandbox outlived its kill");
}
