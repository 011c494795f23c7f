//! The run's end as the run keeps it (`Run::ending`), owned by `evaluate/`: the other phases
//! set the answer the run will end with and add notes to it.

use serde::{Deserialize, Serialize};

/// What the run will answer once the evaluator has spoken, and what it said so far.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Ending {
    /// Correction rounds started by the evaluator so far.
    #[serde(default)]
    pub(super) corrections: u32,
    /// The evaluator found the goal not fully reached: the run ends partial.
    #[serde(default)]
    pub(super) partial: bool,
    /// What the run will answer once the evaluator has spoken.
    #[serde(default)]
    pub(super) done_answer: String,
}

impl Ending {
    pub(crate) fn partial(&self) -> bool {
        self.partial
    }

    #[cfg(test)]
    pub(crate) fn corrections(&self) -> u32 {
        self.corrections
    }

    pub(crate) fn set_answer(&mut self, answer: String) {
        self.done_answer = answer;
    }

    /// A note joins the answer (`done: ...; the review found ...`).
    pub(crate) fn add(&mut self, note: &str) {
        self.done_answer = format!("{}; {note}", self.done_answer);
    }
}
