//! The seccomp filter every `local://` command runs under, where the architecture has one
//! (x86-64, aarch64): system calls a sandboxed program has no business making fail with
//! `EPERM`, as in Docker's and Flatpak's default profiles. Built with `seccompiler`
//! (rust-vmm) into a classic BPF program, written once per user to a file, and handed to
//! `bwrap --seccomp 3` on file descriptor 3 (opened by a `sh` that then `exec`s bwrap, so
//! no `pre_exec` hook is needed to pass it).
//!
//! Nested user namespaces are refused by `bwrap --disable-userns`, not here (`clone3` hides
//! its flags from seccomp).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

use crate::error::{Error, Result};

/// Denied outright: kernel keyrings, BPF, perf, userfaultfd, kernel modules and kexec,
/// file handles (the "shocker" escape), mounts, swap, reboot, accounting, quotas, the
/// kernel log, and the clock. (Two more are denied for some arguments only, in [`program`]:
/// `TIOCSTI` and setting another process's resource limits.)
const DENIED: &[libc::c_long] = &[
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_open_by_handle_at,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_syslog,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
];

fn target() -> Option<TargetArch> {
    TargetArch::try_from(std::env::consts::ARCH).ok().filter(|a| *a != TargetArch::riscv64)
}

/// The filter as the bytes `bwrap --seccomp` reads (an array of `struct sock_filter`), or
/// `None` on an architecture without one.
///
/// # Errors
///
/// [`Error::Provider`] if the filter cannot be compiled (a bug).
pub(super) fn program() -> Result<Option<Vec<u8>>> {
    let Some(arch) = target() else { return Ok(None) };
    let compile_error =
        |e: seccompiler::BackendError| Error::provider(super::SCHEME, "compiling the seccomp filter", e);
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|nr| (*nr, Vec::new())).collect();
    // Typing into the controlling terminal's input queue.
    let tiocsti = SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, libc::TIOCSTI)
        .map_err(compile_error)?;
    rules.insert(libc::SYS_ioctl, vec![SeccompRule::new(vec![tiocsti]).map_err(compile_error)?]);
    // Setting another process's resource limits (`prlimit64` with a pid and new limits).
    // The kernel allows it between processes of one uid without the ptrace check that
    // guards their memory and descriptors, so code set sandboxd's (pid 1's) descriptor limit
    // to 12 and every later command, cell and `connect` of its sandbox failed with
    // `EMFILE`; a shepherd's would blind the runner's reach probe. A process's own limits
    // (`setrlimit`, `ulimit`: glibc passes pid 0) and reading anyone's stay allowed.
    let other_pid =
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, 0).map_err(compile_error)?;
    let new_limits =
        SeccompCondition::new(2, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0).map_err(compile_error)?;
    rules.insert(
        libc::SYS_prlimit64,
        vec![SeccompRule::new(vec![other_pid, new_limits]).map_err(compile_error)?],
    );
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(u32::try_from(libc::EPERM).unwrap_or(1)),
        arch,
    )
    .map_err(compile_error)?;
    let program: BpfProgram = filter.try_into().map_err(compile_error)?;
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for insn in program {
        bytes.extend_from_slice(&insn.code.to_ne_bytes());
        bytes.push(insn.jt);
        bytes.push(insn.jf);
        bytes.extend_from_slice(&insn.k.to_ne_bytes());
    }
    Ok(Some(bytes))
}

/// Numbers the temporary files [`install`] writes, so that each call has its own.
static NEXT_TMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Writes the filter under `root` (once; the content never changes within a version) and
/// returns its path, or `None` where there is no filter.
///
/// # Errors
///
/// [`Error::Provider`] if the file cannot be written.
pub(super) fn install(root: &Path) -> Result<Option<PathBuf>> {
    let Some(bytes) = program()? else { return Ok(None) };
    let path = root.join(format!("seccomp-{}-{}.bpf", std::env::consts::ARCH, env!("CARGO_PKG_VERSION")));
    if std::fs::read(&path).is_ok_and(|existing| existing == bytes) {
        return Ok(Some(path));
    }
    let write_error = |e| Error::provider(super::SCHEME, "cannot write the seccomp filter", e);
    std::fs::create_dir_all(root).map_err(write_error)?;
    // A name of this call's own: creates that start together in one process each write the
    // file (the first soak cycle lost a create when two shared `.seccomp-<pid>.tmp` and one
    // renamed it away under the other).
    let n = NEXT_TMP.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = root.join(format!(".seccomp-{}-{n}.tmp", std::process::id()));
    std::fs::write(&tmp, &bytes).map_err(write_error)?;
    // Readable by the uid a root caller's sandboxes run as (its `sh` opens the file).
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .map_err(write_error)?;
    std::fs::rename(&tmp, &path).map_err(write_error)?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    #[test]
    fn creates_that_start_together_each_install_the_filter() {
        let root = std::env::temp_dir().join(format!("sandboxio-seccomp-race-{}", std::process::id()));
        for _ in 0..20 {
            let _ = std::fs::remove_dir_all(&root);
            std::thread::scope(|s| {
                for _ in 0..8 {
                    s.spawn(|| super::install(&root).expect("a create installing the filter"));
                }
            });
        }
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn the_filter_compiles_where_there_is_one() {
        if let Some(bytes) = super::program().unwrap() {
            assert!(!bytes.is_empty() && bytes.len() % 8 == 0);
        }
    }
}
