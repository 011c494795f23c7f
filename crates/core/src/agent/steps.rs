//! The steps every phase may lead to: asking the coder for a change, and trying again within
//! the budgets. A phase names them as its successor (`To::Code`, `To::Coder`, `To::Retry`);
//! `flow.rs` takes them, and the run's phase changes there.

use super::next::{Next, Retry, To};
use super::{Effect, Phase, Run};

/// The coder is asked for a change (a new iteration).
pub(super) fn code() -> Next {
    Next::new(
        vec![Effect::Progress("asking the model for a change".into())],
        To::Coder,
    )
}

/// The coder's call of a new iteration, with a turn of its own (each turn reads afresh: the
/// files that matter now are in its prompt).
pub(super) fn call_coder(run: &mut Run) -> Next {
    run.iterations += 1;
    Next::to(To::NewTurn(Phase::Coding))
}

/// Another attempt at the current task, because of `why`, unless the retries or the
/// iterations are spent (then the run fails, its answer followed by `report` when there is
/// one); a warning once 80% of the iterations are used.
pub(super) fn retry_or_stop(run: &mut Run, retry: Retry) -> Next {
    let Retry { why, report } = retry;
    let budget = run.settings.budget;
    run.retries += 1;
    let stopped = if run.retries > budget.max_retries {
        Some(format!(
            "stopped after {} retries (agent.max_retries): {why}",
            budget.max_retries
        ))
    } else if run.iterations >= budget.max_iterations {
        Some(format!(
            "stopped at the iteration budget ({} iterations, agent.max_iterations): {why}",
            budget.max_iterations
        ))
    } else {
        None
    };
    if let Some(answer) = stopped {
        return Next::fail(match report {
            Some(report) => format!("{answer}\n{report}"),
            None => answer,
        });
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
    Next::new(effects, To::Coder)
}
