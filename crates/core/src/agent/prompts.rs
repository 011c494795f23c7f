//! What each role is told, and how the roles' answers (intent, plan, reflection, evaluation)
//! are read. Pure text building: the built-in prompts are compiled in from `config/prompts/`
//! and overrides are handed in (`Prompts::set`); reading override files is the runtime's.

use serde::Deserialize;

use super::Run;
use crate::conversation::Message;

/// The role prompts, by name: the defaults in `config/prompts/*.md`, overridden by files of
/// the same name in the user's and a trusted workspace's prompt folders.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompts(std::collections::BTreeMap<&'static str, String>);

/// The built-in prompts, compiled in from `config/prompts/`.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("coder", include_str!("../../../../config/prompts/coder.md")),
    (
        "reflector",
        include_str!("../../../../config/prompts/reflector.md"),
    ),
    (
        "explain",
        include_str!("../../../../config/prompts/explain.md"),
    ),
    (
        "intent",
        include_str!("../../../../config/prompts/intent.md"),
    ),
    (
        "planner",
        include_str!("../../../../config/prompts/planner.md"),
    ),
    (
        "evaluator",
        include_str!("../../../../config/prompts/evaluator.md"),
    ),
    (
        "summarizer",
        include_str!("../../../../config/prompts/summarizer.md"),
    ),
    ("plan", include_str!("../../../../config/prompts/plan.md")),
    (
        "review",
        include_str!("../../../../config/prompts/review.md"),
    ),
    (
        "reviewer",
        include_str!("../../../../config/prompts/reviewer.md"),
    ),
    (
        "tester",
        include_str!("../../../../config/prompts/tester.md"),
    ),
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

/// The system prompt of the run's agent for the coder's turn.
fn coder_system(run: &Run) -> String {
    run.agent()
        .prompt
        .clone()
        .unwrap_or_else(|| run.prompts.get("coder").to_string())
}

/// The coder's prompt: the system prompt, then the fixed context (goal, task, failures, the
/// context within the first prompt's budget), then what it must hear this turn (refusals,
/// failures, advice). With the files it shows whole, for `context::lean`.
pub fn code(run: &Run) -> (Vec<Message>, Vec<(&str, &str)>) {
    let system = coder_system(run);
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
    user.push_str(&run.memory);
    let (files, shown) = fixed_context(run, &run.agent().tools, system.len() + user.len());
    user.push_str(&files);
    let mut messages = vec![Message::system(system), Message::user(user)];
    for f in &run.feedback {
        messages.push(Message::user(f.clone()));
    }
    (messages, shown)
}

/// "Files:" and the context, within what is left of the first prompt's budget after `used`
/// bytes when the turn has tools to read the rest with (without tools, the runtime's
/// agent.context_bytes is the only limit), and the files it shows whole.
pub(super) fn fixed_context<'r>(
    run: &'r Run,
    tools: &[String],
    used: usize,
) -> (String, Vec<(&'r str, &'r str)>) {
    const HEAD: &str = "Files:\n";
    let lean =
        run.budget().first_prompt_bytes > 0 && run.budget().max_tool_steps > 0 && !tools.is_empty();
    let room = if lean {
        run.budget()
            .first_prompt_bytes
            .saturating_sub(used + HEAD.len() + 1)
    } else {
        usize::MAX
    };
    let rendered = run.context.render(room);
    (format!("{HEAD}{}\n", rendered.text), rendered.files)
}

pub fn reflect(run: &Run) -> Vec<Message> {
    let report = run.tests.as_ref().map(|t| t.report.as_str()).unwrap_or("");
    vec![
        Message::system(run.prompts.get("reflector")),
        Message::user(format!(
            "Goal: {}\nIteration {} of {}.\nTest output after the last change:\n{report}\n{}",
            run.goal,
            run.iterations,
            run.budget().max_iterations,
            run.memory
        )),
    ]
}

/// An answer in Markdown: an explanation, or the plan or review agent's answer.
pub fn explain(run: &Run) -> (Vec<Message>, Vec<(&str, &str)>) {
    let system = match (&run.agent().prompt, run.agent().kind) {
        (Some(p), _) => p.clone(),
        (None, super::AgentKind::Plan) => run.prompts.get("plan").to_string(),
        (None, super::AgentKind::Review) => run.prompts.get("review").to_string(),
        (None, super::AgentKind::Build) => run.prompts.get("explain").to_string(),
    };
    let head = format!("{}\n\nCode:\n", run.goal);
    let tools = run.agent().reading_tools();
    let (code, shown) = fixed_context(run, &tools, system.len() + head.len());
    let code = code.strip_prefix("Files:\n").unwrap_or(&code);
    let messages = vec![
        Message::system(system),
        Message::user(format!("{head}{code}")),
    ];
    (messages, shown)
}

/// The summariser's prompt: the turn's tool calls and results so far, to be condensed.
pub fn summarize(run: &Run) -> Vec<Message> {
    let mut transcript = String::new();
    for m in run.turn.messages() {
        for c in &m.tool_calls {
            transcript.push_str(&format!("call {}({})\n", c.name, c.arguments));
        }
        if !m.content.is_empty() {
            transcript.push_str(&m.content);
            transcript.push('\n');
        }
    }
    vec![
        Message::system(run.prompts.get("summarizer")),
        Message::user(format!(
            "Goal: {}\n\nTool calls and results so far:\n{transcript}",
            run.goal
        )),
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

/// Why a role's JSON answer (the reflector's, the planner's, the evaluator's) cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("the plan has no tasks")]
    NoTasks,
    #[error("two tasks share an id")]
    SharedTaskId,
    #[error("no score")]
    NoScore,
}

pub fn parse_reflection(text: &str) -> Result<Reflection, AnswerError> {
    Ok(serde_json::from_str(strip_fence(text))?)
}

pub fn intent(run: &Run) -> Vec<Message> {
    vec![
        Message::system(run.prompts.get("intent")),
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

pub fn plan<'r>(
    run: &'r Run,
    parse_error: Option<&str>,
) -> (Vec<Message>, Vec<(&'r str, &'r str)>) {
    let system = run.prompts.get("planner");
    let head = format!("Goal: {}\n\n{}", run.goal, run.memory);
    let tools = run.agent().reading_tools();
    let (files, shown) = fixed_context(run, &tools, system.len() + head.len());
    let mut messages = vec![
        Message::system(system),
        Message::user(format!("{head}{files}")),
    ];
    if let Some(e) = parse_error {
        messages.push(Message::user(format!(
            "Your plan could not be read ({e}). Answer with the JSON only."
        )));
    }
    (messages, shown)
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
    let plan: Plan = serde_json::from_str(strip_fence(text))?;
    if plan.tasks.is_empty() {
        return Err(AnswerError::NoTasks);
    }
    let mut seen = std::collections::HashSet::new();
    if !plan.tasks.iter().all(|t| seen.insert(t.id.clone())) {
        return Err(AnswerError::SharedTaskId);
    }
    Ok(plan.tasks.into_iter().take(8).collect())
}

pub fn evaluate(run: &Run) -> Vec<Message> {
    vec![
        Message::system(run.prompts.get("evaluator")),
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

/// The reviewer's prompt: the run's diff under review, the goal and the test result.
pub fn review(run: &Run) -> Vec<Message> {
    let tests = run.tests.as_ref().map_or("not run".to_string(), |t| {
        format!("{} passed, {} failed", t.passed_count, t.failed_count)
    });
    let diff = run.reviewing.diff();
    super::review::prompt(run.prompts.get("reviewer"), &run.goal, &tests, diff)
}

/// The evaluator's `{"score", "complete", "reason"}`, the score kept within 1 to 5; a change
/// is complete unless the evaluator says plainly that it is not.
pub fn parse_evaluation(text: &str) -> Result<(u8, String, bool), AnswerError> {
    let v: serde_json::Value = serde_json::from_str(strip_fence(text))?;
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

fn strip_fence(text: &str) -> &str {
    text.trim()
        .trim_start_matches("```json")
        .trim_start_matches("```")
        .trim_end_matches("```")
        .trim()
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
