//! What each role is told, and how the reflector's JSON answer is read. Pure text building.

use serde::Deserialize;

use super::Run;
use crate::model::Message;

const CODER_SYSTEM: &str = "You are a careful software engineer working in the user's repository. \
Change the code to reach the goal. Answer only with edits, in this form, one block per change:\n\n\
path/to/file.ext\n<<<<<<< SEARCH\nthe exact lines to replace, copied from the file\n=======\nthe new lines\n>>>>>>> REPLACE\n\n\
Copy the SEARCH lines exactly, with enough context to be unique. To create a file, use an empty SEARCH. \
Do not explain; do not write anything else.";

const REFLECTOR_SYSTEM: &str = "You review why a change did not make the tests pass. \
Answer only with JSON: {\"task_id\": \"T1\", \"passed\": false, \"report\": \"what went wrong, one or two sentences\", \
\"next_step\": \"what to change next, one sentence\"}.";

const EXPLAIN_SYSTEM: &str = "You explain code to a developer, briefly and precisely, in Markdown.";

pub fn code(run: &Run) -> Vec<Message> {
    let mut user = format!("Goal: {}\n\n", run.goal);
    if run.tasks.len() > 1
        && let Some(t) = run.tasks.get(run.task)
    {
        user.push_str(&format!(
            "Do only task {} of {} now: {} {}\nDone when: {}\n\n",
            run.task + 1,
            run.tasks.len(),
            t.id,
            t.title,
            t.acceptance
        ));
    }
    if let Some(t) = &run.tests
        && !t.passed
    {
        user.push_str(&format!(
            "The tests fail ({} failed, {} passed). Test output:\n{}\n\n",
            t.failed_count, t.passed_count, t.report
        ));
    }
    user.push_str(&format!("Files:\n{}\n", run.context));
    let mut messages = vec![Message::system(CODER_SYSTEM), Message::user(user)];
    for f in &run.feedback {
        messages.push(Message::user(f.clone()));
    }
    messages
}

pub fn reflect(run: &Run) -> Vec<Message> {
    let report = run.tests.as_ref().map(|t| t.report.as_str()).unwrap_or("");
    vec![
        Message::system(REFLECTOR_SYSTEM),
        Message::user(format!(
            "Goal: {}\nIteration {} of {}.\nTest output after the last change:\n{report}",
            run.goal, run.iterations, run.budget.max_iterations
        )),
    ]
}

pub fn explain(run: &Run) -> Vec<Message> {
    vec![
        Message::system(EXPLAIN_SYSTEM),
        Message::user(format!("{}\n\nCode:\n{}", run.goal, run.context)),
    ]
}

/// The reflector's answer: `{"task_id", "passed", "report", "next_step"}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Reflection {
    #[serde(default)]
    pub task_id: String,
    #[serde(default)]
    pub passed: bool,
    pub report: String,
    pub next_step: String,
}

pub fn parse_reflection(text: &str) -> Result<Reflection, String> {
    let t = text
        .trim()
        .trim_start_matches("```json")
        .trim_start_matches("```")
        .trim_end_matches("```")
        .trim();
    serde_json::from_str(t).map_err(|e| e.to_string())
}

const INTENT_SYSTEM: &str = "Classify the developer's request. Answer only with JSON: \
{\"intent\": \"fix\" | \"edit\" | \"explain\" | \"test\"}: fix = make failing tests pass, \
edit = change or add code, explain = answer a question without changing code, test = only run the tests.";

pub fn intent(run: &Run) -> Vec<Message> {
    vec![
        Message::system(INTENT_SYSTEM),
        Message::user(run.goal.clone()),
    ]
}

/// The intent model's answer; anything unreadable is taken as an edit, the safe default
/// since every edit is shown for approval.
pub fn parse_intent(text: &str) -> super::Intent {
    use super::Intent;
    let lower = text.to_lowercase();
    let value = serde_json::from_str::<serde_json::Value>(strip_fence(text))
        .ok()
        .and_then(|v| v["intent"].as_str().map(str::to_lowercase))
        .unwrap_or(lower);
    if value.contains("explain") {
        Intent::Explain
    } else if value.contains("fix") {
        Intent::Fix
    } else if value.trim() == "test" {
        Intent::Test
    } else {
        Intent::Edit
    }
}

const PLANNER_SYSTEM: &str = "You split a developer's goal into small tasks done in order. Answer only with JSON: \
{\"plan_id\": \"plan_0001\", \"tasks\": [{\"id\": \"T1\", \"title\": \"...\", \"rationale\": \"...\", \
\"acceptance\": \"how to tell it is done\", \"artifacts\": [\"paths\"]}]}. At most 8 tasks.";

pub fn plan(run: &Run, parse_error: Option<&str>) -> Vec<Message> {
    let mut messages = vec![
        Message::system(PLANNER_SYSTEM),
        Message::user(format!("Goal: {}\n\nFiles:\n{}", run.goal, run.context)),
    ];
    if let Some(e) = parse_error {
        messages.push(Message::user(format!(
            "Your plan could not be read ({e}). Answer with the JSON only."
        )));
    }
    messages
}

#[derive(Debug, Deserialize)]
struct Plan {
    #[serde(default)]
    #[allow(dead_code)]
    plan_id: String,
    tasks: Vec<super::Task>,
}

/// The planner's answer: tasks in execution order, with unique ids, at most 8.
pub fn parse_plan(text: &str) -> Result<Vec<super::Task>, String> {
    let plan: Plan = serde_json::from_str(strip_fence(text)).map_err(|e| e.to_string())?;
    if plan.tasks.is_empty() {
        return Err("the plan has no tasks".into());
    }
    let mut seen = std::collections::HashSet::new();
    if !plan.tasks.iter().all(|t| seen.insert(t.id.clone())) {
        return Err("two tasks share an id".into());
    }
    Ok(plan.tasks.into_iter().take(8).collect())
}

const EVALUATOR_SYSTEM: &str = "You grade a finished change. Answer only with JSON: \
{\"score\": 1-5, \"reason\": \"one line\"}.";

pub fn evaluate(run: &Run) -> Vec<Message> {
    vec![
        Message::system(EVALUATOR_SYSTEM),
        Message::user(format!(
            "Goal: {}\nIterations: {}\nFiles changed: {}\nTests: {}",
            run.goal,
            run.iterations,
            run.files_changed.join(", "),
            run.tests
                .as_ref()
                .map_or("not run".to_string(), |t| format!(
                    "{} passed, {} failed",
                    t.passed_count, t.failed_count
                ))
        )),
    ]
}

/// The evaluator's `{"score", "reason"}`, the score kept within 1 to 5.
pub fn parse_evaluation(text: &str) -> Result<(u8, String), String> {
    let v: serde_json::Value =
        serde_json::from_str(strip_fence(text)).map_err(|e| e.to_string())?;
    let score = v["score"].as_u64().ok_or("no score")?.clamp(1, 5) as u8;
    let reason = v["reason"]
        .as_str()
        .unwrap_or("")
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    Ok((score, reason))
}

fn strip_fence(text: &str) -> &str {
    text.trim()
        .trim_start_matches("```json")
        .trim_start_matches("```")
        .trim_end_matches("```")
        .trim()
}
