//! One canonical path per public item: no item of the crate is reachable at two public
//! paths (the rule of `docs/adapter-guide.md`, "Where things live").
//!
//! Stable Rust has no machine-readable rustdoc output, so this test reads the source the
//! way the compiler resolves paths, within what rustfmt's layout guarantees (the contents
//! of an inline `mod x { .. }` are indented one level deeper, and its closing brace is
//! alone on a line at the `mod`'s indentation):
//!
//! - the module tree from `src/lib.rs` (`mod`, `pub mod`, `#[path = ".."]`, inline
//!   modules), each module public when every module on its path is `pub`;
//! - every `pub use` (braces, `self`, `as` renames), resolved through chains of re-exports
//!   and re-exported modules to the item it names; a glob re-export is refused, since the
//!   check cannot see through it;
//! - every `pub` item defined at a module's top level.
//!
//! An item then counts one public path for its definition (if its module is public) and one
//! for each `pub use` of it in a public module; two or more fail the test. Items generated
//! by macros are invisible at their definition (but a `bitflags!` struct), so they count
//! only their re-exports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What the scan found: the module tree and every `pub use` and `pub` item in it.
#[derive(Default, Debug)]
struct Crate {
    /// Module path (`crate::backends::docker`) to whether it is reachable publicly.
    modules: BTreeMap<String, bool>,
    /// Public item path in a module to the absolute path it re-exports.
    reexports: Vec<(String, String)>,
    /// Paths of `pub` items defined at a module's top level.
    items: BTreeSet<String>,
    /// Those of them that are not modules (a function may share a private module's name).
    non_modules: BTreeSet<String>,
    /// Problems the scan cannot judge (glob re-exports), reported as failures.
    refused: Vec<String>,
}

/// Reads the source file at a path; `None` if there is none.
type Read<'a> = &'a dyn Fn(&Path) -> Option<String>;

// Longest first: `const fn` is a function, not a constant named `fn`.
const ITEM_KINDS: &[&str] = &[
    "async unsafe fn",
    "const unsafe fn",
    "unsafe fn",
    "const fn",
    "async fn",
    "fn",
    "struct",
    "enum",
    "trait",
    "type",
    "const",
    "static",
    "union",
];

impl Crate {
    fn scan(read: Read<'_>, lib: &Path) -> Crate {
        let mut krate = Crate::default();
        let source = read(lib).unwrap_or_else(|| panic!("cannot read {}", lib.display()));
        let lines: Vec<&str> = source.lines().collect();
        krate.modules.insert("crate".into(), true);
        let dir = lib.parent().unwrap_or(Path::new("")).to_path_buf();
        krate.module(read, &lines, 0, "crate", true, &dir, &dir);
        krate
    }

    /// Scans one module's lines at `indent`. `dir` holds its child modules' files;
    /// `file_dir` is the directory of the file it is written in (for `#[path]`).
    #[allow(clippy::too_many_arguments)]
    fn module(
        &mut self,
        read: Read<'_>,
        lines: &[&str],
        indent: usize,
        path: &str,
        public: bool,
        dir: &Path,
        file_dir: &Path,
    ) {
        let pad = " ".repeat(indent);
        let mut attr_path: Option<String> = None;
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i];
            i += 1;
            let Some(text) = line.strip_prefix(&pad) else { continue };
            if text.starts_with(' ') || text.starts_with("//") {
                continue;
            }
            if let Some(p) = text.strip_prefix("#[path = \"").and_then(|t| t.strip_suffix("\"]")) {
                attr_path = Some(p.to_owned());
                continue;
            }
            if text.starts_with("#[") {
                continue;
            }
            let (is_pub, rest) = match text.strip_prefix("pub ") {
                Some(rest) => (true, rest),
                None => (
                    false,
                    text.strip_prefix("pub(").map_or(text, |t| t.split_once(") ").map_or(t, |(_, r)| r)),
                ),
            };
            if let Some(decl) = rest.strip_prefix("mod ") {
                let name: String = decl.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                let child = format!("{path}::{name}");
                let child_public = public && is_pub;
                self.modules.insert(child.clone(), child_public);
                if is_pub {
                    self.items.insert(child.clone());
                }
                if decl.trim_end().ends_with('{') {
                    // Inline: its lines run to the closing brace at this indentation.
                    let end = lines[i..]
                        .iter()
                        .position(|l| *l == format!("{pad}}}"))
                        .map_or(lines.len(), |p| i + p);
                    let child_dir = dir.join(&name);
                    self.module(read, &lines[i..end], indent + 4, &child, child_public, &child_dir, file_dir);
                    i = end + 1;
                } else {
                    let (file, child_dir) = if let Some(p) = attr_path.take() {
                        let file = file_dir.join(p);
                        let child_dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
                        (file, child_dir)
                    } else {
                        let flat = dir.join(format!("{name}.rs"));
                        if read(&flat).is_some() {
                            (flat, dir.join(&name))
                        } else {
                            (dir.join(&name).join("mod.rs"), dir.join(&name))
                        }
                    };
                    let source = read(&file)
                        .unwrap_or_else(|| panic!("module {child}: cannot read {}", file.display()));
                    let child_lines: Vec<&str> = source.lines().collect();
                    let child_file_dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
                    self.module(read, &child_lines, 0, &child, child_public, &child_dir, &child_file_dir);
                }
                continue;
            }
            attr_path = None;
            if text.starts_with("bitflags::bitflags! {") {
                self.bitflags(&lines[i..], &pad, path);
                continue;
            }
            if !is_pub {
                continue;
            }
            if rest.starts_with("use ") {
                let mut statement = rest.to_owned();
                while !statement.trim_end().ends_with(';') && i < lines.len() {
                    statement.push(' ');
                    statement.push_str(lines[i].trim());
                    i += 1;
                }
                let tree = statement["use ".len()..].trim_end().trim_end_matches(';');
                for (target, alias) in expand_use(tree) {
                    if alias == "*" {
                        self.refused
                            .push(format!("glob re-export `pub use {tree}` in {path}: list the items"));
                        continue;
                    }
                    if let Some(target) = self.absolute(path, &target) {
                        self.reexports.push((format!("{path}::{alias}"), target));
                    }
                }
                continue;
            }
            for kind in ITEM_KINDS {
                if let Some(after) = rest.strip_prefix(kind).and_then(|r| r.strip_prefix(' ')) {
                    let name: String =
                        after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    self.items.insert(format!("{path}::{name}"));
                    self.non_modules.insert(format!("{path}::{name}"));
                    break;
                }
            }
        }
    }

    /// The `pub struct` of a `bitflags!` block (`lines` after its opening line): the one
    /// macro-defined item type of the crate, one level in, up to the block's closing brace.
    fn bitflags(&mut self, lines: &[&str], pad: &str, path: &str) {
        let inner = format!("{pad}    pub struct ");
        let end = lines.iter().position(|l| *l == format!("{pad}}}")).unwrap_or(lines.len());
        if let Some(name) = lines[..end].iter().find_map(|l| l.strip_prefix(&inner)) {
            let name: String = name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            self.items.insert(format!("{path}::{name}"));
            self.non_modules.insert(format!("{path}::{name}"));
        }
    }

    /// The absolute path a `use` path names from `module`, or `None` for another crate.
    fn absolute(&self, module: &str, target: &str) -> Option<String> {
        let mut segments: Vec<&str> = target.split("::").collect();
        let mut base: Vec<&str> = match segments.first().copied() {
            Some("crate") => {
                segments.remove(0);
                vec!["crate"]
            }
            Some("self" | "super") => module.split("::").collect(),
            Some(first) if self.modules.contains_key(&format!("{module}::{first}")) => {
                module.split("::").collect()
            }
            _ => return None,
        };
        while let Some(first) = segments.first().copied() {
            match first {
                "self" => {}
                "super" => {
                    base.pop();
                }
                _ => break,
            }
            segments.remove(0);
        }
        base.extend(segments);
        Some(base.join("::"))
    }

    /// Follows re-exports (of the item, or of a module on its path) to the definition.
    fn resolve(&self, path: &str) -> String {
        let table: BTreeMap<&str, &str> =
            self.reexports.iter().map(|(a, t)| (a.as_str(), t.as_str())).collect();
        let mut path = path.to_owned();
        for _ in 0..32 {
            let segments: Vec<&str> = path.split("::").collect();
            let hop = (1..=segments.len()).rev().find_map(|n| {
                let prefix = segments[..n].join("::");
                table.get(prefix.as_str()).map(|t| {
                    let mut next = vec![(*t).to_owned()];
                    next.extend(segments[n..].iter().map(|s| (*s).to_owned()));
                    next.join("::")
                })
            });
            match hop {
                Some(next) if next != path => path = next,
                _ => break,
            }
        }
        path
    }

    fn module_public(&self, item: &str) -> bool {
        item.rsplit_once("::").is_some_and(|(m, _)| self.modules.get(m) == Some(&true))
    }

    /// Every item reachable at two or more public paths, with those paths.
    fn duplicates(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut paths: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for item in &self.items {
            if self.module_public(item) {
                paths.entry(item.clone()).or_default().insert(item.clone());
            }
        }
        // A re-exported module makes its items public at the alias too.
        let module_aliases: Vec<(String, String)> = self
            .reexports
            .iter()
            .filter(|(alias, _)| self.module_public(alias))
            .map(|(alias, _)| (alias.clone(), self.resolve(alias)))
            .filter(|(_, target)| self.modules.contains_key(target))
            .collect();
        for item in &self.items {
            for (alias, target) in &module_aliases {
                if let Some(rest) = item.strip_prefix(&format!("{target}::")) {
                    paths.entry(item.clone()).or_default().insert(format!("{alias}::{rest}"));
                }
            }
        }
        for (alias, _) in &self.reexports {
            if self.module_public(alias) {
                paths.entry(self.resolve(alias)).or_default().insert(alias.clone());
            }
        }
        paths.retain(|_, p| p.len() > 1);
        paths
    }
}

/// The public surface in figures (issue #29's measure; `scripts/count-public-items` prints
/// them): the names the crate root exports, the public modules, and the items reachable at a
/// public path (each item once, wherever it is reachable; modules not counted). Items behind
/// every feature count, as under `--all-features`; methods and fields are not items here.
#[derive(Debug)]
struct Surface {
    root_reexports: BTreeSet<String>,
    root_modules: BTreeSet<String>,
    modules: BTreeSet<String>,
    items: BTreeSet<String>,
}

impl Crate {
    fn surface(&self) -> Surface {
        let mut paths: BTreeSet<String> =
            self.items.iter().filter(|item| self.module_public(item)).cloned().collect();
        paths.extend(
            self.reexports.iter().filter(|(alias, _)| self.module_public(alias)).map(|(a, _)| a.clone()),
        );
        let root = |p: &&String| p.strip_prefix("crate::").is_some_and(|name| !name.contains("::"));
        let is_module = |p: &String| {
            let target = self.resolve(p);
            self.modules.contains_key(&target) && !self.non_modules.contains(&target)
        };
        Surface {
            root_reexports: self
                .reexports
                .iter()
                .map(|(alias, _)| alias)
                .filter(root)
                .map(|p| p["crate::".len()..].to_owned())
                .collect(),
            root_modules: self
                .items
                .iter()
                .filter(root)
                .filter(|p| is_module(p))
                .map(|p| p["crate::".len()..].to_owned())
                .collect(),
            // Public modules at the paths a user writes (a re-exported module at its alias).
            modules: paths.iter().filter(|p| is_module(p)).cloned().collect(),
            items: paths.iter().filter(|p| !is_module(p)).map(|p| self.resolve(p)).collect(),
        }
    }
}

/// Expands a use tree (`a::{b, c::{d as e, self}}`) into (path, name bound) pairs.
fn expand_use(tree: &str) -> Vec<(String, String)> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    expand_into("", &tree, &mut out);
    out
}

fn expand_into(prefix: &str, tree: &str, out: &mut Vec<(String, String)>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    let join = |p: &str| if prefix.is_empty() { p.to_owned() } else { format!("{prefix}::{p}") };
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::");
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let base = if head.is_empty() { prefix.to_owned() } else { join(head) };
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_into(&base, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_into(&base, &inner[start..], out);
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p.trim(), Some(a.trim())),
        None => (tree, None),
    };
    if path == "self" {
        let name = prefix.rsplit("::").next().unwrap_or(prefix);
        out.push((prefix.to_owned(), alias.unwrap_or(name).to_owned()));
        return;
    }
    let full = join(path);
    let name = full.rsplit("::").next().unwrap_or(&full).to_owned();
    out.push((full, alias.map_or(name, str::to_owned)));
}

fn scan_tree(files: &[(&str, &str)]) -> Crate {
    let files: BTreeMap<PathBuf, String> =
        files.iter().map(|(p, s)| (PathBuf::from(p), (*s).to_owned())).collect();
    Crate::scan(&|p: &Path| files.get(p).cloned(), Path::new("src/lib.rs"))
}

#[test]
fn no_public_item_is_reachable_at_two_paths() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let krate = Crate::scan(&|p: &Path| std::fs::read_to_string(p).ok(), &root.join("src/lib.rs"));
    // The scan saw the crate: a broken scan would find nothing and pass.
    for module in ["crate::backend", "crate::dsn", "crate::testing", "crate::backends::docker"] {
        assert_eq!(krate.modules.get(module), Some(&true), "{module} not found public: {:?}", krate.modules);
    }
    assert!(krate.items.contains("crate::dsn::register_scheme"), "{:?}", krate.items);
    assert_eq!(krate.resolve("crate::Sandbox"), "crate::api::sandbox::Sandbox");
    assert!(krate.refused.is_empty(), "{:#?}", krate.refused);
    let duplicates = krate.duplicates();
    assert!(
        duplicates.is_empty(),
        "items reachable at more than one public path (keep one: the crate root for what a first \
         program names, the item's module for the rest):\n{duplicates:#?}"
    );
}

#[test]
fn the_check_finds_a_reexport_of_a_public_item() {
    let krate = scan_tree(&[
        (
            "src/lib.rs",
            "pub mod dsn;\nmod error;\npub use dsn::{Dsn, other::{self as o}};\npub use error::Error;\n",
        ),
        (
            "src/dsn.rs",
            "pub struct Dsn;\npub(crate) fn private() {}\npub mod other {\n    pub fn f() {}\n}\n",
        ),
        ("src/error.rs", "pub enum Error {}\n"),
    ]);
    let duplicates = krate.duplicates();
    assert_eq!(
        duplicates.keys().collect::<Vec<_>>(),
        ["crate::dsn::Dsn", "crate::dsn::other", "crate::dsn::other::f"],
        "{duplicates:#?}"
    );
    assert_eq!(
        duplicates["crate::dsn::Dsn"],
        BTreeSet::from(["crate::Dsn".to_owned(), "crate::dsn::Dsn".to_owned()])
    );
    assert!(!krate.items.contains("crate::dsn::private"));
}

#[test]
fn the_check_follows_chains_paths_and_inline_modules() {
    let krate = scan_tree(&[
        (
            "src/lib.rs",
            "#[path = \"inner/mod.rs\"]\nmod api;\npub mod testing;\npub use api::Sandbox;\npub use api::b::state;\n\
             mod hidden {\n    pub struct Report;\n}\npub use hidden::Report;\npub use std::time::Duration;\n",
        ),
        ("src/inner/mod.rs", "pub(crate) mod b;\npub use b::Sandbox;\n"),
        ("src/inner/b.rs", "pub struct Sandbox;\npub mod state {\n    pub struct Set;\n}\n"),
        (
            "src/testing/mod.rs",
            "mod fake;\npub use fake::Fake;\npub use crate::state::Set;\npub use super::Report;\n",
        ),
        ("src/testing/fake.rs", "pub struct Fake;\n"),
    ]);
    assert_eq!(krate.resolve("crate::Sandbox"), "crate::api::b::Sandbox");
    let duplicates = krate.duplicates();
    assert_eq!(duplicates.keys().collect::<Vec<_>>(), ["crate::api::b::state::Set", "crate::hidden::Report"]);
    assert!(krate.refused.is_empty());
    let glob = scan_tree(&[("src/lib.rs", "mod a;\npub use a::*;\n"), ("src/a.rs", "pub struct X;\n")]);
    assert_eq!(glob.refused.len(), 1, "{glob:?}");
}

/// The crate root exports what a first program names and nothing else (issue #29): the rest
/// of the API is at its module (`sandboxio::exec`, `fs`, `policy`, …). A name added here is
/// a decision about the first page of the docs, not a side effect of a `pub use`.
#[test]
fn the_root_exports_what_a_first_program_names() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let krate = Crate::scan(&|p: &Path| std::fs::read_to_string(p).ok(), &root.join("src/lib.rs"));
    let surface = krate.surface();
    let names: Vec<&str> = surface.root_reexports.iter().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "Code",
            "CodeResult",
            "Command",
            "Error",
            "ErrorCode",
            "ExecResult",
            "ExitStatus",
            "NetworkPolicy",
            "ResourceLimits",
            "Result",
            "Sandbox",
            "SandboxBuilder",
        ]
    );
}

/// Prints the surface's figures (`scripts/count-public-items` runs it with `--nocapture`).
#[test]
fn surface_figures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let krate = Crate::scan(&|p: &Path| std::fs::read_to_string(p).ok(), &root.join("src/lib.rs"));
    let surface = krate.surface();
    println!("root re-exports ({}): {}", surface.root_reexports.len(), join(&surface.root_reexports));
    println!("root modules ({}): {}", surface.root_modules.len(), join(&surface.root_modules));
    println!("public modules ({}): {}", surface.modules.len(), join(&surface.modules));
    println!("public items ({}), each once:", surface.items.len());
    for item in &surface.items {
        println!("  {item}");
    }
    assert!(surface.items.contains("crate::api::sandbox::Sandbox"), "{surface:#?}");
}

fn join(names: &BTreeSet<String>) -> String {
    names.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
}
