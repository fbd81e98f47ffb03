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

use std::time::Duration;

use modal_stub::proto::client::network_access::NetworkAccessType;
use official_client::Client;

/// Modal's client, in the venv `scripts/modal-client-check` installs (the run takes about
/// 5 s).
const MODAL: Client = Client {
    env_var: "SANDBOXIO_MODAL_PYTHON",
    python: "/opt/sandboxio-modal-client/bin/python3",
    modules: "modal, python_socks",
    missing: "Modal's Python client is not installed (scripts/modal-client-check installs it)",
    bound: Duration::from_mins(3),
};

#[test]
fn the_official_python_client_drives_the_stub_on_v1_sandboxes() {
    let Some(python) = MODAL.python_or_skip() else { return };
    let stub = modal_stub::Stub::start();
    let proxy = stub.connect_proxy();
    let (_, port) = stub.url.rsplit_once(':').expect("the stub's URL has a port");
    let scratch = official_client::Scratch::with_ca("modal-client", &stub.ca_pem);
    let mut command = official_client::script_command(&python, "modal_official_client.py");
    command
        // No profile file of anyone's: the settings below are the whole configuration.
        .env("HOME", &scratch.dir)
        .env("MODAL_CONFIG_PATH", scratch.dir.join("modal.toml"))
        .env("MODAL_SERVER_URL", format!("https://{}:{port}", modal_stub::DOMAIN))
        .env("MODAL_TOKEN_ID", modal_stub::TOKEN_ID)
        .env("MODAL_TOKEN_SECRET", modal_stub::TOKEN_SECRET)
        .env("MODAL_SANDBOX_V2", "0")
        .env("HTTPS_PROXY", format!("http://{proxy}"))
        .env("SSL_CERT_FILE", &scratch.ca)
        .env("SANDBOXIO_MODAL_CA", &scratch.ca);
    MODAL.expect_passed(command);
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
