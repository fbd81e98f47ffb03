//! The host's side of sandboxd, the supervisor that runs inside local and Docker sandboxes,
//! all of it in this folder: its wire protocol (the same files the binary compiles,
//! `sandboxd/src/proto/`), the binary itself (built for this target by `build.rs` and
//! embedded here), the protocol [`client`] on one connection, and the [`session`] a
//! backend's sandbox holds over it (commands, streams, files, code cells, the egress relay).
//! How a backend starts sandboxd and reaches it is the backend's own: `docker://`'s
//! `sandboxd_path/`, `local://`'s `session/`.

#[cfg_attr(
    not(any(feature = "docker", feature = "local")),
    expect(dead_code, reason = "only the backends that run sandboxd run cells on its runner")
)]
pub(crate) mod cells;
#[cfg_attr(
    not(any(feature = "docker", feature = "local")),
    expect(dead_code, reason = "only the backends that run sandboxd use its client")
)]
pub(crate) mod client;
pub(crate) mod session;
/// The code-cell runner sandboxd starts as `python3 -u -c RUNNER` with a control channel, one
/// per code context (its header states its wire format).
#[cfg_attr(
    not(any(feature = "docker", feature = "local")),
    expect(dead_code, reason = "only the backends that run sandboxd run cells on its runner")
)]
pub(crate) const RUNNER: &str = include_str!("../../sandboxd/src/runner.py");

/// The digest `build.rs` names the embedded binary with; compiled here for its tests, and
/// for `docker://`'s template cache keys.
#[cfg(any(test, feature = "docker"))]
pub(crate) mod sha256;

#[path = "../../sandboxd/src/proto/mod.rs"]
#[allow(dead_code, reason = "sandboxd's own half of the protocol is compiled here too")]
pub(crate) mod proto;

/// The sandboxd binary for the target this library was built for: a static executable, so it
/// runs in any Linux image. `None` when `build.rs` could not build it (it said why in a cargo
/// warning); the backends then keep to their paths that do not need it.
#[cfg(sandboxd_embedded)]
#[cfg_attr(
    not(any(test, feature = "docker", feature = "local")),
    expect(dead_code, reason = "only the backends that run sandboxd need the binary")
)]
pub(crate) const BINARY: Option<&[u8]> = Some(include_bytes!(env!("SANDBOXIO_SANDBOXD")));

/// See above: the build could not make sandboxd.
#[cfg(not(sandboxd_embedded))]
#[cfg_attr(
    not(any(test, feature = "docker", feature = "local")),
    expect(dead_code, reason = "only the backends that run sandboxd need the binary")
)]
pub(crate) const BINARY: Option<&[u8]> = None;

/// The SHA-256 of [`BINARY`] as 64 lowercase hex digits (what `sha256sum` prints): an image
/// whose `io.sandboxio.sandboxd` label names it carries these very bytes.
#[cfg(sandboxd_embedded)]
#[cfg_attr(
    not(any(test, feature = "docker")),
    expect(dead_code, reason = "only docker:// bakes sandboxd into images")
)]
pub(crate) const BINARY_SHA256: Option<&str> = Some(env!("SANDBOXIO_SANDBOXD_SHA256"));

/// See above: the build could not make sandboxd.
#[cfg(not(sandboxd_embedded))]
#[cfg_attr(
    not(any(test, feature = "docker")),
    expect(dead_code, reason = "only docker:// bakes sandboxd into images")
)]
pub(crate) const BINARY_SHA256: Option<&str> = None;

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_embedded_binary_runs_and_speaks_this_protocol() {
        let Some(binary) = super::BINARY else {
            panic!("build.rs did not embed sandboxd; its cargo warning says why");
        };
        // A static executable has no program interpreter (PT_INTERP, type 3) in its headers.
        assert_eq!(&binary[..4], b"\x7fELF");
        let dir = std::env::temp_dir().join(format!("sandboxd-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sandboxd");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(binary).unwrap();
        drop(f);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o500)).unwrap();
        // Another test thread that forks while the file is open for writing holds it open in
        // its child until that child execs: executing it meanwhile fails with ETXTBSY.
        let out = (0..200)
            .find_map(|_| match std::process::Command::new(&path).arg("--version").output() {
                Err(e) if e.raw_os_error() == Some(26) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    None
                }
                other => Some(other.unwrap()),
            })
            .expect("the binary stayed busy for 2 s");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("sandboxd protocol {}", super::proto::VERSION)
        );
        assert!(!has_interpreter(binary), "sandboxd is not statically linked");
    }

    #[test]
    fn the_embedded_binary_is_named_by_its_digest() {
        let (Some(binary), Some(digest)) = (super::BINARY, super::BINARY_SHA256) else {
            panic!("build.rs did not embed sandboxd; its cargo warning says why");
        };
        assert_eq!(super::sha256::hex_digest(binary), digest);
    }

    /// Whether an ELF64 little-endian file has a `PT_INTERP` program header.
    fn has_interpreter(elf: &[u8]) -> bool {
        let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]);
        let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
        let phoff = usize::try_from(u64_at(0x20)).unwrap();
        let (size, count) = (usize::from(u16_at(0x36)), usize::from(u16_at(0x38)));
        (0..count).any(|i| u32::from_le_bytes(elf[phoff + i * size..][..4].try_into().unwrap()) == 3)
    }
}
