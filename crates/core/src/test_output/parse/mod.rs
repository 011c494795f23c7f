//! Pure parsers from a test run's output text to failures: test id, location, message and
//! stack frames. One parser per tool family, chosen by what the output looks like, with a
//! generic `path:line[:col]: message` fallback.

mod generic;
mod go;
mod js;
mod python;
mod rust;
mod types;

use serde::{Deserialize, Serialize};

pub use types::{Context, Failure, Location, Parsed};

/// Which tool printed the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
    } else if has("short test summary info")
        || has("= FAILURES =")
        || has("test session starts")
        || output.lines().any(python::quiet_summary)
    {
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
    // generic rule (a `make check` that runs pytest, then mypy), and a tool we do not know is
    // parsed by it alone. It skips warnings: pytest's warnings summary names places too
    // (`more.py:1653: DeprecationWarning: ...` under "626 passed, 1 skipped, 5 warnings").
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi_codes_are_removed() {
        assert_eq!(strip_ansi("\u{1b}[32m- 3\u{1b}[39m"), "- 3");
    }
}
