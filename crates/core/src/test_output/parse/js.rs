//! JavaScript runners: node's test runner (TAP), Jest and Vitest.

use super::types::{Context, Failure, Location, Parsed, count_before, split_location};

/// A location inside a stack line: "at fn (path:1:2)", "fn (path:1:2)", "at path:1:2",
/// "❯ path:1:2", "file:///path:1:2".
fn stack_location(line: &str) -> Option<(&str, u32, Option<u32>)> {
    let t = line
        .trim()
        .trim_start_matches("at ")
        .trim_start_matches('❯')
        .trim();
    let inner = match (t.rfind('('), t.ends_with(')')) {
        (Some(open), true) => &t[open + 1..t.len() - 1],
        _ => t.rsplit(' ').next().unwrap_or(t),
    };
    split_location(inner)
}

fn first_workspace_frame(lines: &[&str], ctx: &Context<'_>) -> Vec<Location> {
    let mut out: Vec<Location> = Vec::new();
    for l in lines {
        if let Some((file, n, col)) = stack_location(l)
            && ctx.in_workspace(file)
        {
            let loc = ctx.location(file, n, col);
            if !out.contains(&loc) {
                out.push(loc);
            }
        }
    }
    out
}

pub fn parse_tap(output: &str, ctx: &Context<'_>) -> Parsed {
    let lines: Vec<&str> = output.lines().collect();
    let mut parsed = Parsed::default();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_start();
        if let Some(rest) = line.strip_prefix("not ok ") {
            let name = rest
                .split_once(" - ")
                .map_or(rest, |(_, n)| n)
                .trim()
                .to_string();
            // The YAML block runs to its "..." line.
            let indent = lines[i].len() - line.len();
            let end = (i + 1..lines.len())
                .find(|&j| {
                    lines[j].trim() == "..."
                        && lines[j].len() - lines[j].trim_start().len() >= indent
                })
                .unwrap_or(i);
            let block = &lines[i + 1..end.max(i + 1)];
            i = end + 1;
            // A suite that failed because its subtests did is reported by those subtests.
            if block
                .iter()
                .any(|l| l.contains("failureType: 'subtestsFailed'"))
            {
                continue;
            }
            let declared = block.iter().find_map(|l| {
                let v = l.trim().strip_prefix("location: ")?.trim_matches('\'');
                let (file, n, col) = split_location(v)?;
                Some(ctx.location(file, n, col))
            });
            parsed.failures.push(Failure::at_first_frame(
                name,
                yaml_text(block, "error:").unwrap_or_else(|| "failed".into()),
                first_workspace_frame(block, ctx),
                declared,
            ));
            continue;
        }
        if let Some(n) = line.strip_prefix("# pass ") {
            parsed.passed = n.trim().parse().ok();
        } else if let Some(n) = line.strip_prefix("# fail ") {
            parsed.failed = n.trim().parse().ok();
        }
        i += 1;
    }
    parsed
}

/// A YAML value: inline (`error: 'text'`) or a block (`error: |-` then more-indented lines).
fn yaml_text(block: &[&str], key: &str) -> Option<String> {
    let at = block.iter().position(|l| l.trim_start().starts_with(key))?;
    let first = block[at].trim_start()[key.len()..].trim();
    if !first.starts_with('|') && !first.is_empty() {
        return Some(first.trim_matches('\'').to_string());
    }
    let key_indent = block[at].len() - block[at].trim_start().len();
    let text: Vec<&str> = block[at + 1..]
        .iter()
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > key_indent)
        .map(|l| l.trim())
        .collect();
    Some(text.join("\n").trim().to_string())
}

pub fn parse_jest(output: &str, ctx: &Context<'_>) -> Parsed {
    let lines: Vec<&str> = output.lines().collect();
    let mut parsed = Parsed::default();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if let Some(name) = line.strip_prefix("● ") {
            let end = (i + 1..lines.len())
                .find(|&j| {
                    let t = lines[j].trim();
                    t.starts_with("● ")
                        || t.starts_with("Test Suites:")
                        || t.starts_with("FAIL ")
                        || t.starts_with("PASS ")
                })
                .unwrap_or(lines.len());
            let block = &lines[i + 1..end];
            i = end;
            if name.starts_with("Console") {
                continue;
            }
            let message: Vec<&str> = block
                .iter()
                .map(|l| l.trim())
                .take_while(|l| !l.starts_with("at ") && !code_frame_line(l))
                .filter(|l| !l.is_empty())
                .collect();
            parsed.failures.push(Failure::at_first_frame(
                name.replace(" › ", " > "),
                message.join("\n"),
                first_workspace_frame(block, ctx),
                None,
            ));
            continue;
        }
        if line.starts_with("Tests:") {
            parsed.failed = count_before(line, "failed").or(Some(0));
            parsed.passed = count_before(line, "passed").or(Some(0));
        }
        i += 1;
    }
    parsed
}

/// Jest's source excerpt lines: "  4 |     expect(...)", "> 4 | ...", "    |   ^".
fn code_frame_line(l: &str) -> bool {
    let t = l.trim_start_matches('>').trim();
    t.starts_with('|')
        || t.split_once(" |")
            .is_some_and(|(n, _)| n.trim().parse::<u32>().is_ok())
}

pub fn parse_vitest(output: &str, ctx: &Context<'_>) -> Parsed {
    let lines: Vec<&str> = output.lines().collect();
    let mut parsed = Parsed::default();
    // The detailed list comes after the "Failed Tests" rule; before it, FAIL lines are the
    // progress list.
    let start = lines
        .iter()
        .position(|l| l.contains("Failed Tests"))
        .unwrap_or(0);
    let mut i = start;
    while i < lines.len() {
        let line = lines[i].trim();
        if let Some(rest) = line.strip_prefix("FAIL ") {
            let name = rest.trim().to_string();
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].trim().starts_with("FAIL ") || lines[j].contains('⎯'))
                .unwrap_or(lines.len());
            let block = &lines[i + 1..end];
            i = end;
            let message = block
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.is_empty())
                .unwrap_or("failed")
                .to_string();
            parsed.failures.push(Failure::at_first_frame(
                name,
                message,
                first_workspace_frame(block, ctx),
                None,
            ));
            continue;
        }
        i += 1;
    }
    for line in &lines {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Tests ") {
            parsed.failed = count_before(rest, "failed").or(Some(0));
            parsed.passed = count_before(rest, "passed").or(Some(0));
        }
    }
    parsed
}
