//! The driver driven in-process: each test runs the whole loop (`Drive::run`) in a tempdir
//! workspace, the models answered by the replay provider from a script and the user, the
//! files and the tests by the test `Shell` (`tests/shell.rs`), and checks what the run did
//! through the shell's calls, the outcome, the files and the journal. Nothing here reads
//! `Run`'s fields: the loop is seen from where the front ends see it.

mod fixture;
mod shell;

use super::{ApplyError, Verdict};
use crate::model::Role;
use crate::tests_run::RunError;
use agent_ls_core::agent::{FailureKind, RunStatus};
use fixture::{
    CALC, FIX, GOAL, REFLECTION, RIGHT, WRONG, Workspace, kinds, line, live_kinds, streamed,
};
use shell::{Call, cancelled, failing, passing};

/// The baseline run of the fix runs: `test_add` fails where `add` is wrong.
fn add_fails(got: i32) -> Result<crate::tests_run::RunResult, RunError> {
    Ok(failing(
        "test_calc.py::test_add",
        "test_calc.py",
        5,
        &format!("assert {got} == 5"),
        0,
    ))
}

/// The shell's trace of one change to calc.py in `iteration`: shown, its task named, applied.
fn change(iteration: u32) -> Vec<String> {
    vec![
        "approve calc.py".into(),
        format!("task T1 fix the failing test in calc.py (iteration {iteration})"),
        "apply calc.py".into(),
    ]
}

/// The shell's trace of a test run.
fn tests() -> Vec<String> {
    vec!["run_tests".into()]
}

/// How a run ended: its status and answer.
fn ended(outcome: &super::Outcome) -> (RunStatus, &str) {
    (outcome.status, outcome.answer.as_str())
}

/// The change was shown after the baseline, and nothing reached the files.
fn shown_not_applied(shell: &shell::TestShell, ws: &Workspace) {
    assert_eq!(shell.effects(), [tests(), change(1)[..1].to_vec()].concat());
    assert_eq!(ws.read("calc.py"), CALC);
}

/// Whether the run's journal has a model call.
fn called_a_model(ws: &Workspace) -> bool {
    kinds(&ws.journal())
        .iter()
        .any(|k| k.starts_with("model_call"))
}

#[tokio::test]
async fn a_fix_run_goes_from_failing_tests_through_one_approved_change_to_passing_tests() {
    let ws = Workspace::new(&[(Role::Coder, FIX)]);
    let mut shell = ws.shell().tests([add_fails(-1), Ok(passing(1))]);
    let outcome = ws.fix(&mut shell).await;

    assert_eq!(
        ended(&outcome),
        (RunStatus::Done, "done: the tests pass after 1 iteration(s)")
    );
    assert_eq!(outcome.iterations, 1);
    assert_eq!(outcome.files_changed, ["calc.py"]);
    assert_eq!((outcome.tests.passed, outcome.tests.failed), (1, 0));
    assert_eq!(outcome.failure_kind, None);
    // The replay provider counts a quarter of the answer's bytes as its tokens.
    assert_eq!(outcome.tokens, (FIX.len() / 4) as u64);
    assert_eq!(shell.effects(), [tests(), change(1), tests()].concat());
    assert_eq!(
        shell.progress_lines(),
        [
            "running the tests to see what fails (iteration 1 of 15)",
            "asking the model for a change (iteration 1 of 15)",
            "proposing a change to calc.py (iteration 1 of 15)",
            "running the tests (iteration 1 of 15)",
        ]
    );
    assert_eq!(ws.read("calc.py"), CALC.replace("a - b", "a + b"));
}

#[tokio::test]
async fn tests_that_still_fail_go_to_the_reflector_and_the_coder_tries_again() {
    let ws = Workspace::new(&[
        (Role::Coder, WRONG),
        (Role::Reflector, REFLECTION),
        (Role::Coder, RIGHT),
    ]);
    let mut shell = ws
        .shell()
        .tests([add_fails(-1), add_fails(6), Ok(passing(1))]);
    let outcome = ws.fix(&mut shell).await;

    assert_eq!(
        ended(&outcome),
        (RunStatus::Done, "done: the tests pass after 2 iteration(s)")
    );
    assert_eq!(outcome.iterations, 2);
    assert_eq!(
        shell.effects(),
        [tests(), change(1), tests(), change(2), tests()].concat()
    );
    assert!(
        shell
            .progress_lines()
            .contains(&"the tests still fail; trying again (retry 1 of 3) (iteration 2 of 15)"),
        "{:?}",
        shell.progress_lines()
    );
    assert_eq!(ws.read("calc.py"), CALC.replace("a - b", "a + b"));
    // The reflector is asked between the two changes, and its answer is read as data.
    let journal = ws.journal();
    let k = kinds(&journal);
    let at = |kind: &str, nth: usize| {
        k.iter()
            .enumerate()
            .filter(|(_, x)| *x == kind)
            .nth(nth)
            .map(|(i, _)| i)
            .unwrap_or_else(|| panic!("no {kind} #{nth} in {k:?}"))
    };
    assert!(at("model_call coder", 0) < at("model_call reflector", 0));
    assert_eq!(at("reflection", 0), at("model_call reflector", 0) + 1);
    assert!(at("reflection", 0) < at("model_call coder", 1));
    let reflection = &journal[at("reflection", 0)]["data"];
    assert_eq!(reflection["next_step"], "return a + b", "{reflection}");
    assert_eq!(reflection["passed"], false);
}

#[tokio::test]
async fn each_step_writes_its_journal_line_in_order_and_the_live_view_sees_the_same() {
    let ws = Workspace::new(&[(Role::Coder, FIX)]);
    let mut shell = ws.shell().tests([add_fails(-1), Ok(passing(1))]);
    let (outcome, live) = ws.drive(&ws.config(), GOAL, &mut shell).await;
    assert_eq!(outcome.status, RunStatus::Done, "{}", outcome.answer);

    let journal = ws.journal();
    assert_eq!(
        kinds(&journal),
        [
            "intent",
            "context",
            "test_result",
            "memory",
            "prompt coder",
            "model_call coder",
            "patch",
            "approval",
            "test_result",
            "phases",
            "finished",
        ]
    );
    assert!(journal.iter().all(|l| l["run_id"] == "run_test0001"));
    let data = |i: usize| &journal[i]["data"];
    assert_eq!(data(0)["goal"], GOAL);
    assert_eq!(data(0)["intent"], "fix");
    assert_eq!(
        (data(2)["failed"].as_u64(), data(2)["passed"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(data(2)["state"], "failed");
    assert_eq!(
        journal[5]["content"], FIX,
        "a model call's line carries its answer"
    );
    assert_eq!(data(6)["files"], serde_json::json!(["calc.py"]));
    assert!(
        data(6)["diff"]
            .as_str()
            .is_some_and(|d| d.contains("+    return a + b"))
    );
    assert_eq!(data(7)["accepted"], true);
    assert_eq!(data(8)["state"], "passed");
    assert!(
        data(9)["first_request_ms"].as_u64().is_some(),
        "{}",
        data(9)
    );
    assert_eq!(data(10)["status"], "done");
    assert_eq!(data(10)["files_changed"], serde_json::json!(["calc.py"]));

    // The journal replays as a script: its model call gives the same answer again.
    let replay = crate::model::replay::Replay::open(&ws.journal_path());
    assert_eq!(
        replay.next(Role::Coder).map(|r| r.text),
        Ok(FIX.to_string())
    );
    // The live view gets every journal line in the same order (but the phase timings, a
    // record for `agent-ls stats`), and the coder's answer as it streams.
    let mut recorded = kinds(&journal);
    recorded.retain(|k| k != "phases");
    assert_eq!(live_kinds(&live), recorded);
    assert_eq!(streamed(&live, Role::Coder), FIX);
    assert!(live.iter().all(|e| e.run_id == "run_test0001"));
}

#[tokio::test]
async fn a_cancel_while_the_change_is_shown_ends_the_run_with_nothing_applied() {
    let ws = Workspace::new(&[(Role::Coder, FIX)]);
    let mut shell = ws
        .shell()
        .tests([add_fails(-1), Ok(passing(1))])
        .cancel_on(&ws.cancel, |c| matches!(c, Call::Approve { .. }));
    let outcome = ws.fix(&mut shell).await;

    assert_eq!(
        ended(&outcome),
        (
            RunStatus::Cancelled,
            "cancelled; edits already applied stay (the editor's undo reverts them)"
        )
    );
    shown_not_applied(&shell, &ws);
    let journal = ws.journal();
    assert_eq!(journal.last(), Some(line(&journal, "finished")));
    assert_eq!(line(&journal, "finished")["data"]["status"], "cancelled");
    assert_eq!(
        kinds(&journal)
            .iter()
            .filter(|k| *k == "test_result")
            .count(),
        1
    );
}

#[tokio::test]
async fn a_cancel_between_two_effects_stops_the_run_before_the_next_one() {
    let ws = Workspace::new(&[
        (Role::Coder, WRONG),
        (Role::Reflector, REFLECTION),
        (Role::Coder, RIGHT),
    ]);
    // Cancelled as the tests after the first change are announced, before they run.
    let mut shell = ws
        .shell()
        .tests([add_fails(-1), add_fails(6), Ok(passing(1))])
        .cancel_on(
            &ws.cancel,
            |c| matches!(c, Call::Progress(m) if m.starts_with("running the tests (")),
        );
    let outcome = ws.fix(&mut shell).await;

    assert_eq!(outcome.status, RunStatus::Cancelled, "{}", outcome.answer);
    assert_eq!(outcome.iterations, 1);
    assert_eq!(shell.count(|c| matches!(c, Call::Apply { .. })), 1);
    assert_eq!(shell.count(|c| matches!(c, Call::RunTests { .. })), 1);
    // The first change stays; nothing after it was asked or applied.
    assert_eq!(ws.read("calc.py"), CALC.replace("a - b", "a * b"));
    let k = kinds(&ws.journal());
    assert!(!k.contains(&"model_call reflector".to_string()), "{k:?}");
    assert_eq!(k.last().map(String::as_str), Some("finished"));
}

#[tokio::test]
async fn a_test_run_the_cancel_stopped_ends_the_run_cancelled_before_any_model_call() {
    let ws = Workspace::new(&[(Role::Coder, FIX)]);
    let mut shell = ws
        .shell()
        .tests([Ok(cancelled())])
        .cancel_on(&ws.cancel, |c| matches!(c, Call::RunTests { .. }));
    let outcome = ws.fix(&mut shell).await;

    assert_eq!(outcome.status, RunStatus::Cancelled, "{}", outcome.answer);
    assert_eq!(outcome.iterations, 0);
    assert_eq!(shell.effects(), ["run_tests"]);
    assert!(!called_a_model(&ws));
}

#[tokio::test]
async fn a_model_without_an_answer_fails_the_run_with_its_error() {
    let ws = Workspace::new(&[]);
    let mut shell = ws.shell().tests([add_fails(-1)]);
    let outcome = ws.fix(&mut shell).await;

    let answer = format!(
        "the coder model failed: the replay script {} has no more answers for the coder role",
        ws.script().display()
    );
    assert_eq!(ended(&outcome), (RunStatus::Failed, answer.as_str()));
    assert_eq!(outcome.failure_kind, None);
    assert_eq!(shell.effects(), ["run_tests"]);
    assert_eq!(ws.read("calc.py"), CALC);
    let journal = ws.journal();
    let k = kinds(&journal);
    assert_eq!(k[k.len() - 3..], ["prompt coder", "phases", "finished"]);
    assert_eq!(journal[k.len() - 1]["data"]["status"], "failed");
}

#[tokio::test]
async fn a_model_that_is_not_configured_fails_the_run_as_a_configuration_problem() {
    let ws = Workspace::new(&[(Role::Coder, FIX)]);
    let mut config = ws.config();
    config.model.replay_file = None;
    let mut shell = ws.shell().tests([add_fails(-1)]);
    let (outcome, _) = ws.drive(&config, GOAL, &mut shell).await;

    assert_eq!(
        ended(&outcome),
        (
            RunStatus::Failed,
            "the coder model failed: no model is configured: provider = \"replay\" needs model.replay_file"
        )
    );
    assert_eq!(outcome.failure_kind, Some(FailureKind::Config));
}

#[tokio::test]
async fn a_change_that_cannot_be_applied_fails_the_run_and_leaves_the_files() {
    let ws = Workspace::new(&[(Role::Coder, FIX)]);
    let mut shell = ws
        .shell()
        .tests([add_fails(-1), Ok(passing(1))])
        .applies([Err(ApplyError::Failed("the disk is full".into()))]);
    let outcome = ws.fix(&mut shell).await;

    assert_eq!(
        ended(&outcome),
        (
            RunStatus::Failed,
            "the change could not be applied: the disk is full"
        )
    );
    assert_eq!(outcome.files_changed, Vec::<String>::new());
    assert_eq!(shell.effects(), [tests(), change(1)].concat());
    assert_eq!(ws.read("calc.py"), CALC);
}

#[tokio::test]
async fn a_stale_apply_redoes_the_step_on_the_new_text() {
    let ws = Workspace::new(&[(Role::Coder, FIX), (Role::Coder, FIX)]);
    let mut shell = ws
        .shell()
        .tests([add_fails(-1), Ok(passing(1))])
        .applies([Err(ApplyError::Stale("calc.py changed meanwhile".into()))]);
    let outcome = ws.fix(&mut shell).await;

    assert_eq!(outcome.status, RunStatus::Done, "{}", outcome.answer);
    assert_eq!(outcome.iterations, 2);
    assert_eq!(
        shell.effects(),
        [tests(), change(1), change(2), tests()].concat()
    );
    assert!(shell.progress_lines().iter().any(|l| l.starts_with(
        "the file changed while the change was prepared; trying again (retry 1 of 3)"
    )));
    assert_eq!(ws.read("calc.py"), CALC.replace("a - b", "a + b"));
}

#[tokio::test]
async fn tests_that_cannot_run_before_any_change_fail_the_run_as_a_configuration_problem() {
    let ws = Workspace::new(&[(Role::Coder, FIX)]);
    let mut shell = ws.shell().tests([Err(RunError::Spawn {
        command: "pytest".into(),
        reason: "No such file or directory".into(),
    })]);
    let outcome = ws.fix(&mut shell).await;

    assert_eq!(
        ended(&outcome),
        (
            RunStatus::Failed,
            "cannot run the tests to find the failures: cannot start `pytest`: No such file or directory"
        )
    );
    assert_eq!(outcome.failure_kind, Some(FailureKind::Config));
    assert!(!called_a_model(&ws));
}

#[tokio::test]
async fn tests_that_cannot_run_after_the_change_fail_the_run_with_the_change_applied() {
    let ws = Workspace::new(&[(Role::Coder, FIX)]);
    let mut shell = ws.shell().tests([
        add_fails(-1),
        Err(RunError::Sandbox("landlock is not supported".into())),
    ]);
    let outcome = ws.fix(&mut shell).await;

    assert_eq!(
        ended(&outcome),
        (
            RunStatus::Failed,
            "the change was applied but the tests could not run: the command did not run: the sandbox could not be set up: landlock is not supported"
        )
    );
    // Not the setup's problem: the change may be what broke the run.
    assert_eq!(outcome.failure_kind, None);
    assert_eq!(outcome.files_changed, ["calc.py"]);
    assert_eq!(ws.read("calc.py"), CALC.replace("a - b", "a + b"));
}

#[tokio::test]
async fn a_rejected_change_ends_the_run_with_nothing_applied() {
    let ws = Workspace::new(&[(Role::Coder, FIX)]);
    let mut shell = ws
        .shell()
        .tests([add_fails(-1)])
        .verdicts([Verdict::Rejected]);
    let outcome = ws.fix(&mut shell).await;

    assert_eq!(
        ended(&outcome),
        (
            RunStatus::Failed,
            "the proposed change was rejected; nothing was applied"
        )
    );
    shown_not_applied(&shell, &ws);
    assert_eq!(line(&ws.journal(), "approval")["data"]["accepted"], false);
}

#[tokio::test]
async fn a_refused_change_proposed_again_stops_the_run() {
    const WORKFLOW: &str =
        ".github/workflows/ci.yml\n<<<<<<< SEARCH\n=======\nrun: echo hi\n>>>>>>> REPLACE\n";
    let ws = Workspace::new(&[(Role::Coder, WORKFLOW), (Role::Coder, WORKFLOW)]);
    // Nobody is there to confirm the protected file it writes: the policy refuses, and the
    // model hears why.
    let mut shell = ws.shell().tests([add_fails(-1)]).absent();
    let outcome = ws.fix(&mut shell).await;

    let (status, answer) = ended(&outcome);
    assert_eq!(status, RunStatus::Failed);
    assert!(
        answer.starts_with("stopped: the model proposed again the change that was refused (it writes protected files (.github/workflows/ci.yml"),
        "{answer}"
    );
    assert!(
        answer.contains("no one is here to confirm them by name"),
        "{answer}"
    );
    assert_eq!(outcome.iterations, 2);
    // Nobody was asked; the user is told why nothing was written, each time.
    let effects = shell.effects();
    assert!(
        effects.iter().all(|e| e == "run_tests"
            || e.starts_with("warn: the change was not applied: it writes protected files")),
        "{effects:?}"
    );
    assert!(!ws.root.join(".github/workflows/ci.yml").exists());
}

#[tokio::test]
async fn a_change_nobody_can_approve_ends_the_run_unwritten() {
    let ws = Workspace::new(&[(Role::Coder, FIX)]);
    let mut shell = ws.shell().tests([add_fails(-1)]).absent();
    let outcome = ws.fix(&mut shell).await;

    assert_eq!(
        ended(&outcome),
        (
            RunStatus::Failed,
            "the proposed change was rejected; nothing was applied"
        )
    );
    let effects = shell.effects();
    assert!(
        effects[1].starts_with("warn: no one is here to approve the change"),
        "{effects:?}"
    );
    assert_eq!(ws.read("calc.py"), CALC);
}

#[tokio::test]
async fn with_the_default_review_and_evaluation_the_reviewer_and_the_evaluator_have_their_turns() {
    let review = r#"{"verdict": "correct", "explanation": "add now returns the sum", "confidence": 0.9, "findings": []}"#;
    let evaluation = r#"{"score": 5, "reason": "the failing test passes"}"#;
    let ws = Workspace::new(&[
        (Role::Coder, FIX),
        (Role::Reviewer, review),
        (Role::Evaluator, evaluation),
    ]);
    let mut config = ws.config();
    let defaults = crate::config::Config::default();
    config.agent.review = defaults.agent.review;
    config.agent.evaluate = defaults.agent.evaluate;
    let mut shell = ws.shell().tests([add_fails(-1), Ok(passing(1))]);
    let (outcome, _) = ws.drive(&config, GOAL, &mut shell).await;

    assert_eq!(outcome.status, RunStatus::Done, "{}", outcome.answer);
    assert!(
        outcome
            .answer
            .starts_with("done: the tests pass after 1 iteration(s); review: ")
            && outcome
                .answer
                .ends_with("(evaluation: 5/5, the failing test passes)"),
        "{}",
        outcome.answer
    );
    let Some(agent_ls_core::agent::review::ReviewResult::Reviewed { review, blocking }) =
        &outcome.review
    else {
        panic!("the outcome has the review: {:?}", outcome.review);
    };
    assert_eq!(review.explanation, "add now returns the sum");
    assert!(!blocking);
    // The shell shows the review after the tests, quietly (advise mode, a review was had).
    let effects = shell.effects();
    assert_eq!(effects.len(), 6, "{effects:?}");
    assert!(
        effects[5].starts_with("reviewed (loud: false): "),
        "{effects:?}"
    );
    assert_eq!(
        kinds(&ws.journal())[8..],
        [
            "test_result",
            "prompt reviewer",
            "model_call reviewer",
            "review",
            "prompt evaluator",
            "model_call evaluator",
            "evaluation",
            "phases",
            "finished",
        ]
    );
}

#[tokio::test]
async fn a_planned_edit_works_through_its_tasks_in_order() {
    let goal = "Add a subtract function to calc.py, then import it in test_calc.py";
    let plan = r#"{"plan_id": "plan_1", "tasks": [{"id": "T1", "title": "add subtract"}, {"id": "T2", "title": "import subtract"}]}"#;
    let subtract = "calc.py\n<<<<<<< SEARCH\ndef multiply(a, b):\n    return a * b\n=======\ndef multiply(a, b):\n    return a * b\n\n\ndef subtract(a, b):\n    return a - b\n>>>>>>> REPLACE\n";
    let import = "test_calc.py\n<<<<<<< SEARCH\nfrom calc import add\n=======\nfrom calc import add, subtract\n>>>>>>> REPLACE\n";
    let ws = Workspace::new(&[
        (Role::Planner, plan),
        (Role::Coder, subtract),
        (Role::Coder, import),
    ]);
    let mut shell = ws.shell().tests([Ok(passing(1)), Ok(passing(1))]);
    let (outcome, _) = ws.drive(&ws.config(), goal, &mut shell).await;

    assert_eq!(outcome.status, RunStatus::Done, "{}", outcome.answer);
    assert_eq!(outcome.iterations, 2);
    assert_eq!(outcome.files_changed, ["calc.py", "test_calc.py"]);
    // An edit has no baseline: the plan, then each task's change and its tests.
    assert_eq!(
        shell.effects(),
        [
            "approve calc.py",
            "task T1 add subtract (iteration 1)",
            "apply calc.py",
            "run_tests",
            "approve test_calc.py",
            "task T2 import subtract (iteration 2)",
            "apply test_calc.py",
            "run_tests",
        ]
    );
    let progress = shell.progress_lines();
    assert_eq!(
        progress.first().copied(),
        Some("plan: T1 add subtract; T2 import subtract (iteration 1 of 15)")
    );
    assert!(
        progress.contains(&"task 2 of 2: import subtract (iteration 2 of 15)"),
        "{progress:?}"
    );
    // No failing test drove the change: the run says how to get a regression test.
    assert!(
        progress
            .iter()
            .any(|l| l.starts_with("no test covers this change")),
        "{progress:?}"
    );
    assert!(
        ws.read("calc.py")
            .ends_with("def subtract(a, b):\n    return a - b\n")
    );
    assert!(
        ws.read("test_calc.py")
            .starts_with("from calc import add, subtract\n")
    );
    assert_eq!(line(&ws.journal(), "plan")["data"]["tasks"][1]["id"], "T2");
}

#[tokio::test]
async fn the_context_stops_reading_files_once_they_no_longer_fit() {
    let ws = Workspace::new(&[(Role::Coder, FIX)]);
    // 80 files of 1 KB: about 5 fill a context of 6 KB, and every one after that is too big
    // for what is left. A big repository ranks tens of thousands like them.
    for n in 0..80 {
        let body = format!(
            "def helper_{n}():\n    return {n}\n{}",
            "# filler\n".repeat(110)
        );
        std::fs::write(ws.root.join(format!("mod_{n:02}.py")), body).unwrap();
    }
    let mut config = ws.config();
    config.agent.context_bytes = 6_000;
    let mut shell = ws.shell().tests([add_fails(-1), Ok(passing(1))]);
    let (outcome, _) = ws.drive(&config, fixture::GOAL, &mut shell).await;
    assert_eq!(outcome.status, RunStatus::Done);
    // Each of the run's two contexts reads the goal's files, those that fit and a run of
    // misses: fewer in all than one pass over the 80 (which each context made before).
    assert!(shell.reads() < 80, "{} reads", shell.reads());
}

#[test]
fn no_model_call_is_made_past_the_cost_cap() {
    let mut totals = crate::model::Totals::default();
    assert_eq!(
        super::over_cap(Some(0.01), &totals),
        None,
        "nothing spent, or no price"
    );
    totals.cost_usd = Some(0.005);
    assert_eq!(super::over_cap(Some(0.01), &totals), None);
    assert_eq!(super::over_cap(None, &totals), None, "no cap");
    totals.cost_usd = Some(0.0125);
    let why = super::over_cap(Some(0.01), &totals).expect("over the cap");
    assert!(
        why.contains("$0.0125") && why.contains("$0.0100") && why.contains("keeps its work"),
        "{why}"
    );
}
