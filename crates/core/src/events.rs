//! What happens in a run, as typed values: every line of a run's journal and every event a
//! live run view gets is one `RunEvent`. Their wire form, the (role, type, data) triple of a
//! journal line (docs/replay.md) and of `agent-ls/runEvent` (docs/lsp-extensions.md), is made
//! in one place, `RunEvent::wire`, so the front ends match on variants and never on strings.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::agent::{Intent, RunStatus, Task};
use crate::conversation::{Role, ToolCall};
use crate::test_output::TestState;

/// One thing that happened in a run. Records the runtime defines (a model's token usage, the
/// review of a change) travel in their own wire form, as `Value`: the core does not know them.
/// The derived `Serialize` gives a line's `data` only (the fields named by role or type are
/// skipped): `wire` gives the whole line.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum RunEvent {
    /// The run starts (`intent`), or goes on after an interruption (`resumed`).
    Started {
        goal: String,
        intent: Option<Intent>,
        iterations: u32,
        #[serde(skip)]
        resumed: bool,
    },
    /// The run goes on from run `from` taken back to its step `step` (docs/rewind.md): that
    /// run's conversation up to there, `messages` of it, comes before the goal.
    Rewound {
        from: String,
        step: u64,
        messages: usize,
    },
    /// What the run's prompts are made of: the agent, the prompt files, the budgets. Journal
    /// only.
    Context {
        agent: String,
        prompt_files: Vec<String>,
        tokenizer: String,
        context_tokens: usize,
        map_tokens: usize,
        /// The instruction files in the system prompt and the bytes of each
        /// (docs/instructions.md).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        instructions: Vec<crate::instructions::Used>,
        /// The skills the prompt lists, by name (docs/skills.md).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        skills: Vec<String>,
    },
    /// The instruction files changed during the run (it came under a folder with a file of
    /// its own), or the budget cut some: every file now used, and what was cut.
    Instructions {
        files: Vec<crate::instructions::Used>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cut: Option<String>,
    },
    /// The conversation did not fit the model's window: the oldest messages were left out.
    ContextCut {
        #[serde(skip)]
        role: Role,
        dropped_messages: usize,
        tokens: usize,
        window: usize,
        tokenizer: String,
    },
    /// What a model call was sent: its size, and the tools offered.
    Prompt {
        #[serde(skip)]
        role: Role,
        messages: usize,
        bytes: usize,
        tokens: usize,
        tokenizer: String,
        tools: Vec<String>,
    },
    /// A new iteration begins, on this task of the plan ("T1 fix the tests"). Live only.
    Iteration {
        n: u32,
        task: Option<String>,
    },
    /// A piece of a model's answer as it streams. Live only.
    Token {
        #[serde(skip)]
        role: Role,
        text: String,
    },
    /// Its data depends on the audience: see `ModelCall`.
    #[serde(skip_serializing)]
    ModelCall(ModelCall),
    /// The planner's tasks.
    Plan {
        tasks: Vec<Task>,
    },
    Reflection(Reflection),
    /// The evaluator's score of the run.
    Evaluation {
        score: u8,
        reason: String,
        complete: bool,
    },
    /// The reviewer's review of the run's diff, or why there is none.
    Review(crate::agent::review::ReviewResult),
    /// The tester's record: its tests, their runs before and after the fix, and what became
    /// of them (docs/tester.md).
    Tester(crate::agent::tester::Record),
    /// What the user decided about the reviewed change once the run ended (the editor's
    /// review question, docs/review.md): kept, or rolled back.
    Decision {
        decision: crate::agent::review::Decision,
    },
    /// What a check point of the run told the user: a hook that failed, timed out, was not
    /// trusted or reported after the run, or a workspace setting left out (docs/hooks.md).
    Warning {
        message: String,
    },
    /// A proposed change: its files, its diff and the review (protected files, risky
    /// constructs) in its wire form.
    Patch {
        files: Vec<String>,
        diff: String,
        review: Value,
    },
    /// An answer sent back to its model to be mended, by class (docs/repairs.md).
    Repair {
        class: String,
        reason: String,
    },
    /// The project's language server read the goal's files before the first edit
    /// (`before_edit`: the errors already there), or checked an applied edit (the errors it
    /// introduced, which went to the model), and how long that waited (docs/project-lsp.md).
    Diagnostics {
        files: Vec<String>,
        errors: Vec<String>,
        before_edit: bool,
        wait_ms: u64,
    },
    /// A tool the coder called.
    ToolCall(ToolCall),
    /// What a tool answered: `text` is its head, `bytes` its whole size.
    ToolResult {
        id: String,
        name: String,
        is_error: bool,
        bytes: usize,
        duration_ms: u64,
        text: String,
    },
    /// The user's verdict on a change.
    Approval {
        accepted: bool,
    },
    /// A test run's result.
    TestResult {
        state: TestState,
        passed: Option<u32>,
        failed: Option<u32>,
        failures: usize,
        duration_ms: u64,
        command: String,
        environment: Option<String>,
    },
    /// The run's end.
    Finished {
        status: RunStatus,
        answer: String,
        iterations: u32,
        files_changed: Vec<String>,
    },
    /// The working tree was recorded as a git checkpoint before the run's first write
    /// (docs/git.md): its commit, and the untracked paths it left out.
    Checkpoint {
        commit: String,
        left_out: Vec<String>,
    },
    /// Records remembered from earlier runs entered the prompts (docs/memory.md): the query
    /// for the current failures, and each record used with its score.
    Memory {
        query: String,
        used: Vec<crate::memory::Used>,
        /// With an embedding model configured: how the records were ranked ("text and
        /// vector, fused by reciprocal rank"), or why by text alone (its server failed).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        embeddings: Option<String>,
    },
    /// An applied change became this step of the history. Live only.
    Step {
        step: u64,
        files: Vec<String>,
    },
    /// A step was undone (`redo: false`) or redone, from any surface. Live only.
    Undone {
        step: u64,
        #[serde(skip)]
        redo: bool,
    },
}

/// A model's answer: the figures of the call, the running totals of the run, and the answer
/// itself (which the journal keeps, so a journal replays as a script).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCall {
    pub role: Role,
    pub provider: String,
    pub model: String,
    /// The call's token usage, in the runtime's wire form.
    pub usage: Value,
    pub duration_ms: u64,
    /// Attempts the answer took, retries and fallbacks included.
    pub attempts: u32,
    pub tokens_total: u64,
    pub cost_usd_total: Option<f64>,
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    /// Answered from the response cache, not by the model.
    pub cached: Option<CacheHit>,
}

/// A model call the response cache answered: how, and what the original call took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheHit {
    pub hit: crate::cache::HitKind,
    pub saved_tokens: u64,
    pub saved_ms: u64,
}

/// The reflector's report, or its text when it did not parse.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Reflection {
    Parsed {
        task_id: String,
        passed: bool,
        report: String,
        next_step: String,
    },
    Unparsed {
        text: String,
    },
}

/// Who reads a line: the journal and the live view differ only in a model call's figures
/// (the journal keeps the attempts, the live view the run's totals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    Journal,
    Live,
}

/// A line's wire form: its role, its type and its data.
#[derive(Debug, Clone, PartialEq)]
pub struct Wire {
    pub role: &'static str,
    pub kind: &'static str,
    pub data: Value,
}

impl RunEvent {
    /// Whether the journal keeps this event (the live-only ones are not lines of it).
    pub fn journaled(&self) -> bool {
        !matches!(
            self,
            RunEvent::Iteration { .. }
                | RunEvent::Token { .. }
                | RunEvent::Step { .. }
                | RunEvent::Undone { .. }
        )
    }

    /// The (role, type, data) triple of the journal line or the `agent-ls/runEvent`.
    pub fn wire(&self, to: Audience) -> Wire {
        let data = match self {
            RunEvent::ModelCall(m) => m.data(to),
            // Every other variant's fields are its data, by the derived `Serialize`.
            _ => serde_json::to_value(self).unwrap_or_default(),
        };
        Wire {
            role: self.role(),
            kind: self.kind(),
            data,
        }
    }

    /// Who the line is of: the agent, a model's role, the user, the tools or the tests.
    fn role(&self) -> &'static str {
        match self {
            RunEvent::ContextCut { role, .. }
            | RunEvent::Prompt { role, .. }
            | RunEvent::Token { role, .. } => role.as_str(),
            RunEvent::ModelCall(m) => m.role.as_str(),
            RunEvent::Plan { .. } => "planner",
            RunEvent::Reflection(_) => "reflector",
            RunEvent::Evaluation { .. } => "evaluator",
            RunEvent::Review(_) => "reviewer",
            RunEvent::Tester(_) => "tester",
            RunEvent::ToolCall(_) => "coder",
            RunEvent::ToolResult { .. } => "tools",
            RunEvent::Approval { .. } | RunEvent::Decision { .. } | RunEvent::Undone { .. } => {
                "user"
            }
            RunEvent::TestResult { .. } => "tests",
            RunEvent::Started { .. }
            | RunEvent::Rewound { .. }
            | RunEvent::Context { .. }
            | RunEvent::Instructions { .. }
            | RunEvent::Iteration { .. }
            | RunEvent::Patch { .. }
            | RunEvent::Repair { .. }
            | RunEvent::Warning { .. }
            | RunEvent::Diagnostics { .. }
            | RunEvent::Finished { .. }
            | RunEvent::Checkpoint { .. }
            | RunEvent::Memory { .. }
            | RunEvent::Step { .. } => "agent",
        }
    }

    /// The line's `type`.
    fn kind(&self) -> &'static str {
        match self {
            RunEvent::Started { resumed: true, .. } => "resumed",
            RunEvent::Started { .. } => "intent",
            RunEvent::Rewound { .. } => "rewound",
            RunEvent::Context { .. } => "context",
            RunEvent::ContextCut { .. } => "context_cut",
            RunEvent::Instructions { .. } => "instructions",
            RunEvent::Prompt { .. } => "prompt",
            RunEvent::Iteration { .. } => "iteration",
            RunEvent::Token { .. } => "token",
            RunEvent::ModelCall(_) => "model_call",
            RunEvent::Plan { .. } => "plan",
            RunEvent::Reflection(_) => "reflection",
            RunEvent::Evaluation { .. } => "evaluation",
            RunEvent::Review(_) => "review",
            RunEvent::Tester(_) => "tester",
            RunEvent::Patch { .. } => "patch",
            RunEvent::Repair { .. } => "repair",
            RunEvent::Warning { .. } => "warning",
            RunEvent::Diagnostics { .. } => "diagnostics",
            RunEvent::ToolCall(_) => "tool_call",
            RunEvent::ToolResult { .. } => "tool_result",
            RunEvent::Approval { .. } => "approval",
            RunEvent::Decision { .. } => "decision",
            RunEvent::TestResult { .. } => "test_result",
            RunEvent::Finished { .. } => "finished",
            RunEvent::Checkpoint { .. } => "checkpoint",
            RunEvent::Memory { .. } => "memory",
            RunEvent::Step { .. } => "step",
            RunEvent::Undone { redo: true, .. } => "redo",
            RunEvent::Undone { .. } => "undo",
        }
    }
}

impl ModelCall {
    fn data(&self, to: Audience) -> Value {
        let mut data = match to {
            Audience::Journal => json!({"provider": self.provider, "model": self.model,
                "usage": self.usage, "duration_ms": self.duration_ms, "attempts": self.attempts}),
            Audience::Live => json!({"provider": self.provider, "model": self.model,
                "usage": self.usage, "duration_ms": self.duration_ms,
                "tokens_total": self.tokens_total, "cost_usd_total": self.cost_usd_total}),
        };
        // Only a cached answer says so, so the lines of model calls stay as they were.
        if let (Some(c), Some(map)) = (self.cached, data.as_object_mut()) {
            map.insert("cached".into(), json!(c.hit.as_str()));
            map.insert("saved_tokens".into(), json!(c.saved_tokens));
            map.insert("saved_ms".into(), json!(c.saved_ms));
        }
        data
    }
}

/// A run's event as a live view gets it: the event with its run and the iteration it belongs
/// to (0 before the first change).
#[derive(Debug, Clone, PartialEq)]
pub struct LiveEvent {
    pub run_id: String,
    pub iteration: u32,
    pub event: RunEvent,
}

/// `agent-ls/runEvent` on the wire: `{runId, iteration, role, type, data}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireEvent {
    pub run_id: String,
    pub iteration: u32,
    pub role: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub data: Value,
}

impl LiveEvent {
    /// The event as `agent-ls/runEvent` carries it.
    pub fn to_wire(&self) -> WireEvent {
        let Wire { role, kind, data } = self.event.wire(Audience::Live);
        WireEvent {
            run_id: self.run_id.clone(),
            iteration: self.iteration,
            role: role.into(),
            kind: kind.into(),
            data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_call_keeps_attempts_in_the_journal_and_totals_live() {
        let m = RunEvent::ModelCall(ModelCall {
            role: Role::Coder,
            provider: "p".into(),
            model: "m".into(),
            usage: json!({"input_tokens": 1}),
            duration_ms: 5,
            attempts: 2,
            tokens_total: 9,
            cost_usd_total: None,
            content: "text".into(),
            tool_calls: Vec::new(),
            cached: None,
        });
        let journal = m.wire(Audience::Journal);
        assert_eq!((journal.role, journal.kind), ("coder", "model_call"));
        assert_eq!(journal.data["attempts"], 2);
        assert!(journal.data.get("tokens_total").is_none());
        let live = m.wire(Audience::Live);
        assert_eq!(live.data["tokens_total"], 9);
        assert!(live.data.get("attempts").is_none());
        assert!(journal.data.get("cached").is_none());
        let RunEvent::ModelCall(mut hit) = m else {
            return;
        };
        hit.cached = Some(CacheHit {
            hit: crate::cache::HitKind::Near,
            saved_tokens: 40,
            saved_ms: 900,
        });
        let journal = RunEvent::ModelCall(hit).wire(Audience::Journal);
        assert_eq!(journal.data["cached"], "near");
        assert_eq!(journal.data["saved_tokens"], 40);
    }

    #[test]
    fn each_event_keeps_its_role_type_and_data_keys() {
        let call = ToolCall {
            id: "c1".into(),
            name: "grep".into(),
            arguments: json!({"pattern": "x"}),
        };
        let cases = [
            (
                RunEvent::Started {
                    goal: "g".into(),
                    intent: None,
                    iterations: 0,
                    resumed: true,
                },
                ("agent", "resumed"),
                json!({"goal": "g", "intent": null, "iterations": 0}),
            ),
            (
                RunEvent::Prompt {
                    role: Role::Planner,
                    messages: 2,
                    bytes: 10,
                    tokens: 3,
                    tokenizer: "bytes/4".into(),
                    tools: Vec::new(),
                },
                ("planner", "prompt"),
                json!({"messages": 2, "bytes": 10, "tokens": 3, "tokenizer": "bytes/4", "tools": []}),
            ),
            (
                RunEvent::ToolCall(call),
                ("coder", "tool_call"),
                json!({"id": "c1", "name": "grep", "arguments": {"pattern": "x"}}),
            ),
            (
                RunEvent::Reflection(Reflection::Unparsed { text: "t".into() }),
                ("reflector", "reflection"),
                json!({"text": "t"}),
            ),
            (
                RunEvent::Finished {
                    status: RunStatus::Done,
                    answer: "a".into(),
                    iterations: 1,
                    files_changed: vec!["x".into()],
                },
                ("agent", "finished"),
                json!({"status": "done", "answer": "a", "iterations": 1, "files_changed": ["x"]}),
            ),
            (
                RunEvent::Token {
                    role: Role::Coder,
                    text: "t".into(),
                },
                ("coder", "token"),
                json!({"text": "t"}),
            ),
        ];
        for (event, (role, kind), data) in cases {
            let wire = event.wire(Audience::Live);
            assert_eq!((wire.role, wire.kind, wire.data), (role, kind, data));
        }
    }

    #[test]
    fn live_events_carry_the_journal_names() {
        let e = LiveEvent {
            run_id: "run_1".into(),
            iteration: 3,
            event: RunEvent::Undone {
                step: 4,
                redo: true,
            },
        };
        let wire = serde_json::to_value(e.to_wire()).unwrap();
        assert_eq!(
            wire,
            json!({"runId": "run_1", "iteration": 3, "role": "user", "type": "redo", "data": {"step": 4}})
        );
        assert!(!e.event.journaled());
    }
}
