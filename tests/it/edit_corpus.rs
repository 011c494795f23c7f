//! The edit engine's fixture corpus: every case in tests/fixtures/edits/*.txt gives files
//! before, a model's answer, and the files after or the expected refusal. The format is
//! described at the top of formats.txt.

use std::collections::BTreeMap;
use std::path::Path;

use agent_ls_core::edit::{self, EditStatus, FileText, Limits, PlanOutcome};

#[derive(Default, Debug)]
struct Case {
    name: String,
    files: BTreeMap<String, String>,
    answer: String,
    expect: BTreeMap<String, String>,
    rules: Vec<(usize, String)>,
    statuses: Vec<(usize, String)>,
    refused: Vec<(usize, String)>,
    parse_error: Option<String>,
}

fn section_text(lines: &[&str], flags: &[&str]) -> String {
    if flags.contains(&"large") {
        return "x\n".repeat(600_000);
    }
    let mut end = lines.len();
    while end > 0 && lines[end - 1].is_empty() {
        end -= 1;
    }
    if end == 0 {
        return String::new();
    }
    let eol = if flags.contains(&"crlf") {
        "\r\n"
    } else {
        "\n"
    };
    let mut text = lines[..end].join(eol);
    if !flags.contains(&"noeol") {
        text.push_str(eol);
    }
    text
}

fn parse_cases(source: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    let lines: Vec<&str> = source.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = lines[i].strip_prefix("%%%% ") else {
            i += 1;
            continue;
        };
        let mut case = Case {
            name: name.to_string(),
            ..Case::default()
        };
        i += 1;
        while i < lines.len() && !lines[i].starts_with("%%%% ") {
            let Some(directive) = lines[i].strip_prefix("%% ") else {
                i += 1;
                continue;
            };
            let body_start = i + 1;
            let mut body_end = body_start;
            while body_end < lines.len()
                && !lines[body_end].starts_with("%% ")
                && !lines[body_end].starts_with("%%%% ")
            {
                body_end += 1;
            }
            let body = &lines[body_start..body_end];
            let words: Vec<&str> = directive.split_whitespace().collect();
            let rest_after = |n: usize| {
                directive
                    .splitn(n + 1, ' ')
                    .nth(n)
                    .unwrap_or("")
                    .to_string()
            };
            match words[0] {
                "file" => {
                    case.files
                        .insert(words[1].into(), section_text(body, &words[2..]));
                }
                "expect" => {
                    case.expect
                        .insert(words[1].into(), section_text(body, &words[2..]));
                }
                "edit" => case.answer = section_text(body, &[]),
                "rule" => case
                    .rules
                    .push((words[1].parse().unwrap(), words[2].into())),
                "status" => case
                    .statuses
                    .push((words[1].parse().unwrap(), words[2].into())),
                "refused" => case
                    .refused
                    .push((words[1].parse().unwrap(), rest_after(2))),
                "parse-error" => case.parse_error = Some(rest_after(1)),
                other => panic!("unknown directive {other} in case {}", case.name),
            }
            i = body_end;
        }
        cases.push(case);
    }
    cases
}

fn status_name(s: &EditStatus) -> &'static str {
    match s {
        EditStatus::Applied { .. } => "applied",
        EditStatus::AlreadyApplied => "already_applied",
        EditStatus::Refused { .. } => "refused",
    }
}

fn check(case: &Case) -> Result<(), String> {
    let plan = match (edit::parse_plan(&case.answer), &case.parse_error) {
        (Err(e), Some(want)) if e.to_string().contains(want.as_str()) => return Ok(()),
        (Err(e), _) => return Err(format!("parse error: {e}")),
        (Ok(p), Some(want)) => {
            return Err(format!(
                "expected a parse error containing {want:?}, parsed {p:?}"
            ));
        }
        (Ok(p), None) => p,
    };
    let outcome = edit::apply_plan(
        &plan,
        Path::new("/ws"),
        &Limits::default(),
        |path| match case.files.get(path) {
            Some(t) => FileText::Text(t.clone()),
            None => FileText::Missing,
        },
    );
    check_reports(case, &outcome)?;
    check_files(case, &outcome)
}

/// Each edit's report: refused with the reason the case names, else applied, with the status
/// and the locating rule the case expects.
fn check_reports(case: &Case, outcome: &PlanOutcome) -> Result<(), String> {
    let report = |i: usize| {
        outcome
            .reports
            .iter()
            .find(|r| r.index == i)
            .ok_or_else(|| format!("no report for edit {i}"))
    };
    for (i, want) in &case.refused {
        match &report(*i)?.status {
            EditStatus::Refused { reason, closest } => {
                let full = format!("{reason} {closest:?}");
                if !full.contains(want.as_str()) {
                    return Err(format!(
                        "edit {i} refused with {reason:?}, expected it to contain {want:?}"
                    ));
                }
            }
            other => {
                return Err(format!(
                    "edit {i} should be refused ({want}), got {other:?}"
                ));
            }
        }
    }
    if case.refused.is_empty()
        && let Some(r) = outcome.refused().next()
    {
        return Err(format!("edit {} was refused: {:?}", r.index, r.status));
    }
    for (i, want) in &case.statuses {
        let got = status_name(&report(*i)?.status);
        if got != want {
            return Err(format!("edit {i} status {got}, expected {want}"));
        }
    }
    for (i, want) in &case.rules {
        match &report(*i)?.status {
            EditStatus::Applied { rule, .. } => {
                let got = serde_json::to_value(rule).unwrap();
                if got != want.as_str() {
                    return Err(format!("edit {i} located by {got}, expected {want}"));
                }
            }
            other => return Err(format!("edit {i} not applied: {other:?}")),
        }
    }
    Ok(())
}

/// The files after the plan are the case's expected ones, and each change's inverse
/// restores the file it changed exactly.
fn check_files(case: &Case, outcome: &PlanOutcome) -> Result<(), String> {
    let mut after = case.files.clone();
    for change in &outcome.changes {
        // The inverse must restore the original exactly.
        let (restored, _) = edit::apply::apply_to_string(&change.new_text, &change.inverse)
            .map_err(|e| format!("{e:?}"))?;
        if restored != change.original.clone().unwrap_or_default() {
            return Err(format!("inverse of {} does not restore it", change.path));
        }
        after.insert(change.path.clone(), change.new_text.clone());
    }
    for (path, text) in &after {
        let want = case.expect.get(path).or_else(|| case.files.get(path));
        if want != Some(text) {
            return Err(format!(
                "{path}:\n--- got\n{text:?}\n--- expected\n{want:?}"
            ));
        }
    }
    for path in case.expect.keys() {
        if !after.contains_key(path) {
            return Err(format!("{path} was not created"));
        }
    }
    Ok(())
}

#[test]
fn every_fixture_case_holds() {
    let mut count = 0;
    let mut failures = Vec::new();
    let mut dir: Vec<_> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/edits"))
            .unwrap()
            .flatten()
            .collect();
    dir.sort_by_key(|e| e.path());
    for entry in dir {
        let source = std::fs::read_to_string(entry.path()).unwrap();
        for case in parse_cases(&source) {
            count += 1;
            if let Err(e) = check(&case) {
                failures.push(format!("{} / {}: {e}", entry.path().display(), case.name));
            }
        }
    }
    assert!(count >= 60, "only {count} cases");
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
