//! What the binary's tests share: a scratch directory that is the binary's `TMPDIR` and
//! working directory, and readers of its output.

#![allow(dead_code, reason = "each test binary uses its own part")]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sandboxio-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandboxio"));
        cmd.args(args).env("TMPDIR", &self.0).current_dir(&self.0);
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).stdin(Stdio::null()).output().unwrap()
    }

    /// The sandbox workspaces the local backend left under this TMPDIR.
    pub fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        for root in std::fs::read_dir(&self.0).unwrap().flatten() {
            if root.file_name().to_string_lossy().starts_with("sandboxio-local-") {
                for entry in std::fs::read_dir(root.path()).unwrap().flatten() {
                    if entry.file_type().unwrap().is_dir() {
                        left.push(entry.file_name().to_string_lossy().into_owned());
                    }
                }
            }
        }
        left
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

/// The last JSON line on stdout (the result, after one line per output chunk).
pub fn last_json(out: &Output) -> serde_json::Value {
    serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap()
}

/// The sandbox workspaces the local backend keeps under `tmp`.
pub fn workspaces(tmp: &std::path::Path) -> usize {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .filter(|root| root.file_name().to_string_lossy().starts_with("sandboxio-local-"))
        .flat_map(|root| std::fs::read_dir(root.path()).unwrap().flatten())
        .filter(|e| e.file_type().unwrap().is_dir())
        .count()
}
