//! A model's turn as the run keeps it (`Run::turn`), owned by `turn/`: the other phases start
//! a turn, read its messages and ask for a parse retry through the methods below.

use serde::{Deserialize, Serialize};

use crate::conversation::Message;

/// How many rounds in all a turn may take per round of `agent.max_tool_steps`: reading new
/// code is progress and does not count toward the limit, but a turn still ends.
pub(crate) const ROUNDS_PER_STEP: u32 = 3;

/// The current turn: its tool calls and their results after its prompt, and whether its
/// unreadable answer was sent back already.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Turn {
    /// The model's tool calls and their results in this turn, after its prompt.
    #[serde(default)]
    pub(super) exchange: Vec<Message>,
    /// Tool-calling rounds in this turn that brought nothing new: each call's result was
    /// one the turn had already had (`agent.max_tool_steps` counts these).
    #[serde(default)]
    pub(super) tool_steps: u32,
    /// Every tool-calling round in this turn; at most `ROUNDS_PER_STEP` times the limit.
    #[serde(default)]
    pub(super) rounds: u32,
    /// Each call made in this turn (its name and arguments) with a hash of its result, to
    /// tell a round that learned something from one that went round in circles.
    #[serde(default)]
    pub(super) seen: Vec<(String, u64)>,
    /// A planner's or coder's answer that did not parse is sent back once; then the step
    /// fails. Kept across the call that asks again, cleared by an answer that parses.
    #[serde(default)]
    pub(super) parse_retry_used: bool,
}

impl Turn {
    /// A new turn: each reads afresh, the files that matter now are in its prompt.
    pub(crate) fn begin(&mut self) {
        self.exchange.clear();
        self.tool_steps = 0;
        self.rounds = 0;
        self.seen.clear();
    }

    /// Whether the turn's tool rounds are spent: `max` rounds that brought nothing new, or
    /// `ROUNDS_PER_STEP` times `max` rounds in all.
    pub(crate) fn spent(&self, max: u32) -> bool {
        self.tool_steps >= max || self.rounds >= max.saturating_mul(ROUNDS_PER_STEP)
    }

    pub(crate) fn messages(&self) -> &[Message] {
        &self.exchange
    }

    /// The model's answer and the request to repair it join the turn.
    pub(crate) fn push(&mut self, message: Message) {
        self.exchange.push(message);
    }

    pub(crate) fn tool_steps(&self) -> u32 {
        self.tool_steps
    }

    /// Every tool-calling round of this turn so far.
    pub(crate) fn rounds(&self) -> u32 {
        self.rounds
    }

    /// Whether the unreadable answer was sent back already; marks it sent back.
    pub(crate) fn retry_once(&mut self) -> bool {
        std::mem::replace(&mut self.parse_retry_used, true)
    }

    /// An answer parsed: the next unreadable one gets its retry again.
    pub(crate) fn parsed(&mut self) {
        self.parse_retry_used = false;
    }
}
