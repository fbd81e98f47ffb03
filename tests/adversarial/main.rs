//! The permanent adversarial suite: one module per attack class
//! (`SECURITY.md` lists the classes and what each test proves). Every attack first proves,
//! in the same run, that its payload works unconfined (the positive control); a control that
//! cannot run is a loud `[skip]`, and a failure under `SANDBOXIO_STRICT=1` (which CI sets,
//! with `SANDBOXIO_REQUIRE_DOCKER=1`). Then it shows the attack failing against the sandbox.
//!
//! Runs against `local://` (CI runs this binary as root and as an unprivileged user) and
//! `docker://` (as root: Docker access is root-equivalent).
#![allow(non_snake_case, reason = "test names read as classes: `class_01__env_never_reaches_a_host_process`")]
#![allow(
    dead_code,
    reason = "helpers shared by the local and docker halves; a build with one backend leaves the other's unused"
)]

#[cfg(any(feature = "local", feature = "docker"))]
mod cell_attacks;
mod class_20_terminal_bytes;
mod class_21_extreme_values;
#[cfg(any(feature = "local", feature = "docker"))]
mod egress_attacks;
mod fs_attacks;
#[cfg(any(feature = "local", feature = "docker"))]
mod sandboxd_attacks;
mod support;

#[cfg(feature = "docker")]
mod docker;
#[cfg(feature = "local")]
mod local;
