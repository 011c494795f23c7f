//! What each role is told, and how the roles' answers (intent, plan, reflection, evaluation)
//! are read. Pure text: the built-in prompts are compiled in from `crates/core/prompts/` and
//! overrides are handed in (`Prompts::set`); reading override files is the runtime's. The
//! messages a run sends with them are built in `messages.rs`.

use serde::Deserialize;

/// The role prompts, by name: the defaults in `crates/core/prompts/*.md`, overridden by files of
/// the same name in the user's and a trusted workspace's prompt folders.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompts(std::collections::BTreeMap<&'static str, String>);

/// The built-in prompts, compiled in from `crates/core/prompts/`.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("coder", include_str!("../../prompts/coder.md")),
    ("reflector", include_str!("../../prompts/reflector.md")),
    ("explain", include_str!("../../prompts/explain.md")),
    ("intent", include_str!("../../prompts/intent.md")),
    ("planner", include_str!("../../prompts/planner.md")),
    ("evaluator", include_str!("../../prompts/evaluator.md")),
    ("summarizer", include_str!("../../prompts/summarizer.md")),
    ("plan", include_str!("../../prompts/plan.md")),
    ("review", include_str!("../../prompts/review.md")),
    ("reviewer", include_str!("../../prompts/reviewer.md")),
    ("tester", include_str!("../../prompts/tester.md")),
];

impl Default for Prompts {
    fn default() -> Self {
        Prompts(
            BUILT_IN
                .iter()
                .map(|(k, v)| (*k, v.trim().to_string()))
                .collect(),
        )
    }
}

impl Prompts {
    /// Puts `text` in place of the prompt called `name`, if that is one of the built-in names
    /// (the file loader in the runtime reads `NAME.md` overrides and hands them in here).
    /// Returns false for a name no role uses.
    pub fn set(&mut self, name: &str, text: &str) -> bool {
        match BUILT_IN.iter().find(|(k, _)| *k == name) {
            Some((k, _)) => {
                self.0.insert(k, text.trim().to_string());
                true
            }
            None => false,
        }
    }

    pub fn get(&self, name: &str) -> &str {
        self.0.get(name).map_or("", String::as_str)
    }
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

/// Why a role's JSON answer (the reflector's, the planner's, the evaluator's) cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Unreadable(#[from] super::json_answer::JsonAnswerError),
    #[error("the plan has no tasks")]
    NoTasks,
    #[error("two tasks share an id")]
    SharedTaskId,
    #[error("no score")]
    NoScore,
}

pub fn parse_reflection(text: &str) -> Result<Reflection, AnswerError> {
    Ok(serde_json::from_value(super::json_answer::object(text)?)?)
}

/// The intent model's answer; anything unreadable is taken as an edit, the safe default
/// since every edit is shown for approval.
pub fn parse_intent(text: &str) -> super::Intent {
    use super::Intent;
    let lower = text.to_lowercase();
    let value = super::json_answer::object(text)
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

#[derive(Debug, Deserialize)]
struct Plan {
    #[serde(default)]
    #[allow(dead_code)]
    plan_id: String,
    tasks: Vec<super::Task>,
}

/// The planner's answer: tasks in execution order, with unique ids, at most 8.
pub fn parse_plan(text: &str) -> Result<Vec<super::Task>, AnswerError> {
    let plan: Plan = serde_json::from_value(super::json_answer::object(text)?)?;
    if plan.tasks.is_empty() {
        return Err(AnswerError::NoTasks);
    }
    let mut seen = std::collections::HashSet::new();
    if !plan.tasks.iter().all(|t| seen.insert(t.id.clone())) {
        return Err(AnswerError::SharedTaskId);
    }
    Ok(plan.tasks.into_iter().take(8).collect())
}

/// The evaluator's `{"score", "complete", "reason"}`, the score kept within 1 to 5; a change
/// is complete unless the evaluator says plainly that it is not.
pub fn parse_evaluation(text: &str) -> Result<(u8, String, bool), AnswerError> {
    let v = super::json_answer::object(text)?;
    let score = v["score"].as_u64().ok_or(AnswerError::NoScore)?.clamp(1, 5) as u8;
    let reason = v["reason"]
        .as_str()
        .unwrap_or("")
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    let complete = v["complete"].as_bool().unwrap_or(true);
    Ok((score, reason, complete))
}

/// One line for a person about a role's answer that is data (a plan, a reflection, an
/// evaluation), shown in its place on a terminal or in a chat where the raw JSON would be
/// noise; `None` for the roles whose answer is shown as it streams (the coder) or not at all.
pub fn role_summary(role: crate::conversation::Role, text: &str) -> Option<String> {
    use crate::conversation::Role;
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let unread = |who: &str| format!("the {who} answered in a form agent-ls could not read");
    Some(match role {
        Role::Planner => match parse_plan(text) {
            Ok(tasks) => {
                let titles: Vec<String> = tasks
                    .iter()
                    .map(|t| format!("{} {}", t.id, flat(&t.title)))
                    .collect();
                format!(
                    "the planner split the goal into {} task(s): {}",
                    tasks.len(),
                    titles.join("; ")
                )
            }
            Err(_) => unread("planner"),
        },
        Role::Reflector => match parse_reflection(text) {
            Ok(r) if r.passed => format!(
                "the reflector finds {} done: {}",
                r.task_id,
                flat(&r.report)
            ),
            Ok(r) => format!(
                "the reflector finds {} not done: {}; next: {}",
                r.task_id,
                flat(&r.report).trim_end_matches(['.', ';']),
                flat(&r.next_step)
            ),
            Err(_) => unread("reflector"),
        },
        Role::Evaluator => match parse_evaluation(text) {
            Ok((score, reason, _)) => format!("the evaluator gives {score}/5: {}", flat(&reason)),
            Err(_) => unread("evaluator"),
        },
        // The review is reported once it is checked (`Effect::Reviewed`), with its findings.
        // The review is reported once it is checked, the tester's tests once they are tried.
        Role::Coder | Role::Intent | Role::Summarizer | Role::Reviewer | Role::Tester => {
            return None;
        }
    })
}
