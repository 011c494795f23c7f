//! The loop's values: what a run is given (`Settings`), its phases, the events the runtime
//! feeds in and the effects it performs, and `Run`, everything the loop knows. Nothing here
//! decides: the phases' modules do, and `flow::step` moves the run between them. Each
//! phase's own state is named from its `state.rs`, not through the phase's module, which
//! depends on these values.

use serde::{Deserialize, Serialize};

use super::change::state::Change;
use super::evaluate::state::Ending;
use super::goal::{Intent, Task};
use super::reproduce::state::Tester;
use super::reviewing::state::Reviewer;
use super::turn::state::Turn;
use super::{AgentProfile, context, prompts, review, tester};
use crate::conversation::Role;
use crate::edit::{EditPlan, FileChange, PlanOutcome};

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
    /// The reviewer reads the run's whole diff once its tests pass.
    Reviewing,
    /// The tester writes a test that fails for the bug (or, after a change no test covered,
    /// a regression test), and the loop tries it.
    Reproducing,
    Done,
    Failed,
    Cancelled,
}

impl Phase {
    /// The phase's name in the store and the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Baseline => "baseline",
            Phase::Classifying => "classifying",
            Phase::Planning => "planning",
            Phase::Evaluating => "evaluating",
            Phase::Explaining => "explaining",
            Phase::Coding => "coding",
            Phase::Locating => "locating",
            Phase::Approving => "approving",
            Phase::Applying => "applying",
            Phase::Testing => "testing",
            Phase::Reflecting => "reflecting",
            Phase::Reviewing => "reviewing",
            Phase::Reproducing => "reproducing",
            Phase::Done => "done",
            Phase::Failed => "failed",
            Phase::Cancelled => "cancelled",
        }
    }

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
    /// The run's cost reached its cap (`agent.max_cost_usd`, `--max-cost`).
    Cost,
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
    /// The command ran and found no test (the project has none yet): for a fix, the tester
    /// writes the first one; for "run the tests", that is the answer.
    #[serde(default)]
    pub no_tests: bool,
    /// Why the run came to no result, when it was stopped (a timeout, a sandbox limit),
    /// named for the model: not a failing test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
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
    /// The change reached the files, and the project's language server reports errors it
    /// introduced (the report, one `path:line:column: error: message` a line): the coder
    /// hears them and answers in the same iteration, before any test runs.
    AppliedWithErrors(String),
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
    /// The run's git diff against its checkpoint (`None`: no checkpoint, the steps' diff is
    /// reviewed), or why it could not be made.
    RunDiff(Result<Option<String>, review::DiffError>),
    /// The runs of the tester's new tests (`Effect::TryTests`), or why they could not run.
    TestsTried(Result<tester::Tried, tester::TrialError>),
    /// The property tests' library (`Effect::DevDependency`) is there, or why it is not.
    DevDependency(Result<(), tester::InstallError>),
    /// Something the run reads (prompts, context, memory), handed in by the driver.
    Input(Input),
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
    /// An answer sent back to its model to be mended: journal it as a repair of `class`
    /// (`elision`, `indentation`, `truncated`, `unreadable`, `not_found`, ...) and show it.
    Repair {
        class: &'static str,
        reason: String,
    },
    /// Make the run's git diff against its checkpoint of these files, with enough context
    /// lines for a reviewer, and answer with `Event::RunDiff`.
    DiffRun {
        files: Vec<String>,
    },
    /// A review of the run's diff was made (or could not be): journal it, count it, show it.
    Reviewed(review::ReviewResult),
    /// Write the tester's new tests (and, after a fix, the code before it) for a trial, run
    /// them, put every file back, and answer with `Event::TestsTried`.
    TryTests(tester::TrialPlan),
    /// Make sure the project has this library for the tester's property tests (`hypothesis`
    /// in its Python, `proptest` in its Cargo.toml's dev-dependencies): when it is missing,
    /// install it as a dev dependency only if the user approves. Answered with
    /// `Event::DevDependency`.
    DevDependency(String),
    /// The tester's record changed (a test refused, kept, or the tester gave up): journal
    /// it and show it.
    Tested(tester::Record),
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
    /// The most bytes of a tool-using turn's fixed prompt (the system prompt and the first
    /// user message: goal, failures, repo map, files); the rest comes through the tools.
    /// 0: no limit beyond the runtime's own.
    #[serde(default)]
    pub first_prompt_bytes: usize,
}

/// What a run is given when it is made (`Run::new`): the driver builds it from the
/// configuration, the chosen agent and the surface's flags, and has no other way to set a
/// run up.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    /// `None` until the intent model has classified an unclear goal (the one setting the run
    /// itself may fill in).
    pub intent: Option<Intent>,
    pub budget: Budget,
    /// The agent running the goal: its kind, tools and prompt.
    #[serde(default)]
    pub agent: AgentProfile,
    /// Self-evaluation at the end: off, basic (may end the run partial) or full (may start
    /// correction rounds).
    #[serde(default)]
    pub evaluation: Evaluation,
    /// The review of the run's diff once its tests pass (`agent.review`).
    #[serde(default)]
    pub review: review::ReviewMode,
    /// From this confidence a P0/P1 finding blocks in gate mode.
    #[serde(default = "review::default_min_confidence")]
    pub review_min_confidence: f64,
    /// The tester's settings (`[tester]`, `--reproduce`).
    #[serde(default)]
    pub tester: tester::Settings,
    /// An applied change that made the tests worse (a passing test now fails, or a syntax or
    /// import error) is undone before the coder tries again (`agent.undo_worse`). Written
    /// into a checkpoint only when off, so a checkpoint keeps its shape.
    #[serde(default = "yes", skip_serializing_if = "Clone::clone")]
    pub undo_worse: bool,
}

fn yes() -> bool {
    true
}

impl Settings {
    /// A run under `budget` by the default agent, with no evaluation, no review and the
    /// tester's defaults.
    pub fn new(intent: Option<Intent>, budget: Budget) -> Settings {
        Settings {
            intent,
            budget,
            agent: AgentProfile::default(),
            evaluation: Evaluation::Off,
            review: review::ReviewMode::Off,
            review_min_confidence: review::default_min_confidence(),
            tester: tester::Settings::default(),
            undo_worse: true,
        }
    }
}

/// What the driver hands a run to read, before a step (`Event::Input`): it changes what the
/// prompts show, never the phase, and produces no effect.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The role prompts (built in, or the user's and a trusted workspace's files), handed in
    /// as every drive opens (a checkpoint leaves them out).
    Prompts(prompts::Prompts),
    /// The files and their text the prompt may show, gathered before every step (a
    /// checkpoint leaves them out: they are gathered afresh on resume).
    Context(context::Context),
    /// What earlier runs remembered about the current failures (`memory::section`), once
    /// the failures are known.
    Memory(String),
    /// Each file of the change just written, read back (only files that held the change's
    /// original text before the write): the after-write check compares them with what the
    /// change meant (`edit::verify`).
    Written(Vec<(String, String)>),
    /// The bytes of the model's latest answer that were not UTF-8, in hex (one entry a run of
    /// them; none for a clean answer): each stands as U+FFFD in its text, and an edit that
    /// would write one is refused naming them.
    BadBytes(Vec<String>),
    /// The instruction files and the skills' list (`instructions::join`, `skills::listing`),
    /// appended to the system prompt of the roles that work on the code; handed in as a
    /// drive opens and again when the run comes under a folder with a file of its own.
    Instructions(String),
    /// The conversation of the run this one goes on from, rewound to one of its steps: it
    /// comes before the goal in the prompts of the roles that work on the code.
    Earlier(Box<crate::conversation::Earlier>),
}

/// Everything the loop knows. The driver keeps it and passes every event through `step`;
/// it reads the run through the accessors below and changes it only through events. State
/// that one phase needs is that phase's own type (`Turn`, `Change`,
/// `Reviewer`, `Tester`, `Ending`); the fields here are
/// what several phases share. It serializes as the checkpoint taken before every coder
/// call, from which `resume` goes on: the phases' types are flattened into it, so a
/// checkpoint keeps the shape it had before they were split out, and old ones still load.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub(super) goal: String,
    #[serde(flatten)]
    pub(super) settings: Settings,
    pub(super) phase: Phase,
    /// The plan's tasks in order (one, the goal itself, when there is no plan) and the
    /// current one.
    pub(super) tasks: Vec<Task>,
    pub(super) task: usize,
    /// Coder attempts so far (each proposal counts).
    pub(super) iterations: u32,
    /// Attempts for the current task since its last success.
    pub(super) retries: u32,
    /// The last test result.
    pub(super) tests: Option<TestSummary>,
    /// What the coder hears next: refusals, failures, the reflector's advice.
    pub(super) feedback: Vec<String>,
    /// Fingerprints of failures after each applied edit.
    pub(super) failure_history: Vec<String>,
    pub(super) warned_budget: bool,
    pub(super) files_changed: Vec<String>,
    /// Each file the run changed: its text before the run and after the latest step, for
    /// the steps' diff where there is no git checkpoint.
    #[serde(default)]
    pub(super) originals: Vec<(String, Option<String>, String)>,
    /// The role prompts (`Input::Prompts`).
    #[serde(skip)]
    pub(super) prompts: prompts::Prompts,
    /// The files the prompt may show (`Input::Context`), cut to the first prompt's budget by
    /// the prompts.
    #[serde(skip)]
    pub(super) context: context::Context,
    /// What earlier runs remembered (`Input::Memory`); shown to the planner, the coder and
    /// the reflector.
    #[serde(default)]
    pub(super) memory: String,
    /// The instruction files and skills (`Input::Instructions`), after the system prompt of
    /// the coder, the planner and the Markdown answers. Not checkpointed: read afresh.
    #[serde(skip)]
    pub(super) instructions: String,
    /// The rewound run's conversation this run follows (`Input::Earlier`); checkpointed, so
    /// a resumed run still knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) earlier: Option<Box<crate::conversation::Earlier>>,
    #[serde(flatten)]
    pub(super) turn: Turn,
    #[serde(flatten)]
    pub(super) change: Change,
    #[serde(flatten)]
    pub(super) reviewing: Reviewer,
    #[serde(flatten)]
    pub(super) reproducing: Tester,
    #[serde(flatten)]
    pub(super) ending: Ending,
}

impl Run {
    /// A new run of `goal` under `settings`, before its start (`Event::Start`).
    pub fn new(goal: &str, settings: Settings) -> Self {
        Run {
            goal: goal.to_string(),
            settings,
            phase: Phase::Baseline,
            tasks: vec![Task {
                id: "T1".into(),
                title: goal.to_string(),
                rationale: String::new(),
                acceptance: String::new(),
                artifacts: Vec::new(),
            }],
            task: 0,
            iterations: 0,
            retries: 0,
            tests: None,
            feedback: Vec::new(),
            failure_history: Vec::new(),
            warned_budget: false,
            files_changed: Vec::new(),
            originals: Vec::new(),
            prompts: prompts::Prompts::default(),
            context: context::Context::default(),
            memory: String::new(),
            instructions: String::new(),
            earlier: None,
            turn: Turn::default(),
            change: Change::default(),
            reviewing: Reviewer::default(),
            reproducing: Tester::default(),
            ending: Ending::default(),
        }
    }

    pub fn goal(&self) -> &str {
        &self.goal
    }

    /// What the run was given, with the intent as the run knows it now.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn intent(&self) -> Option<Intent> {
        self.settings.intent
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn budget(&self) -> &Budget {
        &self.settings.budget
    }

    pub fn agent(&self) -> &AgentProfile {
        &self.settings.agent
    }

    /// Coder attempts so far.
    pub fn iterations(&self) -> u32 {
        self.iterations
    }

    /// The plan's task the run works on.
    pub fn current_task(&self) -> Option<&Task> {
        self.tasks.get(self.task)
    }

    /// The last test result.
    pub fn tests(&self) -> Option<&TestSummary> {
        self.tests.as_ref()
    }

    pub fn files_changed(&self) -> &[String] {
        &self.files_changed
    }

    /// Each file the run changed: its path, its text before the run (`None`: it did not
    /// exist) and after the latest step.
    pub fn originals(&self) -> &[(String, Option<String>, String)] {
        &self.originals
    }

    /// Tool-calling rounds in the current turn.
    pub fn tool_steps(&self) -> u32 {
        self.turn.tool_steps()
    }

    /// The tool-calling rounds of the current turn so far (the first has none before it).
    pub fn tool_rounds(&self) -> u32 {
        self.turn.rounds()
    }

    /// The latest review of the run's diff.
    pub fn last_review(&self) -> Option<&review::ReviewResult> {
        self.reviewing.last()
    }

    /// What the tester did in this run.
    pub fn tester_record(&self) -> Option<&tester::Record> {
        self.reproducing.record()
    }

    /// The rewound run's conversation this run follows, if it follows one.
    pub fn earlier(&self) -> Option<&crate::conversation::Earlier> {
        self.earlier.as_deref()
    }

    /// The evaluator found the goal not fully reached: the run ended partial.
    pub fn partial(&self) -> bool {
        self.ending.partial()
    }

    /// Takes what the driver hands in (`Event::Input`).
    pub(super) fn take(&mut self, input: Input) {
        match input {
            Input::Prompts(p) => self.prompts = p,
            Input::Context(c) => self.context = c,
            Input::Memory(m) => self.memory = m,
            Input::Written(w) => self.change.written(w),
            Input::BadBytes(b) => self.change.bad_bytes(b),
            Input::Instructions(i) => self.instructions = i,
            Input::Earlier(e) => self.earlier = Some(e),
        }
    }
}

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
