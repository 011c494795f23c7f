//! The conversation with a model as plain values: who speaks (`Speaker`), what a call is for
//! (`Role`), the messages, and the tools a model may call. Providers translate these to their
//! wire formats; the state machine builds them. No IO.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a model call is for; each role can use its own model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Planner,
    Coder,
    Reflector,
    Evaluator,
    Intent,
    /// Writes the summary that replaces a long turn's older tool rounds.
    Summarizer,
    /// Reads the run's whole diff once its tests pass and answers with findings.
    Reviewer,
    /// Writes a test that fails for the bug before the fix (or a regression test after it).
    Tester,
}

impl Role {
    pub const ALL: [Role; 8] = [
        Role::Planner,
        Role::Coder,
        Role::Reflector,
        Role::Evaluator,
        Role::Intent,
        Role::Summarizer,
        Role::Reviewer,
        Role::Tester,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Planner => "planner",
            Role::Coder => "coder",
            Role::Reflector => "reflector",
            Role::Evaluator => "evaluator",
            Role::Intent => "intent",
            Role::Summarizer => "summarizer",
            Role::Reviewer => "reviewer",
            Role::Tester => "tester",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Speaker {
    System,
    User,
    Assistant,
    /// A tool's result, answering an assistant's call.
    Tool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub speaker: Speaker,
    pub content: String,
    /// The tools an assistant's message calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool's result: the call it answers (its id and the tool's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<(String, String)>,
}

impl Message {
    fn new(speaker: Speaker, content: String) -> Self {
        Message {
            speaker,
            content,
            tool_calls: Vec::new(),
            answers: None,
        }
    }
    pub fn system(s: impl Into<String>) -> Self {
        Message::new(Speaker::System, s.into())
    }
    pub fn user(s: impl Into<String>) -> Self {
        Message::new(Speaker::User, s.into())
    }
    pub fn assistant(s: impl Into<String>) -> Self {
        Message::new(Speaker::Assistant, s.into())
    }
    /// An assistant's answer that calls tools.
    pub fn calls(text: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        Message {
            tool_calls: calls,
            ..Message::new(Speaker::Assistant, text.into())
        }
    }
    /// A tool's result for `call`.
    pub fn tool_result(call: &ToolCall, text: impl Into<String>) -> Self {
        Message {
            answers: Some((call.id.clone(), call.name.clone())),
            ..Message::new(Speaker::Tool, text.into())
        }
    }
}

/// A function the model may call, with a JSON schema for its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// What an earlier run said and did up to the step it was rewound to (docs/rewind.md): the
/// history a new instruction follows, so the model knows what was tried. `messages` holds
/// no system prompt; a tool call in it is always followed by its result.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Earlier {
    /// The run rewound, and the step it was taken back to.
    pub run_id: String,
    pub step: u64,
    pub messages: Vec<Message>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}
