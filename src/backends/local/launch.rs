//! The one `bwrap` of a sandbox: its command line, and its start with sandboxd as the init
//! of the sandbox's PID namespace.
//!
//! **The launcher.** A host shell closes every descriptor the owner process left open
//! without close-on-exec (a directory descriptor there would be a way out of every
//! namespace), opens the seccomp filter on descriptor 3 and becomes bwrap with an empty
//! environment (`env -i`: the shell's own variables would otherwise reach the sandbox).
//! bash (essential on Debian) can close any descriptor; a POSIX `sh` only 3 to 9.
//!
//! **The namespaces** are those every local sandbox has always had: fresh user, mount, PID,
//! network, IPC and UTS namespaces, no capabilities, no nested user namespaces, a new
//! session, the host's `/usr` read-only, the sandbox's own `/etc/passwd` and `/etc/group`, a
//! read-only `/proc`, a private `/tmp`, the workspace at `/workspace`, and a root that is
//! read-only once set up. `--as-pid-1` makes sandboxd itself the namespace's init: a signal
//! from inside cannot kill it, and its death ends every process of the sandbox.
//!
//! **sandboxd's socket.** The host binds the Unix socket a `connect`ed handle reaches
//! sandboxd through in the sandbox's host directory, outside every path bound into the
//! sandbox, and the launcher hands it to bwrap, and bwrap to sandboxd, as descriptor
//! [`LISTEN_FD`] (`--listen-fd`); sandboxd listens on it. Nothing in the sandbox can name it
//! (issue #27: when sandboxd bound it at `/run/sandboxio/sandboxd.sock`, code inside opened
//! a session of its own there, and what it started in it outlived its command).
//!
//! **The setup window.** bwrap's stdin and stdout are the session's socket (one end of a
//! Unix socket pair, so that sandboxd can hand files over to the owner; see
//! `sandboxd/session/fs.rs`). Nothing runs in
//! the sandbox before sandboxd reads the owner's `Hello` from them; an owner that dies
//! during the setup closes them first, and sandboxd, reading end-of-file, ends at once.
//! Nothing here asks for a parent-death signal: the session is the owner link, and a
//! detached sandbox must outlive its owner.

use std::path::{Path, PathBuf};
use std::process::{Child, Command as OsCommand, Stdio};
use std::time::Duration;

use crate::error::Error;
use crate::policy::NetworkPolicy;

use super::{SCHEME, WORKDIR};

/// Where sandboxd is bound in every local sandbox.
pub(super) const SANDBOXD_PATH: &str = "/.sandboxio/sandboxd";

/// The sandbox's `run` directory (bound from the sandbox's host `run` directory): where the
/// egress relay reaches the gate's socket. sandboxd's own socket is never there.
pub(super) const RUN_DIR: &str = "/run/sandboxio";

/// The descriptor the launcher, bwrap and sandboxd (`--listen-fd`) hold sandboxd's socket
/// at (see the module docs).
pub(super) const LISTEN_FD: i32 = 4;

/// The launcher's first part under bash: close every descriptor above 2 but [`LISTEN_FD`].
const LAUNCH_CLOSE_ALL: &str = r#"for __d in /proc/$$/fd/*; do __n=${__d##*/}; [ "$__n" -gt 2 ] 2>/dev/null && [ "$__n" -ne 4 ] && eval "exec $__n>&-"; done
"#;

/// The launcher's first part under a POSIX `sh`, which can name descriptors 0 to 9 only
/// ([`LISTEN_FD`] stays).
const LAUNCH_CLOSE_LOW: &str = "exec 3>&- 5>&- 6>&- 7>&- 8>&- 9>&-\n";

/// The launcher's second part: `$1` the filter (empty: none), `$2` bwrap, then its argv.
const LAUNCH: &str = r#"f=$1; shift
if [ -n "$f" ]; then exec /usr/bin/env -i "$@" 3<"$f"; else exec /usr/bin/env -i "$@"; fi"#;

/// What a sandbox's `bwrap` is made of.
pub(super) struct Launch<'a> {
    pub bwrap: &'a Path,
    pub seccomp: Option<&'a Path>,
    /// The host uid and gid the sandbox runs as when it is not the caller's (a root caller).
    pub run_as: Option<(u32, u32)>,
    /// The sandbox's host directory (`workspace`, `run`, `passwd`, `group`).
    pub dir: &'a Path,
    /// The sandboxd binary on the host.
    pub sandboxd: &'a Path,
    /// sandboxd's socket, bound by the host and not listening yet (`session::bind_socket`).
    pub listen: &'a std::os::fd::OwnedFd,
    pub network: &'a NetworkPolicy,
    pub ttl: Duration,
}

impl Launch<'_> {
    /// The launcher command (see the module docs), holding a copy of the socket for the
    /// launcher's [`LISTEN_FD`], and `session` (the sandbox's end of the owner's session) as
    /// its stdin and stdout: drop it once spawned.
    ///
    /// # Errors
    ///
    /// When a descriptor cannot be copied (out of descriptors).
    pub(super) fn command(&self, session: &std::os::fd::OwnedFd) -> std::io::Result<OsCommand> {
        use command_fds::{CommandFdExt as _, FdMapping};
        let (shell, close) = if Path::new("/bin/bash").is_file() {
            ("/bin/bash", LAUNCH_CLOSE_ALL)
        } else {
            ("/bin/sh", LAUNCH_CLOSE_LOW)
        };
        let mut cmd = OsCommand::new(shell);
        cmd.arg("-c").arg(format!("{close}{LAUNCH}")).arg("sandboxio-local");
        cmd.arg(self.seccomp.unwrap_or(Path::new(""))).arg(self.bwrap);
        cmd.args(self.bwrap_args());
        // Nothing of the owner's working directory reaches the launcher's `PWD`.
        cmd.current_dir("/");
        cmd.env_clear();
        if let Some((uid, gid)) = self.run_as {
            // A root caller's sandboxes never run as the host's uid 0 (std also drops the
            // supplementary groups when root sets a uid).
            std::os::unix::process::CommandExt::uid(&mut cmd, uid);
            std::os::unix::process::CommandExt::gid(&mut cmd, gid);
        }
        cmd.stdin(Stdio::from(session.try_clone()?)).stdout(Stdio::from(session.try_clone()?));
        cmd.stderr(Stdio::piped());
        let mapping = FdMapping { parent_fd: self.listen.try_clone()?, child_fd: LISTEN_FD };
        cmd.fd_mappings(vec![mapping]).map_err(std::io::Error::other)?;
        Ok(cmd)
    }

    /// bwrap's arguments, program included.
    fn bwrap_args(&self) -> Vec<PathBuf> {
        let mut args: Vec<PathBuf> = Vec::new();
        let mut push = |items: &[&str]| args.extend(items.iter().map(PathBuf::from));
        if self.seccomp.is_some() {
            push(&["--seccomp", "3"]);
        }
        // No capabilities inside, even when the caller is root (uid 0 maps to itself then).
        push(&["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]);
        if *self.network == NetworkPolicy::AllowAll {
            push(&["--share-net"]);
        }
        push(&["--new-session", "--hostname", "sandbox", "--as-pid-1"]);
        push(&["--ro-bind", "/usr", "/usr"]);
        for (link, target) in
            [("/bin", "usr/bin"), ("/sbin", "usr/sbin"), ("/lib", "usr/lib"), ("/lib64", "usr/lib64")]
        {
            if Path::new(link).exists() {
                push(&["--symlink", target, link]);
            }
        }
        // What the host's programs read from `/etc` to start: links to alternatives, CA
        // certificates, and matplotlib's defaults (Debian keeps `matplotlibrc` there, and
        // `import matplotlib` fails without it: no figure could come back as a rich result).
        for etc in ["/etc/alternatives", "/etc/ssl", "/etc/resolv.conf", "/etc/hosts", "/etc/matplotlibrc"] {
            push(&["--ro-bind-try", etc, etc]);
        }
        let mut bind = |how: &str, host: PathBuf, inside: &str| {
            args.push(how.into());
            args.push(host);
            args.push(inside.into());
        };
        // The sandbox's own user database, not the host's.
        bind("--ro-bind", self.dir.join("passwd"), "/etc/passwd");
        bind("--ro-bind", self.dir.join("group"), "/etc/group");
        bind("--bind", self.dir.join("workspace"), WORKDIR);
        bind("--ro-bind", self.sandboxd.to_owned(), SANDBOXD_PATH);
        bind("--bind", self.dir.join("run"), RUN_DIR);
        let mut push = |items: &[&str]| args.extend(items.iter().map(PathBuf::from));
        // `/proc` read-only: kernel settings (`/proc/sys`, even the sandbox's own IPC and PID
        // namespaces' ones) cannot be changed from inside, whatever uid the code has. The
        // root last: nothing can be added beside sandboxd or put in its directory's place.
        push(&["--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]);
        push(&["--chdir", WORKDIR, "--remount-ro", "/"]);
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX).max(1).to_string();
        let listen = LISTEN_FD.to_string();
        push(&["--", SANDBOXD_PATH, "--ttl-ms", &ttl_ms, "--listen-fd", &listen]);
        args
    }
}

/// The host pid of sandboxd, bwrap's only child (the init of the sandbox's PID namespace).
pub(super) fn sandboxd_pid(bwrap: &Child) -> Option<u32> {
    let bwrap_pid = bwrap.id();
    let children = std::fs::read_to_string(format!("/proc/{bwrap_pid}/task/{bwrap_pid}/children")).ok();
    if let Some(first) = children.as_deref().and_then(|c| c.split_whitespace().next()) {
        return first.parse().ok();
    }
    // Without `/proc/<pid>/task/<tid>/children` (CONFIG_PROC_CHILDREN), by parent pid.
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let child: u32 = entry.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        let parent: u32 = stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()?;
        (parent == bwrap_pid).then_some(child)
    })
}

/// The inode of process `pid`'s PID namespace (`None` when it is gone).
pub(super) fn pid_namespace(pid: u32) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    link.to_str()?.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// The processes of the PID namespace `namespace` other than sandboxd's own (its init,
/// its session children and its shepherds, all named `sandboxd`), as `pid N (comm)`.
#[cfg_attr(not(feature = "contract"), expect(dead_code, reason = "used by the test hooks only (hooks.rs)"))]
pub(super) fn processes_in(namespace: u64) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            (pid_namespace(pid)? == namespace).then_some(pid)
        })
        .filter_map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            let comm = comm.trim_end();
            (comm != "sandboxd").then(|| format!("pid {pid} ({comm})"))
        })
        .collect()
}

/// The error for a `bwrap` that cannot be started: `Configuration` naming the package when
/// it is missing.
pub(super) fn spawn_error(bwrap: &Path, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        return Error::Configuration {
            message: format!(
                "bwrap (bubblewrap) is not installed at {}; install Debian's `bubblewrap` package, or use docker://",
                bwrap.display()
            ),
            source: Some(Box::new(e)),
        };
    }
    Error::provider(SCHEME, format!("cannot start {}", bwrap.display()), e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandboxd_is_the_init_after_the_read_only_root_with_the_ttl_and_socket() {
        let dir = Path::new("/s");
        let listen = std::os::fd::OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let launch = Launch {
            bwrap: Path::new("/usr/bin/bwrap"),
            seccomp: Some(Path::new("/f.bpf")),
            run_as: None,
            dir,
            sandboxd: Path::new("/c/sandboxd-x"),
            listen: &listen,
            network: &NetworkPolicy::DenyAll,
            ttl: Duration::from_secs(90),
        };
        let args: Vec<String> = launch.bwrap_args().iter().map(|a| a.display().to_string()).collect();
        let at = |s: &str| args.iter().position(|a| a == s).unwrap();
        assert_eq!(args[..2], ["--seccomp", "3"]);
        assert!(args.contains(&"--as-pid-1".to_owned()) && args.contains(&"--disable-userns".to_owned()));
        assert!(!args.iter().any(|a| a == "--share-net" || a == "--die-with-parent"));
        assert_eq!(args[at("/c/sandboxd-x") - 1], "--ro-bind");
        assert_eq!(args[at("/c/sandboxd-x") + 1], SANDBOXD_PATH);
        assert!(at("/") > at("/tmp"), "the root is made read-only last");
        assert_eq!(args[at("--")..], ["--", SANDBOXD_PATH, "--ttl-ms", "90000", "--listen-fd", "4"]);
        // No path of sandboxd's socket is anywhere in the sandbox's argv (issue #27).
        assert!(!args.iter().any(|a| a.contains("sandboxd.sock")), "{args:?}");
        // The launchers name the descriptor they keep by number.
        assert!(LAUNCH_CLOSE_ALL.contains(&format!("-ne {LISTEN_FD} ")));
        assert!(
            !LAUNCH_CLOSE_LOW.contains(&format!(" {LISTEN_FD}>&-")) && LAUNCH_CLOSE_LOW.contains(" 5>&-")
        );
    }
}
