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
