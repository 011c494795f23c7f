//! The agent loop as a pure state machine: `step(&mut Run, Event) -> Vec<Effect>`. The
//! runtime's driver (`agent_ls_runtime::drive`) performs the effects (model calls, locating
//! edits, approval, applying, test runs) and feeds their results back as events. The core
//! does no IO: the prompts' texts and the files the prompt shows are handed in as events
//! (`Event::Input`), and everything to be done goes out as an effect; it logs through
//! `tracing`, whose subscriber the runtime installs. No clocks, no LSP types.
//!
//! This file only names the parts. `run.rs` has the values (`Run`, `Event`, `Effect`,
//! `Settings`). Each phase is a function that takes the run and an event and returns where
//! the run goes (`next.rs`: `Next`, the effects and a successor `To`): `coding.rs` has the
//! coding loop's own phases (the start, classifying, planning, explaining, coding, testing,
//! reflecting); a phase with state of its own is a folder whose `state.rs` holds that state,
//! private to the folder: `turn/` (a model's turn: its tool rounds, the parse retry),
//! `change/` (locating, approving, applying a proposal), `reviewing/`, `reproduce/` (the
//! tester), `evaluate/` (the evaluator and the run's end answer). `flow.rs` is the one
//! dispatcher: `step` hands the event to its phase and applies the successor; it alone sets
//! `Run::phase`, and it alone goes from one part to another (a phase names `To::Locate`,
//! `To::Review`, ..., never calls another phase). `steps.rs` holds the steps any phase may
//! lead to (calling the coder, retrying within the budgets); `messages.rs` writes each
//! model call (`Call`) from the run, after the step, so the driver knows from
//! `advance` whether to hand in the files first. The files form no cycle
//! (`scripts/check-cycles`, which counts a name taken through a re-export as the
//! re-exporting file's): `flow` -> the phases (`coding`, `change`, `reproduce`,
//! `reviewing`, `evaluate`, `turn`) and `steps` -> `next` -> `messages` -> `run` -> each
//! phase's `state.rs`.

pub mod agents;
mod change;
mod coding;
pub mod context;
mod evaluate;
mod flow;
mod goal;
pub mod json_answer;
mod messages;
mod next;
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
pub use flow::{Stepped, advance, resume, start_review, step};
pub use goal::{Intent, Route, Task, classify, command_line, needs_plan, one_line, route};
pub use run::{
    Budget, Effect, Evaluation, Event, FailureKind, Input, Phase, Run, RunStatus, Settings,
    TestSummary,
};

#[cfg(test)]
mod tests;
