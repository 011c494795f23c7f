//! The phases of the coding loop proper: the start, classifying, planning, explaining,
//! coding, testing, reflecting. A phase with state of its own has its own module (`change`,
//! `reviewing`, `reproduce`, `evaluate`, and `turn` for a model's turn). Like every phase,
//! each function here returns where the run goes (`Next`): it names the next phase, the model
//! call or the step of another part (`To::Locate`, `To::Tester`, `To::TasksDone`, ...), and
//! `flow.rs` takes it from there. Pure like the rest of `agent`: the effects say what to do,
//! the runtime does it.

use super::messages::Call;
use super::next::{Next, To};
use super::{AgentKind, Effect, Event, Intent, Phase, Run, TestSummary, agents, needs_plan};
use super::{prompts, tester};
use crate::conversation::Role;
use crate::edit::{EditPlan, ParseError};

/// Before the first edit: the start, and the tests that tell what fails (or, for a test
/// goal, are the answer).
pub(super) fn on_baseline(run: &mut Run, event: Event) -> Next {
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
            Next::finish(Phase::Done, answer)
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
                return Next::to(To::Tester(tester::Mode::Reproduce));
            }
            if passed {
                Next::finish(Phase::Done, "the tests already pass; nothing to fix".into())
            } else {
                Next::to(To::Code)
            }
        }
        Event::TestsUnavailable(why) => {
            Next::fail(format!("cannot run the tests to find the failures: {why}"))
        }
        _ => Next::stay(Vec::new()),
    }
}

/// The intent model's answer routes an unclear goal.
pub(super) fn on_classifying(run: &mut Run, event: Event) -> Next {
    match event {
        Event::ModelAnswered { text, .. } => {
            run.settings.intent = Some(prompts::parse_intent(&text));
            start(run)
        }
        Event::ModelFailed { error, .. } => {
            // Classification only routes the goal; without it, the goal is taken as an edit.
            run.settings.intent = Some(Intent::Edit);
            start(run).after(vec![Effect::Warn(format!(
                "the intent model failed ({error}); treating the goal as an edit"
            ))])
        }
        _ => Next::stay(Vec::new()),
    }
}

/// The planner's turn: its tool calls, then the plan.
pub(super) fn on_planning(run: &mut Run, event: Event) -> Next {
    match event {
        Event::ModelAnswered { role, text } if role != Role::Summarizer => planned(run, &text),
        Event::ModelFailed { role, error } if role != Role::Summarizer => {
            Next::fail(format!("the planner model failed: {error}"))
        }
        event => Next::to(To::InTurn(event)),
    }
}

/// The planner's answer: the tasks, which the coder starts on, or, once, a request to answer
/// with the JSON only.
fn planned(run: &mut Run, text: &str) -> Next {
    let e = match prompts::parse_plan(text) {
        Ok(tasks) => {
            run.turn.parsed();
            let titles: Vec<String> = tasks
                .iter()
                .map(|t| format!("{} {}", t.id, t.title))
                .collect();
            run.tasks = tasks;
            let plan = Effect::Progress(format!("plan: {}", titles.join("; ")));
            return Next::new(vec![plan], To::Code);
        }
        Err(e) => e,
    };
    if run.turn.retry_once() {
        return Next::fail(format!("the plan could not be read twice: {e}"));
    }
    Next::to(To::Ask(Call::PlanAgain(e.to_string())))
}

/// A Markdown answer's turn: its tool calls, then the answer, which ends the run.
pub(super) fn on_explaining(event: Event) -> Next {
    match event {
        Event::ModelAnswered { role, text } if role != Role::Summarizer => {
            Next::finish(Phase::Done, text)
        }
        Event::ModelFailed { role, error } if role != Role::Summarizer => {
            Next::model_failed(role, error)
        }
        event => Next::to(To::InTurn(event)),
    }
}

/// The coder's turn: its tool calls, then its edits (as text, or as editing tool calls), to
/// be located; an answer that does not parse is sent back once.
pub(super) fn on_coding(run: &mut Run, event: Event) -> Next {
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
            Next::model_failed(role, error)
        }
        event => Next::to(To::InTurn(event)),
    }
}

/// The coder's edits, read from its answer or its editing tool calls: to be located, or, when
/// they could not be read, sent back.
fn proposed(run: &mut Run, plan: Result<EditPlan, ParseError>) -> Next {
    match plan {
        Ok(plan) => {
            run.turn.parsed();
            Next::to(To::Locate(plan))
        }
        Err(e) => unreadable(run, e.class(), e.to_string()),
    }
}

/// The tests after an applied change: the task is done, or the reflector looks at the
/// failures (unless the run goes round in circles). The tester's new test and the undo of a
/// change that made things worse see the tests first (`flow.rs`).
pub(super) fn on_testing(run: &mut Run, event: Event) -> Next {
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
        Event::TestsUnavailable(why) => Next::fail(format!(
            "the change was applied but the tests could not run: {why}"
        )),
        _ => Next::stay(Vec::new()),
    }
}

/// The tests still fail: stop when the same failures keep coming back or the edits
/// alternate, else ask the reflector why.
fn tests_failed(run: &mut Run, t: TestSummary) -> Next {
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
        return Next::fail("stopped: the same failure came back after different edits".into());
    }
    if run.change.alternating() {
        return Next::fail("stopped: the edits alternate between two versions".into());
    }
    Next::to(To::EnterAsking(Phase::Reflecting, Call::Reflector))
}

/// The reflector's advice goes to the coder, which tries again.
pub(super) fn on_reflecting(run: &mut Run, event: Event) -> Next {
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
            Next::retry("the tests still fail")
        }
        Event::ModelFailed { role, error } => Next::model_failed(role, error),
        _ => Next::stay(Vec::new()),
    }
}

/// The first step once the intent is known: a reading agent answers at once; otherwise
/// classify an unclear goal, run the tests first for a fix, plan a large edit, or go straight
/// to the coder.
fn start(run: &Run) -> Next {
    if run.settings.agent.kind != AgentKind::Build {
        return answer(run);
    }
    let Some(intent) = run.settings.intent else {
        return Next::to(To::EnterAsking(Phase::Classifying, Call::Intent));
    };
    let tests = |what: &str| {
        Next::enter(
            Phase::Baseline,
            vec![Effect::Progress(what.into()), Effect::RunTests],
        )
    };
    match intent {
        Intent::Test => tests("running the tests"),
        Intent::Explain => answer(run),
        Intent::Fix => tests("running the tests to see what fails"),
        // Mixed mode: the planner reads the code with the reading tools first (when the run
        // has tools), then the build agent works through its tasks.
        Intent::Edit if needs_plan(&run.goal) => Next::to(To::NewTurn(Phase::Planning)),
        Intent::Edit => Next::to(To::Code),
    }
}

/// A Markdown answer: an explanation, a plan (the plan agent) or a review (the review
/// agent), with the reading tools.
fn answer(run: &Run) -> Next {
    let what = match run.settings.agent.kind {
        AgentKind::Plan => "planning",
        AgentKind::Review => "reviewing",
        AgentKind::Build => "reading the code to answer",
    };
    Next::new(
        vec![Effect::Progress(what.into())],
        To::NewTurn(Phase::Explaining),
    )
}

/// The current task passed its tests: the next task, or, after the last, what comes once the
/// tasks are done (the tester's regression test, the review, the evaluation, the end).
fn task_done(run: &mut Run, answer: String) -> Next {
    if run.task + 1 < run.tasks.len() {
        run.task += 1;
        run.retries = 0;
        run.feedback.clear();
        let t = &run.tasks[run.task];
        let next = Effect::Progress(format!(
            "task {} of {}: {}",
            run.task + 1,
            run.tasks.len(),
            t.title
        ));
        return Next::new(vec![next], To::Code);
    }
    run.ending.set_answer(answer);
    Next::to(To::TasksDone)
}

/// An answer that could not be read as edits is sent back once; twice ends the run.
fn unreadable(run: &mut Run, class: &'static str, e: String) -> Next {
    if run.turn.retry_once() {
        return Next::fail(format!(
            "the coder's answer could not be read as edits twice: {e}"
        ));
    }
    run.feedback.push(format!(
        "Your last answer could not be read as edits ({e}). Answer again with SEARCH/REPLACE blocks or JSON {{\"edits\": [...]}} only."
    ));
    let repair = Effect::Repair {
        class,
        reason: format!("the coder's answer did not parse ({e}); asking once more"),
    };
    Next::new(vec![repair], To::Coder)
}
