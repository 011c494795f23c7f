//! The run's end once its tasks passed (`Phase::Evaluating`): the evaluator's score when one
//! is asked for (`agent.evaluate`), which never blocks: done, a correction round with the
//! critique as its task (under `full`), or a partial end. `Ending` keeps the answer the run
//! will end with and the rounds so far. Each function returns where the run goes (`Next`);
//! `flow.rs` moves it.

pub(super) mod state;

use super::messages::Call;
use super::next::{Next, To};
use super::{Effect, Evaluation, Event, Phase, Run, Task, prompts};

/// The evaluator's score: done, or not complete (a correction round or a partial end). It
/// never blocks: an unreadable or failed evaluation ends the run done.
pub(super) fn on_evaluating(run: &mut Run, event: Event) -> Next {
    match event {
        Event::ModelAnswered { text, .. } => match prompts::parse_evaluation(&text) {
            Ok((score, reason, false)) => incomplete(run, score, reason),
            Ok((score, reason, true)) => {
                tracing::info!(score, reason = %reason, "evaluation");
                let answer = format!(
                    "{} (evaluation: {score}/5, {reason})",
                    run.ending.done_answer
                );
                Next::finish(Phase::Done, answer)
            }
            // Never silent: the run ends done, and the journal and the user learn that its
            // score was lost and why.
            Err(e) => Next::new(
                vec![Effect::Warn(format!(
                    "the evaluator's answer could not be read ({e}); the run ends without its score"
                ))],
                To::Finish(Phase::Done, run.ending.done_answer.clone()),
            ),
        },
        Event::ModelFailed { .. } => Next::finish(Phase::Done, run.ending.done_answer.clone()),
        _ => Next::stay(Vec::new()),
    }
}

/// After the review: the evaluator's score when asked for, or the end.
pub(super) fn evaluate_or_finish(run: &Run) -> Next {
    if run.settings.evaluation != Evaluation::Off {
        return Next::to(To::EnterAsking(Phase::Evaluating, Call::Evaluator));
    }
    Next::finish(Phase::Done, run.ending.done_answer.clone())
}

/// The evaluator found the goal not fully reached: under `full`, a correction round whose
/// task is the critique (while rounds and iterations are left); otherwise the run ends
/// partial with the reason.
fn incomplete(run: &mut Run, score: u8, reason: String) -> Next {
    tracing::info!(score, reason = %reason, "evaluation: incomplete");
    let budget = run.settings.budget;
    if run.settings.evaluation == Evaluation::Full
        && run.ending.corrections < budget.max_corrections
        && run.iterations < budget.max_iterations
    {
        run.ending.corrections += 1;
        run.tasks.push(Task {
            id: format!("C{}", run.ending.corrections),
            title: format!("finish the goal: {reason}"),
            rationale: "the evaluator found the goal not fully reached".into(),
            acceptance: "the evaluator finds the goal reached and the tests pass".into(),
            artifacts: Vec::new(),
        });
        run.task = run.tasks.len() - 1;
        run.retries = 0;
        run.feedback.clear();
        let correction = Effect::Progress(format!(
            "correction {} of {}: {reason}",
            run.ending.corrections, budget.max_corrections
        ));
        return Next::new(vec![correction], To::Code);
    }
    run.ending.partial = true;
    let answer = format!(
        "partial: {} (evaluation: {score}/5, not complete: {reason})",
        run.ending.done_answer
    );
    Next::fail(answer)
}
