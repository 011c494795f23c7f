//! What every parser shares: the failure types (`Location`, `Failure`, `Parsed`), the
//! `Context` that maps a tool's paths into the workspace, and the token helpers
//! (`split_location`, `count_before`). Below the parsers and the dispatch in `mod.rs`: they
//! all use this file, and it uses none of them.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// A place in a file: workspace-relative when the file is inside the workspace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Location {
    pub file: String,
    /// 1-based.
    pub line: u32,
    /// 1-based, when the tool gives one.
    pub column: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub test_id: String,
    pub location: Option<Location>,
    pub message: String,
    /// The other frames of the failure, outermost first, inside the workspace only.
    pub frames: Vec<Location>,
}

impl Failure {
    /// A failure located at its first frame (taken out of `frames`), or at `declared` when it
    /// has no frame: the runners whose stack's first workspace frame is where it failed.
    pub(super) fn at_first_frame(
        test_id: String,
        message: String,
        mut frames: Vec<Location>,
        declared: Option<Location>,
    ) -> Failure {
        let location = if frames.is_empty() {
            declared
        } else {
            Some(frames.remove(0))
        };
        Failure {
            test_id,
            location,
            message,
            frames,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Parsed {
    /// In the order the tool reported them: the first failure first.
    pub failures: Vec<Failure>,
    pub passed: Option<u32>,
    pub failed: Option<u32>,
}

/// What a parser needs to know besides the text.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub root: &'a Path,
    /// The module path from `go.mod`, to map Go package paths to folders.
    pub go_module: Option<&'a str>,
}

impl Context<'_> {
    /// A tool's path as a workspace-relative one: `./x`, `file:///root/x` and `/root/x` all
    /// become `x`. Paths outside the workspace are kept as they are.
    pub fn relativize(&self, raw: &str) -> String {
        let raw = raw.trim().trim_start_matches("file://");
        let path = Path::new(raw);
        // The caller passes the canonical root, so a path through a symlinked root is not
        // recognised here; parsing stays free of IO.
        if let Ok(rel) = path.strip_prefix(self.root) {
            return rel.to_string_lossy().into_owned();
        }
        raw.trim_start_matches("./").to_string()
    }

    /// Whether a tool's path names a file of the project (not the toolchain, a virtualenv or
    /// installed packages).
    pub fn in_workspace(&self, raw: &str) -> bool {
        let rel = self.relativize(raw);
        let p = Path::new(&rel);
        !p.is_absolute()
            && !rel.starts_with('<')
            && !rel.starts_with("node:")
            && !rel.contains("site-packages/")
            && !rel.contains("node_modules/")
            && !rel.starts_with(".venv")
            && !rel.starts_with("..")
    }

    pub(super) fn location(&self, file: &str, line: u32, column: Option<u32>) -> Location {
        Location {
            file: self.relativize(file),
            line,
            column,
        }
    }
}

/// Splits `path:line[:col]` at the end of a token; the path must look like a file.
pub(super) fn split_location(token: &str) -> Option<(&str, u32, Option<u32>)> {
    let token = token.trim().trim_end_matches(':');
    let (rest, last) = token.rsplit_once(':')?;
    let last: u32 = last.parse().ok()?;
    if let Some((path, line)) = rest.rsplit_once(':')
        && let Ok(line) = line.parse::<u32>()
        && looks_like_path(path)
    {
        return Some((path, line, Some(last)));
    }
    looks_like_path(rest).then_some((rest, last, None))
}

fn looks_like_path(p: &str) -> bool {
    !p.is_empty()
        && !p.contains(char::is_whitespace)
        && p.rsplit('/')
            .next()
            .is_some_and(|name| name.contains('.') && !name.ends_with('.'))
}

/// Counts like "3 failed" in a summary line.
pub(super) fn count_before(line: &str, word: &str) -> Option<u32> {
    let words: Vec<&str> = line
        .split(|c: char| {
            c.is_whitespace() || c == ',' || c == ';' || c == '|' || c == '(' || c == ')'
        })
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .find(|w| w[1].trim_end_matches(',') == word)
        .and_then(|w| w[0].parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_split_with_and_without_columns() {
        assert_eq!(
            split_location("src/lib.rs:15:9"),
            Some(("src/lib.rs", 15, Some(9)))
        );
        assert_eq!(
            split_location("tests/test_calc.py:5:"),
            Some(("tests/test_calc.py", 5, None))
        );
        assert_eq!(split_location("not a path:3"), None);
        assert_eq!(split_location("12:30:45"), None);
    }

    #[test]
    fn paths_are_made_relative_to_the_workspace() {
        let ctx = Context {
            root: Path::new("/ws"),
            go_module: None,
        };
        assert_eq!(ctx.relativize("/ws/src/a.rs"), "src/a.rs");
        assert_eq!(ctx.relativize("./src/a.rs"), "src/a.rs");
        assert_eq!(ctx.relativize("file:///ws/a.js"), "a.js");
        assert!(!ctx.in_workspace("/usr/lib/python3/x.py"));
        assert!(!ctx.in_workspace("node:internal/test_runner"));
        assert!(ctx.in_workspace("/ws/a.py"));
    }
}
