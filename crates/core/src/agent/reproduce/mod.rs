//! The tester's phase (`Phase::Reproducing`): the tester writes a test, the loop tries it
//! (`Effect::TryTests`: written, run three times, put back) and keeps it only when it fails on
//! the current code for the reason the tester named; a refused test goes back to the tester
//! with why, within `tester.max_attempts`. A kept test is proposed as its own change, through
//! the same locating, approval and applying as the coder's. After a change no test covered,
//! the same phase writes a regression test that must fail on the code before the run and pass
//! on the code after it (`tester.after_fix = "always"`). `Tester` is the phase's own state:
//! the tester's work while it goes, and its record in the run. What a test is and how its
//! runs are judged is `tester.rs`'s. Each function returns where the run goes (`Next`);
//! `flow.rs` moves it.

pub(super) mod state;

use super::messages::Call;
use super::next::{Next, To};
use super::tester::{
    self, Judgement, Mode, Ran, RanBoth, Status, TestKind, TrialPlan, Work, property,
};
use super::{Effect, Event, Intent, Phase, Run, review};
use crate::conversation::{Message, Role};
use crate::edit::{Edit, EditKind, EditPlan};

/// Starts the tester in `mode`.
pub(super) fn start(run: &mut Run, mode: Mode) -> Next {
    let change = match mode {
        Mode::Reproduce => String::new(),
        Mode::AfterFix => review::steps_diff(&run.originals),
    };
    run.reproducing.work = Some(Work::new(mode, change));
    let what = match mode {
        Mode::Reproduce => "the tester writes a test that shows the bug",
        Mode::AfterFix => "no test covered the change; the tester writes a regression test",
    };
    Next::new(
        vec![Effect::Progress(what.into())],
        To::EnterAsking(Phase::Reproducing, Call::Tester(Vec::new())),
    )
}

/// The tester's answer, the trial of its tests, and what the model or the tests failed with.
pub(super) fn on_reproducing(run: &mut Run, event: Event) -> Next {
    match event {
        Event::ModelAnswered {
            role: Role::Tester,
            text,
        } => answered(run, text),
        Event::ModelFailed {
            role: Role::Tester,
            error,
        } => give_up(
            run,
            Status::Unavailable,
            format!("the tester model failed: {error}"),
        ),
        Event::TestsTried(Ok(tried)) => judged(run, tried),
        Event::DevDependency(Ok(())) => {
            if let Some(work) = run.reproducing.work.as_mut()
                && let Some(library) = missing_library(work)
            {
                work.ready.push(library);
            }
            Next::stay(try_effects(run))
        }
        Event::DevDependency(Err(why)) => refused(
            run,
            format!("{why}; write an example test instead (\"kind\": \"example\")"),
        ),
        // Most often the tester's doing (a protected path, one outside the workspace): it
        // hears why, and the attempt counts.
        Event::TestsTried(Err(why)) => refused(run, format!("the test could not be run: {why}")),
        _ => Next::stay(Vec::new()),
    }
}

/// The tester's tests, read: tried (written, run, put back); an unreadable answer is sent
/// back once.
fn answered(run: &mut Run, text: String) -> Next {
    let Some(work) = run.reproducing.work.as_mut() else {
        return Next::stay(Vec::new());
    };
    match tester::parse_tests(&text) {
        Ok(tests) => {
            work.repaired = false;
            work.examples = false;
            work.attempts += 1;
            work.tests = tests;
            Next::stay(try_effects(run))
        }
        Err(e) if !work.repaired => {
            work.repaired = true;
            let extra = vec![Message::assistant(text), tester::repair(&e)];
            Next::new(
                vec![Effect::Progress(format!(
                    "the tester's answer could not be read ({e}); asking once more"
                ))],
                To::Ask(Call::Tester(extra)),
            )
        }
        Err(e) => give_up(
            run,
            Status::Unavailable,
            format!("the tester's answer could not be read twice: {e}"),
        ),
    }
}

/// The trial of the work's tests: written (after a fix, over the code before the change),
/// run [`tester::TRIAL_RUNS`] times, then (after a fix) run once on the code after it.
fn try_effects(run: &Run) -> Vec<Effect> {
    let Some(work) = run.reproducing.work.as_ref() else {
        return Vec::new();
    };
    // A property test needs its library: found, or installed with the user's approval.
    if let Some(library) = missing_library(work) {
        return vec![
            Effect::Progress(format!(
                "the tester's property test needs {library}; checking the project has it"
            )),
            Effect::DevDependency(library),
        ];
    }
    let mut write: Vec<(String, Option<String>)> = Vec::new();
    let mut after = Vec::new();
    if work.mode == Mode::AfterFix {
        // The code as it was before the run (the steps' inverse), then as it is now.
        for (path, before, now) in &run.originals {
            write.push((path.clone(), before.clone()));
            after.push((path.clone(), Some(now.clone())));
        }
    }
    let mut seen: Vec<&str> = Vec::new();
    for t in &work.tests {
        // Tests in one file share its whole text: written once.
        if !seen.contains(&t.path.as_str()) {
            seen.push(&t.path);
            write.push((t.path.clone(), Some(t.content.clone())));
        }
    }
    let plan = TrialPlan {
        write,
        filter: tester::filter_of(&work.tests),
        times: tester::TRIAL_RUNS,
        after,
    };
    vec![
        Effect::Progress(format!(
            "trying the tester's test {} ({} runs)",
            names(&work.tests),
            tester::TRIAL_RUNS
        )),
        Effect::TryTests(plan),
    ]
}

/// The first library the work's property tests need that this run has not found yet.
fn missing_library(work: &Work) -> Option<String> {
    work.tests
        .iter()
        .filter(|t| t.kind == TestKind::Property)
        .filter_map(property::library_of)
        .find(|l| !work.ready.iter().any(|r| r == l))
        .map(str::to_string)
}

fn names(tests: &[tester::NewTest]) -> String {
    tests
        .iter()
        .map(|t| format!("{}::{}", t.path, t.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The trial's verdict: the test is kept and proposed, or it goes back to the tester. A
/// failing property first has its counterexample made into an example test, tried in turn.
fn judged(run: &mut Run, tried: tester::Tried) -> Next {
    let Some(work) = run.reproducing.work.as_ref() else {
        return Next::stay(Vec::new());
    };
    if work.examples {
        return examples_judged(run, tried);
    }
    let message = match tester::judge(&work.tests, &tried.before) {
        Judgement::Fails(message) => message,
        Judgement::Refused(why) => return refused(run, why),
    };
    if work.tests.iter().any(|t| t.kind == TestKind::Property) {
        return with_examples(run, &tried);
    }
    judged_after(run, tried, &message)
}

/// The kept tests' runs before, and after the change when the tester writes a regression
/// test (which must pass there).
fn judged_after(run: &mut Run, tried: tester::Tried, message: &str) -> Next {
    let Some(work) = run.reproducing.work.as_ref() else {
        return Next::stay(Vec::new());
    };
    let mut ran = RanBoth {
        before: Some(Ran::failed(tried.before.len() as u32, message)),
        after: None,
    };
    if work.mode == Mode::AfterFix {
        match tried
            .after
            .as_ref()
            .map(|t| tester::passes_after(&work.tests, t))
        {
            Some(Ok(())) => ran.after = Some(Ran::passed(1)),
            Some(Err(why)) => return refused(run, why.to_string()),
            None => return refused(run, "the test was not run on the new code".into()),
        }
    }
    kept(run, ran)
}

/// Each failing property's shrunk counterexample, read from its runs, becomes an example
/// test in the property's file; the tests are tried again with them.
fn with_examples(run: &mut Run, tried: &tester::Tried) -> Next {
    let Some(work) = run.reproducing.work.as_mut() else {
        return Next::stay(Vec::new());
    };
    let mut examples = Vec::new();
    let mut contents: Vec<(String, String)> = Vec::new();
    for t in work
        .tests
        .iter_mut()
        .filter(|t| t.kind == TestKind::Property)
    {
        let Some(args) = tried
            .before
            .iter()
            .find_map(|trial| property::counterexample(t, trial))
        else {
            let why = format!(
                "the property {} fails, but its shrunk counterexample is not in the output \
                 (Hypothesis' `Falsifying example:` or `Failing test case:`, proptest's \
                 `minimal failing input:`); write it with @given (Hypothesis) or proptest!",
                t.name
            );
            return refused(run, why);
        };
        // Properties in one file: each example goes after the ones before it.
        let mut base = t.clone();
        if let Some((_, text)) = contents.iter().find(|(p, _)| *p == t.path) {
            base.content = text.clone();
        }
        let example = match property::example_of(&base, &args) {
            Ok(e) => e,
            Err(why) => return refused(run, why.to_string()),
        };
        t.counterexample = Some(args);
        contents.retain(|(p, _)| *p != t.path);
        contents.push((t.path.clone(), example.content.clone()));
        examples.push(example);
    }
    work.tests.extend(examples);
    for t in &mut work.tests {
        if let Some((_, text)) = contents.iter().find(|(p, _)| *p == t.path) {
            t.content = text.clone();
        }
    }
    work.examples = true;
    let mut effects = vec![Effect::Progress(format!(
        "the property fails; its shrunk counterexample becomes an example test ({})",
        work.tests
            .iter()
            .filter_map(|t| t
                .counterexample
                .as_ref()
                .map(|c| format!("{}: {c}", t.name)))
            .collect::<Vec<_>>()
            .join("; ")
    ))];
    effects.extend(try_effects(run));
    Next::stay(effects)
}

/// The example tests made from counterexamples must themselves fail on the current code,
/// the same way every run: judged on their own failures only.
fn examples_judged(run: &mut Run, tried: tester::Tried) -> Next {
    let Some(work) = run.reproducing.work.as_ref() else {
        return Next::stay(Vec::new());
    };
    let examples: Vec<tester::NewTest> = work
        .tests
        .iter()
        .filter(|e| {
            e.kind == TestKind::Example
                && work.tests.iter().any(|p| {
                    p.kind == TestKind::Property && e.name == format!("{}_example", p.name)
                })
        })
        .cloned()
        .collect();
    let theirs: Vec<tester::Trial> = tried
        .before
        .iter()
        .map(|t| {
            let mut t = t.clone();
            t.failures
                .retain(|f| examples.iter().any(|e| f.test_id.ends_with(&e.name)));
            t
        })
        .collect();
    match tester::judge(&examples, &theirs) {
        Judgement::Fails(message) => judged_after(run, tried, &message),
        Judgement::Refused(why) => {
            let why = format!(
                "the example test made from the property's counterexample ({}) was refused: {why}",
                names(&examples)
            );
            refused(run, why)
        }
    }
}

/// A refused test: back to the tester with why, or, once its attempts are spent, the end of
/// its work.
fn refused(run: &mut Run, why: String) -> Next {
    let max = run.settings.tester.max_attempts;
    let Some(work) = run.reproducing.work.as_mut() else {
        return Next::stay(Vec::new());
    };
    let first = why.lines().next().unwrap_or("").to_string();
    work.refused.push(first.clone());
    work.examples = false;
    let tests = names(&work.tests);
    if work.attempts >= max {
        return give_up(
            run,
            Status::Exhausted,
            format!(
                "no test the tester wrote failed for the stated reason in {max} attempt(s) \
                 (tester.max_attempts); the last, {tests}: {first}"
            ),
        );
    }
    work.feedback.push(format!(
        "Your test {tests} was refused: {why}\n\nWrite another test (attempt {} of {max}), \
         with the whole file in `content`.",
        work.attempts + 1
    ));
    let record = work.record(Status::Refused, RanBoth::default(), Some(first.clone()));
    Next::new(
        vec![
            Effect::Tested(record),
            Effect::Progress(format!("the tester's test was refused: {first}")),
        ],
        To::Ask(Call::Tester(Vec::new())),
    )
}

/// The test fails for the stated reason: recorded, and proposed as its own change.
fn kept(run: &mut Run, ran: RanBoth) -> Next {
    let Some(work) = run.reproducing.work.as_mut() else {
        return Next::stay(Vec::new());
    };
    work.applying = true;
    let record = work.record(Status::Kept, ran, None);
    let mut edits: Vec<Edit> = Vec::new();
    for t in &work.tests {
        // Tests in one file (a property and its example) share its whole text: one edit.
        if !edits.iter().any(|e| e.path == t.path) {
            edits.push(Edit {
                path: t.path.clone(),
                kind: EditKind::WholeFile {
                    content: t.content.clone(),
                },
            });
        }
    }
    let plan = EditPlan { edits };
    let summary = record.summary();
    run.reproducing.record = Some(record.clone());
    Next::enter(
        Phase::Locating,
        vec![
            Effect::Tested(record),
            Effect::Progress(format!("{summary}; proposing it as its own change")),
            Effect::Locate(plan),
        ],
    )
}

/// The tester stops: recorded; a run that needed the test to reproduce its bug stops with
/// why, a run that only wanted a regression test goes on without it.
fn give_up(run: &mut Run, status: Status, reason: String) -> Next {
    let Some(work) = run.reproducing.work.take() else {
        return Next::stay(Vec::new());
    };
    let record = work.record(status, RanBoth::default(), Some(reason.clone()));
    run.reproducing.record = Some(record.clone());
    let tested = Effect::Tested(record);
    match work.mode {
        Mode::Reproduce => Next::fail(format!(
            "stopped: the bug could not be reproduced with a test: {reason}"
        ))
        .after(vec![tested]),
        Mode::AfterFix => Next::new(
            vec![
                tested,
                Effect::Warn(format!("no regression test was added: {reason}")),
            ],
            To::Review,
        ),
    }
}

/// The tests after the kept test's change was applied, before the testing phase sees them
/// (`flow.rs`): for a bug to reproduce, its failure goes to the coder (no reflector: nothing
/// was tried yet). `None`: the usual handling.
pub(super) fn on_new_test_tested(run: &mut Run, event: &Event) -> Option<Next> {
    let work = run.reproducing.work.as_ref().filter(|w| w.applying)?;
    let mode = work.mode;
    run.reproducing.work = None;
    match event {
        Event::TestsFinished(t) if mode == Mode::Reproduce && !t.passed => {
            run.tests = Some(t.clone());
            Some(Next::new(
                vec![Effect::Progress(
                    "the new test fails as it should; asking the model for a fix".into(),
                )],
                To::Code,
            ))
        }
        _ => None,
    }
}

/// The user rejected the kept test's change (`flow.rs` hands the tester a rejection before the
/// change's phase): recorded; the fix goes on without it (or the run goes on to its review,
/// after a fix). `None`: not the tester's change, or not a rejection.
pub(super) fn on_rejected(run: &mut Run, event: &Event) -> Option<Next> {
    if *event != Event::Rejected {
        return None;
    }
    let work = run.reproducing.work.take_if(|w| w.applying)?;
    if let Some(r) = run.reproducing.record.as_mut() {
        r.status = Status::Rejected;
    }
    let mut effects: Vec<Effect> = run
        .reproducing
        .record
        .clone()
        .map(Effect::Tested)
        .into_iter()
        .collect();
    Some(match work.mode {
        Mode::Reproduce => {
            effects.push(Effect::Progress(
                "the new test was rejected; the fix goes on without it".into(),
            ));
            Next::new(effects, To::Code)
        }
        Mode::AfterFix => Next::new(effects, To::Review),
    })
}

/// The last task passed: the kept test's run after the fix joins its record, and a change no
/// test covered gets its regression test (`after_fix`); otherwise the tester's record joins
/// the answer and the review is next.
pub(super) fn tasks_done(run: &mut Run) -> Next {
    let mut effects = passed_after_fix(run);
    match after_fix(run) {
        Ok(tester) => return tester.after(effects),
        Err(notes) => effects.extend(notes),
    }
    if let Some(summary) = run.reproducing.record().map(tester::Record::summary) {
        run.ending.add(&summary);
    }
    Next::new(effects, To::Review)
}

/// Once the run's tests pass after a fix of a reproduced bug: the kept test's run after the
/// fix joins its record.
fn passed_after_fix(run: &mut Run) -> Vec<Effect> {
    match run.reproducing.record.as_mut() {
        Some(r)
            if r.mode == Mode::Reproduce && r.status == Status::Kept && r.ran.after.is_none() =>
        {
            r.ran.after = Some(Ran::passed(1));
            vec![Effect::Tested(r.clone())]
        }
        _ => Vec::new(),
    }
}

/// After the last task passed: under `after_fix = "always"`, a change no test covered (an
/// edit, which no failing test drove) gets a regression test (`Ok`: the tester's first
/// step); otherwise the notes to give before the run goes on (`Err`).
fn after_fix(run: &mut Run) -> Result<Next, Vec<Effect>> {
    let uncovered = run.settings.intent == Some(Intent::Edit)
        && run.reproducing.record.is_none()
        && !run.files_changed.is_empty()
        && run.tests.as_ref().is_some_and(|t| t.passed)
        && !run.reviewing.review_only();
    if !uncovered || run.settings.tester.max_attempts == 0 {
        return Err(Vec::new());
    }
    match run.settings.tester.after_fix {
        tester::AfterFix::Off => Err(Vec::new()),
        tester::AfterFix::Suggest => Err(vec![Effect::Progress(
            "no test covers this change; tester.after_fix = \"always\" has the tester add a \
             regression test"
                .into(),
        )]),
        tester::AfterFix::Always => Ok(start(run, Mode::AfterFix)),
    }
}
