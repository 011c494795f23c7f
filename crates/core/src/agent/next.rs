//! Where a phase goes: what a phase's function returns for an event (`Next`), the effects to
//! perform and the run's successor (`To`). A phase never sets `Run::phase` nor calls another
//! phase; `flow.rs` applies the successor, and it alone moves the run from phase to phase.

use super::messages::Call;
use super::run::{Effect, Event, Phase};
use super::tester::Mode;
use crate::conversation::Role;
use crate::edit::EditPlan;

/// A phase's answer to an event: `effects` go out first, in order, then the run goes `to`.
#[derive(Debug)]
#[must_use = "a phase's successor is to be applied (`flow::apply`)"]
pub(super) struct Next {
    pub(super) effects: Vec<Effect>,
    pub(super) to: To,
}

/// Where the run goes after a phase's effects. The first ones end the step (the run waits
/// for the effects' answers, or for its model's); the others name a step another part owns,
/// which `flow.rs` takes in turn.
#[derive(Debug)]
pub(super) enum To {
    /// The run stays in its phase.
    Stay,
    /// The run enters `phase`, to wait there for the answers to its effects.
    Enter(Phase),
    /// A model is called from the phase the run is in.
    Ask(Call),
    /// The run enters `phase` and calls its model.
    EnterAsking(Phase, Call),
    /// The run enters `phase` with a model turn of its own (the coder's, the planner's, a
    /// Markdown answer's, the reviewer's): a new turn, and its first call.
    NewTurn(Phase),
    /// The run ends in `status` (a final phase) with `answer`, what the user reads.
    Finish(Phase, String),
    /// The event belongs to the phase's model turn (a tool call, its results, the summary):
    /// `turn::in_turn`.
    InTurn(Event),
    /// The coder is asked for a change, a new iteration (`steps::code`).
    Code,
    /// The coder's call of a new iteration, with no progress line (`steps::call_coder`).
    Coder,
    /// Another attempt at the task, unless the budgets are spent (`steps::retry_or_stop`).
    Retry(Retry),
    /// The coder's readable edits, to be located (`change::locate`).
    Locate(EditPlan),
    /// The tester starts in `mode` (`reproduce::start`).
    Tester(Mode),
    /// The last task passed (`reproduce::tasks_done`): the tester's regression test, or on
    /// to the review.
    TasksDone,
    /// The review of the run's diff, or what comes after it (`reviewing::after_tasks`).
    Review,
    /// The evaluator's score, or the end (`evaluate::evaluate_or_finish`).
    Evaluate,
}

/// Why the coder tries again, and what the user reads besides when the budget is spent and
/// the run stops instead.
#[derive(Debug)]
pub(super) struct Retry {
    pub(super) why: String,
    pub(super) report: Option<String>,
}

impl Next {
    pub(super) fn new(effects: Vec<Effect>, to: To) -> Next {
        Next { effects, to }
    }

    /// The run goes `to`, with no effect of its own first.
    pub(super) fn to(to: To) -> Next {
        Next::new(Vec::new(), to)
    }

    /// The run stays in its phase and waits for the answers to `effects` (none: the event
    /// changed nothing).
    pub(super) fn stay(effects: Vec<Effect>) -> Next {
        Next::new(effects, To::Stay)
    }

    /// The run enters `phase` and waits there for the answers to `effects`.
    pub(super) fn enter(phase: Phase, effects: Vec<Effect>) -> Next {
        Next::new(effects, To::Enter(phase))
    }

    /// The run ends in `status` with `answer`.
    pub(super) fn finish(status: Phase, answer: String) -> Next {
        Next::to(To::Finish(status, answer))
    }

    /// The run ends failed, with `answer` saying why.
    pub(super) fn fail(answer: String) -> Next {
        Next::finish(Phase::Failed, answer)
    }

    /// A model call the run cannot go on without failed.
    pub(super) fn model_failed(role: Role, error: String) -> Next {
        Next::fail(format!("the {} model failed: {error}", role.as_str()))
    }

    /// Another attempt because of `why`, unless the budgets are spent.
    pub(super) fn retry(why: &str) -> Next {
        Next::to(To::Retry(Retry {
            why: why.to_string(),
            report: None,
        }))
    }

    /// The same successor, with `first` going out before this one's effects.
    pub(super) fn after(mut self, mut first: Vec<Effect>) -> Next {
        first.append(&mut self.effects);
        self.effects = first;
        self
    }
}
