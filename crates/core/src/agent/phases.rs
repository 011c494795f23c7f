//! What each phase does with an event: `transition` dispatches on the phase to one function
//! per phase, and the steps they share (calling the coder, retrying, finishing) follow them.
//! Pure like the rest of `agent`: the effects say what to do, the runtime does it.

use super::review::{self, ReviewMode};
use super::{
    AgentKind, Effect, Event, Intent, Phase, Run, Task, TestSummary, agents, alternating,
    diff_hash, needs_plan, prompts,
};
use crate::conversation::{Message, Role, ToolCall};
use crate::edit::{EditPlan, ParseError, PlanOutcome};

/// One event in the run's phase. A final phase takes nothing more; a cancel ends any other;
/// an event the phase does not expect (a late answer) changes nothing.
pub(super) fn transition(run: &mut Run, event: Event) -> Vec<Effect> {
    if run.phase.is_final() {
        return Vec::new();
    }
    if event == Event::Cancel {
        return finish(
            run,
            Phase::Cancelled,
            "cancelled; edits already applied stay (the editor's undo reverts them)".into(),
        );
    }
    match run.phase {
        Phase::Baseline => on_baseline(run, event),
        Phase::Classifying => on_classifying(run, event),
        Phase::Planning => on_planning(run, event),
        Phase::Evaluating => on_evaluating(run, event),
        Phase::Explaining => on_explaining(run, event),
        Phase::Coding => on_coding(run, event),
        Phase::Locating => on_locating(run, event),
        Phase::Approving => on_approving(run, event),
        Phase::Applying => on_applying(run, event),
        Phase::Testing => on_testing(run, event),
        Phase::Reflecting => on_reflecting(run, event),
        Phase::Reviewing => on_reviewing(run, event),
        Phase::Reproducing => super::reproduce::on_reproducing(run, event),
        Phase::Done | Phase::Failed | Phase::Cancelled => Vec::new(),
    }
}

/// Before the first edit: the start, and the tests that tell what fails (or, for a test
/// goal, are the answer).
fn on_baseline(run: &mut Run, event: Event) -> Vec<Effect> {
    match event {
        Event::Start => start(run),
        Event::TestsFinished(t) if run.intent == Some(Intent::Test) => {
            let answer = if t.passed {
                format!("the tests pass ({} passed)", t.passed_count)
            } else {
                format!(
                    "{} test(s) fail, {} pass:\n{}",
                    t.failed_count, t.passed_count, t.report
                )
            };
            run.tests = Some(t);
            finish(run, Phase::Done, answer)
        }
        Event::TestsFinished(t) => {
            let passed = t.passed;
            // A bug the goal describes and no test shows (or `--reproduce`): a test first.
            let reproduce = run.tester.max_attempts > 0
                && (run.tester.reproduce || (passed && super::tester::describes_bug(&run.goal)));
            run.tests = Some(t);
            if reproduce {
                return super::reproduce::start(run, super::tester::Mode::Reproduce);
            }
            if passed {
                finish(
                    run,
                    Phase::Done,
                    "the tests already pass; nothing to fix".into(),
                )
            } else {
                code(run)
            }
        }
        Event::TestsUnavailable(why) => fail(
            run,
            format!("cannot run the tests to find the failures: {why}"),
        ),
        _ => Vec::new(),
    }
}

/// The intent model's answer routes an unclear goal.
fn on_classifying(run: &mut Run, event: Event) -> Vec<Effect> {
    match event {
        Event::ModelAnswered { text, .. } => {
            run.intent = Some(prompts::parse_intent(&text));
            start(run)
        }
        Event::ModelFailed { error, .. } => {
            // Classification only routes the goal; without it, the goal is taken as an edit.
            run.intent = Some(Intent::Edit);
            let mut effects = vec![Effect::Warn(format!(
                "the intent model failed ({error}); treating the goal as an edit"
            ))];
            effects.extend(start(run));
            effects
        }
        _ => Vec::new(),
    }
}

/// The planner's turn: its tool calls, then the plan, read once more if it does not parse.
fn on_planning(run: &mut Run, event: Event) -> Vec<Effect> {
    match event {
        Event::ModelAnswered { role, text } if role != Role::Summarizer => {
            match prompts::parse_plan(&text) {
                Ok(tasks) => {
                    run.parse_retry_used = false;
                    let titles: Vec<String> = tasks
                        .iter()
                        .map(|t| format!("{} {}", t.id, t.title))
                        .collect();
                    run.tasks = tasks;
                    let mut effects =
                        vec![Effect::Progress(format!("plan: {}", titles.join("; ")))];
                    effects.extend(code(run));
                    effects
                }
                Err(e) if !run.parse_retry_used => {
                    run.parse_retry_used = true;
                    let (mut messages, shown) = prompts::plan(run, None);
                    messages.extend(run.exchange.iter().cloned());
                    let mut messages = super::context::lean(messages, &shown);
                    messages.push(Message::user(format!(
                        "Your plan could not be read ({e}). Answer with the JSON only."
                    )));
                    vec![Effect::CallModel {
                        role: Role::Planner,
                        messages,
                        tools: Vec::new(),
                    }]
                }
                Err(e) => fail(run, format!("the plan could not be read twice: {e}")),
            }
        }
        Event::ModelFailed { role, error } if role != Role::Summarizer => {
            fail(run, format!("the planner model failed: {error}"))
        }
        event => in_turn(run, event),
    }
}

/// The evaluator's score: done, or not complete (a correction round or a partial end). It
/// never blocks: an unreadable or failed evaluation ends the run done.
fn on_evaluating(run: &mut Run, event: Event) -> Vec<Effect> {
    match event {
        Event::ModelAnswered { text, .. } => match prompts::parse_evaluation(&text) {
            Ok((score, reason, false)) => incomplete(run, score, reason),
            Ok((score, reason, true)) => {
                tracing::info!(score, reason = %reason, "evaluation");
                let answer = format!("{} (evaluation: {score}/5, {reason})", run.done_answer);
                finish(run, Phase::Done, answer)
            }
            Err(_) => {
                let answer = run.done_answer.clone();
                finish(run, Phase::Done, answer)
            }
        },
        Event::ModelFailed { .. } => {
            let answer = run.done_answer.clone();
            finish(run, Phase::Done, answer)
        }
        _ => Vec::new(),
    }
}

/// A Markdown answer's turn: its tool calls, then the answer, which ends the run.
fn on_explaining(run: &mut Run, event: Event) -> Vec<Effect> {
    match event {
        Event::ModelAnswered { role, text } if role != Role::Summarizer => {
            finish(run, Phase::Done, text)
        }
        Event::ModelFailed { role, error } if role != Role::Summarizer => {
            model_failed(run, role, error)
        }
        event => in_turn(run, event),
    }
}

/// The coder's turn: its tool calls, then its edits (as text, or as editing tool calls), to
/// be located; an answer that does not parse is sent back once.
fn on_coding(run: &mut Run, event: Event) -> Vec<Effect> {
    match event {
        // Editing tools are proposals: the turn's change, located, shown and tested like
        // edits written as text.
        Event::ToolCalls { calls, .. }
            if calls
                .iter()
                .any(|c| agents::is_edit_tool(&c.name) && run.agent.tools.contains(&c.name)) =>
        {
            let edits: Vec<(&str, &serde_json::Value)> = calls
                .iter()
                .filter(|c| agents::is_edit_tool(&c.name))
                .map(|c| (c.name.as_str(), &c.arguments))
                .collect();
            proposed(run, crate::edit::plan_from_tool_calls(&edits))
        }
        Event::ModelAnswered { role, text } if role != Role::Summarizer => {
            proposed(run, crate::edit::parse_plan(&text))
        }
        Event::ModelFailed { role, error } if role != Role::Summarizer => {
            model_failed(run, role, error)
        }
        event => in_turn(run, event),
    }
}

/// The coder's edits, read from its answer or its editing tool calls: to be located, or, when
/// they could not be read, sent back.
fn proposed(run: &mut Run, plan: Result<EditPlan, ParseError>) -> Vec<Effect> {
    match plan {
        Ok(plan) => {
            // The very edits refused before, sent again: asking, locating or applying them
            // again would only repeat the refusal until the budget is spent.
            let hash = plan_hash(&plan);
            if let Some((_, why)) = run.refused.iter().find(|(h, _)| *h == hash) {
                let answer = format!(
                    "stopped: the model proposed again the change that was refused ({why})"
                );
                return fail(run, answer);
            }
            run.proposal = hash;
            run.parse_retry_used = false;
            run.phase = Phase::Locating;
            vec![Effect::Locate(plan)]
        }
        Err(e) => unreadable(run, e.to_string()),
    }
}

/// The events of a model's turn that are not its answer, in every phase with a turn
/// (planning, explaining, coding): tool calls and their results, and the summary that
/// replaces a long turn's tool rounds.
fn in_turn(run: &mut Run, event: Event) -> Vec<Effect> {
    match event {
        Event::ModelAnswered {
            role: Role::Summarizer,
            text,
        } => {
            let rounds = run.exchange.len();
            run.exchange = vec![Message::user(format!(
                "Notes on your earlier tool calls in this turn (summarised to save room):\n{}",
                text.trim()
            ))];
            vec![
                Effect::Progress(format!(
                    "summarised {rounds} messages of tool calls to keep the prompt small"
                )),
                continue_call(run),
            ]
        }
        Event::ModelFailed {
            role: Role::Summarizer,
            error,
        } => vec![
            Effect::Warn(format!(
                "the summary of the tool calls failed ({error}); they stay as they are"
            )),
            continue_call(run),
        ],
        Event::ToolCalls { text, calls } => {
            run.tool_steps += 1;
            run.exchange.push(Message::calls(text, calls.clone()));
            let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
            vec![
                Effect::Progress(format!("the model reads the code ({})", names.join(", "))),
                Effect::RunTools(calls),
            ]
        }
        Event::ToolResults(results) => tool_results(run, results),
        _ => Vec::new(),
    }
}

/// The tools' results join the turn; then the model is called again, told when that was its
/// last tool round, or first the summarizer, every `summarize_after` rounds.
fn tool_results(run: &mut Run, results: Vec<(ToolCall, String)>) -> Vec<Effect> {
    for (call, text) in &results {
        run.exchange.push(Message::tool_result(call, text.clone()));
    }
    if run.tool_steps >= run.budget.max_tool_steps {
        let what = if run.phase == Phase::Coding {
            "Answer now with your edits."
        } else {
            "Answer now."
        };
        run.exchange.push(Message::user(format!(
            "That was the last tool call of this turn ({} rounds, agent.max_tool_steps). {what}",
            run.tool_steps
        )));
    } else if run.budget.summarize_after > 0
        && run.tool_steps.is_multiple_of(run.budget.summarize_after)
    {
        return vec![Effect::CallModel {
            role: Role::Summarizer,
            messages: prompts::summarize(run),
            tools: Vec::new(),
        }];
    }
    vec![continue_call(run)]
}

/// The located edits: shown for approval, or, when some did not apply, sent back to the
/// coder with the reasons.
fn on_locating(run: &mut Run, event: Event) -> Vec<Effect> {
    let Event::Located(outcome) = event else {
        return Vec::new();
    };
    if !outcome.all_applied() || outcome.changes.is_empty() {
        return not_located(run, &outcome);
    }
    // The model was told why this very change was refused, and sent it again: asking again
    // would only loop until the budget is spent.
    let hash = diff_hash(&outcome.changes);
    if let Some((_, why)) = run.refused.iter().find(|(h, _)| *h == hash) {
        let answer =
            format!("stopped: the model proposed again the change that was refused ({why})");
        return fail(run, answer);
    }
    let diff = outcome.unified_diff();
    run.pending = outcome.changes;
    run.phase = Phase::Approving;
    // The status shows what the run waits for, not the step before it.
    let files: Vec<&str> = run.pending.iter().map(|c| c.path.as_str()).collect();
    vec![
        Effect::Progress(format!("proposing a change to {}", files.join(", "))),
        Effect::AskApproval {
            changes: run.pending.clone(),
            diff,
        },
    ]
}

/// A plan with nothing to approve: every edit already in place (the tests are next), or
/// some refused (none is applied, and the coder hears why).
fn not_located(run: &mut Run, outcome: &PlanOutcome) -> Vec<Effect> {
    if outcome.all_applied() {
        // Everything was already there: nothing to change, so check the tests.
        run.phase = Phase::Testing;
        return vec![
            Effect::Progress("the edits are already in place; running the tests".into()),
            Effect::RunTests,
        ];
    }
    let why: Vec<String> = outcome
        .refused()
        .map(|r| match &r.status {
            crate::edit::EditStatus::Refused { reason, .. } => {
                // The rule, without the closest lines the feedback shows.
                let rule = reason.split("; the closest lines").next().unwrap_or(reason);
                format!("{}: {rule}", r.path)
            }
            _ => r.path.clone(),
        })
        .collect();
    run.refused.push((run.proposal, why.join("; ")));
    run.feedback.push(format!(
        "Some edits could not be applied, so none were. Fix them and send the whole change again \
         (the same edits again end the run):\n{}",
        outcome.refusal_report()
    ));
    retry_or_stop(run, "the proposed edits did not apply")
}

/// The user's (or the approval policy's) answer to the proposed change.
fn on_approving(run: &mut Run, event: Event) -> Vec<Effect> {
    match event {
        Event::Approved => {
            run.phase = Phase::Applying;
            vec![Effect::Apply(run.pending.clone())]
        }
        Event::Refused(why) => {
            run.refused.push((diff_hash(&run.pending), why.clone()));
            run.refused.push((run.proposal, why.clone()));
            run.pending.clear();
            run.feedback.push(format!(
                "The change was not applied: {why}. Make the change again without that \
                 (the same change again ends the run)."
            ));
            retry_or_stop(run, "the change was refused")
        }
        Event::Rejected => super::reproduce::test_rejected(run).unwrap_or_else(|| {
            fail(
                run,
                "the proposed change was rejected; nothing was applied".into(),
            )
        }),
        _ => Vec::new(),
    }
}

/// The change reached the files (the tests are next), failed, or met text that moved on.
fn on_applying(run: &mut Run, event: Event) -> Vec<Effect> {
    match event {
        Event::Applied => {
            let hash = diff_hash(&run.pending);
            run.edit_history.push(hash);
            remember_originals(run);
            for c in &run.pending {
                if !run.files_changed.contains(&c.path) {
                    run.files_changed.push(c.path.clone());
                }
            }
            run.pending.clear();
            run.phase = Phase::Testing;
            vec![
                Effect::Progress("running the tests".into()),
                Effect::RunTests,
            ]
        }
        Event::ApplyFailed(why) => fail(run, format!("the change could not be applied: {why}")),
        Event::Stale(why) => {
            run.pending.clear();
            run.feedback.push(format!(
                "{why}. The files below are the current text; make the change again against it."
            ));
            retry_or_stop(run, "the file changed while the change was prepared")
        }
        _ => Vec::new(),
    }
}

/// The tests after an applied change: the task is done, or the reflector looks at the
/// failures (unless the run goes round in circles).
fn on_testing(run: &mut Run, event: Event) -> Vec<Effect> {
    if let Some(effects) = super::reproduce::on_new_test_tested(run, &event) {
        return effects;
    }
    match event {
        Event::TestsFinished(t) if t.passed => {
            run.tests = Some(t);
            let answer = format!("done: the tests pass after {} iteration(s)", run.iterations);
            task_done(run, answer)
        }
        Event::TestsFinished(t) => tests_failed(run, t),
        // An edit in a project without tests is done once applied; a fix needs its tests.
        Event::TestsUnavailable(why) if run.intent == Some(Intent::Edit) => {
            let answer = format!("done: the change is applied; no tests ran ({why})");
            task_done(run, answer)
        }
        Event::TestsUnavailable(why) => fail(
            run,
            format!("the change was applied but the tests could not run: {why}"),
        ),
        _ => Vec::new(),
    }
}

/// The tests still fail: stop when the same failures keep coming back or the edits
/// alternate, else ask the reflector why.
fn tests_failed(run: &mut Run, t: TestSummary) -> Vec<Effect> {
    let fingerprint = t.fingerprint.clone();
    run.tests = Some(t);
    // The same failures after a different edit, twice: more of the same will not help.
    let repeats = run
        .failure_history
        .iter()
        .filter(|f| **f == fingerprint)
        .count();
    run.failure_history.push(fingerprint);
    if repeats >= 2 {
        return fail(
            run,
            "stopped: the same failure came back after different edits".into(),
        );
    }
    if alternating(&run.edit_history) {
        return fail(
            run,
            "stopped: the edits alternate between two versions".into(),
        );
    }
    run.phase = Phase::Reflecting;
    vec![Effect::CallModel {
        role: Role::Reflector,
        messages: prompts::reflect(run),
        tools: Vec::new(),
    }]
}

/// The reflector's advice goes to the coder, which tries again.
fn on_reflecting(run: &mut Run, event: Event) -> Vec<Effect> {
    match event {
        Event::ModelAnswered { text, .. } => {
            match prompts::parse_reflection(&text) {
                Ok(r) => run.feedback.push(format!(
                    "The tests still fail. Reflection: {}\nNext step: {}",
                    r.report, r.next_step
                )),
                // The reflector only advises; an unreadable reflection is passed on as text.
                Err(_) => run
                    .feedback
                    .push(format!("The tests still fail. Notes: {}", text.trim())),
            }
            retry_or_stop(run, "the tests still fail")
        }
        Event::ModelFailed { role, error } => model_failed(run, role, error),
        _ => Vec::new(),
    }
}

/// A model call the run cannot go on without failed.
fn model_failed(run: &mut Run, role: Role, error: String) -> Vec<Effect> {
    fail(run, format!("the {} model failed: {error}", role.as_str()))
}

/// The first step once the intent is known: a reading agent answers at once; otherwise
/// classify an unclear goal, run the tests first for a fix, plan a large edit, or go straight
/// to the coder.
fn start(run: &mut Run) -> Vec<Effect> {
    if run.agent.kind != AgentKind::Build {
        return answer(run);
    }
    let Some(intent) = run.intent else {
        run.phase = Phase::Classifying;
        return vec![Effect::CallModel {
            role: Role::Intent,
            messages: prompts::intent(run),
            tools: Vec::new(),
        }];
    };
    run.phase = Phase::Baseline;
    match intent {
        Intent::Test => vec![
            Effect::Progress("running the tests".into()),
            Effect::RunTests,
        ],
        Intent::Explain => answer(run),
        Intent::Fix => vec![
            Effect::Progress("running the tests to see what fails".into()),
            Effect::RunTests,
        ],
        Intent::Edit if needs_plan(&run.goal) => {
            // Mixed mode: the planner reads the code with the reading tools first (when the
            // run has tools), then the build agent works through its tasks.
            run.phase = Phase::Planning;
            run.exchange.clear();
            run.tool_steps = 0;
            vec![continue_call(run)]
        }
        Intent::Edit => code(run),
    }
}

/// A Markdown answer: an explanation, a plan (the plan agent) or a review (the review
/// agent), with the reading tools.
fn answer(run: &mut Run) -> Vec<Effect> {
    run.phase = Phase::Explaining;
    run.exchange.clear();
    run.tool_steps = 0;
    let what = match run.agent.kind {
        AgentKind::Plan => "planning",
        AgentKind::Review => "reviewing",
        AgentKind::Build => "reading the code to answer",
    };
    vec![Effect::Progress(what.into()), continue_call(run)]
}

/// The current task passed its tests: the next task, or the end (with the evaluator's score
/// when asked for).
fn task_done(run: &mut Run, answer: String) -> Vec<Effect> {
    if run.task + 1 < run.tasks.len() {
        run.task += 1;
        run.retries = 0;
        run.feedback.clear();
        let t = &run.tasks[run.task];
        let mut effects = vec![Effect::Progress(format!(
            "task {} of {}: {}",
            run.task + 1,
            run.tasks.len(),
            t.title
        ))];
        effects.extend(code(run));
        return effects;
    }
    run.done_answer = answer;
    let mut effects = super::reproduce::passed_after_fix(run);
    match super::reproduce::after_fix(run) {
        Ok(tester) => {
            effects.extend(tester);
            return effects;
        }
        Err(notes) => effects.extend(notes),
    }
    if let Some(r) = &run.tester_record {
        run.done_answer = format!("{}; {}", run.done_answer, r.summary());
    }
    effects.extend(after_tasks(run));
    effects
}

/// Once the tasks are done (and the tester's regression test, if any): the review of the
/// run's diff, or its evaluation, or its end.
pub(super) fn after_tasks(run: &mut Run) -> Vec<Effect> {
    if run.review != ReviewMode::Off && !run.files_changed.is_empty() {
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

/// After the review: the evaluator's score when asked for, or the end.
fn evaluate_or_finish(run: &mut Run) -> Vec<Effect> {
    let answer = run.done_answer.clone();
    if run.evaluation != super::Evaluation::Off {
        run.phase = Phase::Evaluating;
        return vec![Effect::CallModel {
            role: Role::Evaluator,
            messages: prompts::evaluate(run),
            tools: Vec::new(),
        }];
    }
    finish(run, Phase::Done, answer)
}

/// Each file of an applied change: its text before the run (kept from its first change) and
/// its text now, for the steps' diff.
fn remember_originals(run: &mut Run) {
    for c in &run.pending {
        match run.originals.iter_mut().find(|(p, _, _)| *p == c.path) {
            Some(entry) => entry.2 = c.new_text.clone(),
            None => run
                .originals
                .push((c.path.clone(), c.original.clone(), c.new_text.clone())),
        }
    }
}

/// The reviewer's turn: the run's diff (git's, or the steps'), the reviewer's tool calls, and
/// its answer, read once more if it does not parse; then the gate's decision.
fn on_reviewing(run: &mut Run, event: Event) -> Vec<Effect> {
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
        } => {
            let files = run
                .reviewing
                .as_ref()
                .map_or(&[][..], |(_, f)| f.as_slice());
            match review::parse_review(&text).and_then(|r| review::check(r, files)) {
                Ok(r) => reviewed(run, r),
                Err(e) if !run.review_repaired => {
                    run.review_repaired = true;
                    run.exchange.push(Message::assistant(text));
                    run.exchange.push(review::repair(&e));
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
        Event::ModelFailed {
            role: Role::Reviewer,
            error,
        } => review_unavailable(run, format!("the reviewer model failed: {error}")),
        event => in_turn(run, event),
    }
}

/// Starts the reviewer on `diff`; an empty diff has nothing to review.
pub(super) fn review_diff(
    run: &mut Run,
    diff: String,
    files: Vec<review::ChangedFile>,
) -> Vec<Effect> {
    if diff.trim().is_empty() {
        return after_review(run);
    }
    run.phase = Phase::Reviewing;
    run.reviewing = Some((diff, files));
    run.review_repaired = false;
    run.exchange.clear();
    run.tool_steps = 0;
    vec![continue_call(run)]
}

/// A review was read: in gate mode a rejection goes back to the coder (within the retry
/// budget; once it is spent the run stops with the findings); otherwise the run goes on.
fn reviewed(run: &mut Run, r: review::Review) -> Vec<Effect> {
    let blocking = review::blocks(&r, run.review_min_confidence);
    let feedback = review::feedback(&r);
    let result = review::ReviewResult::Reviewed {
        review: r,
        blocking,
    };
    let summary = result.summary();
    let report = result.report();
    run.last_review = Some(result.clone());
    run.reviewing = None;
    let mut effects = vec![Effect::Reviewed(result)];
    if blocking && run.review == ReviewMode::Gate && !run.review_only {
        run.feedback.push(feedback);
        let mut next = retry_or_stop(run, "the reviewer found problems");
        // The budget is spent: the change comes to the user with the findings.
        if let Some(Effect::Finish { answer, .. }) = next.last_mut() {
            answer.push_str(&format!("\n{report}"));
        }
        effects.extend(next);
        return effects;
    }
    if !run.review_only {
        run.done_answer = format!("{}; {summary}", run.done_answer);
    }
    effects.extend(after_review(run));
    effects
}

/// No review could be had: recorded as such (never as an approval), and the run goes on.
fn review_unavailable(run: &mut Run, reason: String) -> Vec<Effect> {
    let result = review::ReviewResult::Unavailable { reason };
    run.last_review = Some(result.clone());
    run.reviewing = None;
    let mut effects = vec![Effect::Reviewed(result)];
    effects.extend(after_review(run));
    effects
}

/// The run after its review: an on-demand review ends with its summary; a run goes on to
/// its evaluation or its end.
fn after_review(run: &mut Run) -> Vec<Effect> {
    if run.review_only {
        let answer = run
            .last_review
            .as_ref()
            .map_or("nothing to review: the diff is empty".to_string(), |r| {
                r.summary()
            });
        return finish(run, Phase::Done, answer);
    }
    evaluate_or_finish(run)
}

/// The evaluator found the goal not fully reached: under `full`, a correction round whose
/// task is the critique (while rounds and iterations are left); otherwise the run ends
/// partial with the reason.
fn incomplete(run: &mut Run, score: u8, reason: String) -> Vec<Effect> {
    tracing::info!(score, reason = %reason, "evaluation: incomplete");
    let full = run.evaluation == super::Evaluation::Full;
    if full
        && run.corrections < run.budget.max_corrections
        && run.iterations < run.budget.max_iterations
    {
        run.corrections += 1;
        let id = format!("C{}", run.corrections);
        run.tasks.push(Task {
            id: id.clone(),
            title: format!("finish the goal: {reason}"),
            rationale: "the evaluator found the goal not fully reached".into(),
            acceptance: "the evaluator finds the goal reached and the tests pass".into(),
            artifacts: Vec::new(),
        });
        run.task = run.tasks.len() - 1;
        run.retries = 0;
        run.feedback.clear();
        let mut effects = vec![Effect::Progress(format!(
            "correction {} of {}: {reason}",
            run.corrections, run.budget.max_corrections
        ))];
        effects.extend(code(run));
        return effects;
    }
    run.partial = true;
    let answer = format!(
        "partial: {} (evaluation: {score}/5, not complete: {reason})",
        run.done_answer
    );
    fail(run, answer)
}

/// An answer that could not be read as edits is sent back once; twice ends the run.
fn unreadable(run: &mut Run, e: String) -> Vec<Effect> {
    if run.parse_retry_used {
        return fail(
            run,
            format!("the coder's answer could not be read as edits twice: {e}"),
        );
    }
    run.parse_retry_used = true;
    run.feedback.push(format!(
        "Your last answer could not be read as edits ({e}). Answer again with SEARCH/REPLACE blocks or JSON {{\"edits\": [...]}} only."
    ));
    vec![
        Effect::Warn(format!(
            "the coder's answer did not parse ({e}); asking once more"
        )),
        call_coder(run),
    ]
}

pub(super) fn code(run: &mut Run) -> Vec<Effect> {
    vec![
        Effect::Progress("asking the model for a change".into()),
        call_coder(run),
    ]
}

fn call_coder(run: &mut Run) -> Effect {
    run.phase = Phase::Coding;
    run.iterations += 1;
    // Each turn reads afresh: the files that matter now are in its prompt.
    run.exchange.clear();
    run.tool_steps = 0;
    continue_call(run)
}

/// The model's next call within its turn (the coder's, the planner's or a Markdown
/// answer's): its prompt, then the tool calls and results so far, with the tools its phase
/// allows while it has tool steps left.
pub(super) fn continue_call(run: &mut Run) -> Effect {
    if !matches!(
        run.phase,
        Phase::Planning | Phase::Explaining | Phase::Reviewing
    ) {
        run.phase = Phase::Coding;
    }
    let (role, (mut messages, shown), tools) = match run.phase {
        Phase::Planning => (
            Role::Planner,
            prompts::plan(run, None),
            run.agent.reading_tools(),
        ),
        Phase::Explaining => (
            Role::Coder,
            prompts::explain(run),
            run.agent.reading_tools(),
        ),
        Phase::Reviewing => (
            Role::Reviewer,
            (prompts::review(run), Vec::new()),
            run.agent.reading_tools(),
        ),
        _ => (Role::Coder, prompts::code(run), run.agent.tools.clone()),
    };
    messages.extend(run.exchange.iter().cloned());
    // Each file's lines once: an earlier copy the turn read again becomes a pointer.
    let messages = super::context::lean(messages, &shown);
    Effect::CallModel {
        role,
        messages,
        tools: if run.tool_steps < run.budget.max_tool_steps {
            tools
        } else {
            Vec::new()
        },
    }
}

fn retry_or_stop(run: &mut Run, why: &str) -> Vec<Effect> {
    run.retries += 1;
    if run.retries > run.budget.max_retries {
        return fail(
            run,
            format!(
                "stopped after {} retries (agent.max_retries): {why}",
                run.budget.max_retries
            ),
        );
    }
    if run.iterations >= run.budget.max_iterations {
        return fail(
            run,
            format!(
                "stopped at the iteration budget ({} iterations, agent.max_iterations): {why}",
                run.budget.max_iterations
            ),
        );
    }
    let mut effects = Vec::new();
    if !run.warned_budget && (run.iterations + 1) * 5 >= run.budget.max_iterations * 4 {
        run.warned_budget = true;
        effects.push(Effect::Warn(format!(
            "iteration {} of {}: 80% of the budget is used",
            run.iterations + 1,
            run.budget.max_iterations
        )));
    }
    effects.push(Effect::Progress(format!(
        "{why}; trying again (retry {} of {})",
        run.retries, run.budget.max_retries
    )));
    effects.push(call_coder(run));
    effects
}

/// Identifies a proposal by its edits, so the same edits sent again are known.
fn plan_hash(plan: &EditPlan) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(plan).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// The run ends failed, with `answer` saying why.
pub(super) fn fail(run: &mut Run, answer: String) -> Vec<Effect> {
    finish(run, Phase::Failed, answer)
}

fn finish(run: &mut Run, status: Phase, answer: String) -> Vec<Effect> {
    run.phase = status;
    vec![Effect::Finish { status, answer }]
}
