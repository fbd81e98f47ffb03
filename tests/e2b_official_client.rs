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

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The venv `scripts/e2b-client-check` installs the packages in.
const DEFAULT_PYTHON: &str = "/opt/sandboxio-e2b-client/bin/python3";
/// How long the whole client run may take (it takes about 10 s).
const BOUND: Duration = Duration::from_secs(180);

#[test]
fn the_official_python_client_drives_the_stub() {
    let Some(python) = official_client::python_or_skip(
        "SANDBOXIO_E2B_PYTHON",
        DEFAULT_PYTHON,
        "e2b, e2b_code_interpreter",
        "E2B's Python packages are not installed (scripts/e2b-client-check installs them)",
    ) else {
        return;
    };
    let stub = e2b_stub::Stub::start();
    let proxy = stub.connect_proxy();
    let dir = std::env::temp_dir().join(format!("sandboxio-e2b-client-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &stub.ca_pem).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/e2b_official_client.py");
    let mut command = Command::new(&python);
    command
        .arg(&script)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("E2B_API_KEY", e2b_stub::API_KEY)
        .env("E2B_DOMAIN", e2b_stub::DOMAIN)
        .env("SSL_CERT_FILE", &ca)
        .env("SANDBOXIO_E2B_PROXY", format!("http://{proxy}"));
    let (status, out, err) = official_client::run_bounded(command, BOUND);
    let _ = std::fs::remove_dir_all(&dir);
    let status = status.unwrap_or_else(|| panic!("the client ran past {BOUND:?}"));
    assert!(status.success(), "the official client failed ({status}):\n{out}\n{err}");
    assert!(out.contains("official-client check: passed"), "{out}");
    assert!(stub.state.sandboxes.lock().unwrap().is_empty(), "the client's sandbox outlived its kill");
}
