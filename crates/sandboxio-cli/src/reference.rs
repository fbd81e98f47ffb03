//! The command reference, `docs/cli.md`: generated from the clap tree of [`crate::args`] by
//! `clap-markdown`, so it cannot drift from `--help`. A test compares the committed page
//! with what the current tree generates; `SANDBOXIO_BLESS=1` on that test rewrites it.
//!
//! clap-markdown copies each command's `after_help` verbatim, and ours is terminal text
//! (`Examples:` and two-space-indented command lines) that Markdown would run together
//! into one paragraph; it also drops help headings. So the tree is first rewritten for
//! Markdown: examples become fenced code blocks, and an option under a heading says so in
//! its help. The terminal's `--help` is untouched.

use std::fmt::Write as _;

use clap::{Arg, Command, CommandFactory as _};

use crate::args::Cli;

/// The page's path, from the repository root.
pub const PAGE: &str = "docs/cli.md";

/// The command that rewrites the page, as the failing test names it.
pub const BLESS: &str = "SANDBOXIO_BLESS=1 cargo test -p sandboxio-cli --bin sandboxio reference";

/// What the page says before the generated part: where it comes from and how to refresh it.
const PREAMBLE: &str = "\
<!-- Generated from crates/sandboxio-cli/src/args.rs: do not edit by hand. -->

Every subcommand, argument, default and example of the `sandboxio` command, generated from
its `clap` definitions (`crates/sandboxio-cli/src/args.rs`), so it says what `--help` says.
In a terminal, `-h` on any command prints its short help and `--help` this text;
`sandboxio --version` prints the version. A test (`cargo test -p sandboxio-cli --bin sandboxio reference`) fails
when this page and the definitions differ; `SANDBOXIO_BLESS=1` on that command rewrites it.
";

/// The page for the current clap tree.
#[must_use]
pub fn page() -> String {
    page_of(&Cli::command())
}

/// The page for `cli`: the title, [`PREAMBLE`], then clap-markdown's text of the
/// Markdown-ready tree.
#[must_use]
pub fn page_of(cli: &Command) -> String {
    let options = clap_markdown::MarkdownOptions::new()
        .title("The `sandboxio` command".to_owned())
        .show_footer(false)
        .show_table_of_contents(true);
    let generated = clap_markdown::help_markdown_command_custom(&for_markdown(cli.clone()), &options);
    // clap-markdown opens with `# TITLE` and one fixed sentence; the preamble replaces it.
    let body = generated.split_once("\n\n").map_or(generated.as_str(), |(_, rest)| rest);
    let body = body
        .strip_prefix("This document contains the help content for the `sandboxio` command-line program.\n\n")
        .unwrap_or(body);
    let mut page = format!("# The `sandboxio` command\n\n{PREAMBLE}\n{body}");
    // clap-markdown separates sections with three blank lines; one is Markdown's own.
    while page.contains("\n\n\n") {
        page = page.replace("\n\n\n", "\n\n");
    }
    // One newline at the end.
    while page.ends_with("\n\n") {
        page.pop();
    }
    page
}

/// `cmd` and its subcommands with `after_help` as Markdown and help headings in the
/// options' help.
fn for_markdown(cmd: Command) -> Command {
    let after = cmd.get_after_help().map(|h| markdown_after_help(&h.to_string()));
    let cmd = match after {
        Some(text) => cmd.after_help(text),
        None => cmd,
    };
    cmd.mut_args(under_heading).mut_subcommands(for_markdown)
}

/// An option shown under a heading (`Streamable HTTP (--transport http)`) names it in its
/// help, since the page lists all options together.
fn under_heading(arg: Arg) -> Arg {
    let Some(heading) = arg.get_help_heading().map(str::to_owned) else { return arg };
    let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
    arg.help(format!("*{heading}:* {help}"))
}

/// Terminal help text as Markdown. The text is blocks separated by blank lines, each a
/// title line (`Examples:`) and lines indented under it. A block whose title starts with
/// `Example` becomes the title and a code block of its lines; where some lines are indented
/// deeper, the shallower ones are captions, each followed by the code block of the deeper
/// lines after it. Any other block becomes the title and a paragraph.
#[must_use]
pub fn markdown_after_help(text: &str) -> String {
    let mut out = String::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut lines = block.lines();
        let title = lines.next().unwrap_or_default().trim();
        let body: Vec<&str> = lines.filter(|l| !l.trim().is_empty()).collect();
        if !out.is_empty() {
            out.push('\n');
        }
        if !title.ends_with(':') || title.starts_with(' ') {
            // Not the expected shape: keep it as a paragraph rather than guess.
            let _ = writeln!(out, "{}", block.trim());
            continue;
        }
        let _ = writeln!(out, "**{title}**\n");
        if !title.starts_with("Example") {
            let words: Vec<&str> = body.iter().map(|l| l.trim()).collect();
            let _ = writeln!(out, "{}", words.join(" "));
            continue;
        }
        let indent = |l: &str| l.len() - l.trim_start().len();
        let least = body.iter().map(|l| indent(l)).min().unwrap_or(0);
        if body.iter().all(|l| indent(l) == least) {
            code_block(&mut out, &body.iter().map(|l| l.trim()).collect::<Vec<_>>());
            continue;
        }
        let mut code: Vec<&str> = Vec::new();
        for line in &body {
            if indent(line) == least {
                code_block(&mut out, &code);
                code.clear();
                let _ = writeln!(out, "{}\n", line.trim());
            } else {
                code.push(line.trim());
            }
        }
        code_block(&mut out, &code);
    }
    out.trim_end().to_owned()
}

/// A fenced code block of `lines`, `json` when they are a JSON value and `sh` otherwise;
/// nothing for no lines.
fn code_block(out: &mut String, lines: &[&str]) {
    if lines.is_empty() {
        return;
    }
    let lang = if lines[0].starts_with('{') { "json" } else { "sh" };
    let _ = writeln!(out, "```{lang}\n{}\n```\n", lines.join("\n"));
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn page_path() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(PAGE)
    }

    /// The first line where `a` and `b` differ, for a failure message a reader can act on.
    fn first_difference(a: &str, b: &str) -> String {
        let (mut la, mut lb) = (a.lines(), b.lines());
        for n in 1.. {
            match (la.next(), lb.next()) {
                (None, None) => break,
                (x, y) if x == y => {}
                (x, y) => return format!("line {n}: committed {x:?}, generated {y:?}"),
            }
        }
        "only in line endings".to_owned()
    }

    #[test]
    fn reference_page_is_current() {
        let generated = page();
        let path = page_path();
        if std::env::var_os("SANDBOXIO_BLESS").is_some_and(|v| v == "1") {
            std::fs::write(&path, &generated).unwrap();
            eprintln!("wrote {}", path.display());
            return;
        }
        // The published crate has no repository around it: say so rather than fail there.
        if !path.parent().is_some_and(std::path::Path::is_dir) {
            eprintln!("[skip] {PAGE}: not in a repository checkout ({} is absent)", path.display());
            return;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{PAGE} differs from what the clap tree in crates/sandboxio-cli/src/args.rs generates \
             ({}); regenerate it with `{BLESS}` and commit it",
            first_difference(&committed, &generated)
        );
    }

    /// Every subcommand path, option, positional argument, default and example of the tree
    /// is on the page (so a page that renders some of it cannot pass).
    #[test]
    fn reference_covers_the_whole_tree() {
        fn walk(cmd: &Command, path: &str, page: &str, seen: &mut usize) {
            assert!(page.contains(&format!("## `{path}`")), "no section for `{path}`");
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                let name = match (arg.get_long(), arg.get_value_names()) {
                    (Some(long), _) => format!("`--{long}"),
                    (None, Some([value, ..])) => format!("`<{value}>`"),
                    (None, _) => format!("`<{}>`", arg.get_id().as_str().to_uppercase()),
                };
                assert!(page.contains(&name), "`{path}`: {name} is not on the page");
                for default in arg.get_default_values() {
                    let default = format!("Default value: `{}`", default.to_string_lossy());
                    assert!(page.contains(&default), "`{path}`: {default} is not on the page");
                }
                *seen += 1;
            }
            if let Some(after) = cmd.get_after_help() {
                for line in after.to_string().lines().filter(|l| l.trim_start().starts_with("sandboxio ")) {
                    assert!(
                        page.contains(&format!("\n{}\n", line.trim())),
                        "example {line:?} not on its own line"
                    );
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), page, seen);
            }
        }
        let page = page();
        let mut seen = 0;
        walk(&Cli::command(), "sandboxio", &page, &mut seen);
        assert!(seen > 40, "the walk saw only {seen} arguments");
        assert!(page.contains("*Streamable HTTP (--transport http):* Where to listen"), "headings kept");
    }

    /// The page follows the tree: a changed help text changes it (the check above is not
    /// comparing constants).
    #[test]
    fn reference_follows_the_tree() {
        let changed = Cli::command().mut_subcommand("kill", |k| k.about("Kill sandboxes, differently."));
        let page = page_of(&changed);
        assert!(page.contains("Kill sandboxes, differently."));
        assert_ne!(page, super::page());
    }

    #[test]
    fn examples_become_code_blocks() {
        assert_eq!(
            markdown_after_help("Examples:\n  sandboxio ls\n  sandboxio ls --json"),
            "**Examples:**\n\n```sh\nsandboxio ls\nsandboxio ls --json\n```"
        );
        assert_eq!(
            markdown_after_help(
                "Clients:\n  Over stdio,\n  one client.\n\nExamples:\n  Entry:\n    {\"a\": 1}\n  Shell:\n    sandboxio mcp"
            ),
            "**Clients:**\n\nOver stdio, one client.\n\n**Examples:**\n\nEntry:\n\n```json\n{\"a\": 1}\n```\n\nShell:\n\n```sh\nsandboxio mcp\n```"
        );
        assert_eq!(markdown_after_help("free text"), "free text", "an unexpected shape stays text");
    }
}
