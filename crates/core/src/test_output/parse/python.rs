//! pytest (default and `--tb=short` tracebacks, rewritten assertions, collection errors,
//! `SyntaxError`) and unittest.

use super::types::{Context, Failure, Location, Parsed, count_before, split_location};

/// A `____ name ____` block header in pytest's FAILURES or ERRORS section.
fn block_header(line: &str) -> Option<&str> {
    if !line.starts_with("___") {
        return None;
    }
    let t = line.trim_end();
    if t.len() > 6 && t.starts_with("___") && t.ends_with("___") {
        Some(t.trim_matches('_').trim())
    } else {
        None
    }
}

/// `File "path", line 12` (tracebacks, and SyntaxError details inside `E` lines).
fn file_line(line: &str) -> Option<(&str, u32)> {
    let rest = line
        .trim()
        .trim_start_matches('E')
        .trim()
        .strip_prefix("File \"")?;
    let (path, after) = rest.split_once('"')?;
    let num = after.trim_start_matches(',').trim().strip_prefix("line ")?;
    let num: String = num.chars().take_while(char::is_ascii_digit).collect();
    Some((path, num.parse().ok()?))
}

pub fn parse_pytest(output: &str, ctx: &Context<'_>) -> Parsed {
    let lines: Vec<&str> = output.lines().collect();
    let mut parsed = Parsed::default();
    // Full test ids from the short summary: "FAILED tests/test_x.py::test_add - message".
    let mut summary: Vec<(String, String)> = Vec::new();
    let mut in_blocks = false;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let rule = line.starts_with('=');
        if rule && (line.contains(" FAILURES ") || line.contains(" ERRORS ")) {
            in_blocks = true;
        } else if rule && line.contains("short test summary info") {
            in_blocks = false;
        } else if let Some(rest) = line
            .strip_prefix("FAILED ")
            .or_else(|| line.strip_prefix("ERROR "))
        {
            let (id, msg) = rest.split_once(" - ").unwrap_or((rest, ""));
            summary.push((id.trim().to_string(), msg.trim().to_string()));
        } else if (rule && line.trim_end().ends_with('=')) || quiet_summary(line) {
            in_blocks = false;
            if line.contains(" in ") {
                parsed.failed = sum(
                    count_before(line, "failed"),
                    count_before(line, "error").or(count_before(line, "errors")),
                );
                parsed.passed = count_before(line, "passed").or(Some(0));
            }
        } else if in_blocks && let Some(name) = block_header(line) {
            let end = (i + 1..lines.len())
                .find(|&j| block_header(lines[j]).is_some() || lines[j].starts_with('='))
                .unwrap_or(lines.len());
            parsed
                .failures
                .push(pytest_block(name, &lines[i + 1..end], ctx));
            i = end;
            continue;
        }
        i += 1;
    }
    // Give each block its full id from the summary, in order, and add summary-only failures
    // (as with `--tb=no`). Blocks are looked up by their short name through an index, since
    // a long run can have thousands of both.
    let mut by_name: std::collections::HashMap<String, std::collections::VecDeque<usize>> =
        std::collections::HashMap::new();
    for (i, f) in parsed.failures.iter().enumerate() {
        by_name.entry(f.test_id.clone()).or_default().push_back(i);
    }
    for (id, msg) in summary {
        let name = id.rsplit("::").next().unwrap_or(&id).to_string();
        let file = id.split("::").next().unwrap_or(&id).to_string();
        let block = by_name
            .get_mut(&name)
            .and_then(|q| q.pop_front())
            .or_else(|| {
                by_name
                    .get_mut(&format!("ERROR collecting {file}"))
                    .and_then(|q| q.pop_front())
            });
        match block {
            Some(i) => parsed.failures[i].test_id = id,
            None => parsed.failures.push(Failure {
                test_id: id,
                location: None,
                message: msg,
                frames: Vec::new(),
            }),
        }
    }
    parsed
}

/// The summary line of `pytest -q`, which has no `===` banner: "1 failed, 1 passed in 0.01s",
/// "no tests ran in 0.00s". Every part before " in " is a count of a kind pytest reports.
pub(super) fn quiet_summary(line: &str) -> bool {
    const KINDS: [&str; 11] = [
        "failed",
        "passed",
        "error",
        "errors",
        "skipped",
        "xfailed",
        "xpassed",
        "warning",
        "warnings",
        "deselected",
        "rerun",
    ];
    let Some((counts, _time)) = line.trim().rsplit_once(" in ") else {
        return false;
    };
    counts == "no tests ran"
        || counts.split(", ").all(|part| {
            part.split_once(' ').is_some_and(|(n, kind)| {
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && KINDS.contains(&kind)
            })
        })
}

fn sum(a: Option<u32>, b: Option<u32>) -> Option<u32> {
    match (a, b) {
        (None, None) => None,
        _ => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

/// One failure block: its frames are the `path:line: ...` lines (both traceback styles), its
/// message the `E` lines; a SyntaxError's own `File "...", line N` is the best location.
fn pytest_block(name: &str, block: &[&str], ctx: &Context<'_>) -> Failure {
    let mut frames: Vec<Location> = Vec::new();
    let mut message: Vec<String> = Vec::new();
    let mut syntax_location = None;
    for line in block {
        if let Some(e) = line.strip_prefix('E') {
            let text = e.strip_prefix("   ").unwrap_or(e).trim_end();
            if let Some((path, n)) = file_line(line)
                && ctx.in_workspace(path)
            {
                syntax_location = Some(ctx.location(path, n, None));
            } else if !text.trim().is_empty() {
                message.push(text.trim_start().to_string());
            }
            continue;
        }
        if line.starts_with(' ') || line.starts_with('_') {
            continue;
        }
        // "tests/test_calc.py:5: AssertionError", "calc.py:6: in divide", "x.py:13: "
        let Some((loc, _)) = line
            .split_once(": ")
            .or_else(|| line.strip_suffix(':').map(|l| (l, "")))
        else {
            continue;
        };
        if let Some((path, n, _)) = split_location(loc)
            && ctx.in_workspace(path)
        {
            let l = ctx.location(path, n, None);
            if !frames.contains(&l) {
                frames.push(l);
            }
        }
    }
    let location = syntax_location.or_else(|| frames.first().cloned());
    if let Some(l) = &location {
        frames.retain(|f| f != l);
    }
    Failure {
        test_id: name.to_string(),
        location,
        message: if message.is_empty() {
            "failed".into()
        } else {
            message.join("\n")
        },
        frames,
    }
}

pub fn parse_unittest(output: &str, ctx: &Context<'_>) -> Parsed {
    let lines: Vec<&str> = output.lines().collect();
    let mut parsed = Parsed::default();
    let mut ran = None;
    let mut skipped = 0;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let header = line
            .strip_prefix("FAIL: ")
            .or_else(|| line.strip_prefix("ERROR: "));
        if let Some(rest) = header {
            // "test_area (test_shapes.ShapeTests.test_area)"
            let id = rest
                .split_once(" (")
                .map(|(_, q)| q.trim_end_matches(')').to_string())
                .unwrap_or_else(|| rest.to_string());
            let end = (i + 1..lines.len())
                .find(|&j| {
                    lines[j].starts_with("=====") || lines[j].starts_with("-----") && j > i + 2
                })
                .unwrap_or(lines.len());
            let block = &lines[i + 1..end];
            let mut frames: Vec<Location> = block
                .iter()
                .filter_map(|l| file_line(l))
                .filter(|(p, _)| ctx.in_workspace(p))
                .map(|(p, n)| ctx.location(p, n, None))
                .collect();
            frames.dedup();
            let message = block
                .iter()
                .rev()
                .map(|l| l.trim())
                .find(|l| !l.is_empty() && !l.starts_with("-----"))
                .unwrap_or("failed")
                .to_string();
            parsed
                .failures
                .push(Failure::at_first_frame(id, message, frames, None));
            i = end;
            continue;
        }
        if let Some(rest) = line.strip_prefix("Ran ") {
            ran = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u32>().ok());
        }
        if line.starts_with("FAILED (") || line.starts_with("OK") {
            let n = |k: &str| {
                line.split(['(', ')', ','])
                    .filter_map(|p| {
                        p.trim()
                            .strip_prefix(k)?
                            .strip_prefix('=')?
                            .parse::<u32>()
                            .ok()
                    })
                    .next()
                    .unwrap_or(0)
            };
            parsed.failed = Some(n("failures") + n("errors"));
            skipped = n("skipped") + n("expected failures");
        }
        i += 1;
    }
    if let (Some(ran), Some(failed)) = (ran, parsed.failed.or(Some(0))) {
        parsed.failed = Some(failed);
        parsed.passed = Some(ran.saturating_sub(failed + skipped));
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::super::{Format, parse};
    use super::*;

    fn ctx() -> Context<'static> {
        Context {
            root: std::path::Path::new("/ws"),
            go_module: None,
        }
    }

    #[test]
    fn the_summary_of_pytest_q_is_read_without_its_banner() {
        let out = "F.\n=================================== FAILURES ===================================\n___________________________________ test_add ___________________________________\n\n    def test_add():\n>       assert add(2, 3) == 5\nE       assert -1 == 5\n\ntest_calc.py:5: AssertionError\n=========================== short test summary info ============================\nFAILED test_calc.py::test_add - assert -1 == 5\n1 failed, 1 passed in 0.01s\n";
        let (format, parsed) = parse(out, &ctx());
        assert_eq!(format, Format::Pytest);
        assert_eq!((parsed.passed, parsed.failed), (Some(1), Some(1)));
        let (format, parsed) = parse("..\n2 passed in 0.01s\n", &ctx());
        assert_eq!(format, Format::Pytest);
        assert_eq!((parsed.passed, parsed.failed), (Some(2), None));
        let (_, parsed) = parse("\nno tests ran in 0.00s\n", &ctx());
        assert_eq!(parsed.passed, Some(0));
        assert!(quiet_summary("2 passed, 1 warning in 0.02s"));
        assert!(!quiet_summary("Ran 3 tests in 0.001s"));
        assert!(!quiet_summary("the tests pass in 2s"));
    }

    /// more-itertools 10.2.0's own run: every test passed, and the warnings summary names a
    /// place of the project's. That is no failure: the run passed (it read as "626 passed /
    /// 1 failed", and a fix that made the tests pass was retried).
    #[test]
    fn a_passing_run_with_warnings_has_no_failure() {
        let out = "============================= test session starts ==============================\n\
collected 627 items\n\n\
tests/test_recipes.py ..........s........... [100%]\n\n\
=============================== warnings summary ===============================\n\
tests/test_more.py::ZipEqualTest::test_equal\n\
  /ws/more_itertools/more.py:1653: DeprecationWarning: zip_equal will be removed in a future version of more-itertools.\n\
    warnings.warn(\n\n\
-- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html\n\
================== 626 passed, 1 skipped, 5 warnings in 1.78s ==================\n";
        let (format, parsed) = parse(out, &ctx());
        assert_eq!(format, Format::Pytest);
        assert_eq!(parsed.passed, Some(626));
        assert!(parsed.failures.is_empty(), "{:?}", parsed.failures);
    }
}
