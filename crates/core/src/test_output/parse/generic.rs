//! The fallback for tools we do not know: every `path:line[:col]: message` line whose path
//! looks like a file of the workspace.

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
        if !ctx.in_workspace(file) || message.trim().is_empty() {
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
