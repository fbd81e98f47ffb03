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

fn main() {
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
    let output = Command::new(rustc)
        .args(["--edition", "2024", "--crate-name", "sandboxd", "--crate-type", "bin", "--target", &target])
        .args([
            "-C",
            "opt-level=2",
            "-C",
            "panic=abort",
            "-C",
            "strip=symbols",
            "-C",
            "target-feature=+crt-static",
        ])
        .args(["--cap-lints", "warn", "-o"])
        .arg(&out)
        .arg("sandboxd/src/main.rs")
        .output();
    match output {
        Ok(o) if o.status.success() => {
            println!("cargo::rustc-cfg=sandboxd_embedded");
            println!("cargo::rustc-env=SANDBOXIO_SANDBOXD={}", out.display());
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
