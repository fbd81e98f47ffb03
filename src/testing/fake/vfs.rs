//! The fake's in-memory file system.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::fs::{DirEntry, FileKind};

/// The working directory of every fake sandbox: `run` and relative paths start here.
pub const WORKDIR: &str = "/workspace";

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    File { data: Vec<u8>, mode: u32 },
    Dir { mode: u32 },
    Symlink { target: String },
}

/// One change a simulated process made, replayed on the sandbox's real file system at the
/// virtual time the process made it.
#[derive(Debug, Clone)]
pub(crate) enum Effect {
    Write { path: String, data: Vec<u8>, mode: Option<u32>, append: bool },
    Mkdir(String),
    Remove { path: String, recursive: bool },
    Symlink { path: String, target: String },
    Chmod { path: String, mode: u32 },
}

/// Absolute, normalised paths to nodes. Every ancestor of a node is a `Dir`.
#[derive(Debug, Clone)]
pub(crate) struct Vfs {
    nodes: BTreeMap<String, Node>,
    /// When set, every change is also logged here, stamped with `now`: a process runs on a
    /// scratch copy and its effects reach the real file system as its replay reaches them.
    journal: Option<Vec<(Duration, Effect)>>,
    /// The virtual time, since the process started, that stamps journal entries.
    pub(crate) now: Duration,
}

fn parent_of(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

fn name_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

impl Vfs {
    pub(crate) fn new() -> Self {
        let mut nodes = BTreeMap::new();
        for dir in ["/", "/tmp", "/etc", "/dev", WORKDIR] {
            nodes.insert(dir.to_owned(), Node::Dir { mode: 0o755 });
        }
        nodes.insert("/etc/hostname".into(), Node::File { data: b"fake\n".to_vec(), mode: 0o644 });
        Vfs { nodes, journal: None, now: Duration::ZERO }
    }

    /// A scratch copy that logs its changes.
    pub(crate) fn scratch(&self) -> Self {
        Vfs { nodes: self.nodes.clone(), journal: Some(Vec::new()), now: Duration::ZERO }
    }

    /// The changes logged so far, in order.
    pub(crate) fn take_journal(&mut self) -> Vec<(Duration, Effect)> {
        self.journal.take().unwrap_or_default()
    }

    fn log(&mut self, effect: impl FnOnce() -> Effect) {
        if let Some(journal) = &mut self.journal {
            journal.push((self.now, effect()));
        }
    }

    /// Applies a logged change (errors are the process's own business, as when it ran).
    pub(crate) fn apply(&mut self, effect: Effect) {
        let _ = match effect {
            Effect::Write { path, data, mode, append } => self.write(&path, data, mode, append),
            Effect::Mkdir(path) => self.mkdir_all(&path),
            Effect::Remove { path, recursive } => self.remove(&path, recursive),
            Effect::Symlink { path, target } => self.symlink(&path, &target),
            Effect::Chmod { path, mode } => self.chmod(&path, mode),
        };
    }

    /// Resolves `path` against `cwd` into an absolute normalised path.
    pub(crate) fn resolve(cwd: &str, path: &str) -> String {
        crate::path::resolve(cwd, path)
    }

    pub(crate) fn get(&self, abs: &str) -> Option<&Node> {
        self.nodes.get(abs)
    }

    /// Reads a file, following up to 40 symlinks as Linux does (`ELOOP` beyond).
    pub(crate) fn read(&self, abs: &str) -> Result<Vec<u8>> {
        let mut current = abs.to_owned();
        for _ in 0..=40 {
            match self.nodes.get(&current) {
                Some(Node::File { data, .. }) => return Ok(data.clone()),
                Some(Node::Dir { .. }) => return Err(Error::IsADirectory { path: abs.to_owned() }),
                Some(Node::Symlink { target }) => {
                    current = Self::resolve(parent_of(&current).unwrap_or("/"), target);
                }
                None => return Err(Error::NotFound { path: abs.to_owned() }),
            }
        }
        Err(Error::invalid_input(format!("{abs:?}: too many levels of symbolic links")))
    }

    pub(crate) fn mkdir_all(&mut self, abs: &str) -> Result<()> {
        self.log(|| Effect::Mkdir(abs.to_owned()));
        self.mkdir_all_unlogged(abs)
    }

    fn mkdir_all_unlogged(&mut self, abs: &str) -> Result<()> {
        // Through a regular file (a parent is one) is `ENOTDIR`, which every backend
        // reports as `NotFound` naming the path asked for (docs/contract.md, Filesystem).
        let mut ancestor = parent_of(abs);
        while let Some(dir) = ancestor {
            match self.nodes.get(dir) {
                Some(Node::File { .. }) => return Err(Error::not_found(abs)),
                Some(_) => break,
                None => ancestor = parent_of(dir),
            }
        }
        self.mkdir_parents(abs)
    }

    fn mkdir_parents(&mut self, abs: &str) -> Result<()> {
        match self.nodes.get(abs) {
            Some(Node::Dir { .. }) => return Ok(()),
            Some(_) => {
                return Err(Error::invalid_input(format!("{abs:?} exists and is not a directory")));
            }
            None => {}
        }
        if let Some(parent) = parent_of(abs) {
            self.mkdir_parents(parent)?;
        }
        self.nodes.insert(abs.to_owned(), Node::Dir { mode: 0o755 });
        Ok(())
    }

    /// Where `abs` leads once symbolic links are followed (up to 40, as Linux does): the
    /// path of the node it names, which may not exist yet (a dangling link leads to its
    /// target's path).
    fn follow(&self, abs: &str) -> Result<String> {
        let mut current = abs.to_owned();
        for _ in 0..=40 {
            match self.nodes.get(&current) {
                Some(Node::Symlink { target }) => {
                    current = Self::resolve(parent_of(&current).unwrap_or("/"), target);
                }
                _ => return Ok(current),
            }
        }
        Err(Error::invalid_input(format!("{abs:?}: too many levels of symbolic links")))
    }

    /// Writes a file as a non-root user's own write would (the semantics every backend
    /// holds to): a link is followed; an existing file is written in place and keeps its
    /// mode (`mode` applies only to a file the write creates); a file without its owner's
    /// write bit is [`Error::PermissionDenied`] naming `abs`.
    pub(crate) fn write(&mut self, abs: &str, data: Vec<u8>, mode: Option<u32>, append: bool) -> Result<()> {
        if self.journal.is_some() {
            self.log(|| Effect::Write { path: abs.to_owned(), data: data.clone(), mode, append });
        }
        let target = self.follow(abs)?;
        if let Some(parent) = parent_of(&target) {
            self.mkdir_all_unlogged(parent)?;
        }
        match self.nodes.get_mut(&target) {
            Some(Node::Dir { .. }) => Err(Error::IsADirectory { path: abs.to_owned() }),
            Some(Node::File { mode: m, .. }) if *m & 0o200 == 0 => {
                Err(Error::PermissionDenied { path: abs.to_owned() })
            }
            Some(Node::File { data: existing, .. }) => {
                if append {
                    existing.extend_from_slice(&data);
                } else {
                    *existing = data;
                }
                Ok(())
            }
            _ => {
                self.nodes.insert(target, Node::File { data, mode: mode.unwrap_or(0o644) });
                Ok(())
            }
        }
    }

    /// Sets the permission bits of what `abs` leads to.
    pub(crate) fn chmod(&mut self, abs: &str, new_mode: u32) -> Result<()> {
        self.log(|| Effect::Chmod { path: abs.to_owned(), mode: new_mode });
        let target = self.follow(abs)?;
        match self.nodes.get_mut(&target) {
            Some(Node::File { mode, .. } | Node::Dir { mode }) => {
                *mode = new_mode & 0o7777;
                Ok(())
            }
            _ => Err(Error::NotFound { path: abs.to_owned() }),
        }
    }

    pub(crate) fn symlink(&mut self, abs: &str, target: &str) -> Result<()> {
        self.log(|| Effect::Symlink { path: abs.to_owned(), target: target.to_owned() });
        if let Some(parent) = parent_of(abs) {
            self.mkdir_all_unlogged(parent)?;
        }
        self.nodes.insert(abs.to_owned(), Node::Symlink { target: target.to_owned() });
        Ok(())
    }

    fn children(&self, abs: &str) -> Vec<(&String, &Node)> {
        let prefix = if abs == "/" { "/".to_owned() } else { format!("{abs}/") };
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| k.len() > prefix.len() && !k[prefix.len()..].contains('/'))
            .collect()
    }

    pub(crate) fn list(&self, abs: &str) -> Result<Vec<DirEntry>> {
        match self.nodes.get(abs) {
            Some(Node::Dir { .. }) => {}
            Some(_) => {
                return Err(Error::invalid_input(format!("{abs:?} is not a directory")));
            }
            None => return Err(Error::NotFound { path: abs.to_owned() }),
        }
        Ok(self
            .children(abs)
            .into_iter()
            .map(|(path, node)| match node {
                Node::File { data, mode } => {
                    DirEntry::new(name_of(path), FileKind::File, data.len() as u64, *mode)
                }
                Node::Dir { mode } => DirEntry::new(name_of(path), FileKind::Dir, 0, *mode),
                Node::Symlink { target } => {
                    DirEntry::new(name_of(path), FileKind::Symlink, target.len() as u64, 0o777)
                }
            })
            .collect())
    }

    pub(crate) fn remove(&mut self, abs: &str, recursive: bool) -> Result<()> {
        self.log(|| Effect::Remove { path: abs.to_owned(), recursive });
        match self.nodes.get(abs) {
            None => return Err(Error::NotFound { path: abs.to_owned() }),
            Some(Node::Dir { .. }) => {
                if abs == "/" {
                    return Err(Error::PermissionDenied { path: abs.to_owned() });
                }
                let prefix = format!("{abs}/");
                let has_children = self.nodes.keys().any(|k| k.starts_with(&prefix));
                if has_children && !recursive {
                    return Err(Error::IsADirectory { path: abs.to_owned() });
                }
                self.nodes.retain(|k, _| !k.starts_with(&prefix));
            }
            Some(_) => {}
        }
        self.nodes.remove(abs);
        Ok(())
    }
}
