//! What each phase does with an event: `transition` dispatches on the phase to one function
//! per phase. The phases of the coding loop are here (the start, classifying, planning,
//! explaining, coding, testing, reflecting); a phase with state of its own has its own
//! module (`change`, `reviewing`, `reproduce`, `evaluate`, and `turn` for a model's turn),
//! and the steps they all share are `steps`. Pure like the rest of `agent`: the effects say
//! what to do, the runtime does it.

use super::steps::{code, fail, finish, model_failed, retry_or_stop};
use super::turn::{continue_call, in_turn};
use super::{
    AgentKind, Effect, Event, Intent, Phase, Run, TestSummary, agents, change, evaluate, messages,
    needs_plan, prompts, reproduce, review, reviewing, tester,
};
use crate::conversation::{Message, Role};
use crate::edit::{EditPlan, ParseError};

/// One transition. Every event is accepted in every phase: one that does not fit (a late
/// answer after a cancel, say) changes nothing. An `Input` is taken in any phase.
pub fn step(run: &mut Run, event: Event) -> Vec<Effect> {
    if let Event::Input(input) = event {
        run.take(input);
        return Vec::new();
    }
    let before = run.phase;
    let effects = transition(run, event);
    if run.phase != before {
        tracing::info!(from = ?before, to = ?run.phase, iteration = run.iterations, "agent step");
    }
    effects
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
    vec![
        Effect::Progress(format!(
            "resumed at iteration {} of {}",
            run.iterations, run.settings.budget.max_iterations
        )),
        continue_call(run),
    ]
}

/// An on-demand review (`agent-ls review`): the reviewer reads `diff` (the user's own
/// change), with `files` its changed files and their line counts, and the run ends with its
/// verdict. The run's goal says what the change is for, as far as the caller knows.
pub fn start_review(run: &mut Run, diff: String, files: Vec<review::ChangedFile>) -> Vec<Effect> {
    run.settings.intent = Some(Intent::Edit);
    reviewing::review_only(run, diff, files)
}

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
        Phase::Evaluating => evaluate::on_evaluating(run, event),
        Phase::Explaining => on_explaining(run, event),
        Phase::Coding => on_coding(run, event),
        Phase::Locating => change::on_locating(run, event),
        Phase::Approving => change::on_approving(run, event),
        Phase::Applying => change::on_applying(run, event),
        Phase::Testing => on_testing(run, event),
        Phase::Reflecting => on_reflecting(run, event),
        Phase::Reviewing => reviewing::on_reviewing(run, event),
        Phase::Reproducing => reproduce::on_reproducing(run, event),
        Phase::Done | Phase::Failed | Phase::Cancelled => Vec::new(),
    }
}

/// Before the first edit: the start, and the tests that tell what fails (or, for a test
/// goal, are the answer).
fn on_baseline(run: &mut Run, event: Event) -> Vec<Effect> {
    match event {
        Event::Start => start(run),
        Event::TestsFinished(t) if run.settings.intent == Some(Intent::Test) => {
            let answer = if t.no_tests {
                "no tests yet: the test command ran and found none; ask for the first one \
                 (\"write a test for ...\"), or `agent-ls run --reproduce` has the tester write \
                 one that shows a bug"
                    .to_string()
            } else if t.passed {
                format!("the tests pass ({} passed)", t.passed_count)
            } else if let Some(why) = &t.stopped {
                format!("the tests did not finish: {why}\n{}", t.report)
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
            let settings = &run.settings.tester;
            // No test yet: the first one is the tester's, whatever the goal says.
            let reproduce = settings.max_attempts > 0
                && (settings.reproduce
                    || t.no_tests
                    || (passed && tester::describes_bug(&run.goal)));
            run.tests = Some(t);
            if reproduce {
                return reproduce::start(run, tester::Mode::Reproduce);
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
            run.settings.intent = Some(prompts::parse_intent(&text));
            start(run)
        }
        Event::ModelFailed { error, .. } => {
            // Classification only routes the goal; without it, the goal is taken as an edit.
            run.settings.intent = Some(Intent::Edit);
            let mut effects = vec![Effect::Warn(format!(
                "the intent model failed ({error}); treating the goal as an edit"
            ))];
            effects.extend(start(run));
            effects
        }
        _ => Vec::new(),
    }
}

/// The planner's turn: its tool calls, then the plan.
fn on_planning(run: &mut Run, event: Event) -> Vec<Effect> {
    match event {
        Event::ModelAnswered { role, text } if role != Role::Summarizer => planned(run, &text),
        Event::ModelFailed { role, error } if role != Role::Summarizer => {
            fail(run, format!("the planner model failed: {error}"))
        }
        event => in_turn(run, event),
    }
}

/// The planner's answer: the tasks, which the coder starts on, or, once, a request to answer
/// with the JSON only.
fn planned(run: &mut Run, text: &str) -> Vec<Effect> {
    let e = match prompts::parse_plan(text) {
        Ok(tasks) => {
            run.turn.parsed();
            let titles: Vec<String> = tasks
                .iter()
                .map(|t| format!("{} {}", t.id, t.title))
                .collect();
            run.tasks = tasks;
            let mut effects = vec![Effect::Progress(format!("plan: {}", titles.join("; ")))];
            effects.extend(code(run));
            return effects;
        }
        Err(e) => e,
    };
    if run.turn.retry_once() {
        return fail(run, format!("the plan could not be read twice: {e}"));
    }
    let (mut messages, shown) = messages::plan(run, None);
    messages.extend(run.turn.messages().iter().cloned());
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
            if calls.iter().any(|c| {
                agents::is_edit_tool(&c.name) && run.settings.agent.tools.contains(&c.name)
            }) =>
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
            run.turn.parsed();
            change::locate(run, plan)
        }
        Err(e) => unreadable(run, e.class(), e.to_string()),
    }
}

/// The tests after an applied change: the task is done, or the reflector looks at the
/// failures (unless the run goes round in circles).
fn on_testing(run: &mut Run, event: Event) -> Vec<Effect> {
    if let Some(effects) = reproduce::on_new_test_tested(run, &event) {
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
        Event::TestsUnavailable(why) if run.settings.intent == Some(Intent::Edit) => {
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
    if let Some(effects) = change::undo_if_worse(run, &t) {
        return effects;
    }
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
    if run.change.alternating() {
        return fail(
            run,
            "stopped: the edits alternate between two versions".into(),
        );
    }
    run.phase = Phase::Reflecting;
    vec![Effect::CallModel {
        role: Role::Reflector,
        messages: messages::reflect(run),
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

/// The first step once the intent is known: a reading agent answers at once; otherwise
/// classify an unclear goal, run the tests first for a fix, plan a large edit, or go straight
/// to the coder.
fn start(run: &mut Run) -> Vec<Effect> {
    if run.settings.agent.kind != AgentKind::Build {
        return answer(run);
    }
    let Some(intent) = run.settings.intent else {
        run.phase = Phase::Classifying;
        return vec![Effect::CallModel {
            role: Role::Intent,
            messages: messages::intent(run),
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
            run.turn.begin();
            vec![continue_call(run)]
        }
        Intent::Edit => code(run),
    }
}

/// A Markdown answer: an explanation, a plan (the plan agent) or a review (the review
/// agent), with the reading tools.
fn answer(run: &mut Run) -> Vec<Effect> {
    run.phase = Phase::Explaining;
    run.turn.begin();
    let what = match run.settings.agent.kind {
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
    run.ending.set_answer(answer);
    let mut effects = reproduce::passed_after_fix(run);
    match reproduce::after_fix(run) {
        Ok(tester) => {
            effects.extend(tester);
            return effects;
        }
        Err(notes) => effects.extend(notes),
    }
    if let Some(summary) = run.reproducing.record().map(tester::Record::summary) {
        run.ending.add(&summary);
    }
    effects.extend(reviewing::after_tasks(run));
    effects
}

/// An answer that could not be read as edits is sent back once; twice ends the run.
fn unreadable(run: &mut Run, class: &'static str, e: String) -> Vec<Effect> {
    if run.turn.retry_once() {
        return fail(
            run,
            format!("the coder's answer could not be read as edits twice: {e}"),
        );
    }
    run.feedback.push(format!(
        "Your last answer could not be read as edits ({e}). Answer again with SEARCH/REPLACE blocks or JSON {{\"edits\": [...]}} only."
    ));
    vec![
        Effect::Repair {
            class,
            reason: format!("the coder's answer did not parse ({e}); asking once more"),
        },
        super::steps::call_coder(run),
    ]
}
