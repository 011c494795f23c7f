//! The agent loop as a pure state machine: `step(&mut Run, Event) -> Vec<Effect>`. The
//! runtime's driver (`agent_ls_runtime::drive`) performs the effects (model calls, locating
//! edits, approval, applying, test runs) and feeds their results back as events. The core
//! does no IO: the prompts' texts and the files the prompt shows are handed in as events
//! (`Event::Input`), and everything to be done goes out as an effect; it logs through
//! `tracing`, whose subscriber the runtime installs. No clocks, no LSP types.
//!
//! This file only names the parts. `run.rs` has the values (`Run`, `Event`, `Effect`,
//! `Settings`); `phases.rs` has `step` and dispatches an event to its phase. Each phase with
//! state of its own is a folder whose `state.rs` holds that state, private to the folder:
//! `turn/` (a model's turn: its tool rounds, the parse retry), `change/` (locating,
//! approving, applying a proposal), `reviewing/`, `reproduce/` (the tester), `evaluate/` (the
//! evaluator and the run's end answer). `steps.rs` holds the steps they share (calling the
//! coder, retrying, failing, finishing); `messages.rs` builds each role's messages from a
//! run. The files form no cycle (`scripts/check-cycles`): `phases` -> `change` ->
//! `reproduce` -> `reviewing` -> `evaluate` -> `steps` -> `turn` -> `messages` -> `run`.

pub mod agents;
mod change;
pub mod context;
mod evaluate;
mod goal;
mod messages;
mod phases;
pub mod prompts;
mod reproduce;
pub mod review;
mod reviewing;
mod run;
mod steps;
pub mod tester;
mod turn;
pub mod window;

pub use agents::{AgentKind, AgentProfile};
pub use goal::{Intent, Route, Task, classify, command_line, needs_plan, one_line, route};
pub use phases::{resume, start_review, step};
pub use run::{
    Budget, Effect, Evaluation, Event, FailureKind, Input, Phase, Run, RunStatus, Settings,
    TestSummary,
};

#[cfg(test)]
mod tests;
