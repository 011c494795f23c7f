//! The review question over LSP, with the real binary and the replay provider playing the
//! coder and the reviewer: a run whose review has findings ends with one
//! window/showMessageRequest naming them ("Keep" / "Roll back run" / "Show findings"); "Roll
//! back run" restores the buffers through workspace/applyEdit and the disk (from the git
//! checkpoint, or without git by the run's undo), "Keep" keeps them, and a review that finds
//! nothing asks nothing more. In gate mode the retry step's preview names the finding it is
//! to fix.

use crate::support;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use support::editor::{Buffers, applies};
use support::{Client, Spawn, file_uri};

const BROKEN: &str = "\"\"\"A tiny calculator with a bug for the agent to fix.\"\"\"\n\n\ndef add(a, b):\n    return a - b\n\n\ndef multiply(a, b):\n    return a * b\n";

/// The coder's answer turning `add`'s body from `from` into `to`.
fn coder(from: &str, to: &str) -> Value {
    json!({"role": "coder", "content": format!("calc.py\n<<<<<<< SEARCH\n    return {from}\n=======\n    return {to}\n>>>>>>> REPLACE\n")})
}

/// The reviewer's answer with one P1 on calc.py line 5 (`add`'s body).
fn p1() -> Value {
    let content = json!({
        "findings": [{"title": "[P1] operands swapped", "body": "b + a reads oddly",
            "priority": 1, "confidence": 0.9, "path": "calc.py", "start_line": 5, "end_line": 5}],
        "verdict": "incorrect", "explanation": "see the finding", "confidence": 0.85
    });
    json!({"role": "reviewer", "content": content.to_string()})
}

fn approved() -> Value {
    json!({"role": "reviewer", "content": r#"{"findings": [], "verdict": "correct", "explanation": "adds", "confidence": 0.95}"#})
}

const FINDING: &str = "[P1] operands swapped — calc.py:5 (0.90)";

/// The example (a committed repository when `git`), with the replay script `lines`.
fn workspace(git: bool, lines: &[Value]) -> tempfile::TempDir {
    let ws = if git {
        support::git::example_repository()
    } else {
        support::example()
    };
    std::fs::write(
        ws.path().join(".replay.jsonl"),
        support::replay_script(lines),
    )
    .unwrap();
    ws
}

struct Editor {
    c: Client,
    buffers: Buffers,
    calc: String,
}

/// A server on `ws` with calc.py open, whose edits land in in-memory buffers; `caps` are
/// the client's workspaceEdit capabilities and `agent` the `[agent]` settings.
fn editor(ws: &Path, caps: Value, agent: Value) -> Editor {
    let mut options = json!({"model": {"provider": "replay", "replay_file": ".replay.jsonl"},
        "git": {"commit": "never"}});
    options["agent"] = agent;
    options["agent"]["evaluate"] = json!(false);
    let mut c = Client::spawn(Spawn::default());
    c.initialize(ws, json!({"workspace": {"workspaceEdit": caps}}), options);
    let calc = file_uri(&ws.join("calc.py"));
    c.open(&calc, BROKEN);
    let buffers: Buffers = Arc::new(Mutex::new(HashMap::from([(
        calc.clone(),
        (BROKEN.to_string(), 1),
    )])));
    applies(&mut c, buffers.clone(), vec![calc.clone()]);
    Editor { c, buffers, calc }
}

/// Answers the review question with each of `answers` in turn, and any other question with
/// its first action (a step's "Accept").
fn answer_review(c: &mut Client, answers: &[&str]) {
    let mut answers: Vec<String> = answers.iter().rev().map(|a| a.to_string()).collect();
    c.on_request("window/showMessageRequest", move |p| {
        let first = p["actions"][0].clone();
        if first["title"] != "Keep" {
            return first;
        }
        json!({"title": answers.pop().unwrap_or_else(|| "Keep".into())})
    });
}

fn review_questions(c: &Client) -> Vec<String> {
    c.server_requests
        .iter()
        .filter(|r| r["method"] == "window/showMessageRequest")
        .filter(|r| r["params"]["actions"][0]["title"] == "Keep")
        .map(|r| r["params"]["message"].as_str().unwrap().to_string())
        .collect()
}

fn journal_decisions(ws: &Path) -> Vec<Value> {
    support::journaled(ws, "decision")
}

/// A P1 in advise mode, with the steps asked first ("prompt"), and the review question
/// answered "Roll back run": the buffer and the disk are back to before the run.
fn rolled_back(git: bool) {
    let ws = workspace(git, &[coder("a - b", "b + a"), p1()]);
    let mut e = editor(
        ws.path(),
        json!({"documentChanges": true}),
        json!({"approval": "prompt"}),
    );
    answer_review(&mut e.c, &["Roll back run"]);
    e.c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = e.c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}\n{}", e.c.stderr());
    let asked = review_questions(&e.c);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0].contains("the reviewer says the patch is incorrect (confidence 0.85, 1 finding)"),
        "{}",
        asked[0]
    );
    assert!(asked[0].lines().any(|l| l == FINDING), "{}", asked[0]);
    assert_eq!(done["decision"], "rolled_back", "{done}");
    assert_eq!(done["checkpoint"].is_string(), git, "{done}");
    let buffer = e.buffers.lock().unwrap()[&e.calc].0.clone();
    assert_eq!(buffer, BROKEN, "the buffer is back to before the run");
    assert_eq!(e.c.document_state(&e.calc)["text"], BROKEN);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("calc.py")).unwrap(),
        BROKEN
    );
    // The finding was on its line while the question waited, and went with the rollback.
    let calc = e.calc.clone();
    let reviewed = |m: &Value| {
        m["method"] == "textDocument/publishDiagnostics"
            && m["params"]["uri"] == calc.as_str()
            && m["params"]["diagnostics"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["source"] == "agent-ls review")
    };
    let shown =
        e.c.log
            .iter()
            .position(reviewed)
            .expect("the finding was published");
    let calc = e.calc.clone();
    e.c.wait_until(
        |c| {
            c.log
                .iter()
                .skip(shown + 1)
                .any(|m| {
                    m["method"] == "textDocument/publishDiagnostics"
                        && m["params"]["uri"] == calc.as_str()
                        && m["params"]["diagnostics"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .all(|d| d["source"] != "agent-ls review")
                })
                .then_some(())
        },
        "the finding cleared",
    );
    // Nothing of the run is left for undo to take back.
    assert!(e.c.command("agent-ls.undo", Value::Null).is_err());
    let decisions = journal_decisions(ws.path());
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0]["data"]["decision"], "rolled_back");
    assert_eq!(decisions[0]["role"], "user");
    let live =
        e.c.wait_notification("agent-ls/runEvent", |p| p["type"] == "decision");
    assert_eq!(live["data"]["decision"], "rolled_back");
}

#[test]
fn roll_back_run_at_the_review_question_restores_the_files_from_the_git_checkpoint() {
    rolled_back(true);
}

#[test]
fn roll_back_run_at_the_review_question_undoes_the_run_without_git() {
    rolled_back(false);
}

#[test]
fn keep_at_the_review_question_keeps_the_change_and_show_findings_asks_again() {
    let ws = workspace(true, &[coder("a - b", "b + a"), p1()]);
    let mut e = editor(
        ws.path(),
        json!({"documentChanges": true}),
        json!({"approval": "prompt"}),
    );
    answer_review(&mut e.c, &["Show findings", "Keep"]);
    e.c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = e.c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["decision"], "kept", "{done}");
    assert_eq!(
        review_questions(&e.c).len(),
        2,
        "asked again after the findings"
    );
    // The whole review: the finding with its body, and the explanation.
    let shown = e.c.wait_notification("window/showMessage", |p| {
        p["message"]
            .as_str()
            .is_some_and(|m| m.contains("b + a reads oddly"))
    });
    let text = shown["message"].as_str().unwrap();
    assert!(
        text.contains(FINDING) && text.contains("see the finding"),
        "{text}"
    );
    let buffer = e.buffers.lock().unwrap()[&e.calc].0.clone();
    assert!(buffer.contains("return b + a"), "{buffer}");
    assert!(
        std::fs::read_to_string(ws.path().join("calc.py"))
            .unwrap()
            .contains("return b + a")
    );
    // The finding stays on its line.
    let uri = e.calc.clone();
    e.c.wait_notification("textDocument/publishDiagnostics", |p| {
        p["uri"] == uri.as_str()
            && p["diagnostics"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["source"] == "agent-ls review")
    });
    assert_eq!(journal_decisions(ws.path())[0]["data"]["decision"], "kept");
    // It was on its line before the question, while the user decided.
    let first_question =
        e.c.log
            .iter()
            .position(|m| {
                m["method"] == "window/showMessageRequest"
                    && m["params"]["actions"][0]["title"] == "Keep"
            })
            .unwrap();
    let first_finding = e.c.log.iter().position(|m| {
        m["method"] == "textDocument/publishDiagnostics"
            && m["params"]["diagnostics"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["source"] == "agent-ls review")
    });
    assert!(
        first_finding.is_some_and(|f| f < first_question),
        "{first_finding:?} {first_question}"
    );
}

#[test]
fn a_review_that_finds_nothing_asks_nothing_more() {
    let ws = workspace(false, &[coder("a - b", "a + b"), approved()]);
    let mut e = editor(
        ws.path(),
        json!({"documentChanges": true}),
        json!({"approval": "prompt"}),
    );
    e.c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = e.c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(done["review"]["verdict"], "correct", "{done}");
    assert!(done.get("decision").is_none(), "{done}");
    let questions: Vec<&Value> =
        e.c.server_requests
            .iter()
            .filter(|r| r["method"] == "window/showMessageRequest")
            .collect();
    // The step's own question, and nothing after the review.
    assert_eq!(questions.len(), 1, "{questions:#?}");
    assert_eq!(questions[0]["params"]["actions"][0]["title"], "Accept");
}

#[test]
fn in_gate_mode_the_retry_steps_preview_names_the_finding_it_is_to_fix() {
    let ws = workspace(
        false,
        &[
            coder("a - b", "b + a"),
            p1(),
            coder("b + a", "a + b"),
            approved(),
        ],
    );
    let caps = json!({"documentChanges": true, "changeAnnotationSupport": {"groupsOnLabel": true}});
    let mut e = editor(
        ws.path(),
        caps,
        json!({"approval": "confirm", "review": "gate"}),
    );
    e.c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = e.c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}\n{}", e.c.stderr());
    assert_eq!(done["review"]["verdict"], "correct", "{done}");
    let annotations: Vec<Value> =
        e.c.server_requests
            .iter()
            .filter(|r| r["method"] == "workspace/applyEdit")
            .map(|r| r["params"]["edit"]["changeAnnotations"]["agent-ls:calc.py"].clone())
            .collect();
    assert_eq!(annotations.len(), 2, "{annotations:#?}");
    // The first step fixes nothing the reviewer said; the retry names the P1.
    assert!(
        !annotations[0]["description"]
            .as_str()
            .unwrap()
            .contains("[P1]"),
        "{annotations:#?}"
    );
    let description = annotations[1]["description"].as_str().unwrap();
    assert_eq!(description, format!("calc.py: fixes {FINDING}"));
    assert!(
        annotations[1]["label"].as_str().unwrap().contains(FINDING),
        "{annotations:#?}"
    );
    assert_eq!(annotations[1]["needsConfirmation"], true);
    // The second review passed the change: nothing more to ask.
    assert!(review_questions(&e.c).is_empty());
}

#[test]
fn in_gate_mode_the_retry_steps_question_names_the_finding_it_is_to_fix() {
    let ws = workspace(
        false,
        &[
            coder("a - b", "b + a"),
            p1(),
            coder("b + a", "a + b"),
            approved(),
        ],
    );
    let mut e = editor(
        ws.path(),
        json!({"documentChanges": true}),
        json!({"approval": "prompt", "review": "gate"}),
    );
    e.c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = e.c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}");
    let asked: Vec<String> =
        e.c.server_requests
            .iter()
            .filter(|r| r["method"] == "window/showMessageRequest")
            .map(|r| r["params"]["message"].as_str().unwrap().to_string())
            .collect();
    assert_eq!(asked.len(), 2, "{asked:#?}");
    assert!(!asked[0].contains("[P1]"), "{}", asked[0]);
    assert!(
        asked[1].ends_with(&format!(
            "It is meant to fix the reviewer's findings:\n{FINDING}"
        )),
        "{}",
        asked[1]
    );
}

/// Answers each step's question with its first action ("Accept") and leaves the review
/// question open, as a user who has not got to it yet.
fn leave_review_open(c: &mut Client) {
    c.on_request("window/showMessageRequest", move |p| {
        let first = p["actions"][0].clone();
        if first["title"] == "Keep" {
            return json!(support::DEFER);
        }
        first
    });
}

#[test]
fn undo_while_the_review_question_waits_answers_it_and_undoes() {
    let ws = workspace(true, &[coder("a - b", "b + a"), p1()]);
    let mut e = editor(
        ws.path(),
        json!({"documentChanges": true}),
        json!({"approval": "prompt"}),
    );
    leave_review_open(&mut e.c);
    e.c.command("agent-ls.fixTests", Value::Null).unwrap();
    let question = e.c.wait_deferred("window/showMessageRequest");
    // The run looks finished to the user; the question must not hold the workspace.
    let undone = e.c.command("agent-ls.undo", Value::Null);
    assert!(undone.is_ok(), "{undone:?}");
    let done = e.c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["decision"], "kept", "{done}");
    // The question the undo answered is cancelled, so a client can take it off the screen.
    e.c.wait_notification("$/cancelRequest", |p| p["id"] == question);
    // The disk and the editor's buffer both come back; the undo's edit can reach the buffer
    // a moment after the file is written, so the test waits for both.
    let calc = e.calc.clone();
    let buffers = e.buffers.clone();
    e.c.wait_until(
        |_| {
            let disk = std::fs::read_to_string(ws.path().join("calc.py")).ok()?;
            let buffer = buffers.lock().ok()?.get(&calc)?.0.clone();
            (disk == BROKEN && buffer == BROKEN).then_some(())
        },
        "calc.py back as it was, on disk and in the buffer",
    );
}

#[test]
fn an_unavailable_review_is_a_notice_not_a_question() {
    // No reviewer answer in the script: the review is unavailable.
    let ws = workspace(true, &[coder("a - b", "a + b")]);
    let mut e = editor(
        ws.path(),
        json!({"documentChanges": true}),
        json!({"approval": "prompt"}),
    );
    answer_review(&mut e.c, &[]);
    e.c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = e.c.wait_notification("agent-ls/runFinished", |_| true);
    assert!(
        review_questions(&e.c).is_empty(),
        "{:?}",
        review_questions(&e.c)
    );
    assert!(done.get("decision").is_none_or(Value::is_null), "{done}");
    e.c.wait_notification("window/showMessage", |p| {
        p["message"]
            .as_str()
            .is_some_and(|m| m.contains("was not reviewed") && m.contains("it stays"))
    });
    assert!(
        std::fs::read_to_string(ws.path().join("calc.py"))
            .unwrap()
            .contains("return a + b")
    );
}
