//! The fallback for tools we do not know: every `path:line[:col]: message` line whose path
//! looks like a file of the workspace, unless it is a warning.

use super::types::{Context, Failure, split_location};

pub fn parse(output: &str, ctx: &Context<'_>) -> Vec<Failure> {
    let mut failures = Vec::new();
    for line in output.lines() {
        let t = line.trim();
        let Some((loc, message)) = t.split_once(": ") else {
            continue;
        };
        let Some((file, n, col)) = split_location(loc) else {
            continue;
        };
        if !ctx.in_workspace(file) || message.trim().is_empty() || is_warning(message) {
            continue;
        }
        failures.push(Failure {
            test_id: format!("{}:{n}", ctx.relativize(file)),
            location: Some(ctx.location(file, n, col)),
            message: message.trim().to_string(),
            frames: Vec::new(),
        });
    }
    failures
}

/// A compiler's or a runtime's warning (`warning: unused variable`, `DeprecationWarning: ...`),
/// which says nothing failed.
fn is_warning(message: &str) -> bool {
    let kind = message.trim_start().split(':').next().unwrap_or("");
    kind.eq_ignore_ascii_case("warning")
        || (kind.ends_with("Warning")
            && kind.chars().all(|c| c.is_ascii_alphanumeric() || c == '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_not_failures() {
        let ctx = Context {
            root: std::path::Path::new("/ws"),
            go_module: None,
        };
        let out = "src/a.c:3:5: warning: unused variable 'x'\n\
                   pkg/more.py:1653: DeprecationWarning: zip_equal will be removed\n\
                   src/b.c:9:1: error: expected ';'\n";
        let found = parse(out, &ctx);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].test_id, "src/b.c:9");
    }
}
