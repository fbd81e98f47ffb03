//! What the official-client checks share (`tests/e2b_official_client.rs`,
//! `tests/modal_official_client.rs`): finding the venv's Python with the provider's packages,
//! skipping loudly without it (a failure under `SANDBOXIO_STRICT=1`), and running the
//! client's script within a bound.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The Python at `$env_var`, else at `default`, if it imports `modules` (`import a, b`).
/// Without one, says `[skip]` with `why`, or panics under `SANDBOXIO_STRICT=1`.
pub fn python_or_skip(env_var: &str, default: &str, modules: &str, why: &str) -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var(env_var).unwrap_or_else(|_| default.to_owned()));
    let ok = Command::new(&path)
        .args(["-c", &format!("import {modules}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(path);
    }
    let why = format!("{why} (no Python importing {modules} at {})", path.display());
    assert!(std::env::var("SANDBOXIO_STRICT").as_deref() != Ok("1"), "{why}");
    println!("[skip] the official-client check: {why}");
    None
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
