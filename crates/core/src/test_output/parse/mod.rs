//! Pure parsers from a test run's output text to failures: test id, location, message and
//! stack frames. One parser per tool family, chosen by what the output looks like, with a
//! generic `path:line[:col]: message` fallback.

mod generic;
mod go;
mod js;
mod python;
mod rust;

use std::path::Path;

use serde::Serialize;

/// A place in a file: workspace-relative when the file is inside the workspace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Location {
    pub file: String,
    /// 1-based.
    pub line: u32,
    /// 1-based, when the tool gives one.
    pub column: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    fn at_first_frame(
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

/// Which tool printed the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Libtest,
    Nextest,
    Pytest,
    Unittest,
    GoTest,
    Tap,
    Jest,
    Vitest,
    Generic,
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

    fn location(&self, file: &str, line: u32, column: Option<u32>) -> Location {
        Location {
            file: self.relativize(file),
            line,
            column,
        }
    }
}

/// Recognises the tool from the output. Every tool announces itself near the start (headers)
/// or the end (summaries), so only the first and last 64 KiB are looked at: a long run's
/// output is not scanned a dozen times.
pub fn detect_format(output: &str) -> Format {
    const WINDOW: usize = 64 * 1024;
    let sample = if output.len() > 2 * WINDOW {
        let head_end = floor_char_boundary(output, WINDOW);
        let tail_start = floor_char_boundary(output, output.len() - WINDOW);
        format!("{}\n{}", &output[..head_end], &output[tail_start..])
    } else {
        output.to_string()
    };
    let output = sample.as_str();
    let has = |s: &str| output.contains(s);
    if has("Nextest run ID") || (has("        FAIL [") && has("Summary [")) {
        Format::Nextest
    } else if has("test result: ") || has("---- ") && has(" stdout ----") || has("error[E") {
        Format::Libtest
    } else if has("short test summary info") || has("= FAILURES =") || has("test session starts") {
        Format::Pytest
    } else if output.lines().any(|l| {
        l.strip_prefix("Ran ")
            .and_then(|r| r.split_whitespace().next())
            .is_some_and(|n| n.parse::<u32>().is_ok())
    }) {
        Format::Unittest
    } else if has("--- FAIL: ")
        || output
            .lines()
            .any(|l| l.starts_with("FAIL\t") || l.starts_with("ok  \t"))
    {
        Format::GoTest
    } else if has("TAP version")
        || output
            .lines()
            .any(|l| l.trim_start().starts_with("not ok "))
    {
        Format::Tap
    } else if has("Test Suites:") || has("  ● ") {
        Format::Jest
    } else if has(" Test Files ") || has("⎯ Failed Tests") {
        Format::Vitest
    } else {
        Format::Generic
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Parses a run's combined output (stdout, then stderr). Colour codes are removed first.
pub fn parse(output: &str, ctx: &Context<'_>) -> (Format, Parsed) {
    let clean = strip_ansi(output);
    let format = detect_format(&clean);
    let mut parsed = match format {
        Format::Libtest | Format::Nextest => rust::parse(&clean, ctx),
        Format::Pytest => python::parse_pytest(&clean, ctx),
        Format::Unittest => python::parse_unittest(&clean, ctx),
        Format::GoTest => go::parse(&clean, ctx),
        Format::Tap => js::parse_tap(&clean, ctx),
        Format::Jest => js::parse_jest(&clean, ctx),
        Format::Vitest => js::parse_vitest(&clean, ctx),
        Format::Generic => Parsed::default(),
    };
    // Whatever the tool, a failure the parser could not place may still be found by the
    // generic rule, and a tool we do not know is parsed by it alone.
    if parsed.failures.is_empty() {
        parsed.failures = generic::parse(&clean, ctx);
    }
    dedupe(&mut parsed.failures);
    (format, parsed)
}

fn dedupe(failures: &mut Vec<Failure>) {
    let mut seen = std::collections::HashSet::new();
    failures.retain(|f| seen.insert((f.test_id.clone(), f.location.clone(), f.message.clone())));
}

/// Removes ANSI escape sequences (colours, cursor moves) some tools print even into pipes.
pub fn strip_ansi(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains('\u{1b}') {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, then one final byte in @..~.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else {
            chars.next();
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Splits `path:line[:col]` at the end of a token; the path must look like a file.
pub(crate) fn split_location(token: &str) -> Option<(&str, u32, Option<u32>)> {
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
pub(crate) fn count_before(line: &str, word: &str) -> Option<u32> {
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
    fn ansi_codes_are_removed() {
        assert_eq!(strip_ansi("\u{1b}[32m- 3\u{1b}[39m"), "- 3");
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
