//! The Modal stub checked against Modal's official Python client (`modal`, with its
//! `api-proxy-support` extra): `tests/support/modal_official_client.py` drives the stub with
//! it (app, image, a sandbox with a TTL, an idle timeout, tags and no network, commands with
//! stdout, stderr, stdin and exit codes, a file through commands, list by tags, terminate),
//! so the stub and sandboxio's adapter cannot share one misreading of the protocol.
//!
//! Opt-in (`test = false`): `scripts/modal-client-check` installs the client in a venv and
//! runs this, and `.ci/run` calls that script. The client reaches the stub over real TLS
//! with certificate checks on both channels (the stub's CA; see the script for how each
//! channel is told) through a loopback `CONNECT` proxy given with the client's own proxy
//! support, which stands in for name resolution: the client names `modal.test`, never
//! `localhost`, for which it would skip the router's certificate check. Without the venv it
//! says `[skip]`; with `SANDBOXIO_STRICT=1` that is a failure.

#![cfg(all(feature = "modal", feature = "local", feature = "contract"))]

#[path = "support/modal_stub/mod.rs"]
mod modal_stub;
#[path = "support/official_client.rs"]
mod official_client;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use modal_stub::proto::client::network_access::NetworkAccessType;

/// The venv `scripts/modal-client-check` installs the client in.
const DEFAULT_PYTHON: &str = "/opt/sandboxio-modal-client/bin/python3";
/// How long the whole client run may take (it takes about 10 s).
const BOUND: Duration = Duration::from_secs(180);

#[test]
fn the_official_python_client_drives_the_stub() {
    let Some(python) = official_client::python_or_skip(
        "SANDBOXIO_MODAL_PYTHON",
        DEFAULT_PYTHON,
        "modal, python_socks",
        "Modal's Python client is not installed (scripts/modal-client-check installs it)",
    ) else {
        return;
    };
    let stub = modal_stub::Stub::start();
    let proxy = stub.connect_proxy();
    let port = stub.url.rsplit_once(':').expect("the stub's URL has a port").1.to_owned();
    let dir = std::env::temp_dir().join(format!("sandboxio-modal-client-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &stub.ca_pem).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/modal_official_client.py");
    let mut command = Command::new(&python);
    command
        .arg(&script)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        // No profile file of anyone's: the settings below are the whole configuration.
        .env("HOME", &dir)
        .env("MODAL_CONFIG_PATH", dir.join("modal.toml"))
        .env("MODAL_SERVER_URL", format!("https://{}:{port}", modal_stub::DOMAIN))
        .env("MODAL_TOKEN_ID", modal_stub::TOKEN_ID)
        .env("MODAL_TOKEN_SECRET", modal_stub::TOKEN_SECRET)
        .env("MODAL_SANDBOX_V2", "0")
        .env("HTTPS_PROXY", format!("http://{proxy}"))
        .env("SSL_CERT_FILE", &ca)
        .env("SANDBOXIO_MODAL_CA", &ca);
    let (status, out, err) = official_client::run_bounded(command, BOUND);
    let _ = std::fs::remove_dir_all(&dir);
    let status = status.unwrap_or_else(|| panic!("the client ran past {BOUND:?}"));
    assert!(status.success(), "the official client failed ({status}):\n{out}\n{err}");
    assert!(out.contains("official-client check: passed"), "{out}");
    println!("client identities the stub saw: {:?}", stub.state.identities.lock().unwrap());
    // What the client sent is what the adapter sends for the same request (tests/modal.rs
    // checks the adapter's side): the TTL, the idle timeout, the network and the tags.
    let creates = stub.state.creates.lock().unwrap();
    let [(key, sent)] = creates.as_slice() else { panic!("one SandboxCreate, got {}", creates.len()) };
    println!("the client's SandboxCreate (x-idempotency-key {key:?}): {sent:?}");
    let d = sent.definition.as_ref().expect("a definition");
    assert_eq!((d.timeout_secs, d.idle_timeout_secs), (300, Some(120)));
    assert_eq!(d.entrypoint_args, ["sleep", "infinity"]);
    let network = d.network_access.as_ref().expect("a network access");
    assert_eq!(network.network_access_type(), NetworkAccessType::Blocked);
    let tags: Vec<_> = sent.tags.iter().map(|t| t.tag_name.as_str()).collect();
    assert_eq!(tags, ["sandboxio.check", "run"]);
    drop(creates);
    let live = stub.state.sandboxes.lock().unwrap().values().filter(|s| s.finished().is_none()).count();
    assert_eq!(live, 0, "the client's sandbox outlived its terminate");
    assert_eq!(stub.made(), 1, "one create, one sandbox");
}
