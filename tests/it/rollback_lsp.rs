//! `agent-ls.rollback` over LSP against real git: a run in a committed repository, then the
//! whole run rolled back through workspace/applyEdit (buffers and disk back to the
//! checkpoint, the created file deleted with a `DeleteFile`), a refusal naming a buffer the
//! user edited after the run, and `force` going on from there.

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use support::editor::{Buffers, Edits, applies as editor_applies};
use support::git::{FIX_AND_CREATE, example_repository};
use support::{Client, Spawn, file_uri};

const BROKEN: &str = "\"\"\"A tiny calculator with a bug for the agent to fix.\"\"\"\n\n\ndef add(a, b):\n    return a - b\n\n\ndef multiply(a, b):\n    return a * b\n";

struct Setup {
    ws: tempfile::TempDir,
    c: Client,
    buffers: Buffers,
    edits: Edits,
    calc: String,
}

/// A committed repository, calc.py open in the editor, and a run that fixes calc.py and
/// creates notes.py, finished.
fn after_a_run() -> Setup {
    after_a_run_with(Vec::new())
}

/// The same, with the server started with `env`.
fn after_a_run_with(env: Vec<(String, String)>) -> Setup {
    let ws = example_repository();
    std::fs::write(
        ws.path().join(".replay.jsonl"),
        support::replay_script(&[json!({"role": "coder", "content": FIX_AND_CREATE})]),
    )
    .unwrap();
    let options = json!({"model": {"provider": "replay", "replay_file": ".replay.jsonl"}, "agent": {"approval": "auto", "evaluate": false}});
    let caps = json!({"workspace": {"workspaceEdit": {"documentChanges": true, "resourceOperations": ["create", "delete"]}}});
    let mut c = Client::spawn(Spawn {
        env,
        ..Default::default()
    });
    c.initialize(ws.path(), caps, options);
    let calc = file_uri(&ws.path().join("calc.py"));
    c.open(&calc, BROKEN);
    let buffers: Buffers = Arc::new(Mutex::new(HashMap::from([(
        calc.clone(),
        (BROKEN.to_string(), 1),
    )])));
    let edits = editor_applies(&mut c, buffers.clone(), vec![calc.clone()]);
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}\n{}", c.stderr());
    assert!(done["checkpoint"].is_string(), "{done}");
    assert!(ws.path().join("notes.py").exists());
    edits.lock().unwrap().clear();
    // What the run's own test runs said is past: a test status from here on is a new run.
    c.notifications.clear();
    Setup {
        ws,
        c,
        buffers,
        edits,
        calc,
    }
}

fn buffer(s: &Setup, uri: &str) -> Option<String> {
    s.buffers.lock().unwrap().get(uri).map(|(t, _)| t.clone())
}

#[test]
fn rollback_restores_an_open_buffer_and_the_disk_and_deletes_the_created_file() {
    let mut s = after_a_run();
    let notes = file_uri(&s.ws.path().join("notes.py"));
    assert!(buffer(&s, &s.calc).unwrap().contains("return a + b"));
    let answer = s.c.command("agent-ls.rollback", json!({})).unwrap();
    let mut files: Vec<&str> = answer["rolled_back"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}\n{}", s.c.stderr()))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    files.sort();
    assert_eq!(files, ["calc.py", "notes.py"], "{answer}");
    // The buffer, the server's copy of it and the disk are back to the checkpoint.
    assert_eq!(buffer(&s, &s.calc).as_deref(), Some(BROKEN));
    assert_eq!(s.c.document_state(&s.calc)["text"], BROKEN);
    assert_eq!(
        std::fs::read_to_string(s.ws.path().join("calc.py")).unwrap(),
        BROKEN
    );
    assert!(!s.ws.path().join("notes.py").exists());
    // The tests run again on the code as it is back to: add is broken there.
    let tests = s.c.wait_notification("agent-ls/testStatus", |p| {
        p["state"] != "running" && p["failed"].as_u64().is_some_and(|n| n > 0)
    });
    assert_eq!(tests["state"], "failed", "{tests}");
    // Only the changed line was edited, and the created file went with a DeleteFile.
    let edits = s.edits.lock().unwrap().clone();
    let ops: Vec<&Value> = edits
        .iter()
        .flat_map(|e| e["documentChanges"].as_array().unwrap())
        .collect();
    let calc_edits: Vec<&Value> = ops
        .iter()
        .filter(|o| o["textDocument"]["uri"] == s.calc.as_str())
        .flat_map(|o| o["edits"].as_array().unwrap())
        .collect();
    assert_eq!(calc_edits.len(), 1, "{edits:?}");
    assert_eq!(calc_edits[0]["newText"], "    return a - b\n");
    assert!(
        ops.iter()
            .any(|o| o["kind"] == "delete" && o["uri"] == notes.as_str()),
        "{edits:?}"
    );
    // The run's steps are undone: nothing left for undo to take back.
    let status = s.c.command("agent-ls.status", Value::Null).unwrap();
    let steps = status["steps"].as_array().unwrap();
    assert!(
        !steps.is_empty() && steps.iter().all(|st| st["undone"] == true),
        "{status}"
    );
    let undo = s.c.command("agent-ls.undo", Value::Null);
    assert!(undo.is_err(), "{undo:?}");
    // Rolling back again finds every file already at the checkpoint: no refusal, no edit.
    s.edits.lock().unwrap().clear();
    let again = s.c.command("agent-ls.rollback", json!({})).unwrap();
    assert_eq!(again["rolled_back"], json!([]), "{again}");
    assert_eq!(
        again["already_rolled_back"].as_array().map(Vec::len),
        Some(2),
        "{again}"
    );
    assert!(s.edits.lock().unwrap().is_empty());
}

#[test]
fn rollback_refuses_a_buffer_edited_after_the_run_and_force_goes_on() {
    let mut s = after_a_run();
    // The user types in calc.py after the run and does not save.
    let typed = format!("# mine\n{}", buffer(&s, &s.calc).unwrap());
    s.buffers
        .lock()
        .unwrap()
        .insert(s.calc.clone(), (typed.clone(), 10));
    s.c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": s.calc, "version": 10}, "contentChanges": [{"text": typed}]}),
    );
    let answer = s.c.command("agent-ls.rollback", json!({})).unwrap();
    assert_eq!(answer["changed"], json!(["calc.py"]), "{answer}");
    assert!(
        answer["refused"]
            .as_str()
            .unwrap()
            .contains("changed since the run: calc.py"),
        "{answer}"
    );
    assert!(answer.get("rolled_back").is_none());
    assert!(
        s.edits.lock().unwrap().is_empty(),
        "a refusal sends no edit"
    );
    assert!(s.ws.path().join("notes.py").exists());
    assert_eq!(buffer(&s, &s.calc).as_deref(), Some(typed.as_str()));

    let forced =
        s.c.command("agent-ls.rollback", json!({"force": true}))
            .unwrap();
    assert!(
        forced["rolled_back"].is_array(),
        "{forced}\n{}",
        s.c.stderr()
    );
    assert_eq!(buffer(&s, &s.calc).as_deref(), Some(BROKEN));
    assert_eq!(
        std::fs::read_to_string(s.ws.path().join("calc.py")).unwrap(),
        BROKEN
    );
    assert!(!s.ws.path().join("notes.py").exists());
}

#[test]
fn rollback_outside_a_repository_or_of_an_unknown_run_is_a_clear_error() {
    let mut s = after_a_run();
    let unknown =
        s.c.command("agent-ls.rollback", json!({"run": "no-such-run"}))
            .unwrap_err();
    assert!(
        unknown["message"]
            .as_str()
            .unwrap()
            .contains("there is no run no-such-run here"),
        "{unknown}"
    );
    let ws = support::example();
    let mut c = Client::spawn(Spawn::default());
    c.initialize(ws.path(), json!({}), json!({}));
    let err = c.command("agent-ls.rollback", Value::Null).unwrap_err();
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("is not inside a git repository"),
        "{err}"
    );
}

#[test]
fn a_panic_in_a_rollback_is_its_error_and_the_next_rollback_runs() {
    let hooks = vec![
        ("AGENT_LS_TEST_HOOKS".to_string(), "1".to_string()),
        ("AGENT_LS_TEST_PANIC".to_string(), "rollback".to_string()),
    ];
    let mut s = after_a_run_with(hooks);
    let err = s.c.command("agent-ls.rollback", json!({})).unwrap_err();
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("failed inside the rollback"),
        "{err}"
    );
    let status = s.c.command("agent-ls.status", Value::Null).unwrap();
    assert_eq!(status["active"], Value::Null, "{status}");
    let answer = s.c.command("agent-ls.rollback", json!({})).unwrap();
    assert!(answer["rolled_back"].is_array(), "{answer}");
    assert_eq!(buffer(&s, &s.calc).as_deref(), Some(BROKEN));
}

/// LSP 3.18's `workspace/textDocumentContent` for `agent-ls:` URIs, over stdio: the server
/// advertises the scheme, a file as the run's checkpoint held it and the run's diff open as
/// documents, and what is not there is said.
#[test]
fn a_runs_checkpoint_and_diff_open_as_agent_ls_documents() {
    let mut s = after_a_run();
    let run = s.c.command("agent-ls.status", Value::Null).unwrap()["last"]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let content = |c: &mut Client, uri: String| {
        c.request("workspace/textDocumentContent", json!({ "uri": uri }))
    };
    let before = content(&mut s.c, format!("agent-ls:/runs/{run}/checkpoint/calc.py")).unwrap();
    assert_eq!(before, json!({ "text": BROKEN }));
    let diff = content(&mut s.c, format!("agent-ls:/runs/{run}/diff")).unwrap();
    let diff = diff["text"].as_str().unwrap();
    assert!(
        diff.contains("-    return a - b\n+    return a + b"),
        "{diff}"
    );
    assert!(diff.contains("notes.py"), "{diff}");
    // The run created notes.py: its checkpoint has none.
    let missing = content(
        &mut s.c,
        format!("agent-ls:/runs/{run}/checkpoint/notes.py"),
    )
    .unwrap_err();
    assert_eq!(missing["code"], -32803, "{missing}");
    assert!(
        missing["message"]
            .as_str()
            .unwrap()
            .contains("not in the checkpoint"),
        "{missing}"
    );
    let unknown = content(&mut s.c, "agent-ls:/runs/run_nope/diff".into()).unwrap_err();
    assert_eq!(unknown["code"], -32803, "{unknown}");
    let not_ours = content(&mut s.c, "agent-ls:/elsewhere".into()).unwrap_err();
    assert_eq!(not_ours["code"], -32602, "{not_ours}");

    // The scheme is advertised (workspace.textDocumentContent, which LSP 3.17 has not).
    let mut c = Client::spawn(Spawn::default());
    let init = c.initialize(s.ws.path(), json!({}), Value::Null);
    assert_eq!(
        init["capabilities"]["workspace"]["textDocumentContent"],
        json!({ "schemes": ["agent-ls"] }),
        "{init}"
    );
}
