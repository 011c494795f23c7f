//! The reviewer's phase (`Phase::Reviewing`): once the tasks are done, the run's diff (git's,
//! or the steps'), the reviewer's turn on it, and the gate's decision: in gate mode a
//! confident P0/P1 finding sends the change back to the coder; otherwise the run goes on to
//! its evaluation. `agent-ls review` runs this phase alone on a given diff. `Reviewer` is
//! the phase's own state. What a review is (its JSON, its checks) is `review.rs`'s. Each
//! function returns where the run goes (`Next`); `flow.rs` moves it.

pub(super) mod state;

use super::messages::Call;
use super::next::{Next, Retry, To};
use super::{Effect, Event, Phase, Run, review};
use crate::conversation::Role;

/// Once the tasks are done (and the tester's regression test, if any): the review of the
/// run's diff, or its evaluation, or its end.
pub(super) fn after_tasks(run: &Run) -> Next {
    if run.settings.review != review::ReviewMode::Off && !run.files_changed.is_empty() {
        return Next::enter(
            Phase::Reviewing,
            vec![
                Effect::Progress("the reviewer reads the run's change".into()),
                Effect::DiffRun {
                    files: run.files_changed.clone(),
                },
            ],
        );
    }
    Next::to(To::Evaluate)
}

/// An on-demand review: the run is the review of `diff` and nothing else.
pub(super) fn review_only(run: &mut Run, diff: String, files: Vec<review::ChangedFile>) -> Next {
    run.reviewing.review_only = true;
    review_diff(run, diff, files)
}

/// The reviewer's turn: the run's diff (git's, or the steps'), the reviewer's tool calls, and
/// its answer, read once more if it does not parse; then the gate's decision.
pub(super) fn on_reviewing(run: &mut Run, event: Event) -> Next {
    match event {
        Event::RunDiff(Ok(git)) => {
            let diff = git.unwrap_or_else(|| review::steps_diff(&run.originals));
            let mut files = review::changed_files(&diff);
            for f in &mut files {
                f.lines = run
                    .originals
                    .iter()
                    .find(|(p, _, _)| *p == f.path)
                    .map(|(_, _, text)| review::line_count(text));
            }
            review_diff(run, diff, files)
        }
        Event::RunDiff(Err(why)) => {
            review_unavailable(run, format!("the run's diff could not be made: {why}"))
        }
        Event::ModelAnswered {
            role: Role::Reviewer,
            text,
        } => answered(run, text),
        Event::ModelFailed {
            role: Role::Reviewer,
            error,
        } => review_unavailable(run, format!("the reviewer model failed: {error}")),
        event => Next::to(To::InTurn(event)),
    }
}

/// The reviewer's answer: a review, or, once, a request to repair it.
fn answered(run: &mut Run, text: String) -> Next {
    let files = run
        .reviewing
        .reviewing
        .as_ref()
        .map_or(&[][..], |(_, f)| f.as_slice());
    match review::parse_review(&text).and_then(|r| review::check(r, files)) {
        Ok(r) => reviewed(run, r),
        Err(e) if !run.reviewing.review_repaired => {
            run.reviewing.review_repaired = true;
            run.turn.push(crate::conversation::Message::assistant(text));
            run.turn.push(review::repair(&e));
            Next::new(
                vec![Effect::Progress(format!(
                    "the reviewer's answer could not be read ({e}); asking once more"
                ))],
                To::Ask(Call::Turn),
            )
        }
        Err(e) => review_unavailable(
            run,
            format!("the reviewer's answer could not be read twice: {e}"),
        ),
    }
}

/// Starts the reviewer on `diff`; an empty diff has nothing to review.
fn review_diff(run: &mut Run, diff: String, files: Vec<review::ChangedFile>) -> Next {
    if diff.trim().is_empty() {
        return after_review(run);
    }
    run.reviewing.reviewing = Some((diff, files));
    run.reviewing.review_repaired = false;
    Next::to(To::NewTurn(Phase::Reviewing))
}

/// A review was read: in gate mode a rejection goes back to the coder (within the retry
/// budget; once it is spent the run stops with the findings); otherwise the run goes on.
fn reviewed(run: &mut Run, r: review::Review) -> Next {
    let blocking = review::blocks(&r, run.settings.review_min_confidence);
    let feedback = review::feedback(&r);
    let result = review::ReviewResult::Reviewed {
        review: r,
        blocking,
    };
    let summary = result.summary();
    let report = result.report();
    run.reviewing.last_review = Some(result.clone());
    run.reviewing.reviewing = None;
    let effects = vec![Effect::Reviewed(result)];
    let review_only = run.reviewing.review_only;
    if blocking && run.settings.review == review::ReviewMode::Gate && !review_only {
        run.feedback.push(feedback);
        // Once the budget is spent, the change comes to the user with the findings.
        let retry = Retry {
            why: "the reviewer found problems".into(),
            report: Some(report),
        };
        return Next::new(effects, To::Retry(retry));
    }
    if !review_only {
        run.ending.add(&summary);
    }
    after_review(run).after(effects)
}

/// No review could be had: recorded as such (never as an approval), and the run goes on.
fn review_unavailable(run: &mut Run, reason: String) -> Next {
    let result = review::ReviewResult::Unavailable { reason };
    run.reviewing.last_review = Some(result.clone());
    run.reviewing.reviewing = None;
    after_review(run).after(vec![Effect::Reviewed(result)])
}

/// The run after its review: an on-demand review ends with its summary; a run goes on to
/// its evaluation or its end.
fn after_review(run: &Run) -> Next {
    if run.reviewing.review_only {
        let answer = run
            .reviewing
            .last_review
            .as_ref()
            .map_or("nothing to review: the diff is empty".to_string(), |r| {
                r.summary()
            });
        return Next::finish(Phase::Done, answer);
    }
    Next::to(To::Evaluate)
}
