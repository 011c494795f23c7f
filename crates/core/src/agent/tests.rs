//! The state machine with plain values: each scenario feeds events and checks the effects.

use super::*;
use crate::conversation::{Role, ToolCall};
use crate::edit::{self, FileText, Limits};
use crate::edit::{EditPlan, PlanOutcome};

fn budget(max_retries: u32, max_iterations: u32) -> Budget {
    Budget {
        max_retries,
        max_iterations,
        max_tool_steps: 2,
        summarize_after: 0,
        max_corrections: 2,
        first_prompt_bytes: 0,
    }
}

/// A run of `goal` with 3 retries and 15 iterations, and no files in its prompt.
fn new_run(goal: &str, intent: Option<Intent>) -> Run {
    made(goal, intent, budget(3, 15))
}

/// A run of `goal` under `budget`, with the default settings otherwise.
fn made(goal: &str, intent: Option<Intent>, budget: Budget) -> Run {
    Run::new(goal, Settings::new(intent, budget))
}

/// A run of `goal` whose prompt shows `context`, handed in as the driver does.
fn with_context(
    goal: &str,
    intent: Option<Intent>,
    budget: Budget,
    context: impl Into<context::Context>,
) -> Run {
    let mut run = made(goal, intent, budget);
    assert!(step(&mut run, Event::Input(Input::Context(context.into()))).is_empty());
    run
}

/// A fix whose tests failed with `fp` before the first edit: the coder is being asked.
fn fixing(budget: Budget, fp: &str) -> Run {
    let mut run = made("fix", Some(Intent::Fix), budget);
    step(&mut run, Event::Start);
    step(&mut run, Event::TestsFinished(failing(fp)));
    run
}

fn failing(fp: &str) -> TestSummary {
    TestSummary {
        passed: false,
        passed_count: 1,
        failed_count: 1,
        report: format!("FAILED {fp}"),
        fingerprint: fp.into(),
        no_tests: false,
        stopped: None,
    }
}

fn passing() -> TestSummary {
    TestSummary {
        passed: true,
        passed_count: 2,
        failed_count: 0,
        report: String::new(),
        fingerprint: String::new(),
        no_tests: false,
        stopped: None,
    }
}

const FILE: &str = "def add(a, b):\n    return a - b\n";

const REFLECTION: &str =
    r#"{"task_id":"T1","passed":false,"report":"multiplied","next_step":"add"}"#;

fn edit_answer(new: &str) -> String {
    format!(
        "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return {new}\n>>>>>>> REPLACE\n"
    )
}

fn locate(plan: &EditPlan) -> PlanOutcome {
    edit::apply_plan(
        plan,
        std::path::Path::new("/ws"),
        &Limits::default(),
        |_| FileText::Text(FILE.into()),
    )
}

/// The model of `role` answers `text`.
fn answered(run: &mut Run, role: Role, text: &str) -> Vec<Effect> {
    step(
        run,
        Event::ModelAnswered {
            role,
            text: text.into(),
        },
    )
}

/// The model calls tools, with no text beside the calls.
fn tool_calls(run: &mut Run, calls: Vec<ToolCall>) -> Vec<Effect> {
    step(
        run,
        Event::ToolCalls {
            text: String::new(),
            calls,
        },
    )
}

fn call(id: &str, name: &str, arguments: serde_json::Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
    }
}

/// The coder's answer must be edits: they are located, and the effects of that come back.
fn locate_answer(run: &mut Run, answer: &str) -> Vec<Effect> {
    let e = answered(run, Role::Coder, answer);
    let Some(Effect::Locate(plan)) = e.last() else {
        panic!("no edits to locate: {e:?}")
    };
    step(run, Event::Located(locate(plan)))
}

/// Drives the run through one coder answer: parse, locate, approve, apply.
fn propose(run: &mut Run, answer: &str) -> Vec<Effect> {
    let effects = answered(run, Role::Coder, answer);
    let Some(Effect::Locate(plan)) = effects.last() else {
        return effects;
    };
    let effects = step(run, Event::Located(locate(plan)));
    if !matches!(effects.last(), Some(Effect::AskApproval { .. })) {
        return effects;
    }
    assert!(matches!(
        step(run, Event::Approved).as_slice(),
        [Effect::Apply(_)]
    ));
    step(run, Event::Applied)
}

/// The messages and the tools of the coder call the effects end with.
fn coder_turn(e: &[Effect]) -> (&[crate::conversation::Message], &[String]) {
    match e.last() {
        Some(Effect::CallModel {
            role: Role::Coder,
            messages,
            tools,
        }) => (messages, tools),
        _ => panic!("no coder call last: {e:?}"),
    }
}

/// The messages of the coder call the effects end with.
fn coder_call(e: &[Effect]) -> &[crate::conversation::Message] {
    coder_turn(e).0
}

fn is_call(e: &Effect, role: Role) -> bool {
    matches!(e, Effect::CallModel { role: r, .. } if *r == role)
}

/// Whether `e` ends the run with `status`, with an answer that contains `text`.
fn finishes(e: Option<&Effect>, status: Phase, text: &str) -> bool {
    matches!(e, Some(Effect::Finish { status: s, answer }) if *s == status && answer.contains(text))
}

#[test]
fn a_fix_in_one_iteration() {
    let mut run = with_context(
        "fix the failing tests",
        Some(Intent::Fix),
        budget(3, 15),
        "calc.py".to_string(),
    );
    assert!(matches!(
        step(&mut run, Event::Start).as_slice(),
        [Effect::Progress(_), Effect::RunTests]
    ));
    let e = step(&mut run, Event::TestsFinished(failing("a")));
    assert!(
        matches!(e[0], Effect::Progress(_)),
        "the status says the model is asked"
    );
    assert!(is_call(&e[1], Role::Coder));
    let Effect::CallModel { messages, .. } = &e[1] else {
        unreachable!()
    };
    assert!(
        messages[1].content.contains("FAILED a"),
        "the coder sees the failures"
    );
    assert!(matches!(
        propose(&mut run, &edit_answer("a + b")).last(),
        Some(Effect::RunTests)
    ));
    let e = step(&mut run, Event::TestsFinished(passing()));
    assert!(finishes(e.first(), Phase::Done, ""));
    assert_eq!(
        (run.iterations, run.files_changed.clone()),
        (1, vec!["calc.py".to_string()])
    );
}

#[test]
fn a_failing_run_is_reflected_on_and_retried() {
    let mut run = fixing(budget(3, 15), "a");
    propose(&mut run, &edit_answer("a * b"));
    let e = step(&mut run, Event::TestsFinished(failing("b")));
    assert!(is_call(&e[0], Role::Reflector));
    let e = answered(&mut run, Role::Reflector, REFLECTION);
    let messages = coder_call(&e);
    assert!(messages.last().unwrap().content.contains("Next step: add"));
    propose(&mut run, &edit_answer("a + b"));
    let e = step(&mut run, Event::TestsFinished(passing()));
    assert!(finishes(e.first(), Phase::Done, ""));
    assert_eq!(run.iterations, 2);
}

#[test]
fn the_retry_budget_stops_the_run_with_a_message() {
    let mut run = fixing(budget(2, 15), "a");
    let mut last = Vec::new();
    for (i, new) in ["a * b", "a / b", "a % b"].iter().enumerate() {
        propose(&mut run, &edit_answer(new));
        step(&mut run, Event::TestsFinished(failing(&format!("f{i}"))));
        last = answered(&mut run, Role::Reflector, "not json");
    }
    assert!(
        finishes(last.last(), Phase::Failed, "agent.max_retries"),
        "{last:?}"
    );
}

#[test]
fn the_same_failure_after_different_edits_stops_early() {
    let mut run = fixing(budget(9, 15), "same");
    for new in ["a * b", "a / b"] {
        propose(&mut run, &edit_answer(new));
        step(&mut run, Event::TestsFinished(failing("same")));
        answered(&mut run, Role::Reflector, "{}");
    }
    propose(&mut run, &edit_answer("a % b"));
    let e = step(&mut run, Event::TestsFinished(failing("same")));
    assert!(finishes(e.first(), Phase::Failed, "same failure"), "{e:?}");
}

#[test]
fn a_rejected_plan_stops_the_run_and_applies_nothing() {
    let mut run = new_run("make add add", Some(Intent::Edit));
    let e = step(&mut run, Event::Start);
    assert!(
        e.last().is_some_and(|e| is_call(e, Role::Coder)),
        "an edit goal goes straight to the coder"
    );
    locate_answer(&mut run, &edit_answer("a + b"));
    let e = step(&mut run, Event::Rejected);
    assert!(finishes(e.first(), Phase::Failed, "rejected"));
    assert!(run.files_changed.is_empty());
}

/// A run whose first proposal (`a + b`) was refused for writing a protected file, with
/// `max_retries` retries, and the refusal's effects.
fn refused_once(max_retries: u32) -> (Run, Vec<Effect>) {
    let mut run = made("edit", Some(Intent::Edit), budget(max_retries, 15));
    step(&mut run, Event::Start);
    locate_answer(&mut run, &edit_answer("a + b"));
    let e = step(
        &mut run,
        Event::Refused("it writes protected files (.git/config)".into()),
    );
    (run, e)
}

#[test]
fn a_refused_change_is_told_to_the_model_and_tried_again_within_the_budget() {
    let (mut run, e) = refused_once(1);
    let call = e
        .iter()
        .find_map(|e| match e {
            Effect::CallModel { role, messages, .. } if *role == Role::Coder => Some(messages),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the coder is asked again: {e:?}"));
    assert!(
        call.iter()
            .any(|m| m.content.contains(".git/config") && m.content.contains("not applied")),
        "the refusal reaches the model"
    );
    assert!(run.change.pending().is_empty() && run.files_changed.is_empty());
    // A second refusal spends the last retry: the run stops, nothing applied.
    locate_answer(&mut run, &edit_answer("a * b"));
    let e = step(&mut run, Event::Refused("again".into()));
    assert!(
        e.iter().any(|e| finishes(Some(e), Phase::Failed, "")),
        "{e:?}"
    );
    assert!(run.files_changed.is_empty());
}

#[test]
fn the_same_refused_change_proposed_again_ends_the_run_with_the_reason() {
    let (mut run, _) = refused_once(3);
    // The model sends the very same change: it is neither located nor asked about again.
    let e = answered(&mut run, Role::Coder, &edit_answer("a + b"));
    assert!(
        !e.iter()
            .any(|e| matches!(e, Effect::AskApproval { .. } | Effect::Locate(_))),
        "{e:?}"
    );
    assert!(
        finishes(
            e.first(),
            Phase::Failed,
            "proposed again the change that was refused"
        ),
        "{e:?}"
    );
    assert!(
        finishes(e.first(), Phase::Failed, ".git/config"),
        "the reason is in the answer: {e:?}"
    );
}

/// Each kind of refusal reaches the coder's next call naming the file and what to do
/// instead, and the same edits sent again end the run at once with the reason.
#[test]
fn every_refusal_reaches_the_model_and_a_repeat_ends_the_run() {
    let not_found = "calc.py\n<<<<<<< SEARCH\nnothing like this\n=======\nx\n>>>>>>> REPLACE\n";
    let outside = "../etc/passwd\n<<<<<<< SEARCH\nroot\n=======\nx\n>>>>>>> REPLACE\n";
    let ambiguous =
        "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";
    let cases: [(&str, &str, &str); 3] = [
        (not_found, "calc.py", "not found"),
        (outside, "../etc/passwd", "edit only files inside it"),
        (ambiguous, "calc.py", "add surrounding lines"),
    ];
    for (answer, file, rule) in cases {
        let mut run = new_run("edit", Some(Intent::Edit));
        step(&mut run, Event::Start);
        let e = answered(&mut run, Role::Coder, answer);
        let Some(Effect::Locate(plan)) = e.last() else {
            panic!("{e:?}")
        };
        // The same function twice in the file makes the search text ambiguous.
        let twice = format!("{FILE}\n{FILE}");
        let outcome = edit::apply_plan(
            plan,
            std::path::Path::new("/ws"),
            &Limits::default(),
            |_| FileText::Text(twice.clone()),
        );
        let e = step(&mut run, Event::Located(outcome));
        let told = &coder_call(&e).last().unwrap().content;
        assert!(
            told.contains(file) && told.contains(rule) && told.contains("end the run"),
            "{rule}: {told}"
        );
        let e = answered(&mut run, Role::Coder, answer);
        assert!(
            finishes(e.first(), Phase::Failed, "proposed again")
                && finishes(e.first(), Phase::Failed, file),
            "{rule}: {e:?}"
        );
    }
    // A stale change is redone on fresh text, and the model hears why: see
    // a_stale_buffer_redoes_the_step_on_fresh_text.
}

#[test]
fn an_answer_that_does_not_parse_is_sent_back_once() {
    let mut run = new_run("edit", Some(Intent::Edit));
    step(&mut run, Event::Start);
    let e = answered(&mut run, Role::Coder, "I would change the sign.");
    assert!(matches!(
        &e[0],
        Effect::Repair {
            class: "unreadable",
            ..
        }
    ));
    let Effect::CallModel { messages, .. } = &e[1] else {
        panic!()
    };
    assert!(
        messages
            .last()
            .unwrap()
            .content
            .contains("could not be read")
    );
    let e = answered(&mut run, Role::Coder, "still prose");
    assert!(finishes(e.first(), Phase::Failed, ""));
}

#[test]
fn refused_edits_go_back_to_the_coder_with_the_reason() {
    let mut run = new_run("edit", Some(Intent::Edit));
    step(&mut run, Event::Start);
    let answer = "calc.py\n<<<<<<< SEARCH\nnothing like this exists\n=======\nx\n>>>>>>> REPLACE\n";
    let e = locate_answer(&mut run, answer);
    let Some(Effect::CallModel { messages, .. }) = e.last() else {
        panic!("{e:?}")
    };
    assert!(messages.last().unwrap().content.contains("NOT applied"));
}

#[test]
fn cancel_ends_the_run_and_late_events_are_ignored() {
    let mut run = new_run("fix", Some(Intent::Fix));
    step(&mut run, Event::Start);
    let e = step(&mut run, Event::Cancel);
    assert!(finishes(e.first(), Phase::Cancelled, ""));
    assert!(step(&mut run, Event::TestsFinished(failing("a"))).is_empty());
}

#[test]
fn alternating_edits_stop_the_run() {
    assert!(change::Change::applied(vec![1, 2, 1, 2]).alternating());
    assert!(!change::Change::applied(vec![1, 2, 3, 2]).alternating());
    assert!(!change::Change::applied(vec![1, 1, 1, 1]).alternating());
}

#[test]
fn goals_are_classified_by_their_obvious_words() {
    assert_eq!(classify("fix the failing tests"), Some(Intent::Fix));
    assert_eq!(classify("explain this function"), Some(Intent::Explain));
    assert_eq!(classify("what does parse do?"), Some(Intent::Explain));
    assert_eq!(classify("add a --verbose flag"), Some(Intent::Edit));
    assert_eq!(classify("run the tests"), Some(Intent::Test));
    assert_eq!(
        classify("the prefix thing, but for suffixes"),
        None,
        "not obvious: the intent model decides"
    );
}

#[test]
fn a_stale_buffer_redoes_the_step_on_fresh_text() {
    let mut run = new_run("edit", Some(Intent::Edit));
    step(&mut run, Event::Start);
    locate_answer(&mut run, &edit_answer("a + b"));
    step(&mut run, Event::Approved);
    let e = step(
        &mut run,
        Event::Stale("calc.py changed while the change was prepared".into()),
    );
    let told = &coder_call(&e).last().unwrap().content;
    assert!(told.contains("current text"), "{told}");
    assert!(told.contains("calc.py changed"), "{told}");
    assert!(run.files_changed.is_empty());
}

#[test]
fn an_unclear_goal_is_classified_by_the_intent_model() {
    let mut run = new_run("the prefix thing, but for suffixes", None);
    let e = step(&mut run, Event::Start);
    assert!(is_call(&e[0], Role::Intent));
    let e = answered(&mut run, Role::Intent, r#"{"intent": "edit"}"#);
    assert!(is_call(e.last().unwrap(), Role::Coder));
    assert_eq!(run.intent(), Some(Intent::Edit));
}

#[test]
fn a_large_goal_is_planned_and_its_tasks_run_in_order_then_evaluated() {
    let goal = "Add a subtract function. Then add a divide function that refuses zero. Then document both in the README.";
    let mut run = new_run(goal, Some(Intent::Edit));
    run.settings.evaluation = crate::agent::Evaluation::Basic;
    let e = step(&mut run, Event::Start);
    assert!(is_call(&e[0], Role::Planner));
    let plan = r#"{"plan_id": "plan_0001", "tasks": [{"id": "T1", "title": "fix add", "acceptance": "add adds"}, {"id": "T2", "title": "fix add again", "acceptance": "still adds"}]}"#;
    let e = answered(&mut run, Role::Planner, plan);
    let messages = coder_call(&e);
    assert!(messages[1].content.contains("task 1 of 2 now: T1 fix add"));
    propose(&mut run, &edit_answer("a + b"));
    let e = step(&mut run, Event::TestsFinished(passing()));
    let messages = coder_call(&e);
    assert!(
        messages[1].content.contains("task 2 of 2"),
        "the next task starts"
    );
    propose(&mut run, &edit_answer("b + a"));
    let e = step(&mut run, Event::TestsFinished(passing()));
    // After the note that no test covers the edit (tester.after_fix = "suggest").
    assert!(is_call(e.last().unwrap(), Role::Evaluator), "{e:?}");
    let e = answered(
        &mut run,
        Role::Evaluator,
        r#"{"score": 4, "reason": "small and tested"}"#,
    );
    assert!(finishes(e.first(), Phase::Done, "evaluation: 4/5"), "{e:?}");
}

#[test]
fn the_evaluator_never_blocks() {
    let mut run = fixing(budget(3, 15), "a");
    run.settings.evaluation = crate::agent::Evaluation::Basic;
    propose(&mut run, &edit_answer("a + b"));
    step(&mut run, Event::TestsFinished(passing()));
    let e = step(
        &mut run,
        Event::ModelFailed {
            role: Role::Evaluator,
            error: "down".into(),
        },
    );
    assert!(finishes(e.first(), Phase::Done, ""));
}

#[test]
fn a_plan_that_does_not_parse_is_asked_for_once_more() {
    let goal = "Do one thing. Then another thing. Then a third thing.";
    let mut run = new_run(goal, Some(Intent::Edit));
    step(&mut run, Event::Start);
    let e = answered(&mut run, Role::Planner, "first I will...");
    assert!(is_call(&e[0], Role::Planner));
    let e = answered(&mut run, Role::Planner, "still prose");
    assert!(finishes(e.first(), Phase::Failed, ""));
}

#[test]
fn a_test_goal_runs_the_tests_and_reports() {
    let mut run = new_run("run the tests", Some(Intent::Test));
    assert!(
        step(&mut run, Event::Start)
            .iter()
            .any(|e| matches!(e, Effect::RunTests))
    );
    let e = step(&mut run, Event::TestsFinished(failing("x")));
    assert!(finishes(e.first(), Phase::Done, "1 test(s) fail"));
}

#[test]
fn a_checkpoint_round_trips_and_resume_calls_the_coder_with_what_was_learned() {
    let mut run = fixing(budget(3, 15), "a");
    propose(&mut run, &edit_answer("a * b"));
    step(&mut run, Event::TestsFinished(failing("b")));
    answered(&mut run, Role::Reflector, REFLECTION);
    // The driver checkpoints here, as the second coder call goes out.
    assert_eq!((run.phase, run.iterations), (Phase::Coding, 2));
    let saved = serde_json::to_string(&run).unwrap();
    let mut back: Run = serde_json::from_str(&saved).unwrap();
    let e = resume(&mut back);
    let messages = coder_call(&e);
    assert!(messages.last().unwrap().content.contains("Next step: add"));
    assert_eq!(back.iterations, 2, "the same iteration, not a new one");
    propose(&mut back, &edit_answer("a + b"));
    let e = step(&mut back, Event::TestsFinished(passing()));
    assert!(finishes(e.first(), Phase::Done, ""));
    assert_eq!(back.failure_history, run.failure_history);

    // A run saved anywhere else starts over.
    let mut fresh = new_run("fix", Some(Intent::Fix));
    let e = resume(&mut fresh);
    assert!(e.iter().any(|e| matches!(e, Effect::RunTests)), "{e:?}");
}

#[test]
fn commands_in_free_form_goals_are_routed_without_a_model() {
    assert_eq!(route("undo"), Route::Undo(None));
    assert_eq!(route("Undo the last change."), Route::Undo(None));
    assert_eq!(route("undo step 3"), Route::Undo(Some(3)));
    assert_eq!(route("revert the last change"), Route::Undo(None));
    assert_eq!(route("redo"), Route::Redo);
    assert_eq!(route("status"), Route::Status);
    assert_eq!(route("what is the agent doing?"), Route::Status);
    assert_eq!(
        route("run `cargo clippy --all-targets`"),
        Route::Command(vec![
            "cargo".into(),
            "clippy".into(),
            "--all-targets".into()
        ])
    );
    assert_eq!(
        route("run make lint"),
        Route::Command(vec!["make".into(), "lint".into()])
    );
    assert_eq!(
        route("run `cargo test -p core`"),
        Route::Command(vec![
            "cargo".into(),
            "test".into(),
            "-p".into(),
            "core".into()
        ])
    );
    // Quotes group words as a shell's do, inside any of the three quotings of the command.
    let grouped = Route::Command(vec!["pytest".into(), "-k".into(), "a b".into()]);
    assert_eq!(route(r#"run "pytest -k 'a b'""#), grouped);
    assert_eq!(route("run `pytest -k \"a b\"`"), grouped);
    assert_eq!(
        route("run make check ARGS='a b'"),
        Route::Command(vec!["make".into(), "check".into(), "ARGS=a b".into()])
    );
    assert_eq!(
        command_line(&["pytest".into(), "-k".into(), "a b".into()]),
        "pytest -k 'a b'"
    );
    // Unbalanced quotes are not a command line.
    assert_eq!(route("run make check ARGS='a b"), Route::Agent);
    // The loop's own goals stay with the loop.
    for goal in [
        "run the tests",
        "run tests",
        "fix the failing tests",
        "undo the rename in parser.rs and call the function parse_all instead everywhere",
        "add an undo command to the editor",
        "explain the status field",
        "run",
        "run the linter",
        "run all the benchmarks and tell me which got slower",
    ] {
        assert_eq!(route(goal), Route::Agent, "{goal}");
    }
}

#[test]
fn the_coder_reads_with_tools_within_its_turn_then_must_answer() {
    use crate::conversation::Speaker;
    let mut run = new_run("fix the failing tests", Some(Intent::Fix));
    step(&mut run, Event::Start);
    let e = step(&mut run, Event::TestsFinished(failing("a")));
    assert!(matches!(
        e.last(),
        Some(Effect::CallModel { tools, .. }) if tools.iter().any(|t| t == "grep") && tools.iter().any(|t| t == "edit_file")
    ));
    let grep = call("c1", "grep", serde_json::json!({"pattern": "def add"}));
    // The first round learns something; the same call with the same answer twice more learns
    // nothing, and those two rounds spend the budget of 2.
    for round in 1..=3 {
        let e = tool_calls(&mut run, vec![grep.clone()]);
        assert!(matches!(e.last(), Some(Effect::RunTools(c)) if c.len() == 1));
        let e = step(
            &mut run,
            Event::ToolResults(vec![(grep.clone(), "calc.py:4: def add(a, b):".into())]),
        );
        let (messages, tools) = coder_turn(&e);
        // The call and its result follow the prompt, in order; the turn is still iteration 1.
        let tail: Vec<Speaker> = messages.iter().rev().take(2).map(|m| m.speaker).collect();
        assert_eq!(run.iterations, 1);
        if round < 3 {
            assert!(!tools.is_empty(), "a tool step is left");
            assert_eq!(tail, [Speaker::Tool, Speaker::Assistant]);
        } else {
            assert!(tools.is_empty(), "the budget of 2 rounds is spent");
            let last = messages.last().unwrap();
            assert!(last.content.contains("Answer now"), "{last:?}");
        }
    }
    // The answer with edits goes on as before, and the next turn starts with no exchange.
    assert!(matches!(
        propose(&mut run, &edit_answer("a * b")).last(),
        Some(Effect::RunTests)
    ));
    let mut e = step(&mut run, Event::TestsFinished(failing("b")));
    // A failure is reflected on first; the reflector's advice leads to the next coder turn.
    if e.last().is_some_and(|e| is_call(e, Role::Reflector)) {
        e = answered(
            &mut run,
            Role::Reflector,
            r#"{"task_id": "T1", "passed": false, "report": "wrong", "next_step": "sum"}"#,
        );
    }
    assert!(
        matches!(
            e.last(),
            Some(Effect::CallModel {
                role: Role::Coder,
                tools,
                ..
            }) if !tools.is_empty()
        ),
        "the next turn is the coder's, with tools again: {e:?}"
    );
    assert_eq!(run.iterations, 2);
    assert!(run.turn.messages().is_empty() && run.tool_steps() == 0);
}

#[test]
fn reading_new_code_is_progress_and_the_turn_still_ends() {
    let mut run = new_run("fix the failing tests", Some(Intent::Fix));
    step(&mut run, Event::Start);
    step(&mut run, Event::TestsFinished(failing("a")));
    let max = run.budget().max_tool_steps;
    let limit = max * super::turn::state::ROUNDS_PER_STEP;
    for round in 1..=limit {
        let read = call(
            &format!("r{round}"),
            "read_file",
            serde_json::json!({"path": format!("mod{round}.py")}),
        );
        tool_calls(&mut run, vec![read.clone()]);
        let e = step(
            &mut run,
            Event::ToolResults(vec![(read, format!("     1| x = {round}\n"))]),
        );
        let (_, tools) = coder_turn(&e);
        // Each round read something new: no step of the limit spent, until the rounds' cap.
        assert_eq!(tools.is_empty(), round == limit, "round {round} of {limit}");
    }
    assert_eq!(run.tool_steps(), 0);
}

#[test]
fn editing_tools_are_proposals_that_go_through_locate_and_approval() {
    let mut run = new_run("change add", Some(Intent::Edit));
    step(&mut run, Event::Start);
    let edit = serde_json::json!({"path": "calc.py", "search": "a - b", "replace": "a + b"});
    let e = tool_calls(&mut run, vec![call("e1", "edit_file", edit)]);
    let Some(Effect::Locate(plan)) = e.last() else {
        panic!("an edit tool call is located like an answer: {e:?}")
    };
    assert_eq!(plan.paths(), ["calc.py"]);
    assert_eq!(run.phase, Phase::Locating);
    // A call with bad arguments is sent back once, like an unreadable answer.
    let mut run = new_run("change add", Some(Intent::Edit));
    step(&mut run, Event::Start);
    let write = serde_json::json!({"path": "x.py"});
    let e = tool_calls(&mut run, vec![call("e1", "write_file", write)]);
    assert!(
        matches!(e.first(), Some(Effect::Repair { reason, .. }) if reason.contains("content")),
        "{e:?}"
    );
    assert!(
        run.feedback
            .last()
            .unwrap()
            .contains("could not be read as edits")
    );
}

#[test]
fn a_reading_agent_answers_in_markdown_with_reading_tools_only() {
    let mut run = new_run("review calc.py", Some(Intent::Edit));
    run.settings.agent = AgentProfile::built_in("review").unwrap();
    let e = step(&mut run, Event::Start);
    let Some(Effect::CallModel {
        role,
        messages,
        tools,
    }) = e.last()
    else {
        panic!("{e:?}")
    };
    assert_eq!(*role, Role::Coder);
    assert!(
        messages[0].content.contains("review agent"),
        "{}",
        messages[0].content
    );
    assert!(tools.contains(&"grep".to_string()) && tools.contains(&"get_diagnostics".to_string()));
    assert!(
        !tools.iter().any(|t| t == "edit_file" || t == "run_command"),
        "{tools:?}"
    );
    let e = answered(&mut run, Role::Coder, "- calc.py:2: subtracts");
    assert!(finishes(e.last(), Phase::Done, "subtracts"));
}

#[test]
fn long_tool_turns_are_summarised() {
    let mut b = budget(3, 15);
    b.max_tool_steps = 8;
    b.summarize_after = 2;
    let mut run = made("change add", Some(Intent::Edit), b);
    step(&mut run, Event::Start);
    let grep = call("g", "grep", serde_json::json!({"pattern": "x"}));
    for round in 1..=2 {
        tool_calls(&mut run, vec![grep.clone()]);
        let e = step(
            &mut run,
            Event::ToolResults(vec![(grep.clone(), format!("r{round}"))]),
        );
        if round == 2 {
            let Some(Effect::CallModel {
                role: Role::Summarizer,
                messages,
                ..
            }) = e.last()
            else {
                panic!("{e:?}")
            };
            assert!(messages[1].content.contains("r1") && messages[1].content.contains("r2"));
        }
    }
    let e = answered(&mut run, Role::Summarizer, "calc.py:4 has add");
    assert_eq!(run.turn.messages().len(), 1);
    let (messages, tools) = coder_turn(&e);
    assert!(
        messages
            .last()
            .unwrap()
            .content
            .contains("calc.py:4 has add")
    );
    assert!(!tools.is_empty());
    assert_eq!(run.iterations, 1);
}

/// The evaluator's answer in a fence with prose, or with a trailing comma, is read like the
/// reviewer's (it was dropped without a word); one that cannot be read at all ends the run
/// done and says so, for the journal and the user.
#[test]
fn evaluation_answers_as_models_write_them_are_read_and_a_lost_one_is_named() {
    let written = [
        "Here is my verdict:\n```json\n{\"score\": 2, \"complete\": false, \"reason\": \"mul is missing\"}\n```",
        "{\"score\": 2, \"complete\": false, \"reason\": \"mul is missing\",}",
    ];
    for answer in written {
        let mut run = new_run("add add and mul", Some(Intent::Edit));
        run.settings.evaluation = crate::agent::Evaluation::Basic;
        step(&mut run, Event::Start);
        propose(&mut run, &edit_answer("a + b"));
        step(&mut run, Event::TestsFinished(passing()));
        let e = answered(&mut run, Role::Evaluator, answer);
        assert!(
            finishes(e.last(), Phase::Failed, "mul is missing"),
            "{answer}: {e:?}"
        );
    }
    let mut run = new_run("add add and mul", Some(Intent::Edit));
    run.settings.evaluation = crate::agent::Evaluation::Basic;
    step(&mut run, Event::Start);
    propose(&mut run, &edit_answer("a + b"));
    step(&mut run, Event::TestsFinished(passing()));
    let e = answered(&mut run, Role::Evaluator, "I think it is fine, 4 out of 5.");
    assert!(
        e.iter().any(
            |e| matches!(e, Effect::Warn(w) if w.contains("evaluator's answer could not be read"))
        ),
        "{e:?}"
    );
    assert!(
        matches!(
            e.last(),
            Some(Effect::Finish {
                status: Phase::Done,
                ..
            })
        ),
        "{e:?}"
    );
}

#[test]
fn evaluation_basic_ends_partial_and_full_corrects() {
    let incomplete = r#"{"score": 2, "complete": false, "reason": "mul is missing"}"#;
    for (mode, corrects) in [
        (crate::agent::Evaluation::Basic, false),
        (crate::agent::Evaluation::Full, true),
    ] {
        let mut run = new_run("add add and mul", Some(Intent::Edit));
        run.settings.evaluation = mode;
        step(&mut run, Event::Start);
        propose(&mut run, &edit_answer("a + b"));
        let e = step(&mut run, Event::TestsFinished(passing()));
        assert!(e.iter().any(|e| is_call(e, Role::Evaluator)), "{e:?}");
        let e = answered(&mut run, Role::Evaluator, incomplete);
        if corrects {
            assert!(
                matches!(
                    e.last(),
                    Some(Effect::CallModel {
                        role: Role::Coder,
                        ..
                    })
                ),
                "{e:?}"
            );
            assert_eq!(
                run.tasks.last().unwrap().title,
                "finish the goal: mul is missing"
            );
            assert_eq!(run.ending.corrections(), 1);
        } else {
            assert!(run.partial());
            assert!(finishes(e.last(), Phase::Failed, "mul is missing"), "{e:?}");
            assert!(
                matches!(e.last(), Some(Effect::Finish { answer, .. }) if answer.starts_with("partial:")),
                "{e:?}"
            );
        }
    }
}

#[test]
fn a_goal_is_named_in_one_line_of_at_most_80_characters() {
    use crate::agent::one_line;
    assert_eq!(one_line("fix the failing tests"), "fix the failing tests");
    assert_eq!(
        one_line("\n  implement this:\n```python\ndef f():\n    pass\n```\n"),
        "implement this: …"
    );
    let long = "é".repeat(200);
    let named = one_line(&long);
    assert_eq!(named.chars().count(), 80, "{named}");
    assert!(named.ends_with('…'));
}

#[test]
fn a_data_answer_is_summarised_in_one_line_for_people() {
    use crate::conversation::Role;
    use prompts::role_summary;
    let reflection = r#"{"task_id": "T1", "passed": false, "report": "add now multiplies:\nadd(2, 3) gives 6", "next_step": "Return a + b."}"#;
    assert_eq!(
        role_summary(Role::Reflector, reflection).unwrap(),
        "the reflector finds T1 not done: add now multiplies: add(2, 3) gives 6; next: Return a + b."
    );
    assert_eq!(
        role_summary(
            Role::Evaluator,
            r#"{"score": 4, "reason": "a one-line fix"}"#
        )
        .unwrap(),
        "the evaluator gives 4/5: a one-line fix"
    );
    assert_eq!(
        role_summary(Role::Evaluator, "not json").unwrap(),
        "the evaluator answered in a form agent-ls could not read"
    );
    assert_eq!(role_summary(Role::Coder, "calc.py\n"), None);
}

/// A fix on a large context with a first prompt budget of `bytes`: the coder is being asked.
fn lean_fix(bytes: usize) -> (Run, Vec<Effect>) {
    use super::context::{Context, Piece};
    let file = |path: &str, text: String| Piece {
        path: Some(path.into()),
        text,
    };
    let context = Context {
        pieces: vec![
            file("test_calc.py", "from calc import add\n".into()),
            Piece {
                path: None,
                text: "Repo map:\ncalc.py:1: def add(a, b):\n".into(),
            },
            file("calc.py", FILE.into()),
            file("big.py", "x = 1\n".repeat(3000)),
            file("other.py", "y = 2\n".repeat(3000)),
        ],
        unread: (0..100).map(|i| format!("m{i}.py")).collect(),
    };
    let mut b = budget(3, 15);
    b.first_prompt_bytes = bytes;
    b.max_tool_steps = 8;
    let mut run = with_context("fix the failing tests", Some(Intent::Fix), b, context);
    step(&mut run, Event::Start);
    let e = step(&mut run, Event::TestsFinished(failing("a")));
    (run, e)
}

#[test]
fn the_first_prompt_keeps_within_its_budget_when_tools_can_read_the_rest() {
    let (mut run, e) = lean_fix(2000);
    let messages = coder_call(&e);
    let bytes: usize = messages.iter().map(|m| m.content.len()).sum();
    assert!(bytes <= 2000, "{bytes}");
    let first = &messages[1].content;
    assert!(first.contains("FAILED a") && first.contains("Repo map:"));
    assert!(
        first.contains("def add(a, b):\n    return a - b"),
        "{first}"
    );
    assert!(
        !first.contains("x = 1"),
        "a large file comes through the tools"
    );
    // Without tools, the runtime's own limit is the only one.
    run.settings.budget.max_tool_steps = 0;
    let e = answered(&mut run, Role::Coder, "no edits here");
    let whole: usize = coder_call(&e).iter().map(|m| m.content.len()).sum();
    assert!(whole > 30_000, "{whole}");
}

#[test]
fn a_file_read_twice_appears_once_in_the_next_call_and_the_prefix_stays() {
    let (mut run, e) = lean_fix(2000);
    let before = coder_call(&e).to_vec();
    let read = |id: &str| call(id, "read_file", serde_json::json!({"path": "big.py"}));
    let text: String = (1..=50).map(|n| format!("{n:>6}| x = 1\n")).collect();
    tool_calls(&mut run, vec![read("r1")]);
    let e = step(
        &mut run,
        Event::ToolResults(vec![(read("r1"), text.clone())]),
    );
    let after_one = coder_call(&e).to_vec();
    assert_eq!(
        after_one[..before.len()],
        before[..],
        "the prefix is byte-stable"
    );
    tool_calls(&mut run, vec![read("r2")]);
    let e = step(
        &mut run,
        Event::ToolResults(vec![(read("r2"), text.clone())]),
    );
    let messages = coder_call(&e);
    assert_eq!(
        messages
            .iter()
            .filter(|m| m.content.contains(&text))
            .count(),
        1
    );
    assert!(
        messages
            .iter()
            .any(|m| m.content == "[file big.py lines 1-50: shown again below]")
    );
    // calc.py is whole in the first message: reading it again points there.
    let calc = call("r3", "read_file", serde_json::json!({"path": "calc.py"}));
    tool_calls(&mut run, vec![calc.clone()]);
    let numbered = "     1| def add(a, b):\n     2|     return a - b\n";
    let e = step(&mut run, Event::ToolResults(vec![(calc, numbered.into())]));
    let last = coder_call(&e).last().unwrap();
    assert_eq!(
        last.content,
        "[file calc.py lines 1-2: the same text is in the first message]"
    );
}

/// The reviewer's answer with one finding on calc.py line 2 (the changed line).
fn review_answer(verdict: &str, priority: u8) -> String {
    format!(
        "{{\"findings\": [{{\"title\": \"[P{priority}] wrong\", \"body\": \"b\", \"priority\": {priority}, \
         \"confidence\": 0.9, \"path\": \"calc.py\", \"start_line\": 2, \"end_line\": 2}}], \
         \"verdict\": \"{verdict}\", \"explanation\": \"e\", \"confidence\": 0.9}}"
    )
}

/// A fix under `mode` whose first change passed its tests: the reviewer is about to read the
/// steps' diff (no git checkpoint).
fn reviewing(mode: review::ReviewMode) -> Run {
    let mut run = fixing(budget(3, 15), "f1");
    run.settings.review = mode;
    propose(&mut run, &edit_answer("a + b"));
    let e = step(&mut run, Event::TestsFinished(passing()));
    assert!(
        matches!(e.last(), Some(Effect::DiffRun { files }) if files == &["calc.py"]),
        "{e:?}"
    );
    let e = step(&mut run, Event::RunDiff(Ok(None)));
    let Some(Effect::CallModel {
        role: Role::Reviewer,
        messages,
        ..
    }) = e.last()
    else {
        panic!("no reviewer call: {e:?}")
    };
    // The steps' diff, with the goal and the tests.
    let user = &messages[1].content;
    assert!(
        user.contains("+    return a + b") && user.contains("2 passed"),
        "{user}"
    );
    run
}

#[test]
fn gate_mode_sends_a_confident_p1_back_to_the_coder_and_passes_the_second_change() {
    let mut run = reviewing(review::ReviewMode::Gate);
    let e = answered(&mut run, Role::Reviewer, &review_answer("incorrect", 1));
    assert!(matches!(
        &e[0],
        Effect::Reviewed(review::ReviewResult::Reviewed { blocking: true, .. })
    ));
    let (messages, _) = coder_turn(&e);
    assert!(
        messages
            .iter()
            .any(|m| m.content.contains("[P1] wrong (calc.py:2-2)")),
        "{messages:?}"
    );
    assert_eq!(run.retries, 1);
    propose(&mut run, &edit_answer("b + a"));
    step(&mut run, Event::TestsFinished(passing()));
    step(&mut run, Event::RunDiff(Ok(None)));
    let e = answered(
        &mut run,
        Role::Reviewer,
        r#"{"findings": [], "verdict": "correct", "explanation": "ok", "confidence": 0.9}"#,
    );
    assert!(
        finishes(e.last(), Phase::Done, "review: the patch is correct"),
        "{e:?}"
    );
}

#[test]
fn a_p3_finding_or_advise_mode_does_not_block() {
    let mut run = reviewing(review::ReviewMode::Gate);
    let e = answered(&mut run, Role::Reviewer, &review_answer("incorrect", 3));
    assert!(finishes(e.last(), Phase::Done, "1 P3"), "{e:?}");
    let mut run = reviewing(review::ReviewMode::Advise);
    let e = answered(&mut run, Role::Reviewer, &review_answer("incorrect", 1));
    assert!(matches!(
        &e[0],
        Effect::Reviewed(review::ReviewResult::Reviewed { blocking: true, .. })
    ));
    assert!(finishes(e.last(), Phase::Done, "1 P1"), "{e:?}");
}

#[test]
fn gate_mode_stops_with_the_findings_once_the_retries_are_spent() {
    let mut run = reviewing(review::ReviewMode::Gate);
    run.settings.budget.max_retries = 0;
    let e = answered(&mut run, Role::Reviewer, &review_answer("incorrect", 0));
    assert!(
        finishes(e.last(), Phase::Failed, "the reviewer found problems"),
        "{e:?}"
    );
    assert!(matches!(
        run.last_review(),
        Some(review::ReviewResult::Reviewed { .. })
    ));
}

#[test]
fn an_unreadable_review_is_asked_again_once_then_unavailable_not_approved() {
    let mut run = reviewing(review::ReviewMode::Gate);
    let e = answered(&mut run, Role::Reviewer, "Looks fine to me!");
    let Some(Effect::CallModel {
        role: Role::Reviewer,
        messages,
        ..
    }) = e.last()
    else {
        panic!("no repair request: {e:?}")
    };
    assert!(
        messages
            .last()
            .unwrap()
            .content
            .contains("could not be read (no JSON object")
    );
    let e = answered(&mut run, Role::Reviewer, "{\"verdict\": \"fine\"}");
    assert!(matches!(
        &e[0],
        Effect::Reviewed(review::ReviewResult::Unavailable { reason }) if reason.contains("twice")
    ));
    assert!(finishes(e.last(), Phase::Done, "the tests pass"), "{e:?}");
    assert!(!matches!(
        run.last_review(),
        Some(review::ReviewResult::Reviewed { .. })
    ));
}

#[test]
fn a_review_reads_the_git_diff_and_checks_its_lines_against_the_new_text() {
    let mut run = fixing(budget(3, 15), "f1");
    run.settings.review = review::ReviewMode::Advise;
    propose(&mut run, &edit_answer("a + b"));
    step(&mut run, Event::TestsFinished(passing()));
    let git = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n";
    step(&mut run, Event::RunDiff(Ok(Some(git.into()))));
    // Line 9 of a two-line file: asked again, with the reason.
    let past = review_answer("incorrect", 1).replace("\"end_line\": 2", "\"end_line\": 9");
    let e = answered(&mut run, Role::Reviewer, &past);
    let Some(Effect::CallModel { messages, .. }) = e.last() else {
        panic!("{e:?}")
    };
    assert!(
        messages
            .last()
            .unwrap()
            .content
            .contains("past the end of calc.py (2 lines)")
    );
}

#[test]
fn remembered_records_reach_the_coder_the_reflector_and_the_planner() {
    const MEMORY: &str = "Remembered from earlier runs (the most relevant first):\n- [r-1] x\n\n";
    let mut run = made("fix", Some(Intent::Fix), budget(3, 15));
    step(&mut run, Event::Start);
    // The driver hands the section in before the baseline's result is stepped.
    step(&mut run, Event::Input(Input::Memory(MEMORY.into())));
    let e = step(&mut run, Event::TestsFinished(failing("a")));
    assert!(coder_call(&e)[1].content.contains(MEMORY));
    propose(&mut run, &edit_answer("a * b"));
    let e = step(&mut run, Event::TestsFinished(failing("b")));
    let Effect::CallModel { role, messages, .. } = &e[0] else {
        panic!("{e:?}")
    };
    assert_eq!(*role, Role::Reflector);
    assert!(messages[1].content.contains(MEMORY));
    let (plan, _) = messages::plan(&run, None);
    assert!(plan[1].content.contains(MEMORY));
}

/// A test answer of the tester's, for `tests/test_t.py::test_t` expecting `expect`.
fn tester_answer(expect: &str) -> String {
    serde_json::json!({"tests": [{"path": "tests/test_t.py", "name": "test_t", "kind": "example",
        "reason": "r", "expect": expect, "content": "def test_t():\n    assert 1 == 2\n"}]})
    .to_string()
}

fn trial(failing_with: Option<&str>) -> tester::Trial {
    tester::Trial {
        passed: failing_with.is_none(),
        failures: failing_with
            .map(|m| crate::test_output::Failure {
                test_id: "tests/test_t.py::test_t".into(),
                location: None,
                message: m.into(),
                frames: Vec::new(),
            })
            .into_iter()
            .collect(),
        report: "the output".into(),
        problem: None,
    }
}

fn tried(failing_with: Option<&str>) -> Event {
    Event::TestsTried(Ok(tester::Tried {
        before: vec![trial(failing_with); 3],
        after: None,
    }))
}

#[test]
fn a_described_bug_with_passing_tests_goes_to_the_tester_not_to_the_end() {
    let mut run = new_run("fix: parse drops the last field", Some(Intent::Fix));
    step(&mut run, Event::Start);
    let e = step(&mut run, Event::TestsFinished(passing()));
    assert!(is_call(e.last().unwrap(), Role::Tester), "{e:?}");
    assert_eq!(run.phase, Phase::Reproducing);
    // "fix the failing tests" has nothing to reproduce.
    let mut run = new_run("fix the failing tests", Some(Intent::Fix));
    step(&mut run, Event::Start);
    let e = step(&mut run, Event::TestsFinished(passing()));
    assert!(finishes(e.last(), Phase::Done, "already pass"), "{e:?}");
}

#[test]
fn a_kept_test_is_proposed_alone_and_its_failure_goes_to_the_coder() {
    let mut run = new_run("fix: parse drops the last field", Some(Intent::Fix));
    step(&mut run, Event::Start);
    step(&mut run, Event::TestsFinished(passing()));
    // An unreadable answer is asked for once more.
    let e = answered(&mut run, Role::Tester, "I would test parse");
    assert!(is_call(e.last().unwrap(), Role::Tester), "{e:?}");
    let e = answered(&mut run, Role::Tester, &tester_answer("assert 1 == 2"));
    let Some(Effect::TryTests(plan)) = e.last() else {
        panic!("no trial: {e:?}")
    };
    assert_eq!(plan.times, 3);
    assert_eq!(plan.filter.as_deref(), Some("tests/test_t.py"));
    // It passes: back to the tester, told why.
    let e = step(&mut run, tried(None));
    let Some(Effect::CallModel { messages, .. }) = e.last() else {
        panic!("no tester call: {e:?}")
    };
    assert!(messages.last().unwrap().content.contains("passes"));
    answered(&mut run, Role::Tester, &tester_answer("assert 1 == 2"));
    let e = step(&mut run, tried(Some("AssertionError: assert 1 == 2")));
    let Some(Effect::Locate(plan)) = e.last() else {
        panic!("not proposed: {e:?}")
    };
    assert_eq!(plan.edits.len(), 1);
    assert_eq!(plan.edits[0].path, "tests/test_t.py");
    assert_eq!(
        run.tester_record().map(|r| r.status),
        Some(tester::Status::Kept)
    );
    // Located, approved and applied like any change; its failing run starts the coder.
    let outcome = locate(plan);
    step(&mut run, Event::Located(outcome));
    step(&mut run, Event::Approved);
    step(&mut run, Event::Applied);
    let e = step(&mut run, Event::TestsFinished(failing("new")));
    assert!(is_call(e.last().unwrap(), Role::Coder), "{e:?}");
}

#[test]
fn the_tester_budget_ends_a_run_that_needed_the_test() {
    let mut run = new_run("fix: parse drops the last field", Some(Intent::Fix));
    run.settings.tester.max_attempts = 1;
    step(&mut run, Event::Start);
    step(&mut run, Event::TestsFinished(passing()));
    answered(&mut run, Role::Tester, &tester_answer("assert 1 == 2"));
    let e = step(&mut run, tried(Some("ImportError: cannot import name 'x'")));
    assert!(
        finishes(e.last(), Phase::Failed, "could not be reproduced"),
        "{e:?}"
    );
    assert_eq!(
        run.tester_record().map(|r| r.status),
        Some(tester::Status::Exhausted)
    );
}

#[test]
fn a_test_that_could_not_be_written_goes_back_to_the_tester() {
    let mut run = new_run("fix: parse drops the last field", Some(Intent::Fix));
    step(&mut run, Event::Start);
    step(&mut run, Event::TestsFinished(passing()));
    answered(&mut run, Role::Tester, &tester_answer("assert 1 == 2"));
    let e = step(
        &mut run,
        Event::TestsTried(Err(tester::TrialError::Protected {
            path: ".git/x.py".into(),
            why: "git's own files".into(),
        })),
    );
    let Some(Effect::CallModel { role, messages, .. }) = e.last() else {
        panic!("no tester call: {e:?}")
    };
    assert_eq!(*role, Role::Tester);
    assert!(messages.last().unwrap().content.contains("is protected"));
    assert_eq!(run.reproducing.work().map(|w| w.attempts), Some(1));
}

/// A Hypothesis property of the tester's, `tests/test_t.py::test_p`.
fn property_answer() -> String {
    serde_json::json!({"tests": [{"path": "tests/test_t.py", "name": "test_p", "kind": "property",
        "reason": "r", "expect": "AssertionError", "content": "@given(st.text())\ndef test_p(s):\n    assert 1 == 2\n"}]})
    .to_string()
}

fn failing_in(ids: &[&str], message: &str) -> tester::Trial {
    tester::Trial {
        passed: false,
        failures: ids
            .iter()
            .map(|id| crate::test_output::Failure {
                test_id: (*id).into(),
                location: None,
                message: message.into(),
                frames: Vec::new(),
            })
            .collect(),
        report: "the output".into(),
        problem: None,
    }
}

/// The tester's property test, its library checked: the run reproducing a bug, with the
/// effects of the library's answer `ready`.
fn property_checked(ready: Result<(), tester::InstallError>) -> (Run, Vec<Effect>) {
    let mut run = new_run("fix: parse drops the last field", Some(Intent::Fix));
    step(&mut run, Event::Start);
    step(&mut run, Event::TestsFinished(passing()));
    let e = answered(&mut run, Role::Tester, &property_answer());
    assert_eq!(e.last(), Some(&Effect::DevDependency("hypothesis".into())));
    let e = step(&mut run, Event::DevDependency(ready));
    (run, e)
}

/// The trial's three runs fail in the tests `ids` with `message`.
fn trial_failing(run: &mut Run, ids: &[&str], message: &str) -> Vec<Effect> {
    let before = vec![failing_in(ids, message); 3];
    step(
        run,
        Event::TestsTried(Ok(tester::Tried {
            before,
            after: None,
        })),
    )
}

/// The last message of the tester call the effects end with.
fn told_tester(e: &[Effect]) -> &str {
    let Some(Effect::CallModel { messages, .. }) = e.last() else {
        panic!("no tester call: {e:?}")
    };
    &messages.last().unwrap().content
}

const SHRUNK: &str = "AssertionError: assert 1 == 2\nFailing test case: test_p(\ns=',',\n)";

#[test]
fn a_property_library_the_user_would_not_install_sends_the_tester_back() {
    let (_, e) = property_checked(Err(tester::InstallError::NotApproved {
        library: "hypothesis".into(),
        command: "python3 -I -m pip install hypothesis".into(),
    }));
    assert!(told_tester(&e).contains("write an example test instead"));
}

#[test]
fn a_failing_property_s_counterexample_becomes_an_example_test_that_must_fail_too() {
    let (mut run, e) = property_checked(Ok(()));
    assert!(matches!(e.last(), Some(Effect::TryTests(_))), "{e:?}");
    let e = trial_failing(&mut run, &["tests/test_t.py::test_p"], SHRUNK);
    let Some(Effect::TryTests(plan)) = e.last() else {
        panic!("no trial of the example: {e:?}")
    };
    assert_eq!(plan.filter.as_deref(), Some("tests/test_t.py"));
    assert_eq!(plan.write.len(), 1);
    let written = plan.write[0].1.clone().unwrap_or_default();
    assert!(
        written.contains("def test_p_example():\n")
            && written.contains("test_p.hypothesis.inner_test(s=',')"),
        "{written}"
    );
    // The example passes: refused, back to the tester, told why.
    let e = trial_failing(&mut run, &["tests/test_t.py::test_p"], SHRUNK);
    let told = told_tester(&e);
    assert!(
        told.contains("example test") && told.contains("passes"),
        "{told}"
    );
    // Again (its library found already), and this time the example fails too: both kept,
    // in one change of one file.
    let e = answered(&mut run, Role::Tester, &property_answer());
    assert!(matches!(e.last(), Some(Effect::TryTests(_))), "{e:?}");
    trial_failing(&mut run, &["tests/test_t.py::test_p"], SHRUNK);
    let both = ["tests/test_t.py::test_p", "tests/test_t.py::test_p_example"];
    let e = trial_failing(&mut run, &both, "AssertionError: assert 1 == 2");
    let Some(Effect::Locate(plan)) = e.last() else {
        panic!("not proposed: {e:?}")
    };
    assert_eq!(plan.edits.len(), 1);
    let record = run.tester_record().cloned().unwrap();
    assert_eq!(record.status, tester::Status::Kept);
    let kinds: Vec<_> = record
        .tests
        .iter()
        .map(|t| (t.name.as_str(), t.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("test_p", tester::TestKind::Property),
            ("test_p_example", tester::TestKind::Example)
        ]
    );
    assert_eq!(record.tests[0].counterexample.as_deref(), Some("s=','"));
}

/// A checkpoint written before each phase's state had its own type (the `Run` of one flat
/// struct), in the middle of a turn with a tool round: it still loads, keeps what it had,
/// resumes with that turn's coder call, and writes back the same keys.
#[test]
fn a_checkpoint_from_before_the_phases_own_their_state_still_resumes() {
    const OLD: &str = include_str!("testdata/checkpoint-0.json");
    let mut run: Run = serde_json::from_str(OLD).unwrap();
    assert_eq!(run.phase(), Phase::Coding);
    assert_eq!((run.goal(), run.intent()), ("fix", Some(Intent::Fix)));
    assert_eq!((run.iterations(), run.tool_steps()), (2, 1));
    assert_eq!(run.files_changed(), ["calc.py"]);
    assert_eq!(run.originals().len(), 1);
    assert_eq!(run.settings().review, review::ReviewMode::Gate);
    assert_eq!(run.settings().review_min_confidence, 0.6);
    assert_eq!(run.settings().tester.max_attempts, 2);
    assert_eq!(run.settings().evaluation, Evaluation::Full);
    assert_eq!(run.ending.corrections(), 1);
    assert!(matches!(
        run.last_review(),
        Some(review::ReviewResult::Unavailable { .. })
    ));
    assert_eq!(
        run.tester_record().map(|r| r.status),
        Some(tester::Status::Exhausted)
    );
    assert_eq!(
        run.reproducing.work().map(|w| w.mode),
        Some(tester::Mode::AfterFix)
    );
    let e = resume(&mut run);
    let messages = coder_call(&e);
    assert!(
        messages[1]
            .content
            .contains("Earlier runs: add was wrong once.")
    );
    assert!(messages[2].content.contains("Reflection: multiplied"));
    // The turn's tool round comes after the prompt.
    assert!(
        !messages.last().unwrap().tool_calls.is_empty(),
        "{messages:?}"
    );
    let keys = |json: &str| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    // What the old checkpoint had, and what turns keep since (their rounds and results seen).
    let mut now = keys(OLD);
    now.extend(["rounds".to_string(), "seen".to_string()]);
    now.sort();
    assert_eq!(keys(&serde_json::to_string(&run).unwrap()), now);
}

/// A test run that found no test at all (pytest's "no tests ran").
fn no_tests() -> TestSummary {
    TestSummary {
        passed: false,
        passed_count: 0,
        failed_count: 0,
        report: "no tests ran in <time>".into(),
        fingerprint: String::new(),
        no_tests: true,
        stopped: None,
    }
}

#[test]
fn no_tests_yet_is_said_as_such_and_a_fix_starts_with_the_testers_first_test() {
    let mut run = new_run("run the tests", Some(Intent::Test));
    step(&mut run, Event::Start);
    let e = step(&mut run, Event::TestsFinished(no_tests()));
    assert!(finishes(e.first(), Phase::Done, "no tests yet"), "{e:?}");
    let mut run = new_run("make add add", Some(Intent::Fix));
    step(&mut run, Event::Start);
    let e = step(&mut run, Event::TestsFinished(no_tests()));
    assert!(is_call(e.last().unwrap(), Role::Tester), "{e:?}");
    assert_eq!(run.phase, Phase::Reproducing);
}

/// In a fix, a whole-file write that keeps less than half of the file's code is an elision:
/// nothing is written, and the coder hears it; a goal that asks for removal may.
#[test]
fn a_whole_file_write_dropping_most_code_in_a_fix_is_an_elision() {
    let original: String = (0..20).map(|i| format!("x{i} = {i}\n")).collect();
    let answer = serde_json::json!({"path": "m.py", "content": "x0 = 1\n"}).to_string();
    for (goal, elided) in [("fix", true), ("remove the unused names", false)] {
        let mut run = made(goal, Some(Intent::Fix), budget(3, 15));
        step(&mut run, Event::Start);
        step(&mut run, Event::TestsFinished(failing("t")));
        let e = answered(&mut run, Role::Coder, &answer);
        let Some(Effect::Locate(plan)) = e.last() else {
            panic!("{e:?}")
        };
        let outcome = edit::apply_plan(
            plan,
            std::path::Path::new("/ws"),
            &Limits::default(),
            |_| FileText::Text(original.clone()),
        );
        let e = step(&mut run, Event::Located(outcome));
        let repaired = e
            .iter()
            .any(|x| matches!(x, Effect::Repair { class: "elision", reason } if reason.contains("keeps 0 of")));
        assert_eq!(repaired, elided, "{goal}: {e:?}");
        assert_eq!(
            e.iter().any(|x| matches!(x, Effect::AskApproval { .. })),
            !elided
        );
    }
}

/// Drives the run through one coder answer up to its applying: the effects of `applied`.
fn apply_with(run: &mut Run, answer: &str, applied: Event) -> Vec<Effect> {
    let effects = answered(run, Role::Coder, answer);
    let Some(Effect::Locate(plan)) = effects.last() else {
        panic!("no edits: {effects:?}")
    };
    step(run, Event::Located(locate(plan)));
    step(run, Event::Approved);
    step(run, applied)
}

#[test]
fn the_language_servers_new_errors_go_to_the_coder_in_the_same_iteration() {
    let mut run = fixing(budget(3, 15), "a");
    let report = "calc.py:2:12: error: \"c\" is not defined".to_string();
    let e = apply_with(
        &mut run,
        &edit_answer("a + c"),
        Event::AppliedWithErrors(report),
    );
    let messages = coder_call(&e);
    assert!(
        messages
            .last()
            .unwrap()
            .content
            .contains("\"c\" is not defined"),
        "the coder hears the error: {messages:?}"
    );
    assert_eq!(run.iterations, 1, "no iteration is spent on the fix");
    assert_eq!(run.files_changed, vec!["calc.py".to_string()]);
    let e = apply_with(&mut run, &edit_answer("a + b"), Event::Applied);
    assert!(matches!(e.last(), Some(Effect::RunTests)), "{e:?}");
    assert_eq!(run.iterations, 1);
}

#[test]
fn errors_the_coder_cannot_fix_let_the_tests_run_after_three_rounds() {
    let mut run = fixing(budget(3, 15), "a");
    for round in 0..4 {
        let e = apply_with(
            &mut run,
            &edit_answer(&format!("a + c{round}")),
            Event::AppliedWithErrors("calc.py:2:12: error: unknown".into()),
        );
        let tests = matches!(e.last(), Some(Effect::RunTests));
        assert_eq!(tests, round == 3, "round {round}: {e:?}");
    }
}

/// `advance` is `step` in two halves: the transition at once, with whether it ends in a model
/// call, and the call written from the run when its effects are asked for, so the files the
/// driver hands in between show in the prompt, just as when handed in before `step`.
#[test]
fn advance_says_whether_a_step_calls_a_model_and_writes_the_call_last() {
    let files = || Input::Context("calc.py: handed in after the transition".to_string().into());
    let mut run = made("fix the failing tests", Some(Intent::Fix), budget(3, 15));
    let started = advance(&mut run, Event::Start);
    assert!(!started.calls_model(), "the baseline runs the tests");
    assert!(matches!(
        started.effects(&run).as_slice(),
        [Effect::Progress(_), Effect::RunTests]
    ));
    let mut whole = run.clone();
    let stepped = advance(&mut run, Event::TestsFinished(failing("a")));
    assert!(stepped.calls_model(), "the coder is asked");
    assert_eq!(
        run.phase(),
        Phase::Coding,
        "the transition is taken already"
    );
    assert!(step(&mut run, Event::Input(files())).is_empty());
    let e = stepped.effects(&run);
    assert!(
        coder_call(&e)[1]
            .content
            .contains("handed in after the transition"),
        "{e:?}"
    );
    assert!(step(&mut whole, Event::Input(files())).is_empty());
    assert_eq!(step(&mut whole, Event::TestsFinished(failing("a"))), e);
}

#[test]
fn a_rewound_runs_conversation_comes_between_the_system_prompt_and_the_new_goal() {
    use crate::conversation::{Earlier, Message, Speaker};
    let mut run = made("instead, multiply", Some(Intent::Fix), budget(3, 15));
    let earlier = Earlier {
        run_id: "run_a".into(),
        step: 1,
        messages: vec![
            Message::user("Goal: make add add"),
            Message::assistant("calc.py\n<<<<<<< SEARCH ..."),
        ],
    };
    step(
        &mut run,
        Event::Input(Input::Earlier(Box::new(earlier.clone()))),
    );
    step(&mut run, Event::Start);
    let e = step(&mut run, Event::TestsFinished(failing("a")));
    let messages = coder_call(&e);
    assert_eq!(messages[0].speaker, Speaker::System);
    assert_eq!(&messages[1..3], &earlier.messages[..]);
    assert!(messages[3].content.starts_with("Goal: instead, multiply"));
    // A checkpoint keeps it, so a resumed run still follows the conversation.
    let again: Run = serde_json::from_str(&serde_json::to_string(&run).unwrap()).unwrap();
    assert_eq!(again.earlier(), Some(&earlier));
    let (plan, _) = messages::plan(&run, None);
    assert_eq!(&plan[1..3], &earlier.messages[..]);
}
