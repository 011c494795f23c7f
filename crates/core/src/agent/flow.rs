//! The one dispatcher: `step` hands an event to its phase's function, which returns where the
//! run goes (`Next`), and `apply` takes it from there. `apply` alone moves the run from phase
//! to phase, and it alone calls from one part to another: when a phase names a step another
//! part owns (`To::Locate`, `To::Tester`, `To::Review`, ...), `apply` asks that part, which
//! returns its own successor, until the run waits for an effect's answer. No phase's module
//! calls another phase's.
//!
//! A model call is named (`messages::Call`) and written last, from the run as the step left
//! it (`Stepped::effects`): the driver learns from `advance` whether a step calls a model and
//! hands in the files the prompt shows only then, without stepping twice.

use super::messages::{self, Call};
use super::next::{Next, To};
use super::{Effect, Event, Intent, Phase, Run, review};
use super::{change, coding, evaluate, reproduce, reviewing, steps, turn};

/// One transition. Every event is accepted in every phase: one that does not fit (a late
/// answer after a cancel, say) changes nothing. An `Input` is taken in any phase.
pub fn step(run: &mut Run, event: Event) -> Vec<Effect> {
    advance(run, event).effects(run)
}

/// `step` in two halves, for a driver that hands in what a model's prompt shows (costly to
/// gather) only for a step that calls a model: the transition now; the model call, if the
/// step makes one, is written from the run when `Stepped::effects` is asked for.
pub fn advance(run: &mut Run, event: Event) -> Stepped {
    if let Event::Input(input) = event {
        run.take(input);
        return Stepped::default();
    }
    let before = run.phase;
    let next = transition(run, event);
    let stepped = apply(run, next);
    if run.phase != before {
        tracing::info!(from = ?before, to = ?run.phase, iteration = run.iterations, "agent step");
    }
    stepped
}

/// A step taken (`advance`) whose model call, if it makes one, is still to be written.
#[derive(Debug, Default)]
#[must_use = "a step's effects are to be performed"]
pub struct Stepped {
    effects: Vec<Effect>,
    call: Option<Call>,
}

impl Stepped {
    /// Whether the step ends with a model call, whose prompt shows the run's files.
    pub fn calls_model(&self) -> bool {
        self.call.is_some()
    }

    /// The step's effects, in order, its model call (always the last) written from `run` as
    /// it is now, with what was handed in since the step.
    pub fn effects(self, run: &Run) -> Vec<Effect> {
        let mut effects = self.effects;
        effects.extend(self.call.map(|call| messages::call(run, &call)));
        effects
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
    run.change.forget_pending();
    let resumed = Effect::Progress(format!(
        "resumed at iteration {} of {}",
        run.iterations, run.settings.budget.max_iterations
    ));
    apply(run, Next::new(vec![resumed], To::Ask(Call::Turn))).effects(run)
}

/// An on-demand review (`agent-ls review`): the reviewer reads `diff` (the user's own
/// change), with `files` its changed files and their line counts, and the run ends with its
/// verdict. The run's goal says what the change is for, as far as the caller knows.
pub fn start_review(run: &mut Run, diff: String, files: Vec<review::ChangedFile>) -> Vec<Effect> {
    run.settings.intent = Some(Intent::Edit);
    let next = reviewing::review_only(run, diff, files);
    apply(run, next).effects(run)
}

/// One event in the run's phase. A final phase takes nothing more; a cancel ends any other;
/// an event the phase does not expect (a late answer) changes nothing. While the tester's
/// kept test goes through the change's phases, the tester sees a rejection and the tests'
/// result first; failing tests go to the change first, which undoes a change that made
/// them worse.
fn transition(run: &mut Run, event: Event) -> Next {
    if run.phase.is_final() {
        return Next::stay(Vec::new());
    }
    if event == Event::Cancel {
        return Next::finish(
            Phase::Cancelled,
            "cancelled; edits already applied stay (the editor's undo reverts them)".into(),
        );
    }
    match run.phase {
        Phase::Baseline => coding::on_baseline(run, event),
        Phase::Classifying => coding::on_classifying(run, event),
        Phase::Planning => coding::on_planning(run, event),
        Phase::Evaluating => evaluate::on_evaluating(run, event),
        Phase::Explaining => coding::on_explaining(event),
        Phase::Coding => coding::on_coding(run, event),
        Phase::Locating => change::on_locating(run, event),
        Phase::Approving => match reproduce::on_rejected(run, &event) {
            Some(next) => next,
            None => change::on_approving(run, event),
        },
        Phase::Applying => change::on_applying(run, event),
        Phase::Testing => match reproduce::on_new_test_tested(run, &event) {
            Some(next) => next,
            None => match change::undo_if_worse(run, &event) {
                Some(next) => next,
                None => coding::on_testing(run, event),
            },
        },
        Phase::Reflecting => coding::on_reflecting(run, event),
        Phase::Reviewing => reviewing::on_reviewing(run, event),
        Phase::Reproducing => reproduce::on_reproducing(run, event),
        Phase::Done | Phase::Failed | Phase::Cancelled => Next::stay(Vec::new()),
    }
}

/// Takes the run where `next` says, through the steps other parts own, until it waits: for
/// its effects' answers, or for the model call that ends the step.
fn apply(run: &mut Run, mut next: Next) -> Stepped {
    let mut effects = Vec::new();
    loop {
        effects.append(&mut next.effects);
        next = match next.to {
            To::Stay => return Stepped::waiting(effects),
            To::Enter(phase) => {
                run.phase = phase;
                return Stepped::waiting(effects);
            }
            To::Ask(call) => return Stepped::asking(effects, call),
            To::EnterAsking(phase, call) => {
                run.phase = phase;
                return Stepped::asking(effects, call);
            }
            To::NewTurn(phase) => {
                run.phase = phase;
                // Each turn reads afresh: the files that matter now are in its prompt.
                run.turn.begin();
                return Stepped::asking(effects, Call::Turn);
            }
            To::Finish(status, answer) => {
                run.phase = status;
                effects.push(Effect::Finish { status, answer });
                return Stepped::waiting(effects);
            }
            To::InTurn(event) => turn::in_turn(run, event),
            To::Code => steps::code(),
            To::Coder => steps::call_coder(run),
            To::Retry(retry) => steps::retry_or_stop(run, retry),
            To::Locate(plan) => change::locate(run, plan),
            To::Tester(mode) => reproduce::start(run, mode),
            To::TasksDone => reproduce::tasks_done(run),
            To::Review => reviewing::after_tasks(run),
            To::Evaluate => evaluate::evaluate_or_finish(run),
        };
    }
}

impl Stepped {
    fn waiting(effects: Vec<Effect>) -> Stepped {
        Stepped {
            effects,
            call: None,
        }
    }

    fn asking(effects: Vec<Effect>, call: Call) -> Stepped {
        Stepped {
            effects,
            call: Some(call),
        }
    }
}
