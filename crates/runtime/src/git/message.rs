//! What a run's commit message and pull request say: the run's report read back from its
//! journal (goal, plan, test results before and after, evaluation), a commit message the
//! model writes in the Conventional Commits form, and the plain message used when there is no
//! model, or it fails, is slow or answers out of form.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::model::{Message, Models, Request, Role};
use agent_ls_core::agent::review::ReviewResult;

/// How long the model may take to write a commit message before the plain one is used.
const MODEL_WAIT: Duration = Duration::from_secs(30);
/// The most bytes of the run's diff the model is shown.
const DIFF_BYTES: usize = 8_000;
/// The longest subject line taken from the model.
const MAX_SUBJECT: usize = 100;

/// A test run's counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tests {
    pub state: String,
    pub passed: Option<u32>,
    pub failed: Option<u32>,
}

impl std::fmt::Display for Tests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.passed, self.failed) {
            (Some(p), Some(x)) => write!(f, "{} ({p} passed, {x} failed)", self.state),
            _ => write!(f, "{}", self.state),
        }
    }
}

/// What a run did, from its journal.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    pub run_id: String,
    pub goal: String,
    /// The plan's tasks, "T1 title".
    pub plan: Vec<String>,
    /// The first test run (the baseline) and the last.
    pub tests_before: Option<Tests>,
    pub tests_after: Option<Tests>,
    /// The evaluator's score (1 to 5) and reason.
    pub evaluation: Option<(u64, String)>,
    /// The reviewer's last word on the change (docs/review.md): its summary and findings.
    pub review: Option<String>,
    pub files: Vec<String>,
}

/// The run's report, from its journal in `root` (empty but for the id when it has none).
pub fn report(root: &Path, run_id: &str, files: &[String]) -> RunReport {
    let mut r = RunReport {
        run_id: run_id.to_string(),
        files: files.to_vec(),
        ..RunReport::default()
    };
    let Some(path) = crate::journal::path_of(root, run_id) else {
        return r;
    };
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut tests = Vec::new();
    for line in crate::journal::read_lines(&text, &path) {
        let data = &line["data"];
        match line["type"].as_str().unwrap_or_default() {
            "intent" if r.goal.is_empty() => {
                r.goal = data["goal"].as_str().unwrap_or_default().to_string();
            }
            "plan" => {
                r.plan = data["tasks"]
                    .as_array()
                    .map(|ts| ts.iter().map(task_line).collect())
                    .unwrap_or_default();
            }
            "test_result" => tests.push(Tests {
                state: data["state"].as_str().unwrap_or("unknown").to_string(),
                passed: data["passed"].as_u64().map(|v| v as u32),
                failed: data["failed"].as_u64().map(|v| v as u32),
            }),
            // The last review is the one the change ended with.
            "review" => {
                r.review = serde_json::from_value::<ReviewResult>(data.clone())
                    .ok()
                    .map(|review| review.report());
            }
            "evaluation" => {
                r.evaluation = Some((
                    data["score"].as_u64().unwrap_or(0),
                    data["reason"].as_str().unwrap_or_default().to_string(),
                ));
            }
            _ => {}
        }
    }
    r.tests_before = tests.first().cloned();
    r.tests_after = tests.last().cloned().filter(|_| tests.len() > 1);
    r
}

fn task_line(t: &Value) -> String {
    format!(
        "{} {}",
        t["id"].as_str().unwrap_or_default(),
        t["title"].as_str().unwrap_or_default()
    )
    .trim()
    .to_string()
}

/// The Conventional Commits type a goal reads as.
fn kind_of(goal: &str) -> &'static str {
    let first = goal
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_lowercase();
    match first.trim_end_matches(|c: char| !c.is_alphanumeric()) {
        "fix" | "fixes" | "repair" | "correct" | "resolve" => "fix",
        "add" | "create" | "implement" | "support" | "introduce" | "new" => "feat",
        "document" | "docs" | "doc" | "explain" => "docs",
        "test" | "tests" | "cover" => "test",
        "refactor" | "rename" | "simplify" | "extract" | "move" | "clean" => "refactor",
        "speed" | "optimize" | "optimise" => "perf",
        _ => "chore",
    }
}

/// The body lines every message carries, whoever wrote the rest: the goal and the tests.
fn facts(r: &RunReport) -> String {
    let mut body = format!("Goal: {}\n", r.goal.trim());
    match (&r.tests_before, &r.tests_after) {
        (Some(b), Some(a)) => body.push_str(&format!("Tests: {a}; before the run: {b}\n")),
        (Some(only), None) | (None, Some(only)) => body.push_str(&format!("Tests: {only}\n")),
        (None, None) => body.push_str("Tests: not run\n"),
    }
    body
}

/// The plain message: a subject made from the goal, and the goal, tests and files.
pub fn fallback(r: &RunReport) -> String {
    let goal = agent_ls_core::agent::one_line(r.goal.trim());
    let mut summary: String = goal.chars().take(64).collect();
    if summary.chars().count() < goal.chars().count() {
        summary.push('…');
    }
    if summary.is_empty() {
        summary = format!("agent-ls run {}", r.run_id);
    }
    let mut message = format!("{}: {summary}\n\n{}", kind_of(&r.goal), facts(r));
    if !r.files.is_empty() {
        message.push_str(&format!("Files: {}\n", r.files.join(", ")));
    }
    message
}

/// A commit message written by the model (the summarizer role), the goal and tests' lines
/// added to its body; the plain one when there is no model or its answer will not do.
pub async fn write(models: &Models, r: &RunReport, diff: &[u8]) -> String {
    let cancel = CancellationToken::new();
    let mut shown = String::from_utf8_lossy(&diff[..diff.len().min(DIFF_BYTES)]).into_owned();
    if diff.len() > DIFF_BYTES {
        shown.push_str("\n[the rest of the diff is left out]\n");
    }
    let request = Request {
        messages: vec![
            Message::system(
                "Write the git commit message for the change below, in the Conventional Commits form: a subject line `type(scope): summary` (type one of feat, fix, docs, test, refactor, perf, chore; the scope optional) of at most 72 characters, a blank line, then one to three short lines saying what changed and why. Answer with the message only: no code fences, no quotes.",
            ),
            Message::user(format!(
                "Goal: {}\nFiles: {}\n{}\nDiff:\n{shown}",
                r.goal,
                r.files.join(", "),
                facts(r)
            )),
        ],
        tools: Vec::new(),
        tool_choice: None,
        json_schema: None,
        max_tokens: Some(300),
        ..Request::default()
    };
    let call = models.call(Role::Summarizer, &request, &cancel, None);
    match tokio::time::timeout(MODEL_WAIT, call).await {
        Ok(Ok(answer)) => match from_model(&answer.text, r) {
            Some(m) => m,
            None => {
                tracing::info!("the model's commit message is not in form; the plain one is used");
                fallback(r)
            }
        },
        Ok(Err(e)) => {
            tracing::info!("no commit message from the model ({e}); the plain one is used");
            fallback(r)
        }
        Err(_) => {
            tracing::info!("the model was slow to write the commit message; the plain one is used");
            fallback(r)
        }
    }
}

/// The model's answer as a message, when its subject is a Conventional Commits one.
fn from_model(text: &str, r: &RunReport) -> Option<String> {
    let text = text.trim().trim_matches('`').trim();
    let mut lines = text.lines();
    let subject = lines.next()?.trim().to_string();
    let (head, summary) = subject.split_once(": ")?;
    let kind = head.split('(').next()?.trim_end_matches('!');
    let form = !kind.is_empty()
        && kind.chars().all(|c| c.is_ascii_lowercase())
        && !summary.trim().is_empty()
        && subject.chars().count() <= MAX_SUBJECT;
    if !form {
        return None;
    }
    let rest: Vec<&str> = lines.collect();
    let body = rest.join("\n").trim().to_string();
    let mut message = format!("{subject}\n\n");
    if !body.is_empty() {
        message.push_str(&body);
        message.push_str("\n\n");
    }
    message.push_str(&facts(r));
    Some(message)
}

/// The pull request's body: the goal, the plan, the tests before and after, the evaluation.
pub fn pr_body(r: &RunReport, commit: &str) -> String {
    let mut b = format!("## Goal\n\n{}\n", r.goal.trim());
    if !r.plan.is_empty() {
        b.push_str("\n## Plan\n\n");
        for t in &r.plan {
            b.push_str(&format!("- {t}\n"));
        }
    }
    b.push_str("\n## Tests\n\n");
    let or_none = |t: &Option<Tests>| t.as_ref().map_or("not run".to_string(), Tests::to_string);
    b.push_str(&format!("- before: {}\n", or_none(&r.tests_before)));
    b.push_str(&format!("- after: {}\n", or_none(&r.tests_after)));
    if let Some((score, reason)) = &r.evaluation {
        b.push_str(&format!(
            "\n## Evaluation\n\n{score}/5: {}\n",
            reason.trim()
        ));
    }
    if let Some(review) = &r.review {
        b.push_str(&format!("\n## Review\n\n```\n{}\n```\n", review.trim()));
    }
    if !r.files.is_empty() {
        b.push_str(&format!("\n## Files\n\n{}\n", r.files.join(", ")));
    }
    b.push_str(&format!(
        "\nMade by agent-ls (run {}, commit {commit}).\n",
        r.run_id
    ));
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> RunReport {
        RunReport {
            run_id: "r1".into(),
            goal: "fix the failing tests".into(),
            tests_before: Some(Tests {
                state: "failed".into(),
                passed: Some(1),
                failed: Some(1),
            }),
            tests_after: Some(Tests {
                state: "passed".into(),
                passed: Some(2),
                failed: Some(0),
            }),
            files: vec!["calc.py".into()],
            ..RunReport::default()
        }
    }

    #[test]
    fn the_plain_message_is_conventional_and_names_the_goal_and_tests() {
        let m = fallback(&report());
        assert!(m.starts_with("fix: fix the failing tests\n\n"), "{m}");
        assert!(m.contains("Goal: fix the failing tests"), "{m}");
        assert!(
            m.contains(
                "Tests: passed (2 passed, 0 failed); before the run: failed (1 passed, 1 failed)"
            ),
            "{m}"
        );
    }

    #[test]
    fn a_model_answer_out_of_form_is_not_taken() {
        assert!(from_model("I fixed the tests.", &report()).is_none());
        let m = from_model(
            "```\nfix(calc): add adds\n\nadd returned a - b\n```",
            &report(),
        )
        .expect("in form");
        assert!(
            m.starts_with("fix(calc): add adds\n\nadd returned a - b\n\nGoal:"),
            "{m}"
        );
    }
}
