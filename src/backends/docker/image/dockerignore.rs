//! `.dockerignore` as the `docker` CLI reads it: one pattern a line, `#` comments, blank
//! lines skipped, a leading `!` re-includes, the last matching pattern wins, and a pattern
//! that matches a directory excludes everything under it. Patterns are cleaned (a leading
//! `/` or `./` dropped) and match `/`-separated paths relative to the context's root, with
//! Go's `filepath.Match` syntax (`*` and `?` within one path segment, `[...]` classes,
//! `\` escapes) plus `**`, any number of segments.

/// The parsed patterns of one `.dockerignore`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ignore {
    /// (segments of the pattern, whether it is an exception `!`).
    patterns: Vec<(Vec<String>, bool)>,
}

impl Ignore {
    /// Parses the file's text.
    pub(crate) fn parse(text: &str) -> Ignore {
        let mut patterns = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (exception, pattern) = match line.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, line),
            };
            let segments: Vec<String> =
                pattern.split('/').filter(|s| !s.is_empty() && *s != ".").map(str::to_owned).collect();
            if !segments.is_empty() {
                patterns.push((segments, exception));
            }
        }
        Ignore { patterns }
    }

    /// Whether any pattern is an exception (then an excluded directory must still be
    /// walked: something under it may be re-included).
    pub(crate) fn has_exceptions(&self) -> bool {
        self.patterns.iter().any(|(_, exception)| *exception)
    }

    /// Whether `path` (relative, `/`-separated) is excluded.
    pub(crate) fn excludes(&self, path: &str) -> bool {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let mut excluded = false;
        for (pattern, exception) in &self.patterns {
            // The path itself or any of its parent directories.
            let hit = (1..=segments.len()).any(|n| matches_segments(pattern, &segments[..n]));
            if hit {
                excluded = !exception;
            }
        }
        excluded
    }
}

/// Whether the pattern's segments match the path's, `**` taking any number of segments.
fn matches_segments(pattern: &[String], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((first, rest)) if first == "**" => {
            (0..=path.len()).any(|skip| matches_segments(rest, &path[skip..]))
        }
        Some((first, rest)) => match path.split_first() {
            Some((segment, more)) => {
                glob(first.as_bytes(), segment.as_bytes()) && matches_segments(rest, more)
            }
            None => false,
        },
    }
}

/// Go's `filepath.Match` within one segment: `*`, `?`, `[...]` (with `^` or `!` negation
/// and ranges), `\` escapes.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.first() {
        None => name.is_empty(),
        Some(b'*') => (0..=name.len()).any(|skip| glob(&pattern[1..], &name[skip..])),
        Some(b'?') => !name.is_empty() && glob(&pattern[1..], &name[1..]),
        Some(b'[') => {
            let Some((&c, rest)) = name.split_first() else { return false };
            match class(&pattern[1..], c) {
                Some((true, after)) => glob(after, rest),
                _ => false,
            }
        }
        Some(b'\\') if pattern.len() > 1 => {
            name.first() == Some(&pattern[1]) && glob(&pattern[2..], &name[1..])
        }
        Some(&p) => name.first() == Some(&p) && glob(&pattern[1..], &name[1..]),
    }
}

/// Matches `c` against a class whose text starts after `[`: whether it matched and the
/// pattern after `]`, or `None` for an unterminated class (which matches nothing).
fn class(mut pattern: &[u8], c: u8) -> Option<(bool, &[u8])> {
    let negated = matches!(pattern.first(), Some(b'^' | b'!'));
    if negated {
        pattern = &pattern[1..];
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let (&lo, rest) = pattern.split_first()?;
        if lo == b']' && !first {
            return Some((matched != negated, rest));
        }
        first = false;
        let (lo, rest) = if lo == b'\\' { (*rest.first()?, &rest[1..]) } else { (lo, rest) };
        if rest.first() == Some(&b'-') && rest.get(1).is_some_and(|&h| h != b']') {
            let hi = rest[1];
            matched |= lo <= c && c <= hi;
            pattern = &rest[2..];
        } else {
            matched |= lo == c;
            pattern = rest;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_exclude_files_and_whole_directories() {
        let ignore =
            Ignore::parse("# comment\n\n/target\n*.log\nsecrets/\ndocs/**/*.md\n!docs/keep/README.md\n");
        for excluded in ["target", "target/debug/x", "a.log", "secrets/key", "docs/a.md", "docs/x/y/b.md"] {
            assert!(ignore.excludes(excluded), "{excluded}");
        }
        for kept in ["src/a.log", "main.rs", "docs/keep/README.md", "docs/a.txt", "targets"] {
            assert!(!ignore.excludes(kept), "{kept}");
        }
        assert!(ignore.has_exceptions());
    }

    #[test]
    fn the_last_matching_pattern_wins() {
        let ignore = Ignore::parse("*.txt\n!keep*.txt\nkeep-not.txt\n");
        assert!(ignore.excludes("a.txt"));
        assert!(!ignore.excludes("keep-1.txt"));
        assert!(ignore.excludes("keep-not.txt"));
        assert!(!Ignore::parse("").excludes("anything"));
    }

    #[test]
    fn go_match_syntax() {
        assert!(glob(b"a?c", b"abc") && !glob(b"a?c", b"ac"));
        assert!(glob(b"[a-c]x", b"bx") && !glob(b"[a-c]x", b"dx"));
        assert!(glob(b"[^a-c]x", b"dx") && glob(b"[!a]x", b"bx"));
        assert!(glob(b"\\*", b"*") && !glob(b"\\*", b"a"));
        assert!(!glob(b"[abc", b"a"), "an unterminated class matches nothing");
        assert!(glob(b"*", b"") && glob(b"*.rs", b"lib.rs"));
        let ignore = Ignore::parse("**/node_modules\n./build\n");
        assert!(ignore.excludes("node_modules") && ignore.excludes("a/b/node_modules/x.js"));
        assert!(ignore.excludes("build/out"));
    }
}
