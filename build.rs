//! Builds `sandboxd` (the supervisor that runs inside sandboxes) for the target being compiled,
//! when a backend that runs it (`local`, `docker`) is enabled. The binary is embedded in the
//! library and written into each sandbox at run time.
//!
//! Stable Cargo cannot depend on another crate's binary, so the build compiles
//! `sandboxd/src/main.rs` with a bare `rustc`: sandboxd depends on `std` only for this reason.
//! It is linked statically (`crt-static`), so it runs in any Linux image, whatever its libc.
//! `docs/adr/0006-sandboxd.md` records the choice and the alternatives.

use std::env;
use std::path::PathBuf;
use std::process::Command;

#[path = "src/sandboxd/sha256.rs"]
mod sha256;

/// `rustc`'s arguments for sandboxd, one a line, but the target, the output and the source.
const RUSTC_ARGS: &str = include_str!("sandboxd/src/rustc-args");

fn main() {
    modal_proto();
    println!("cargo::rerun-if-changed=sandboxd/src");
    println!("cargo::rustc-check-cfg=cfg(sandboxd_embedded)");
    let wanted =
        env::var_os("CARGO_FEATURE_LOCAL").is_some() || env::var_os("CARGO_FEATURE_DOCKER").is_some();
    if !wanted {
        return;
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("sandboxd");
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = env::var("TARGET").expect("cargo sets TARGET");
    // The flags live in a file of their own because `scripts/build-images` builds the same
    // bytes to bake into images; the source path stays relative for the same reason (it is
    // part of the binary).
    let output = Command::new(rustc)
        .args(RUSTC_ARGS.lines().filter(|l| !l.is_empty()))
        .args(["--target", &target, "-o"])
        .arg(&out)
        .arg("sandboxd/src/main.rs")
        .output();
    match output {
        Ok(o) if o.status.success() => {
            println!("cargo::rustc-cfg=sandboxd_embedded");
            println!("cargo::rustc-env=SANDBOXIO_SANDBOXD={}", out.display());
            // What images with sandboxd baked in are labelled with (`scripts/build-images`):
            // a `docker://` create skips placing the binary only in an image whose label
            // names these very bytes.
            let binary = std::fs::read(&out).expect("rustc just wrote sandboxd");
            println!("cargo::rustc-env=SANDBOXIO_SANDBOXD_SHA256={}", sha256::hex_digest(&binary));
        }
        Ok(o) => {
            // Without sandboxd the backends still work on their older paths; say why loudly.
            let stderr = String::from_utf8_lossy(&o.stderr);
            let first = stderr.lines().find(|l| l.starts_with("error")).unwrap_or("no error line");
            println!(
                "cargo::warning=sandboxd could not be built for {target} ({first}); backends run without it"
            );
        }
        Err(e) => println!("cargo::warning=sandboxd could not be built: rustc did not start: {e}"),
    }
}

/// With the `modal` feature: compiles the trimmed Modal protocol (`proto/modal/`) with protox
/// (a protobuf compiler in Rust, so no `protoc`) and generates prost messages and tonic
/// clients into `OUT_DIR` (`modal.client.rs`, `modal.task_command_router.rs`), and the same
/// messages with servers into `OUT_DIR/modal-stub/` for tests.
#[cfg(feature = "modal")]
fn modal_proto() {
    println!("cargo::rerun-if-changed=proto/modal");
    let files = ["modal/api.proto", "modal/task_command_router.proto"];
    let fds =
        protox::compile(files, ["proto"]).unwrap_or_else(|e| panic!("proto/modal does not compile: {e}"));
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_fds(fds.clone())
        .unwrap_or_else(|e| panic!("cannot generate the Modal client from proto/modal: {e}"));
    // The same messages with servers and no clients, for the test servers only (included by
    // `#[cfg(test)]` code; never part of the library).
    let stub = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("modal-stub");
    std::fs::create_dir_all(&stub).expect("OUT_DIR is writable");
    tonic_prost_build::configure()
        .build_client(false)
        .build_transport(false)
        .out_dir(&stub)
        .compile_fds(fds)
        .unwrap_or_else(|e| panic!("cannot generate the Modal test servers from proto/modal: {e}"));
}

#[cfg(not(feature = "modal"))]
fn modal_proto() {}
