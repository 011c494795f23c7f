//! The agent loop as a pure state machine: `step(&mut Run, Event) -> Vec<Effect>`. The shell
//! (`drive.rs`) performs the effects (model calls, locating edits, approval, applying, test
//! runs) and feeds their results back as events. No IO, no clocks, no LSP types.

pub mod agents;
pub mod prompts;
pub mod window;

pub use agents::{AgentKind, AgentProfile};

use serde::{Deserialize, Serialize};

use crate::conversation::Role;
use crate::edit::{EditPlan, FileChange, PlanOutcome};

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Intent {
    /// Make the failing tests pass.
    Fix,
    /// Change the code as the goal says.
    Edit,
    /// Answer a question about the code; nothing is edited.
    Explain,
    /// Run the tests and report.
    Test,
}

/// One task of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: String,
    pub title: String,
    #[serde(default)]
    pub rationale: String,
    #[serde(default)]
    pub acceptance: String,
    #[serde(default)]
    pub artifacts: Vec<String>,
}

/// Classifies a goal by its obvious words; `None` when they do not tell, and the intent
/// model decides.
pub fn classify(goal: &str) -> Option<Intent> {
    let g = goal.to_lowercase();
    let has = |w: &str| g.contains(w);
    let word = |w: &str| g.split(|c: char| !c.is_alphanumeric()).any(|x| x == w);
    if has("explain")
        || has("what does")
        || has("why does")
        || has("how does")
        || g.trim_end().ends_with('?')
    {
        Some(Intent::Explain)
    } else if has("run the tests") || has("run tests") || word("rerun") {
        Some(Intent::Test)
    } else if word("fix") || has("failing") || has("make the tests pass") || has("make tests pass")
    {
        Some(Intent::Fix)
    } else if [
        "add",
        "implement",
        "create",
        "write",
        "change",
        "rename",
        "refactor",
        "remove",
        "delete",
        "update",
        "replace",
        "move",
        "extract",
        "convert",
        "make",
        "use",
        "support",
        "handle",
        "document",
    ]
    .iter()
    .any(|w| word(w))
    {
        Some(Intent::Edit)
    } else {
        None
    }
}

/// What a free-form goal asks for: the agent loop, or one of the commands the palette also
/// has, recognised by their obvious words so no model call is spent on them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Agent,
    /// "undo", "undo step 3", "revert the last change".
    Undo(Option<u64>),
    Redo,
    Status,
    /// "run `make lint`", "run cargo clippy": a command, run like the tests (allowlist,
    /// timeout, output cap) with its failures published as diagnostics.
    Command(Vec<String>),
}

pub fn route(goal: &str) -> Route {
    let g = goal.trim().trim_end_matches(['.', '!', '?']).trim();
    let lower = g.to_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    let short = words.len() <= 6;
    match words.as_slice() {
        ["undo", rest @ ..] if short => {
            let step = rest
                .windows(2)
                .find(|w| w[0] == "step")
                .and_then(|w| w[1].trim_start_matches('#').parse().ok());
            return Route::Undo(step);
        }
        ["revert", "the", "last", "change" | "step" | "edit"] => return Route::Undo(None),
        ["redo", ..] if words.len() <= 4 => return Route::Redo,
        ["status"] | ["show", "status"] | ["agent", "status"] | ["show", "the", "status"] => {
            return Route::Status;
        }
        ["what", "is", "the", "agent", "doing"] => return Route::Status,
        _ => {}
    }
    // "run `cmd`" always names a command; "run cmd" does unless it is about the tests
    // ("run the tests" is the loop's test intent).
    let rest = g
        .strip_prefix("run ")
        .or_else(|| g.strip_prefix("Run "))
        .or_else(|| g.strip_prefix("execute "))
        .map(str::trim);
    if let Some(rest) = rest {
        let quoted = rest.len() >= 2
            && ((rest.starts_with('`') && rest.ends_with('`'))
                || (rest.starts_with('"') && rest.ends_with('"'))
                || (rest.starts_with('\'') && rest.ends_with('\'')));
        let inner = if quoted {
            rest[1..rest.len() - 1].trim()
        } else {
            rest.strip_prefix(':').unwrap_or(rest).trim()
        };
        let argv: Vec<String> = inner.split_whitespace().map(String::from).collect();
        // Unquoted, it must read like a command line, not a sentence ("run the linter").
        let prose = [
            "the", "a", "an", "all", "every", "each", "my", "our", "this", "these",
        ]
        .contains(
            &argv
                .first()
                .map(|w| w.to_lowercase())
                .unwrap_or_default()
                .as_str(),
        );
        let about_tests = inner.to_lowercase().contains("test");
        if !argv.is_empty() && (quoted || (!about_tests && !prose && argv.len() <= 8)) {
            return Route::Command(argv);
        }
    }
    Route::Agent
}

/// A goal long enough to be several tasks is planned first; a small one is one task.
pub fn needs_plan(goal: &str) -> bool {
    goal.split_whitespace().count() > 30
        || goal.matches(". ").count() >= 2
        || goal.to_lowercase().contains(" then ")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Running the tests before the first edit, to know what fails.
    Baseline,
    /// The intent model decides what an unclear goal asks for.
    Classifying,
    Planning,
    Evaluating,
    Explaining,
    Coding,
    Locating,
    Approving,
    Applying,
    Testing,
    Reflecting,
    Done,
    Failed,
    Cancelled,
}

impl Phase {
    pub fn is_final(self) -> bool {
        matches!(self, Phase::Done | Phase::Failed | Phase::Cancelled)
    }
}

/// Where a run stands, as the store, the journal and `agent-ls/runFinished` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Done,
    Failed,
    Cancelled,
    /// `agent-ls run --dry-run`: the change was shown and nothing applied.
    Proposed,
    /// Marked `running` by a process that is gone (shown by `agent-ls stats`, never stored).
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Done => "done",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Proposed => "proposed",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        [
            RunStatus::Running,
            RunStatus::Done,
            RunStatus::Failed,
            RunStatus::Cancelled,
            RunStatus::Proposed,
            RunStatus::Interrupted,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }

    /// The status a run ends with, from the phase the loop stopped in.
    pub fn from_phase(phase: Phase) -> RunStatus {
        match phase {
            Phase::Done => RunStatus::Done,
            Phase::Cancelled => RunStatus::Cancelled,
            _ => RunStatus::Failed,
        }
    }
}

/// Why a failed run failed, when the cause has a kind of its own (and its own exit code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The model service refused the key.
    Auth,
    /// Something to fix in the configuration (no model configured).
    Config,
    /// A model call or the tests ran out of time.
    Timeout,
    /// The tests pass, but the evaluator found the goal not fully reached.
    Partial,
}

/// A test run's result as the loop sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestSummary {
    pub passed: bool,
    pub passed_count: u32,
    pub failed_count: u32,
    /// The normalised report, so the same failure gives the same text.
    pub report: String,
    /// Identifies the failure set: equal fingerprints mean the same failures came back.
    pub fingerprint: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Start,
    ModelAnswered {
        role: Role,
        text: String,
    },
    ModelFailed {
        role: Role,
        error: String,
    },
    /// The edit engine located the plan on the current text.
    Located(PlanOutcome),
    Approved,
    Rejected,
    /// The change was not applied for a reason the model can act on (it wrote a protected
    /// file nobody allowed): it hears why, and tries again.
    Refused(String),
    Applied,
    ApplyFailed(String),
    /// The files changed while the change was prepared and it could not be re-located on
    /// the new text: the step is redone on fresh text.
    Stale(String),
    TestsFinished(TestSummary),
    TestsUnavailable(String),
    /// The coder called tools instead of answering (with any text it wrote beside them).
    ToolCalls {
        text: String,
        calls: Vec<crate::conversation::ToolCall>,
    },
    /// The tools' results, in call order.
    ToolResults(Vec<(crate::conversation::ToolCall, String)>),
    Cancel,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    CallModel {
        role: Role,
        messages: Vec<crate::conversation::Message>,
        /// The tools offered, by name (none once the turn's tool steps are spent).
        tools: Vec<String>,
    },
    /// Run these tool calls and answer with `Event::ToolResults`.
    RunTools(Vec<crate::conversation::ToolCall>),
    Locate(EditPlan),
    AskApproval {
        changes: Vec<FileChange>,
        diff: String,
    },
    Apply(Vec<FileChange>),
    RunTests,
    Progress(String),
    Warn(String),
    /// The run ended; `answer` is what the user reads.
    Finish {
        status: Phase,
        answer: String,
    },
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Budget {
    pub max_retries: u32,
    pub max_iterations: u32,
    /// Tool calls the coder may make in one turn before it must answer (0: no tools).
    #[serde(default)]
    pub max_tool_steps: u32,
    /// Tool rounds after which the older ones are summarised (0: never).
    #[serde(default)]
    pub summarize_after: u32,
    /// Correction rounds a full evaluation may start.
    #[serde(default)]
    pub max_corrections: u32,
}

/// Everything the loop knows. The shell keeps it and passes every event through `step`.
/// It serializes as the checkpoint taken before every coder call, from which `resume` goes on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub goal: String,
    /// `None` until the intent model has classified an unclear goal.
    pub intent: Option<Intent>,
    /// The plan's tasks in order (one, the goal itself, when there is no plan) and the
    /// current one.
    pub tasks: Vec<Task>,
    pub task: usize,
    /// Self-evaluation at the end: off, basic (may end the run partial) or full (may start
    /// correction rounds).
    #[serde(default)]
    pub evaluation: crate::agent::Evaluation,
    /// Correction rounds started by the evaluator so far.
    #[serde(default)]
    pub corrections: u32,
    /// The evaluator found the goal not fully reached: the run ends partial.
    #[serde(default)]
    pub partial: bool,
    /// The agent running the goal: its kind, tools and prompt.
    #[serde(default)]
    pub agent: AgentProfile,
    /// The role prompts (built in, or the user's and a trusted workspace's files), set by the
    /// shell before every drive.
    #[serde(skip)]
    pub prompts: prompts::Prompts,
    /// What the run will answer once the evaluator has spoken.
    done_answer: String,
    pub phase: Phase,
    pub budget: Budget,
    /// Files and their text the prompt shows, gathered by the shell before every step
    /// (so a checkpoint leaves it out: it is gathered afresh on resume).
    #[serde(skip)]
    pub context: String,
    /// Coder attempts so far (each proposal counts).
    pub iterations: u32,
    /// Attempts for the current task since its last success.
    pub retries: u32,
    /// The last test result.
    pub tests: Option<TestSummary>,
    /// What the coder hears next: refusals, failures, the reflector's advice.
    pub feedback: Vec<String>,
    /// A reply that did not parse is sent back once; then the step fails.
    pub parse_retry_used: bool,
    /// Fingerprints of failures after each applied edit, and a hash of each applied diff.
    pub failure_history: Vec<String>,
    pub edit_history: Vec<u64>,
    pub files_changed: Vec<String>,
    pub warned_budget: bool,
    /// The coder's tool calls and their results in the current turn, after its prompt.
    #[serde(default)]
    pub exchange: Vec<crate::conversation::Message>,
    /// Tool-calling rounds in the current turn.
    #[serde(default)]
    pub tool_steps: u32,
    /// Checkpoints are taken before a coder call, when nothing is pending.
    #[serde(skip)]
    pending: Vec<FileChange>,
}

impl Run {
    pub fn new(goal: &str, intent: Option<Intent>, budget: Budget, context: String) -> Self {
        Run {
            goal: goal.to_string(),
            intent,
            tasks: vec![Task {
                id: "T1".into(),
                title: goal.to_string(),
                rationale: String::new(),
                acceptance: String::new(),
                artifacts: Vec::new(),
            }],
            task: 0,
            evaluation: crate::agent::Evaluation::Off,
            corrections: 0,
            partial: false,
            agent: AgentProfile::default(),
            prompts: prompts::Prompts::default(),
            done_answer: String::new(),
            phase: Phase::Baseline,
            budget,
            context,
            iterations: 0,
            retries: 0,
            tests: None,
            feedback: Vec::new(),
            parse_retry_used: false,
            failure_history: Vec::new(),
            edit_history: Vec::new(),
            files_changed: Vec::new(),
            warned_budget: false,
            exchange: Vec::new(),
            tool_steps: 0,
            pending: Vec::new(),
        }
    }
}

/// One transition. Every event is accepted in every phase: one that does not fit (a late
/// answer after a cancel, say) changes nothing.
pub fn step(run: &mut Run, event: Event) -> Vec<Effect> {
    let before = run.phase;
    let effects = transition(run, event);
    if run.phase != before {
        tracing::info!(from = ?before, to = ?run.phase, iteration = run.iterations, "agent step");
    }
    effects
}

fn transition(run: &mut Run, event: Event) -> Vec<Effect> {
    if run.phase.is_final() {
        return Vec::new();
    }
    match (run.phase, event) {
        (_, Event::Cancel) => finish(
            run,
            Phase::Cancelled,
            "cancelled; edits already applied stay (the editor's undo reverts them)".into(),
        ),
        (Phase::Baseline, Event::Start) => start(run),
        // The summary of a long turn's tool rounds replaces them.
        (
            Phase::Coding | Phase::Explaining | Phase::Planning,
            Event::ModelAnswered {
                role: Role::Summarizer,
                text,
            },
        ) => {
            let rounds = run.exchange.len();
            run.exchange = vec![crate::conversation::Message::user(format!(
                "Notes on your earlier tool calls in this turn (summarised to save room):\n{}",
                text.trim()
            ))];
            vec![
                Effect::Progress(format!(
                    "summarised {rounds} messages of tool calls to keep the prompt small"
                )),
                continue_call(run),
            ]
        }
        (
            Phase::Coding | Phase::Explaining | Phase::Planning,
            Event::ModelFailed {
                role: Role::Summarizer,
                error,
            },
        ) => vec![
            Effect::Warn(format!(
                "the summary of the tool calls failed ({error}); they stay as they are"
            )),
            continue_call(run),
        ],
        (Phase::Classifying, Event::ModelAnswered { text, .. }) => {
            run.intent = Some(prompts::parse_intent(&text));
            start(run)
        }
        (Phase::Classifying, Event::ModelFailed { error, .. }) => {
            // Classification only routes the goal; without it, the goal is taken as an edit.
            run.intent = Some(Intent::Edit);
            let mut effects = vec![Effect::Warn(format!(
                "the intent model failed ({error}); treating the goal as an edit"
            ))];
            effects.extend(start(run));
            effects
        }
        (Phase::Planning, Event::ModelAnswered { text, .. }) => match prompts::parse_plan(&text) {
            Ok(tasks) => {
                run.parse_retry_used = false;
                let titles: Vec<String> = tasks
                    .iter()
                    .map(|t| format!("{} {}", t.id, t.title))
                    .collect();
                run.tasks = tasks;
                let mut effects = vec![Effect::Progress(format!("plan: {}", titles.join("; ")))];
                effects.extend(code(run));
                effects
            }
            Err(e) if !run.parse_retry_used => {
                run.parse_retry_used = true;
                let mut messages = prompts::plan(run, None);
                messages.extend(run.exchange.iter().cloned());
                messages.push(crate::conversation::Message::user(format!(
                    "Your plan could not be read ({e}). Answer with the JSON only."
                )));
                vec![Effect::CallModel {
                    role: Role::Planner,
                    messages,
                    tools: Vec::new(),
                }]
            }
            Err(e) => finish(
                run,
                Phase::Failed,
                format!("the plan could not be read twice: {e}"),
            ),
        },
        (Phase::Planning, Event::ModelFailed { error, .. }) => finish(
            run,
            Phase::Failed,
            format!("the planner model failed: {error}"),
        ),
        (Phase::Evaluating, Event::ModelAnswered { text, .. }) => {
            match prompts::parse_evaluation(&text) {
                Ok((score, reason, false)) => incomplete(run, score, reason),
                Ok((score, reason, true)) => {
                    tracing::info!(score, reason = %reason, "evaluation");
                    let answer = format!("{} (evaluation: {score}/5, {reason})", run.done_answer);
                    finish(run, Phase::Done, answer)
                }
                Err(_) => {
                    let answer = run.done_answer.clone();
                    finish(run, Phase::Done, answer)
                }
            }
        }
        (Phase::Evaluating, Event::ModelFailed { .. }) => {
            let answer = run.done_answer.clone();
            finish(run, Phase::Done, answer)
        }
        (Phase::Baseline, Event::TestsFinished(t)) if run.intent == Some(Intent::Test) => {
            let answer = if t.passed {
                format!("the tests pass ({} passed)", t.passed_count)
            } else {
                format!(
                    "{} test(s) fail, {} pass:\n{}",
                    t.failed_count, t.passed_count, t.report
                )
            };
            run.tests = Some(t);
            finish(run, Phase::Done, answer)
        }
        (Phase::Baseline, Event::TestsFinished(t)) => {
            let passed = t.passed;
            run.tests = Some(t);
            if passed {
                finish(
                    run,
                    Phase::Done,
                    "the tests already pass; nothing to fix".into(),
                )
            } else {
                code(run)
            }
        }
        (Phase::Baseline, Event::TestsUnavailable(why)) => finish(
            run,
            Phase::Failed,
            format!("cannot run the tests to find the failures: {why}"),
        ),
        (Phase::Explaining, Event::ModelAnswered { text, .. }) => finish(run, Phase::Done, text),
        // Editing tools are proposals: the turn's change, located, shown and tested like
        // edits written as text.
        (Phase::Coding, Event::ToolCalls { calls, .. })
            if calls
                .iter()
                .any(|c| agents::is_edit_tool(&c.name) && run.agent.tools.contains(&c.name)) =>
        {
            let edits: Vec<(&str, &serde_json::Value)> = calls
                .iter()
                .filter(|c| agents::is_edit_tool(&c.name))
                .map(|c| (c.name.as_str(), &c.arguments))
                .collect();
            match crate::edit::plan_from_tool_calls(&edits) {
                Ok(plan) => {
                    run.parse_retry_used = false;
                    run.phase = Phase::Locating;
                    vec![Effect::Locate(plan)]
                }
                Err(e) => unreadable(run, e.to_string()),
            }
        }
        (Phase::Coding | Phase::Explaining | Phase::Planning, Event::ToolCalls { text, calls }) => {
            run.tool_steps += 1;
            run.exchange
                .push(crate::conversation::Message::calls(text, calls.clone()));
            let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
            vec![
                Effect::Progress(format!("the model reads the code ({})", names.join(", "))),
                Effect::RunTools(calls),
            ]
        }
        (Phase::Coding | Phase::Explaining | Phase::Planning, Event::ToolResults(results)) => {
            for (call, text) in &results {
                run.exchange.push(crate::conversation::Message::tool_result(
                    call,
                    text.clone(),
                ));
            }
            if run.tool_steps >= run.budget.max_tool_steps {
                let what = if run.phase == Phase::Coding {
                    "Answer now with your edits."
                } else {
                    "Answer now."
                };
                run.exchange.push(crate::conversation::Message::user(format!(
                    "That was the last tool call of this turn ({} rounds, agent.max_tool_steps). {what}",
                    run.tool_steps
                )));
            } else if run.budget.summarize_after > 0
                && run.tool_steps.is_multiple_of(run.budget.summarize_after)
            {
                return vec![Effect::CallModel {
                    role: Role::Summarizer,
                    messages: prompts::summarize(run),
                    tools: Vec::new(),
                }];
            }
            vec![continue_call(run)]
        }
        (Phase::Coding, Event::ModelAnswered { text, .. }) => {
            match crate::edit::parse_plan(&text) {
                Ok(plan) => {
                    run.parse_retry_used = false;
                    run.phase = Phase::Locating;
                    vec![Effect::Locate(plan)]
                }
                Err(e) => unreadable(run, e.to_string()),
            }
        }
        (
            Phase::Explaining | Phase::Coding | Phase::Reflecting,
            Event::ModelFailed { role, error },
        ) => finish(
            run,
            Phase::Failed,
            format!("the {} model failed: {error}", role.as_str()),
        ),
        (Phase::Locating, Event::Located(outcome)) => {
            if !outcome.all_applied() || outcome.changes.is_empty() {
                if outcome.all_applied() {
                    // Everything was already there: nothing to change, so check the tests.
                    run.phase = Phase::Testing;
                    return vec![
                        Effect::Progress(
                            "the edits are already in place; running the tests".into(),
                        ),
                        Effect::RunTests,
                    ];
                }
                run.feedback.push(format!(
                    "Some edits could not be applied, so none were. Fix them and send the whole change again:\n{}",
                    outcome.refusal_report()
                ));
                return retry_or_stop(run, "the proposed edits did not apply");
            }
            let diff = outcome.unified_diff();
            run.pending = outcome.changes;
            run.phase = Phase::Approving;
            // The status shows what the run waits for, not the step before it.
            let files: Vec<&str> = run.pending.iter().map(|c| c.path.as_str()).collect();
            vec![
                Effect::Progress(format!("proposing a change to {}", files.join(", "))),
                Effect::AskApproval {
                    changes: run.pending.clone(),
                    diff,
                },
            ]
        }
        (Phase::Approving, Event::Approved) => {
            run.phase = Phase::Applying;
            vec![Effect::Apply(run.pending.clone())]
        }
        (Phase::Approving, Event::Refused(why)) => {
            run.pending.clear();
            run.feedback.push(format!(
                "The change was not applied: {why}. Make the change again without that."
            ));
            retry_or_stop(run, "the change was refused")
        }
        (Phase::Approving, Event::Rejected) => finish(
            run,
            Phase::Failed,
            "the proposed change was rejected; nothing was applied".into(),
        ),
        (Phase::Applying, Event::Applied) => {
            let hash = diff_hash(&run.pending);
            run.edit_history.push(hash);
            for c in &run.pending {
                if !run.files_changed.contains(&c.path) {
                    run.files_changed.push(c.path.clone());
                }
            }
            run.pending.clear();
            run.phase = Phase::Testing;
            vec![
                Effect::Progress("running the tests".into()),
                Effect::RunTests,
            ]
        }
        (Phase::Applying, Event::ApplyFailed(why)) => finish(
            run,
            Phase::Failed,
            format!("the change could not be applied: {why}"),
        ),
        (Phase::Applying, Event::Stale(why)) => {
            run.pending.clear();
            run.feedback.push(format!(
                "{why}. The files below are the current text; make the change again against it."
            ));
            retry_or_stop(run, "the file changed while the change was prepared")
        }
        (Phase::Testing, Event::TestsFinished(t)) => {
            let passed = t.passed;
            let fingerprint = t.fingerprint.clone();
            run.tests = Some(t);
            if passed {
                let answer = format!("done: the tests pass after {} iteration(s)", run.iterations);
                return task_done(run, answer);
            }
            // The same failures after a different edit, twice: more of the same will not help.
            let repeats = run
                .failure_history
                .iter()
                .filter(|f| **f == fingerprint)
                .count();
            run.failure_history.push(fingerprint);
            if repeats >= 2 {
                return finish(
                    run,
                    Phase::Failed,
                    "stopped: the same failure came back after different edits".into(),
                );
            }
            if alternating(&run.edit_history) {
                return finish(
                    run,
                    Phase::Failed,
                    "stopped: the edits alternate between two versions".into(),
                );
            }
            run.phase = Phase::Reflecting;
            vec![Effect::CallModel {
                role: Role::Reflector,
                messages: prompts::reflect(run),
                tools: Vec::new(),
            }]
        }
        // An edit in a project without tests is done once applied; a fix needs its tests.
        (Phase::Testing, Event::TestsUnavailable(why)) if run.intent == Some(Intent::Edit) => {
            let answer = format!("done: the change is applied; no tests ran ({why})");
            task_done(run, answer)
        }
        (Phase::Testing, Event::TestsUnavailable(why)) => finish(
            run,
            Phase::Failed,
            format!("the change was applied but the tests could not run: {why}"),
        ),
        (Phase::Reflecting, Event::ModelAnswered { text, .. }) => {
            match prompts::parse_reflection(&text) {
                Ok(r) => run.feedback.push(format!(
                    "The tests still fail. Reflection: {}\nNext step: {}",
                    r.report, r.next_step
                )),
                // The reflector only advises; an unreadable reflection is passed on as text.
                Err(_) => run
                    .feedback
                    .push(format!("The tests still fail. Notes: {}", text.trim())),
            }
            retry_or_stop(run, "the tests still fail")
        }
        // Anything else in a phase that does not expect it is ignored (a late answer).
        _ => Vec::new(),
    }
}

/// Goes on from a checkpoint (a `Run` saved as the coder was about to be called): the same
/// iteration's coder call again, on the files as they are now. A run that is not at such a
/// point starts over.
pub fn resume(run: &mut Run) -> Vec<Effect> {
    if run.phase != Phase::Coding {
        run.phase = Phase::Baseline;
        return step(run, Event::Start);
    }
    run.pending.clear();
    vec![
        Effect::Progress(format!(
            "resumed at iteration {} of {}",
            run.iterations, run.budget.max_iterations
        )),
        continue_call(run),
    ]
}

/// The first step once the intent is known: a reading agent answers at once; otherwise
/// classify an unclear goal, run the tests first for a fix, plan a large edit, or go straight
/// to the coder.
fn start(run: &mut Run) -> Vec<Effect> {
    if run.agent.kind != AgentKind::Build {
        return answer(run);
    }
    let Some(intent) = run.intent else {
        run.phase = Phase::Classifying;
        return vec![Effect::CallModel {
            role: Role::Intent,
            messages: prompts::intent(run),
            tools: Vec::new(),
        }];
    };
    run.phase = Phase::Baseline;
    match intent {
        Intent::Test => vec![
            Effect::Progress("running the tests".into()),
            Effect::RunTests,
        ],
        Intent::Explain => answer(run),
        Intent::Fix => vec![
            Effect::Progress("running the tests to see what fails".into()),
            Effect::RunTests,
        ],
        Intent::Edit if needs_plan(&run.goal) => {
            // Mixed mode: the planner reads the code with the reading tools first (when the
            // run has tools), then the build agent works through its tasks.
            run.phase = Phase::Planning;
            run.exchange.clear();
            run.tool_steps = 0;
            vec![continue_call(run)]
        }
        Intent::Edit => code(run),
    }
}

/// A Markdown answer: an explanation, a plan (the plan agent) or a review (the review
/// agent), with the reading tools.
fn answer(run: &mut Run) -> Vec<Effect> {
    run.phase = Phase::Explaining;
    run.exchange.clear();
    run.tool_steps = 0;
    let what = match run.agent.kind {
        AgentKind::Plan => "planning",
        AgentKind::Review => "reviewing",
        AgentKind::Build => "reading the code to answer",
    };
    vec![Effect::Progress(what.into()), continue_call(run)]
}

/// The current task passed its tests: the next task, or the end (with the evaluator's score
/// when asked for).
fn task_done(run: &mut Run, answer: String) -> Vec<Effect> {
    if run.task + 1 < run.tasks.len() {
        run.task += 1;
        run.retries = 0;
        run.feedback.clear();
        let t = &run.tasks[run.task];
        let mut effects = vec![Effect::Progress(format!(
            "task {} of {}: {}",
            run.task + 1,
            run.tasks.len(),
            t.title
        ))];
        effects.extend(code(run));
        return effects;
    }
    if run.evaluation != crate::agent::Evaluation::Off {
        run.done_answer = answer;
        run.phase = Phase::Evaluating;
        return vec![Effect::CallModel {
            role: Role::Evaluator,
            messages: prompts::evaluate(run),
            tools: Vec::new(),
        }];
    }
    finish(run, Phase::Done, answer)
}

/// The evaluator found the goal not fully reached: under `full`, a correction round whose
/// task is the critique (while rounds and iterations are left); otherwise the run ends
/// partial with the reason.
fn incomplete(run: &mut Run, score: u8, reason: String) -> Vec<Effect> {
    tracing::info!(score, reason = %reason, "evaluation: incomplete");
    let full = run.evaluation == crate::agent::Evaluation::Full;
    if full
        && run.corrections < run.budget.max_corrections
        && run.iterations < run.budget.max_iterations
    {
        run.corrections += 1;
        let id = format!("C{}", run.corrections);
        run.tasks.push(Task {
            id: id.clone(),
            title: format!("finish the goal: {reason}"),
            rationale: "the evaluator found the goal not fully reached".into(),
            acceptance: "the evaluator finds the goal reached and the tests pass".into(),
            artifacts: Vec::new(),
        });
        run.task = run.tasks.len() - 1;
        run.retries = 0;
        run.feedback.clear();
        let mut effects = vec![Effect::Progress(format!(
            "correction {} of {}: {reason}",
            run.corrections, run.budget.max_corrections
        ))];
        effects.extend(code(run));
        return effects;
    }
    run.partial = true;
    let answer = format!(
        "partial: {} (evaluation: {score}/5, not complete: {reason})",
        run.done_answer
    );
    finish(run, Phase::Failed, answer)
}

/// An answer that could not be read as edits is sent back once; twice ends the run.
fn unreadable(run: &mut Run, e: String) -> Vec<Effect> {
    if run.parse_retry_used {
        return finish(
            run,
            Phase::Failed,
            format!("the coder's answer could not be read as edits twice: {e}"),
        );
    }
    run.parse_retry_used = true;
    run.feedback.push(format!(
        "Your last answer could not be read as edits ({e}). Answer again with SEARCH/REPLACE blocks or JSON {{\"edits\": [...]}} only."
    ));
    vec![
        Effect::Warn(format!(
            "the coder's answer did not parse ({e}); asking once more"
        )),
        call_coder(run),
    ]
}

fn code(run: &mut Run) -> Vec<Effect> {
    vec![
        Effect::Progress("asking the model for a change".into()),
        call_coder(run),
    ]
}

fn call_coder(run: &mut Run) -> Effect {
    run.phase = Phase::Coding;
    run.iterations += 1;
    // Each turn reads afresh: the files that matter now are in its prompt.
    run.exchange.clear();
    run.tool_steps = 0;
    continue_call(run)
}

/// The model's next call within its turn (the coder's, the planner's or a Markdown
/// answer's): its prompt, then the tool calls and results so far, with the tools its phase
/// allows while it has tool steps left.
fn continue_call(run: &mut Run) -> Effect {
    let (role, mut messages, tools) = match run.phase {
        Phase::Planning => (
            Role::Planner,
            prompts::plan(run, None),
            run.agent.reading_tools(),
        ),
        Phase::Explaining => (
            Role::Coder,
            prompts::explain(run),
            run.agent.reading_tools(),
        ),
        _ => {
            run.phase = Phase::Coding;
            (Role::Coder, prompts::code(run), run.agent.tools.clone())
        }
    };
    messages.extend(run.exchange.iter().cloned());
    Effect::CallModel {
        role,
        messages,
        tools: if run.tool_steps < run.budget.max_tool_steps {
            tools
        } else {
            Vec::new()
        },
    }
}

fn retry_or_stop(run: &mut Run, why: &str) -> Vec<Effect> {
    run.retries += 1;
    if run.retries > run.budget.max_retries {
        return finish(
            run,
            Phase::Failed,
            format!(
                "stopped after {} retries (agent.max_retries): {why}",
                run.budget.max_retries
            ),
        );
    }
    if run.iterations >= run.budget.max_iterations {
        return finish(
            run,
            Phase::Failed,
            format!(
                "stopped at the iteration budget ({} iterations, agent.max_iterations): {why}",
                run.budget.max_iterations
            ),
        );
    }
    let mut effects = Vec::new();
    if !run.warned_budget && (run.iterations + 1) * 5 >= run.budget.max_iterations * 4 {
        run.warned_budget = true;
        effects.push(Effect::Warn(format!(
            "iteration {} of {}: 80% of the budget is used",
            run.iterations + 1,
            run.budget.max_iterations
        )));
    }
    effects.push(Effect::Progress(format!(
        "{why}; trying again (retry {} of {})",
        run.retries, run.budget.max_retries
    )));
    effects.push(call_coder(run));
    effects
}

fn finish(run: &mut Run, status: Phase, answer: String) -> Vec<Effect> {
    run.phase = status;
    vec![Effect::Finish { status, answer }]
}

/// A, B, A, B: the last four applied edits alternate between two different changes.
fn alternating(history: &[u64]) -> bool {
    matches!(history, [.., a, b, c, d] if a == c && b == d && a != b)
}

fn diff_hash(changes: &[FileChange]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for c in changes {
        c.path.hash(&mut h);
        c.new_text.hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
mod tests;

/// Self-evaluation at the end of a run that passed its tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Evaluation {
    /// No evaluator call.
    #[default]
    Off,
    /// The evaluator scores the change and may downgrade done to partial, with its reason.
    Basic,
    /// As basic, and a partial result starts a correction round with the critique as its goal.
    Full,
}

impl<'de> Deserialize<'de> for Evaluation {
    /// `true` and `false` are read as "basic" and "off", as the key once was a switch.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Name(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(Evaluation::Basic),
            Raw::Bool(false) => Ok(Evaluation::Off),
            Raw::Name(n) => match n.as_str() {
                "off" => Ok(Evaluation::Off),
                "basic" => Ok(Evaluation::Basic),
                "full" => Ok(Evaluation::Full),
                other => Err(serde::de::Error::custom(format!(
                    "unknown evaluation `{other}`: expected \"off\", \"basic\" or \"full\""
                ))),
            },
        }
    }
}
