//! Class 4 (and 21: a size at its type's limit): a file's size is the sandbox's to claim. A
//! sparse file claims terabytes with no byte on disk; under a read limit raised past what the
//! host can hold (`read_limit(u64::MAX)`, "no limit"), `local://`'s handed-over read set the
//! claim aside in one allocation before reading a byte, and the whole host process aborted
//! ("memory allocation of 4611686018427387904 bytes failed", on main at `ce3d8bd`): every
//! sandbox it held went with it. Now the claim is asked for, never assumed: a size the
//! process cannot set aside is `TooLarge` at once.
//!
//! The read runs in a child process (this binary re-run): an abort must fail the test, not
//! end the test binary.

use std::time::Duration;

use sandboxio::NetworkPolicy;

use crate::fs_attacks::sh;
use crate::support::{block_on, child_role, local, spawn_child, strict};

const CHILD: &str = "local::class_04_sparse_claims::class_04__sparse_claim_child";

/// 4 EiB: more than any address space (x86-64 and arm64 users have at most 128 PiB), and
/// within what `/tmp`'s tmpfs lets a file claim (2^63 - 1).
const CLAIM: u64 = 1 << 62;

/// Not an attack: the child of the test below (does nothing unless its role is set). Prints
/// `CONTROL <bytes>` (a small sparse file read through the same unlimited read) and
/// `CLAIMED <size>` and `READ <outcome>` for the claim.
#[test]
fn class_04__sparse_claim_child() {
    if child_role().as_deref() != Some("sparse-claim") {
        return;
    }
    let sbx = local(NetworkPolicy::deny_all());
    let fs = sbx.fs().read_limit(u64::MAX).timeout(Duration::from_secs(30));
    // The control: the same unlimited read takes a sparse file whole (the path is live).
    let small = sh(&sbx, "truncate -s 1048576 small.bin && stat -c %s small.bin");
    assert_eq!(small.stdout_lossy().trim(), "1048576", "control: a 1 MiB sparse file: {small:?}");
    let read = block_on(fs.read("small.bin")).expect("control: the unlimited read of 1 MiB");
    // Its bytes, all zeros.
    println!("CONTROL {}", if read.iter().all(|b| *b == 0) { read.len() } else { 0 });
    // The claim: on the sandbox's tmpfs, reached through a link in the workspace.
    let made =
        sh(&sbx, &format!("truncate -s {CLAIM} /tmp/claim && ln -s /tmp/claim claim && stat -L -c %s claim"));
    println!("CLAIMED {}", made.stdout_lossy().trim());
    let outcome = match block_on(fs.read("claim")) {
        Ok(data) => format!("Ok {} bytes", data.len()),
        Err(e) => format!("{} {e}", e.code().as_str()),
    };
    println!("READ {outcome}");
    block_on(sbx.close()).unwrap();
}

#[test]
fn class_04__a_file_claiming_more_than_the_host_can_hold_is_too_large_not_an_abort() {
    if child_role().is_some() {
        return;
    }
    let test = "local_class_04__a_file_claiming_more_than_the_host_can_hold_is_too_large_not_an_abort";
    let out = spawn_child(CHILD, "sparse-claim", &[]).wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let line = |tag: &str| said.lines().find_map(|l| l.split_once(tag).map(|(_, r)| r.trim().to_owned()));
    assert_eq!(line("CONTROL "), Some("1048576".to_owned()), "{test}: the control's read: {said}");
    if line("CLAIMED ") != Some(CLAIM.to_string()) {
        // The sandbox's /tmp would not take the claim: nothing was tried.
        assert!(!strict(), "{test}: could not make a {CLAIM}-byte sparse file: {said}");
        println!("[skip] {test}: could not make a {CLAIM}-byte sparse file: {said}");
        return;
    }
    assert!(out.status.success(), "{test}: the host process died reading the claim ({}): {said}", out.status);
    let read = line("READ ").unwrap_or_default();
    assert!(
        read.starts_with("SBX-016"),
        "{test}: a claim over what the host can hold must be TooLarge: {read}"
    );
    println!("{test}: {read}");
}
