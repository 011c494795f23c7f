//! Runs that outlive their server: a run killed with SIGKILL shows as interrupted and
//! `agent-ls.resume` continues it from its last checkpoint; SIGKILL at random moments leaves
//! the workspace's store consistent (every step recorded with a working inverse, or not at
//! all); `agent-ls stats` reports what the store holds.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_ls_runtime::store::Store;
use serde_json::{Value, json};
use support::model_server::{ModelServer, Reply, openai_text};
use support::{Client, apply_lsp_edits, file_uri};

const BROKEN: &str = "\"\"\"A tiny calculator with a bug for the agent to fix.\"\"\"\n\n\ndef add(a, b):\n    return a - b\n\n\ndef multiply(a, b):\n    return a * b\n";

const WRONG: &str =
    "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return b - a\n>>>>>>> REPLACE\n";
const RIGHT: &str =
    "calc.py\n<<<<<<< SEARCH\n    return b - a\n=======\n    return a + b\n>>>>>>> REPLACE\n";
const REFLECTION: &str = r#"{"task_id": "T1", "passed": false, "report": "add subtracts the wrong way round", "next_step": "make add return the sum a + b"}"#;

/// Answers applyEdit as an editor that applies it, with the didChange that follows.
fn applies(client: &mut Client, uri: &str, editor: Arc<Mutex<(String, i64)>>) {
    let uri = uri.to_string();
    client.on_request_then("workspace/applyEdit", move |p| {
        let mut e = editor.lock().unwrap();
        let mut changed = false;
        for op in p["edit"]["documentChanges"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if op["textDocument"]["uri"] == uri.as_str() {
                e.0 = apply_lsp_edits(&e.0, op["edits"].as_array().unwrap());
                e.1 += 1;
                changed = true;
            }
        }
        let notes = if changed {
            vec![
                json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
                "textDocument": {"uri": uri, "version": e.1}, "contentChanges": [{"text": e.0}]}}),
            ]
        } else {
            vec![]
        };
        (json!({"applied": true}), notes)
    });
}

/// A model that proposes a wrong fix, reflects on the failure, then hangs in the second
/// iteration's coder call: the moment the tests kill the agent.
fn stalls_in_the_second_iteration() -> ModelServer {
    ModelServer::start(vec![
        openai_text(&[WRONG]),
        openai_text(&[REFLECTION]),
        Reply::Sse {
            events: vec![],
            stall_after: Some(0),
        },
    ])
}

/// The server's settings with the model at `url`: changes applied without asking, no
/// evaluation or review.
fn settings(url: &str) -> Value {
    json!({"model": {"provider": "openai", "base_url": format!("{url}/v1"), "name": "m"},
           "agent": {"approval": "auto", "evaluate": false, "review": "off"}})
}

/// Starts a fix run on `ws` with calc.py open in `editor`, and kills the server while its
/// model hangs in the second iteration's coder call; returns the run's id.
fn killed_in_the_second_iteration(
    ws: &Path,
    uri: &str,
    editor: &Arc<Mutex<(String, i64)>>,
) -> String {
    let first = stalls_in_the_second_iteration();
    let mut c = Client::spawn(Default::default());
    c.initialize(ws, json!({}), settings(&first.url));
    c.open(uri, BROKEN);
    applies(&mut c, uri, editor.clone());
    let run_id = c.command("agent-ls.fixTests", Value::Null).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while first.count() < 3 {
        assert!(
            Instant::now() < deadline,
            "the run never reached its second coder call; log:\n{}",
            c.stderr()
        );
        c.pump(Duration::from_millis(50));
    }
    c.kill();
    assert!(
        std::fs::read_to_string(ws.join("calc.py"))
            .unwrap()
            .contains("return b - a"),
        "the first iteration's change is on disk"
    );
    run_id
}

#[test]
fn a_run_killed_mid_iteration_resumes_from_its_checkpoint() {
    let ws = support::example();
    let uri = file_uri(&ws.path().join("calc.py"));
    let editor = Arc::new(Mutex::new((BROKEN.to_string(), 1)));
    let run_id = killed_in_the_second_iteration(ws.path(), &uri, &editor);

    // A new server (a restart) on the same workspace, the editor still holding its buffer.
    let second = ModelServer::start(vec![openai_text(&[RIGHT])]);
    let mut c = Client::spawn(Default::default());
    c.initialize(ws.path(), json!({}), settings(&second.url));
    let text = editor.lock().unwrap().0.clone();
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "python", "version": 5, "text": text}}),
    );
    *editor.lock().unwrap() = (text, 5);
    applies(&mut c, &uri, editor.clone());
    let status = c.settled_status();
    let interrupted = status["interrupted"].as_array().unwrap();
    assert_eq!(interrupted.len(), 1, "{status}");
    assert_eq!(interrupted[0]["run_id"], run_id.as_str());
    assert_eq!(interrupted[0]["iterations"], 2);

    let err = c
        .command("agent-ls.resume", json!({"run_id": "run_nope"}))
        .unwrap_err();
    assert!(
        err["message"].as_str().unwrap().contains("no run run_nope"),
        "{err}"
    );
    let resumed = c
        .command("agent-ls.resume", json!({"run_id": run_id}))
        .unwrap();
    assert_eq!(resumed["run_id"], run_id.as_str());
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(done["run_id"], run_id.as_str());
    assert_eq!(
        done["iterations"], 2,
        "it went on with iteration 2, not from the start"
    );
    // The resumed coder call carried what the run had learned before the kill.
    let request = second.requests()[0].body.to_string();
    assert!(
        request.contains("make add return the sum"),
        "the reflection reached the resumed coder: {request}"
    );
    assert_eq!(
        second.count(),
        1,
        "no baseline or replanning: straight to the coder"
    );
    assert!(
        std::fs::read_to_string(ws.path().join("calc.py"))
            .unwrap()
            .contains("return a + b")
    );
    let status = c.settled_status();
    assert_eq!(status["interrupted"], json!([]), "{status}");
    let err = c
        .command("agent-ls.resume", json!({"run_id": run_id}))
        .unwrap_err();
    assert!(
        err["message"].as_str().unwrap().contains("already ended"),
        "{err}"
    );

    // The journal is one file for the run, appended to by the resume.
    let journals: Vec<_> = std::fs::read_dir(ws.path().join(".agent-ls/runs"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(&run_id))
        .collect();
    assert_eq!(journals.len(), 1);
    let journal = std::fs::read_to_string(journals[0].path()).unwrap();
    assert!(journal.contains("\"resumed\"") && journal.contains("\"finished\""));
}

/// Applies a stored change's edits (byte ranges on `from`) in reverse order.
fn apply_edits(from: &str, edits: &Value) -> String {
    let mut out = from.to_string();
    let mut list: Vec<&Value> = edits.as_array().unwrap().iter().collect();
    list.sort_by_key(|e| std::cmp::Reverse(e["range"]["start"].as_u64().unwrap()));
    for e in list {
        let (s, t) = (
            e["range"]["start"].as_u64().unwrap() as usize,
            e["range"]["end"].as_u64().unwrap() as usize,
        );
        out.replace_range(s..t, e["text"].as_str().unwrap());
    }
    out
}

/// After a kill in `round`, the store at `ws` opens as it is, every step row reads with a
/// working inverse, and every run is whole; returns how many runs show as still running.
fn the_store_is_whole(ws: &Path, round: usize) -> i64 {
    // The store opens as it is: nothing corrupt to move aside.
    let (store, notice) = Store::open(ws).unwrap();
    assert!(notice.is_none(), "round {round}: {notice:?}");
    let conn = rusqlite::Connection::open(ws.join(".agent-ls/store.sqlite")).unwrap();
    let rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM steps", [], |r| r.get(0))
        .unwrap();
    let steps = store.load_steps().unwrap();
    assert_eq!(
        steps.len() as i64,
        rows,
        "round {round}: every step row reads"
    );
    every_step_carries_an_inverse_that_undoes_it(&conn);
    // Runs are whole: no figures without their run, known statuses only.
    let orphans: i64 = conn
        .query_row(
            "SELECT (SELECT COUNT(*) FROM iterations WHERE run_id NOT IN (SELECT run_id FROM runs))
                  + (SELECT COUNT(*) FROM approvals WHERE run_id NOT IN (SELECT run_id FROM runs))",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0, "round {round}");
    let bad: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM runs WHERE status NOT IN ('running', 'done', 'failed', 'cancelled')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(bad, 0);
    let running: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM runs WHERE status = 'running'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let interrupted = store.interrupted_runs(None).unwrap();
    assert_eq!(
        interrupted.len() as i64,
        running,
        "a killed run shows as interrupted"
    );
    running
}

/// Every recorded step carries its inverse, and the inverse undoes it exactly.
fn every_step_carries_an_inverse_that_undoes_it(conn: &rusqlite::Connection) {
    let mut stmt = conn.prepare("SELECT changes, files FROM steps").unwrap();
    let all: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (changes, files) in all {
        let changes: Value = serde_json::from_str(&changes).unwrap();
        let files: Value = serde_json::from_str(&files).unwrap();
        for (ch, file) in changes
            .as_array()
            .unwrap()
            .iter()
            .zip(files.as_array().unwrap())
        {
            assert_eq!(
                file["hash"].as_str().unwrap(),
                agent_ls_core::edit::history::text_hash(ch["new_text"].as_str().unwrap())
            );
        }
        for ch in changes.as_array().unwrap() {
            let original = ch["original"].as_str().unwrap();
            let new_text = ch["new_text"].as_str().unwrap();
            assert!(!ch["inverse"].as_array().unwrap().is_empty());
            assert_eq!(apply_edits(original, &ch["edits"]), new_text);
            assert_eq!(apply_edits(new_text, &ch["inverse"]), original);
        }
    }
}

#[test]
fn sigkill_at_random_moments_leaves_a_consistent_store() {
    let ws = support::example();
    let uri = file_uri(&ws.path().join("calc.py"));
    let replay = [
        json!({"role": "coder", "content": WRONG}),
        json!({"role": "reflector", "content": REFLECTION}),
        json!({"role": "coder", "content": RIGHT}),
        json!({"role": "evaluator", "content": "{\"score\": 4, \"reason\": \"fixed\"}"}),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect::<String>();
    std::fs::write(ws.path().join(".replay.jsonl"), replay).unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    let rounds = 24;
    let mut killed_running = 0;
    let mut mid_run = 0;
    for round in 0..rounds {
        std::fs::write(ws.path().join("calc.py"), BROKEN).unwrap();
        let editor = Arc::new(Mutex::new((BROKEN.to_string(), 1)));
        let mut c = Client::spawn(Default::default());
        c.initialize(
            ws.path(),
            json!({}),
            json!({"model": {"provider": "replay", "replay_file": ".replay.jsonl"}, "agent": {"approval": "auto"}}),
        );
        c.open(&uri, BROKEN);
        applies(&mut c, &uri, editor);
        c.command("agent-ls.fixTests", Value::Null).unwrap();
        // A whole run takes about 1.5 s here; kill anywhere in it (and sometimes after it).
        let wait = Duration::from_millis(rng.u64(0..2000));
        if round + 1 == rounds {
            // The last round lets its run end, so a step is recorded however slow the
            // machine is (under a loaded CI, every kill can land before the first step).
            c.wait_notification("agent-ls/runFinished", |_| true);
        } else {
            c.pump(wait);
        }
        c.kill();

        let running = the_store_is_whole(ws.path(), round);
        if running > killed_running {
            mid_run += 1;
        }
        killed_running = killed_running.max(running);
    }
    let steps = Store::open(ws.path())
        .unwrap()
        .0
        .load_steps()
        .unwrap()
        .len();
    eprintln!("{rounds} kills: {mid_run} inside a run, {steps} steps recorded");
    assert!(killed_running > 0, "some kills landed inside a run");

    the_latest_step_still_undoes(ws.path());
}

/// After all the kills, a server starts on the store and undoes the latest step, with the
/// file as that step left it (each round began by putting calc.py back).
fn the_latest_step_still_undoes(ws: &Path) {
    let (latest, _) = Store::open(ws)
        .unwrap()
        .0
        .load_steps()
        .unwrap()
        .pop()
        .expect("some step was recorded");
    let change = &latest.changes[0];
    std::fs::write(ws.join(&change.path), &change.new_text).unwrap();
    let mut c = Client::spawn(Default::default());
    c.initialize(ws, json!({}), json!({"agent": {"approval": "auto"}}));
    let status = c.command("agent-ls.status", Value::Null).unwrap();
    assert_eq!(status["steps"][0]["id"], latest.id, "{status}");
    let r = c.command("agent-ls.undo", Value::Null).unwrap();
    assert_eq!(r["step"], latest.id);
    c.wait_notification("window/showMessage", |p| {
        p["message"].as_str().unwrap_or("").contains("undid step")
    });
    assert_eq!(
        std::fs::read_to_string(ws.join(&change.path)).unwrap(),
        change.original.clone().unwrap()
    );
}

/// The journal carries the loop's readings beside the raw model answers.
fn the_journal_has_the_loops_readings(ws: &Path) {
    let journal = std::fs::read_dir(ws.join(".agent-ls/runs"))
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect::<String>();
    let types: Vec<String> = journal
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for kind in [
        "intent",
        "model_call",
        "patch",
        "approval",
        "test_result",
        "reflection",
        "evaluation",
        "finished",
    ] {
        assert!(types.iter().any(|t| t == kind), "no {kind} in {types:?}");
    }
}

#[test]
fn stats_report_tokens_times_iterations_and_rates() {
    let ws = support::example();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agent-ls"))
            .args(args)
            .arg("--workspace")
            .arg(ws.path())
            .env("AGENT_LS_MODEL__PROVIDER", "replay")
            .env(
                "AGENT_LS_MODEL__REPLAY_FILE",
                support::repo("examples/replay/fix-calc.jsonl"),
            )
            .env("XDG_CONFIG_HOME", ws.path().join(".xdg"))
            .output()
            .unwrap()
    };
    let out = run(&["stats"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("no runs recorded"));
    let out = run(&["run", "fix the failing tests", "--yes"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["stats", "--json"]);
    assert!(out.status.success());
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    let total = &stats["total"];
    assert_eq!(total["runs"], 1);
    assert_eq!(total["done"], 1);
    assert_eq!(total["pass_rate"], 1.0);
    assert_eq!(total["iterations"], 2, "{stats}");
    assert_eq!(
        total["proposals"], 2,
        "the wrong fix and the right one were proposed"
    );
    assert_eq!(total["accepted"], 2);
    assert!(total["tokens"].as_u64().unwrap() > 0);
    assert!(
        total["test_ms"].as_u64().unwrap() > 0,
        "three test runs took time"
    );
    let r = &stats["runs"][0];
    assert_eq!(r["tests_passed"], 3);
    assert_eq!(r["tests_failed"], 0);
    assert_eq!(r["evaluation"], 4);

    // The iterations table holds each attempt's figures, the reflection included.
    let conn = rusqlite::Connection::open(ws.path().join(".agent-ls/store.sqlite")).unwrap();
    let (failed, reflection): (i64, String) = conn
        .query_row(
            "SELECT tests_failed, reflection FROM iterations WHERE n = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(failed > 0);
    assert!(!reflection.is_empty());

    the_journal_has_the_loops_readings(ws.path());

    let out = run(&["stats"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1 runs: 1 done")
            && text.contains("pass rate 100%")
            && text.contains("2 of 2 proposed changes accepted"),
        "{text}"
    );
}

#[test]
fn a_killed_headless_run_resumes_with_run_resume() {
    let ws = support::example();
    let first = stalls_in_the_second_iteration();
    let agent = |url: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agent-ls"));
        cmd.arg("run")
            .arg("--workspace")
            .arg(ws.path())
            .args(["--yes", "--json"])
            .env("XDG_CONFIG_HOME", ws.path().join(".xdg"))
            .env("AGENT_LS_MODEL__PROVIDER", "openai")
            .env("AGENT_LS_MODEL__BASE_URL", format!("{url}/v1"))
            .env("AGENT_LS_MODEL__NAME", "m")
            .env("AGENT_LS_AGENT__EVALUATE", "false")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd
    };
    let mut child = agent(&first.url)
        .arg("fix the failing tests")
        .spawn()
        .unwrap();
    // The third request is the second coder call, which stalls.
    first.wait_for_requests(3);
    child.kill().unwrap();
    child.wait().unwrap();
    let interrupted = Store::open(ws.path())
        .unwrap()
        .0
        .interrupted_runs(None)
        .unwrap();
    assert_eq!(interrupted.len(), 1);
    // The second iteration's checkpoint was written before its coder call went out.
    assert_eq!(interrupted[0].iterations, 2);
    let id = interrupted[0].run_id.clone();
    let stats = Command::new(env!("CARGO_BIN_EXE_agent-ls"))
        .args(["stats", "--json", "--workspace"])
        .arg(ws.path())
        .output()
        .unwrap();
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["runs"][0]["status"], "interrupted", "{stats}");

    let second = ModelServer::start(vec![openai_text(&[RIGHT])]);
    let out = agent(&second.url).args(["--resume", &id]).output().unwrap();
    let outcome: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{outcome}");
    assert_eq!(outcome["run_id"], id.as_str());
    assert_eq!(outcome["iterations"], 2);
    assert!(
        second.requests()[0]
            .body
            .to_string()
            .contains("make add return the sum")
    );
    assert!(
        std::fs::read_to_string(ws.path().join("calc.py"))
            .unwrap()
            .contains("return a + b")
    );
    // Once it ended, it is not resumed again.
    let out = agent(&second.url).args(["--resume", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already ended"));
}
