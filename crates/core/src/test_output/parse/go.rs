//! go test: `--- FAIL:` blocks with `file.go:line: message` lines, mapped from the package's
//! import path to its folder, build errors, and panics.

use super::types::{Context, Failure, Parsed, split_location};

pub fn parse(output: &str, ctx: &Context<'_>) -> Parsed {
    let mut state = State::default();
    for line in output.lines() {
        state.line(line, ctx);
    }
    state.finish()
}

/// What the parse has read so far, line by line.
#[derive(Default)]
struct State {
    parsed: Parsed,
    /// Failures of the package being printed; their files are relative to its folder, which
    /// is known only from the "FAIL\tpkg" or "ok\tpkg" line that closes it.
    pending: Vec<Failure>,
    /// The failure whose lines are being read, in `pending`.
    current: Option<usize>,
    failed: u32,
    passed: u32,
    saw_pass_lines: bool,
    in_build_errors: bool,
}

impl State {
    fn line(&mut self, line: &str, ctx: &Context<'_>) {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("--- FAIL: ") {
            self.test_failed(rest);
        } else if trimmed.starts_with("--- PASS: ") {
            self.saw_pass_lines = true;
            if !trimmed.contains('/') {
                self.passed += 1;
            }
            self.current = None;
        } else if line.starts_with("FAIL\t")
            || line.starts_with("ok  \t")
            || line.starts_with("FAIL ") && line.contains('\t')
        {
            self.package_ended(line, ctx);
        } else if line.starts_with("# ") {
            self.in_build_errors = true;
            self.current = None;
        } else if self.in_build_errors {
            self.build_error(line, ctx);
        } else if let Some(i) = self.current {
            failure_line(&mut self.pending[i], line, ctx);
        }
    }

    /// "--- FAIL: TestAdd (0.00s)": a failure whose lines follow (a subtest's is not counted
    /// apart from its parent's).
    fn test_failed(&mut self, rest: &str) {
        let name = rest.split(" (").next().unwrap_or(rest).to_string();
        if !name.contains('/') {
            self.failed += 1;
        }
        self.pending.push(Failure {
            test_id: name,
            location: None,
            message: String::new(),
            frames: Vec::new(),
        });
        self.current = Some(self.pending.len() - 1);
        self.in_build_errors = false;
    }

    /// "FAIL\tpkg" or "ok  \tpkg" closes a package: its failures' files move under its folder.
    fn package_ended(&mut self, line: &str, ctx: &Context<'_>) {
        let pkg = line
            .split('\t')
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .next()
            .unwrap_or("");
        let dir = package_dir(pkg, ctx);
        for mut f in self.pending.drain(..) {
            if let Some(loc) = &mut f.location
                && !loc.file.contains('/')
                && !dir.is_empty()
            {
                loc.file = format!("{dir}/{}", loc.file);
            }
            if f.message.is_empty() {
                f.message = "the test failed".into();
            }
            self.parsed.failures.push(f);
        }
        self.current = None;
        self.in_build_errors = false;
    }

    /// "./add.go:4:13: undefined: c", relative to where go ran (the workspace root).
    fn build_error(&mut self, line: &str, ctx: &Context<'_>) {
        if let Some((loc, msg)) = line.split_once(": ")
            && let Some((file, n, col)) = split_location(loc)
        {
            self.parsed.failures.push(Failure {
                test_id: "build".into(),
                location: Some(ctx.location(file, n, col)),
                message: msg.trim().to_string(),
                frames: Vec::new(),
            });
        }
    }

    /// The failures left open and the counts (each build error counts as a failure).
    fn finish(mut self) -> Parsed {
        let mut parsed = self.parsed;
        parsed.failures.append(&mut self.pending);
        let build_errors = parsed
            .failures
            .iter()
            .filter(|f| f.test_id == "build")
            .count() as u32;
        parsed.failed = Some(self.failed + build_errors);
        parsed.passed = self.saw_pass_lines.then_some(self.passed);
        parsed
    }
}

/// A line of failure `f`'s block: its place and message ("    add_test.go:7: message"), a
/// panic's frame or message, or a more-indented line that continues the message.
fn failure_line(f: &mut Failure, line: &str, ctx: &Context<'_>) {
    let trimmed = line.trim();
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
