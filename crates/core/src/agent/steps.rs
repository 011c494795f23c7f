//! The steps every phase shares: asking the coder for a change, trying again within the
//! budgets, and ending the run (failed, or with any final phase). A phase's own module
//! decides when; these say how, in one place.

use super::{Effect, Phase, Run, turn};
use crate::conversation::Role;

/// The coder is asked for a change (a new iteration).
pub(super) fn code(run: &mut Run) -> Vec<Effect> {
    vec![
        Effect::Progress("asking the model for a change".into()),
        call_coder(run),
    ]
}

/// The coder's call of a new iteration, with a turn of its own.
pub(super) fn call_coder(run: &mut Run) -> Effect {
    run.phase = Phase::Coding;
    run.iterations += 1;
    // Each turn reads afresh: the files that matter now are in its prompt.
    run.turn.begin();
    turn::continue_call(run)
}

/// The coder is asked again within the same iteration (to fix what the language server
/// found in its edit): no iteration and no retry is spent.
pub(super) fn call_coder_again(run: &mut Run) -> Effect {
    run.phase = Phase::Coding;
    run.turn.begin();
    turn::continue_call(run)
}

/// Another attempt at the current task, because of `why`, unless the retries or the
/// iterations are spent (then the run fails); a warning once 80% of the iterations are used.
pub(super) fn retry_or_stop(run: &mut Run, why: &str) -> Vec<Effect> {
    let budget = run.settings.budget;
    run.retries += 1;
    if run.retries > budget.max_retries {
        return fail(
            run,
            format!(
                "stopped after {} retries (agent.max_retries): {why}",
                budget.max_retries
            ),
        );
    }
    if run.iterations >= budget.max_iterations {
        return fail(
            run,
            format!(
                "stopped at the iteration budget ({} iterations, agent.max_iterations): {why}",
                budget.max_iterations
            ),
        );
    }
    let mut effects = Vec::new();
    if !run.warned_budget && (run.iterations + 1) * 5 >= budget.max_iterations * 4 {
        run.warned_budget = true;
        effects.push(Effect::Warn(format!(
            "iteration {} of {}: 80% of the budget is used",
            run.iterations + 1,
            budget.max_iterations
        )));
    }
    effects.push(Effect::Progress(format!(
        "{why}; trying again (retry {} of {})",
        run.retries, budget.max_retries
    )));
    effects.push(call_coder(run));
    effects
}

/// A model call the run cannot go on without failed.
pub(super) fn model_failed(run: &mut Run, role: Role, error: String) -> Vec<Effect> {
    fail(run, format!("the {} model failed: {error}", role.as_str()))
}

/// The run ends failed, with `answer` saying why.
pub(super) fn fail(run: &mut Run, answer: String) -> Vec<Effect> {
    finish(run, Phase::Failed, answer)
}

/// The run ends in `status` (a final phase) with `answer`, what the user reads.
pub(super) fn finish(run: &mut Run, status: Phase, answer: String) -> Vec<Effect> {
    run.phase = status;
    vec![Effect::Finish { status, answer }]
}
