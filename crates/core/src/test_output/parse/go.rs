//! go test: `--- FAIL:` blocks with `file.go:line: message` lines, mapped from the package's
//! import path to its folder, build errors, and panics.

use super::{Context, Failure, Parsed, split_location};

pub fn parse(output: &str, ctx: &Context<'_>) -> Parsed {
    let mut parsed = Parsed::default();
    // Failures of the package being printed; their files are relative to its folder, which
    // is known only from the "FAIL\tpkg" or "ok\tpkg" line that closes it.
    let mut pending: Vec<Failure> = Vec::new();
    let mut current: Option<usize> = None;
    let (mut failed, mut passed) = (0u32, 0u32);
    let mut saw_pass_lines = false;
    let mut in_build_errors = false;
    for line in output.lines() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("--- FAIL: ") {
            let name = rest.split(" (").next().unwrap_or(rest).to_string();
            if !name.contains('/') {
                failed += 1;
            }
            pending.push(Failure {
                test_id: name,
                location: None,
                message: String::new(),
                frames: Vec::new(),
            });
            current = Some(pending.len() - 1);
            in_build_errors = false;
        } else if trimmed.starts_with("--- PASS: ") {
            saw_pass_lines = true;
            if !trimmed.contains('/') {
                passed += 1;
            }
            current = None;
        } else if line.starts_with("FAIL\t")
            || line.starts_with("ok  \t")
            || line.starts_with("FAIL ") && line.contains('\t')
        {
            let pkg = line
                .split('\t')
                .nth(1)
                .unwrap_or("")
                .split_whitespace()
                .next()
                .unwrap_or("");
            let dir = package_dir(pkg, ctx);
            for mut f in pending.drain(..) {
                if let Some(loc) = &mut f.location
                    && !loc.file.contains('/')
                    && !dir.is_empty()
                {
                    loc.file = format!("{dir}/{}", loc.file);
                }
                if f.message.is_empty() {
                    f.message = "the test failed".into();
                }
                parsed.failures.push(f);
            }
            current = None;
            in_build_errors = false;
        } else if line.starts_with("# ") {
            in_build_errors = true;
            current = None;
        } else if in_build_errors {
            // "./add.go:4:13: undefined: c", relative to where go ran (the workspace root).
            if let Some((loc, msg)) = line.split_once(": ")
                && let Some((file, n, col)) = split_location(loc)
            {
                parsed.failures.push(Failure {
                    test_id: "build".into(),
                    location: Some(ctx.location(file, n, col)),
                    message: msg.trim().to_string(),
                    frames: Vec::new(),
                });
            }
        } else if let Some(i) = current {
            let f = &mut pending[i];
            // "    add_test.go:7: message"; more-indented lines continue the message.
            if let Some((loc, msg)) = trimmed.split_once(": ")
                && let Some((file, n, col)) = split_location(loc)
                && file.ends_with(".go")
                && f.location.is_none()
            {
                f.location = Some(ctx.location(file, n, col));
                f.message = msg.to_string();
            } else if let Some((file, n)) = panic_frame(trimmed)
                && ctx.in_workspace(file)
            {
                let loc = ctx.location(file, n, None);
                if f.location.is_none() {
                    f.location = Some(loc);
                } else if f.location.as_ref() != Some(&loc) && !f.frames.contains(&loc) {
                    f.frames.push(loc);
                }
            } else if trimmed.starts_with("panic: ") && f.message.is_empty() {
                f.message = trimmed.to_string();
            } else if !trimmed.is_empty() && f.location.is_some() && line.starts_with("        ") {
                f.message.push('\n');
                f.message.push_str(trimmed);
            }
        }
    }
    parsed.failures.append(&mut pending);
    parsed.failed = Some(
        failed
            + parsed
                .failures
                .iter()
                .filter(|f| f.test_id == "build")
                .count() as u32,
    );
    parsed.passed = saw_pass_lines.then_some(passed);
    parsed
}

/// A goroutine trace line: "/abs/path/add.go:5 +0x1d".
fn panic_frame(line: &str) -> Option<(&str, u32)> {
    let loc = line.split(" +0x").next()?;
    let (file, n) = loc.rsplit_once(':')?;
    if !file.ends_with(".go") {
        return None;
    }
    Some((file, n.parse().ok()?))
}

/// "example.com/mod/sub" → "sub" for module "example.com/mod".
fn package_dir(pkg: &str, ctx: &Context<'_>) -> String {
    match ctx.go_module {
        Some(module) => pkg
            .strip_prefix(module)
            .unwrap_or("")
            .trim_start_matches('/')
            .to_string(),
        None => String::new(),
    }
}
