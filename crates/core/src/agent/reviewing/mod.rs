//! The reviewer's phase (`Phase::Reviewing`): once the tasks are done, the run's diff (git's,
//! or the steps'), the reviewer's turn on it, and the gate's decision: in gate mode a
//! confident P0/P1 finding sends the change back to the coder; otherwise the run goes on to
//! its evaluation. `agent-ls review` runs this phase alone on a given diff. `Reviewer` is
//! the phase's own state. What a review is (its JSON, its checks) is `review.rs`'s.

mod state;

pub(super) use state::Reviewer;

use super::evaluate::evaluate_or_finish;
use super::steps::{finish, retry_or_stop};
use super::turn::{continue_call, in_turn};
use super::{Effect, Event, Phase, Run, review};
use crate::conversation::Role;

/// Once the tasks are done (and the tester's regression test, if any): the review of the
/// run's diff, or its evaluation, or its end.
pub(super) fn after_tasks(run: &mut Run) -> Vec<Effect> {
    if run.settings.review != review::ReviewMode::Off && !run.files_changed.is_empty() {
        run.phase = Phase::Reviewing;
        return vec![
            Effect::Progress("the reviewer reads the run's change".into()),
            Effect::DiffRun {
                files: run.files_changed.clone(),
            },
        ];
    }
    evaluate_or_finish(run)
}

/// An on-demand review: the run is the review of `diff` and nothing else.
pub(super) fn review_only(
    run: &mut Run,
    diff: String,
    files: Vec<review::ChangedFile>,
) -> Vec<Effect> {
    run.reviewing.review_only = true;
    review_diff(run, diff, files)
}

/// The reviewer's turn: the run's diff (git's, or the steps'), the reviewer's tool calls, and
/// its answer, read once more if it does not parse; then the gate's decision.
pub(super) fn on_reviewing(run: &mut Run, event: Event) -> Vec<Effect> {
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
        event => in_turn(run, event),
    }
}

/// The reviewer's answer: a review, or, once, a request to repair it.
fn answered(run: &mut Run, text: String) -> Vec<Effect> {
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
            vec![
                Effect::Progress(format!(
                    "the reviewer's answer could not be read ({e}); asking once more"
                )),
                continue_call(run),
            ]
        }
        Err(e) => review_unavailable(
            run,
            format!("the reviewer's answer could not be read twice: {e}"),
        ),
    }
}

/// Starts the reviewer on `diff`; an empty diff has nothing to review.
fn review_diff(run: &mut Run, diff: String, files: Vec<review::ChangedFile>) -> Vec<Effect> {
    if diff.trim().is_empty() {
        return after_review(run);
    }
    run.phase = Phase::Reviewing;
    run.reviewing.reviewing = Some((diff, files));
    run.reviewing.review_repaired = false;
    run.turn.begin();
    vec![continue_call(run)]
}

/// A review was read: in gate mode a rejection goes back to the coder (within the retry
/// budget; once it is spent the run stops with the findings); otherwise the run goes on.
fn reviewed(run: &mut Run, r: review::Review) -> Vec<Effect> {
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
    let mut effects = vec![Effect::Reviewed(result)];
    let review_only = run.reviewing.review_only;
    if blocking && run.settings.review == review::ReviewMode::Gate && !review_only {
        run.feedback.push(feedback);
        let mut next = retry_or_stop(run, "the reviewer found problems");
        // The budget is spent: the change comes to the user with the findings.
        if let Some(Effect::Finish { answer, .. }) = next.last_mut() {
            answer.push_str(&format!("\n{report}"));
        }
        effects.extend(next);
        return effects;
    }
    if !review_only {
        run.ending.add(&summary);
    }
    effects.extend(after_review(run));
    effects
}

/// No review could be had: recorded as such (never as an approval), and the run goes on.
fn review_unavailable(run: &mut Run, reason: String) -> Vec<Effect> {
    let result = review::ReviewResult::Unavailable { reason };
    run.reviewing.last_review = Some(result.clone());
    run.reviewing.reviewing = None;
    let mut effects = vec![Effect::Reviewed(result)];
    effects.extend(after_review(run));
    effects
}

/// The run after its review: an on-demand review ends with its summary; a run goes on to
/// its evaluation or its end.
fn after_review(run: &mut Run) -> Vec<Effect> {
    if run.reviewing.review_only {
        let answer = run
            .reviewing
            .last_review
            .as_ref()
            .map_or("nothing to review: the diff is empty".to_string(), |r| {
                r.summary()
            });
        return finish(run, Phase::Done, answer);
    }
    evaluate_or_finish(run)
}
