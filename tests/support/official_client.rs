//! What the official-client checks share (`tests/e2b_official_client.rs`,
//! `tests/modal_official_client.rs`): finding the venv's Python with the provider's packages,
//! skipping loudly without it (a failure under `SANDBOXIO_STRICT=1`), and running the
//! client's script within a bound.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// One provider's official client: where its venv's Python is, what it must import, and how
/// long its script may run.
pub struct Client {
    /// The variable that overrides [`Client::python`].
    pub env_var: &'static str,
    /// The venv's Python, which the provider's check script installs.
    pub python: &'static str,
    /// What the Python must import (`a, b`).
    pub modules: &'static str,
    /// What a skip says is missing, and what installs it.
    pub missing: &'static str,
    /// How long the client's script may run.
    pub bound: Duration,
}

impl Client {
    /// The Python at `$env_var`, else at `python`, if it imports `modules`. Without one,
    /// says `[skip]` and why, or panics under `SANDBOXIO_STRICT=1`.
    pub fn python_or_skip(&self) -> Option<PathBuf> {
        let path = PathBuf::from(std::env::var(self.env_var).unwrap_or_else(|_| self.python.to_owned()));
        let ok = Command::new(&path)
            .args(["-c", &format!("import {}", self.modules)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(path);
        }
        let why = format!("{} (no Python importing {} at {})", self.missing, self.modules, path.display());
        assert!(std::env::var("SANDBOXIO_STRICT").as_deref() != Ok("1"), "{why}");
        println!("[skip] the official-client check: {why}");
        None
    }

    /// Runs `command` within the bound ([`run_bounded`]) and panics unless it exited 0 and
    /// printed `official-client check: passed`; returns its stdout.
    pub fn expect_passed(&self, command: Command) -> String {
        let (status, out, err) = run_bounded(command, self.bound);
        let status = status.unwrap_or_else(|| panic!("the client ran past {:?}", self.bound));
        assert!(status.success(), "the official client failed ({status}):\n{out}\n{err}");
        assert!(out.contains("official-client check: passed"), "{out}");
        out
    }
}

/// Runs `command` with piped output, killing it after `bound`: its exit status (`None` when
/// it ran past the bound), stdout and stderr. Both are printed, so a failure shows them.
pub fn run_bounded(mut command: Command, bound: Duration) -> (Option<ExitStatus>, String, String) {
    let mut child =
        command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the client's python starts");
    // Read both pipes on threads, so a chatty client cannot fill one and stall.
    let mut pipe_out = child.stdout.take().expect("piped stdout");
    let mut pipe_err = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe_out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe_err.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the client's status") {
            break Some(status);
        }
        if started.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, err) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    println!("{out}");
    eprintln!("{err}");
    (status, out, err)
}

/// A scratch directory under the temporary directory holding the stub's CA as `ca.pem`,
/// removed when dropped.
pub struct Scratch {
    pub dir: PathBuf,
    pub ca: PathBuf,
}

impl Scratch {
    pub fn with_ca(name: &str, ca_pem: &[u8]) -> Scratch {
        let dir = std::env::temp_dir().join(format!("sandboxio-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, ca_pem).expect("the CA written");
        Scratch { dir, ca }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `python` running `tests/support/<script>` with an empty environment but `PATH`.
pub fn script_command(python: &Path, script: &str) -> Command {
    let mut command = Command::new(python);
    command
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support").join(script))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    command
}
