//! cargo test (libtest) and cargo nextest: panics with their locations and messages
//! (`assert_eq!` left/right included), backtrace frames in the workspace, tests that failed
//! without a panic, and compile errors with their `-->` locations.

use super::types::{Context, Failure, Parsed, count_before, split_location};

pub fn parse(output: &str, ctx: &Context<'_>) -> Parsed {
    let lines: Vec<&str> = output.lines().collect();
    let mut parsed = Parsed::default();
    let mut failed_names: Vec<String> = Vec::new();
    let mut section: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        let raw = lines[i];
        let line = raw.trim();
        if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|l| l.strip_suffix(" stdout ----"))
        {
            section = Some(name.to_string());
        } else if let Some(rest) = line.strip_prefix("FAIL [") {
            // nextest: "FAIL [   0.109s] (2/3) crate tests::adds"
            if let Some(name) = rest
                .split(']')
                .nth(1)
                .and_then(|r| r.split_whitespace().last())
            {
                section = Some(name.to_string());
                if !failed_names.contains(&name.to_string()) {
                    failed_names.push(name.to_string());
                }
            }
        } else if let Some(rest) = line.strip_prefix("thread '") {
            if let Some((failure, next)) = panic_at(rest, &lines, i, section.as_deref(), ctx) {
                parsed.failures.push(failure);
                i = next;
                continue;
            }
        } else if line.starts_with("error[E") || line.starts_with("error: ") {
            if let Some(failure) = compile_error(line, &lines[i + 1..], ctx) {
                parsed.failures.push(failure);
            }
        } else if line == "failures:" {
            // The closing list of failed test names (after the per-test sections).
            let mut j = i + 1;
            while j < lines.len() && lines[j].starts_with("    ") && !lines[j].trim().is_empty() {
                let name = lines[j].trim().to_string();
                if !failed_names.contains(&name) {
                    failed_names.push(name);
                }
                j += 1;
            }
        } else if line.starts_with("test result: ") {
            add(&mut parsed.passed, count_before(line, "passed"));
            add(&mut parsed.failed, count_before(line, "failed"));
        } else if line.starts_with("Summary [") {
            // nextest's summary replaces the per-binary counts it echoed from libtest.
            parsed.passed = count_before(line, "passed");
            parsed.failed = count_before(line, "failed");
        }
        i += 1;
    }
    // A test that failed without a panic (it returned an Err, say) still gets a failure.
    for name in failed_names {
        if !parsed.failures.iter().any(|f| f.test_id == name) {
            parsed.failures.push(Failure {
                test_id: name,
                location: None,
                message: "the test failed without a panic message".into(),
                frames: Vec::new(),
            });
        }
    }
    parsed
}

fn add(total: &mut Option<u32>, n: Option<u32>) {
    if let Some(n) = n {
        *total = Some(total.unwrap_or(0) + n);
    }
}

/// `thread 'name' (1234) panicked at src/lib.rs:15:9:` then the message lines, or the old
/// one-line form `thread 'name' panicked at 'message', src/lib.rs:15:9`. Returns the failure
/// and the index of the first line after it.
fn panic_at(
    rest: &str,
    lines: &[&str],
    at: usize,
    section: Option<&str>,
    ctx: &Context<'_>,
) -> Option<(Failure, usize)> {
    let (thread, after) = rest.split_once('\'')?;
    let after = after.split_once("panicked at ")?.1;
    let test_id = if thread == "main" || thread == "<unnamed>" {
        section.unwrap_or(thread).to_string()
    } else {
        thread.to_string()
    };
    let (location, mut message, mut next) = if let Some(old) = after.strip_prefix('\'') {
        let (msg, loc) = old.rsplit_once("', ")?;
        let (file, line, col) = split_location(loc)?;
        (ctx.location(file, line, col), msg.to_string(), at + 1)
    } else {
        let (file, line, col) = split_location(after)?;
        let mut message = Vec::new();
        let mut j = at + 1;
        while j < lines.len() {
            let l = lines[j].trim();
            if l.is_empty()
                || l.starts_with("note: ")
                || l == "stack backtrace:"
                || l.starts_with("thread '")
            {
                break;
            }
            message.push(l);
            j += 1;
        }
        (ctx.location(file, line, col), message.join("\n"), j)
    };
    // Backtrace frames inside the workspace: "at ./src/lib.rs:15:9".
    let mut frames = Vec::new();
    while next < lines.len() {
        let l = lines[next].trim();
        if l.is_empty() || l.starts_with("---- ") || l.starts_with("thread '") {
            break;
        }
        if let Some(loc) = l.strip_prefix("at ").and_then(split_location)
            && ctx.in_workspace(loc.0)
        {
            let frame = ctx.location(loc.0, loc.1, loc.2);
            if frame != location && !frames.contains(&frame) {
                frames.push(frame);
            }
        } else if l == "stack backtrace:"
            || l.starts_with("note: ")
            || l.chars().next().is_some_and(|c| c.is_ascii_digit())
        {
            // backtrace header and numbered function lines
        } else {
            break;
        }
        next += 1;
    }
    if message.is_empty() {
        message = "panicked".into();
    }
    Some((
        Failure {
            test_id,
            location: Some(location),
            message,
            frames,
        },
        next,
    ))
}

/// `error[E0277]: message` with ` --> src/lib.rs:2:7` on one of the next lines.
fn compile_error(header: &str, rest: &[&str], ctx: &Context<'_>) -> Option<Failure> {
    let (code, message) = match header.strip_prefix("error[") {
        Some(r) => {
            let (code, msg) = r.split_once("]: ")?;
            (code.to_string(), msg.to_string())
        }
        None => (
            "error".to_string(),
            header.strip_prefix("error: ")?.to_string(),
        ),
    };
    for l in rest.iter().take(3) {
        if let Some(loc) = l.trim().strip_prefix("--> ") {
            let (file, line, col) = split_location(loc)?;
            if !ctx.in_workspace(file) {
                return None;
            }
            return Some(Failure {
                test_id: format!("compile {code}"),
                location: Some(ctx.location(file, line, col)),
                message,
                frames: Vec::new(),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::Location;
    use super::*;
    use std::path::Path;

    fn ctx() -> Context<'static> {
        Context {
            root: Path::new("/ws"),
            go_module: None,
        }
    }

    #[test]
    fn old_style_panics_parse_too() {
        let out = "---- it_works stdout ----\nthread 'it_works' panicked at 'boom', src/lib.rs:3:5\n\nfailures:\n    it_works\n\ntest result: FAILED. 0 passed; 1 failed; 0 ignored";
        let p = parse(out, &ctx());
        assert_eq!(p.failures.len(), 1);
        assert_eq!(p.failures[0].message, "boom");
        assert_eq!(
            p.failures[0].location,
            Some(Location {
                file: "src/lib.rs".into(),
                line: 3,
                column: Some(5)
            })
        );
        assert_eq!((p.passed, p.failed), (Some(0), Some(1)));
    }

    #[test]
    fn a_test_returning_err_is_a_failure_without_location() {
        let out = "---- t stdout ----\nError: \"nope\"\n\nfailures:\n    t\n\ntest result: FAILED. 0 passed; 1 failed;";
        let p = parse(out, &ctx());
        assert_eq!(p.failures[0].test_id, "t");
        assert_eq!(p.failures[0].location, None);
    }
}
