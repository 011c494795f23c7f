//! The editor experience through the real binary and a client that behaves like the real
//! editors: documents saved by the editor on `agent-ls/saveFiles` (and by the server only for
//! clients that cannot), files the editor creates as it applies a `CreateFile`, a broken test
//! command reported as such and never as failing tests, and `agent-ls/runEvent` feeding a run
//! view in order, with streamed tokens and the steps to undo.

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use support::editor::{Buffers, applies as editor_applies};
use support::model_server::{ModelServer, openai_text};
use support::{Client, Spawn, file_uri};

const BROKEN: &str = "\"\"\"A tiny calculator with a bug for the agent to fix.\"\"\"\n\n\ndef add(a, b):\n    return a - b\n\n\ndef multiply(a, b):\n    return a * b\n";

fn run_finished(c: &mut Client) -> Value {
    c.wait_notification("agent-ls/runFinished", |_| true)
}

fn replay(ws: &std::path::Path, lines: &[Value]) -> Value {
    std::fs::write(ws.join(".replay.jsonl"), support::replay_script(lines)).unwrap();
    json!({"model": {"provider": "replay", "replay_file": ".replay.jsonl"}, "agent": {"approval": "auto", "evaluate": false}})
}

const SAVE_CAPS: &str = r#"{"workspace": {"workspaceEdit": {"documentChanges": true, "resourceOperations": ["create", "delete"]}}, "experimental": {"agentLs": {"saveFiles": true}}}"#;

#[test]
fn an_editor_that_saves_is_asked_to_and_the_server_never_writes_under_its_buffers() {
    let ws = support::example();
    let uri = file_uri(&ws.path().join("calc.py"));
    let helpers = file_uri(&ws.path().join("helpers.py"));
    let answer = support::create_module_answer();
    let options = replay(ws.path(), &[json!({"role": "coder", "content": answer})]);
    let mut c = Client::spawn(Spawn::default());
    c.initialize(ws.path(), serde_json::from_str(SAVE_CAPS).unwrap(), options);
    // The user has typed a comment and not saved it.
    let typed = format!("# mine\n{BROKEN}");
    c.open(&uri, BROKEN);
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": typed}]}),
    );
    let buffers: Buffers = Arc::new(Mutex::new(HashMap::from([(
        uri.clone(),
        (typed.clone(), 2),
    )])));
    editor_applies(&mut c, buffers.clone(), vec![uri.clone()]);
    let (b, root) = (buffers.clone(), ws.path().to_path_buf());
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    c.on_request("agent-ls/saveFiles", move |p| {
        log.lock().unwrap().push(p.clone());
        // Nothing of the step is on disk yet: the server left that to the editor.
        assert!(
            std::fs::read_to_string(root.join("calc.py"))
                .unwrap()
                .contains("return a - b")
        );
        let b = b.lock().unwrap();
        let mut saved = Vec::new();
        for f in p["files"].as_array().unwrap() {
            let u = f["uri"].as_str().unwrap();
            if let Some((text, version)) = b.get(u) {
                if f["version"].as_i64().is_some_and(|v| v != *version) {
                    continue;
                }
                std::fs::write(u.strip_prefix("file://").unwrap(), text).unwrap();
                saved.push(u.to_string());
            }
        }
        json!({"saved": saved})
    });
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = run_finished(&mut c);
    assert_eq!(done["status"], "done", "{done}\n{}", c.stderr());
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let files = asked[0]["files"].as_array().unwrap();
    assert!(
        files
            .iter()
            .any(|f| f["uri"] == uri.as_str() && f["version"] == 3),
        "{asked:?}"
    );
    assert!(files.iter().any(|f| f["uri"] == helpers.as_str()));
    // The disk holds exactly the buffers: the fix, the new file and the user's own line, of
    // which the user is told.
    let disk = std::fs::read_to_string(ws.path().join("calc.py")).unwrap();
    assert!(
        disk.starts_with("# mine\n") && disk.contains("return a + b"),
        "{disk}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("helpers.py")).unwrap(),
        "def double(x):\n    return 2 * x\n"
    );
    c.wait_notification("window/showMessage", |p| {
        p["message"]
            .as_str()
            .unwrap_or("")
            .contains("saved calc.py with your unsaved changes")
    });
    assert_eq!(done["tests"], json!({"passed": 3, "failed": 0}));
}

#[test]
fn a_file_the_editor_created_as_it_applied_the_edit_is_the_steps_and_undo_and_redo_follow() {
    // A client without saveFiles: the support client creates the empty file as it applies
    // the CreateFile, like VS Code and Neovim, and the server writes the disk.
    let ws = support::example();
    std::fs::write(ws.path().join("test_helpers.py"), support::TEST_HELPERS).unwrap();
    let answer = support::create_module_answer();
    let options = replay(ws.path(), &[json!({"role": "coder", "content": answer})]);
    let caps = json!({"workspace": {"workspaceEdit": {"documentChanges": true, "resourceOperations": ["create", "delete"]}}});
    let mut c = Client::spawn(Spawn::default());
    c.initialize(ws.path(), caps, options);
    let buffers: Buffers = Arc::default();
    editor_applies(&mut c, buffers, vec![]);
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = run_finished(&mut c);
    assert_eq!(done["status"], "done", "{done}\n{}", c.stderr());
    assert_eq!(done["tests"], json!({"passed": 4, "failed": 0}));
    let helpers = ws.path().join("helpers.py");
    assert_eq!(
        std::fs::read_to_string(&helpers).unwrap(),
        "def double(x):\n    return 2 * x\n"
    );
    let status = c.settled_status();
    assert_eq!(status["steps"].as_array().unwrap().len(), 1, "{status}");

    c.command("agent-ls.undo", Value::Null).unwrap();
    c.wait_notification("window/showMessage", |p| {
        p["message"].as_str().unwrap_or("").contains("undid step")
    });
    assert!(!helpers.exists(), "undo deletes the file it created");
    c.command("agent-ls.redo", Value::Null).unwrap();
    c.wait_notification("window/showMessage", |p| {
        p["message"].as_str().unwrap_or("").contains("redid step")
    });
    assert_eq!(
        std::fs::read_to_string(&helpers).unwrap(),
        "def double(x):\n    return 2 * x\n"
    );
}

/// A test command that cannot run the tests: a Python module that is not installed.
fn broken_runner_env() -> Vec<(String, String)> {
    vec![
        (
            "AGENT_LS_TEST__COMMAND".into(),
            r#"["python3", "-m", "no_such_runner"]"#.into(),
        ),
        (
            "AGENT_LS_TEST__ALLOWLIST".into(),
            r#"["python3 -m no_such_runner", "no-such-program"]"#.into(),
        ),
    ]
}

#[test]
fn a_broken_test_command_is_an_error_with_the_fix_never_failing_tests_and_costs_no_model_call() {
    let ws = support::example();
    let model = ModelServer::start(vec![openai_text(&["calc.py"])]);
    let mut c = Client::spawn(Spawn {
        env: broken_runner_env(),
        ..Spawn::default()
    });
    c.initialize(
        ws.path(),
        json!({}),
        json!({"model": {"provider": "openai", "base_url": format!("{}/v1", model.url), "name": "m"}, "agent": {"approval": "auto"}}),
    );
    c.command("agent-ls.rerunTests", Value::Null).unwrap();
    let status = c.wait_notification("agent-ls/testStatus", |p| p["state"] != "running");
    assert_eq!(status["state"], "error", "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("`python3 -m no_such_runner`: No module named no_such_runner; install no_such_runner or set `test.command`"),
        "{message}"
    );
    c.wait_notification("window/showMessage", |p| {
        p["message"]
            .as_str()
            .unwrap_or("")
            .contains("the tests did not run")
    });

    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = run_finished(&mut c);
    assert_eq!(done["status"], "failed");
    assert_eq!(done["failure_kind"], "config", "{done}");
    assert!(
        done["answer"]
            .as_str()
            .unwrap()
            .contains("install no_such_runner"),
        "{done}"
    );
    assert_eq!(model.count(), 0, "no model call is spent on good code");
    assert!(
        !c.notifications.iter().any(|n| {
            n["method"] == "textDocument/publishDiagnostics"
                && n["params"]["diagnostics"]
                    .as_array()
                    .is_some_and(|d| !d.is_empty())
        }),
        "no failing-test diagnostics"
    );

    // A program that is not there: the same, saying it cannot start.
    let mut env = broken_runner_env();
    env[0].1 = r#"["no-such-program"]"#.into();
    let mut c = Client::spawn(Spawn {
        env,
        ..Spawn::default()
    });
    c.initialize(ws.path(), json!({}), Value::Null);
    c.command("agent-ls.rerunTests", Value::Null).unwrap();
    let status = c.wait_notification("agent-ls/testStatus", |p| p["state"] != "running");
    assert_eq!(status["state"], "error", "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("no-such-program"),
        "{status}"
    );
}

#[test]
fn agent_ls_run_exits_3_on_a_broken_test_command_before_any_model_call() {
    let ws = support::example();
    let model = ModelServer::start(vec![openai_text(&["x"])]);
    let home = tempfile::tempdir().unwrap();
    let mut cmd = support::agent_ls(
        &["run", "fix the failing tests", "--yes", "--workspace"],
        home.path(),
    );
    cmd.arg(ws.path())
        .env("XDG_STATE_HOME", home.path())
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", model.url))
        .envs(broken_runner_env());
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains("install no_such_runner or set `test.command`"),
        "{stdout}"
    );
    assert_eq!(model.count(), 0);
}

/// Each event but the streamed tokens, as its iteration and `role:type`.
fn outline(events: &[Value]) -> Vec<(u64, String)> {
    events
        .iter()
        .filter(|e| e["type"] != "token")
        .map(|e| {
            (
                e["iteration"].as_u64().unwrap(),
                format!(
                    "{}:{}",
                    e["role"].as_str().unwrap(),
                    e["type"].as_str().unwrap()
                ),
            )
        })
        .collect()
}

/// The outline of a run whose first change the reflector turns down and whose second passes.
fn two_iterations_outline() -> Vec<(u64, String)> {
    [
        (0, "agent:intent"),
        (0, "agent:context"),
        (0, "tests:test_result"),
        // Memory is searched for the first failures (docs/memory.md): nothing is remembered
        // in a new workspace, and the line says what was looked for.
        (0, "agent:memory"),
        (1, "agent:iteration"),
        (1, "coder:prompt"),
        (1, "coder:model_call"),
        (1, "agent:patch"),
        (1, "user:approval"),
        (1, "agent:step"),
        (1, "tests:test_result"),
        (1, "reflector:prompt"),
        (1, "reflector:model_call"),
        (1, "reflector:reflection"),
        (2, "agent:iteration"),
        (2, "coder:prompt"),
        (2, "coder:model_call"),
        (2, "agent:patch"),
        (2, "user:approval"),
        (2, "agent:step"),
        (2, "tests:test_result"),
        // The reviewer (agent.review = "advise") has no answer in the script: its review is
        // unavailable, and the run ends as it would have.
        (2, "reviewer:prompt"),
        (2, "reviewer:review"),
        (2, "agent:finished"),
    ]
    .iter()
    .map(|(i, s)| (*i, s.to_string()))
    .collect()
}

#[test]
fn run_events_follow_a_two_iteration_run_in_order_and_name_the_steps_to_undo() {
    let ws = support::example();
    let uri = file_uri(&ws.path().join("calc.py"));
    let docstring = "calc.py\n<<<<<<< SEARCH\ndef multiply(a, b):\n=======\ndef multiply(a, b):\n    \"\"\"The product.\"\"\"\n>>>>>>> REPLACE\n";
    let fix =
        "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";
    let reflection = r#"{"task_id": "T1", "passed": false, "report": "add still subtracts", "next_step": "make add return a + b"}"#;
    let options = replay(
        ws.path(),
        &[
            json!({"role": "coder", "content": docstring}),
            json!({"role": "reflector", "content": reflection}),
            json!({"role": "coder", "content": fix}),
        ],
    );
    let mut c = Client::spawn(Spawn::default());
    c.initialize(ws.path(), json!({}), options);
    c.open(&uri, BROKEN);
    let buffers: Buffers = Arc::new(Mutex::new(HashMap::from([(
        uri.clone(),
        (BROKEN.to_string(), 1),
    )])));
    editor_applies(&mut c, buffers.clone(), vec![uri.clone()]);
    let run_id = c.command("agent-ls.fixTests", Value::Null).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = run_finished(&mut c);
    assert_eq!(done["status"], "done", "{done}");
    let events: Vec<Value> = c
        .notifications
        .iter()
        .filter(|n| n["method"] == "agent-ls/runEvent")
        .map(|n| n["params"].clone())
        .collect();
    assert!(events.iter().all(|e| e["runId"] == run_id.as_str()));
    // The view's outline: tokens aside, every event in the order it happened.
    assert_eq!(outline(&events), two_iterations_outline());
    // The model's answer streamed before its model_call, in pieces that add up to it.
    let streamed: String = events
        .iter()
        .take_while(|e| !(e["type"] == "model_call" && e["iteration"] == 1))
        .filter(|e| e["type"] == "token")
        .map(|e| e["data"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, docstring);
    let steps: Vec<u64> = events
        .iter()
        .filter(|e| e["type"] == "step")
        .map(|e| e["data"]["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps.len(), 2);

    // Undo of the first iteration's step, from the view: the docstring goes, the fix stays.
    c.command("agent-ls.undo", json!({"step": steps[0]}))
        .unwrap();
    let undo = c.wait_notification("agent-ls/runEvent", |p| p["type"] == "undo");
    assert_eq!(undo["data"]["step"], steps[0]);
    let text = buffers.lock().unwrap()[&uri].0.clone();
    assert!(
        !text.contains("The product") && text.contains("return a + b"),
        "{text}"
    );
}

#[test]
fn over_lsp_the_coder_reads_unsaved_buffers_with_tools_and_the_view_hears_of_it() {
    let ws = support::example();
    let uri = file_uri(&ws.path().join("calc.py"));
    // The user's unsaved comment is in the buffer only: grep must find it there.
    let typed = BROKEN.replace("def add", "# unsaved note\ndef add");
    std::fs::write(
        ws.path().join("notes.txt"),
        (0..300).map(|i| format!("note {i}\n")).collect::<String>(),
    )
    .unwrap();
    let mut options = replay(
        ws.path(),
        &[
            json!({"role": "coder", "content": "", "tool_calls": [
                {"name": "grep", "arguments": {"pattern": "unsaved note"}},
                {"name": "read_file", "arguments": {"path": "../outside.py"}},
                {"name": "read_file", "arguments": {"path": "notes.txt"}}
            ]}),
            // The change comes as an editing tool's proposal, on the unsaved buffer's text.
            json!({"role": "coder", "content": "", "tool_calls": [
                {"name": "edit_file", "arguments": {"path": "calc.py", "search": "    return a - b\n", "replace": "    return a + b\n"}}
            ]}),
        ],
    );
    options["agent"]["tool_result_bytes"] = json!(400);
    let mut c = Client::spawn(Spawn::default());
    c.initialize(ws.path(), json!({}), options);
    c.open(&uri, &typed);
    let buffers: Buffers = Arc::new(Mutex::new(HashMap::from([(uri.clone(), (typed, 1))])));
    editor_applies(&mut c, buffers.clone(), vec![uri.clone()]);
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = run_finished(&mut c);
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(done["iterations"], 1, "{done}");
    let results: Vec<Value> = c
        .notifications
        .iter()
        .filter(|n| n["method"] == "agent-ls/runEvent" && n["params"]["type"] == "tool_result")
        .map(|n| n["params"]["data"].clone())
        .collect();
    assert_eq!(results.len(), 3, "{results:?}");
    // A file over the limit comes as whole lines, then where to read on: never cut inside.
    assert!(
        results[2]["bytes"].as_u64().unwrap() <= 400,
        "{}",
        results[2]
    );
    let page = results[2]["text"].as_str().unwrap();
    assert!(
        page.contains("note 0")
            && page.contains("read on with start_line")
            && !page.contains("bytes cut"),
        "{page}"
    );
    let text = buffers.lock().unwrap()[&uri].0.clone();
    assert!(
        text.contains("# unsaved note") && text.contains("return a + b"),
        "{text}"
    );
    // Parallel calls come back in call order; a bad call is an answer, not the run's end.
    assert_eq!(results[0]["name"], "grep");
    assert_eq!(results[0]["text"], "calc.py:4: # unsaved note");
    assert_eq!(results[1]["name"], "read_file");
    assert_eq!(results[1]["is_error"], true);
    assert!(
        results[1]["text"]
            .as_str()
            .unwrap()
            .contains("outside the workspace"),
        "{}",
        results[1]
    );
}

#[test]
fn over_lsp_a_command_names_the_review_agent_and_an_unknown_agent_is_an_error() {
    let ws = support::example();
    let uri = file_uri(&ws.path().join("calc.py"));
    let options = replay(
        ws.path(),
        &[
            json!({"role": "coder", "content": "", "tool_calls": [
                {"name": "read_file", "arguments": {"path": "calc.py"}}
            ]}),
            json!({"role": "coder", "content": "- calc.py:5: `add` subtracts."}),
        ],
    );
    let mut c = Client::spawn(Spawn::default());
    c.initialize(ws.path(), json!({}), options);
    c.open(&uri, BROKEN);
    let err = c
        .command(
            "agent-ls.run",
            json!({"goal": "look at calc.py", "agent": "nope"}),
        )
        .unwrap_err();
    assert!(err.to_string().contains("build, plan, review"), "{err}");
    c.command(
        "agent-ls.run",
        json!({"goal": "look at calc.py", "agent": "review"}),
    )
    .unwrap();
    let done = run_finished(&mut c);
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(done["answer"], "- calc.py:5: `add` subtracts.");
    assert_eq!(done["files_changed"], json!([]));
    // A reading agent is offered no editing tools, and edits nothing.
    assert!(
        !c.notifications
            .iter()
            .any(|n| n["method"] == "agent-ls/runEvent" && n["params"]["type"] == "patch")
    );
}

#[test]
fn over_lsp_a_server_without_tools_gets_the_text_protocol() {
    use support::model_server::Reply;
    let ws = support::example();
    let uri = file_uri(&ws.path().join("calc.py"));
    let fix =
        "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";
    let server = ModelServer::start(vec![
        Reply::status(400, "{\"error\": \"this model does not support tools\"}"),
        openai_text(&["{\"tool\": \"grep\", \"arguments\": {\"pattern\": \"def add\"}}"]),
        openai_text(&[fix]),
    ]);
    let mut c = Client::spawn(Spawn {
        env: vec![
            ("AGENT_LS_MODEL__PROVIDER".into(), "openai".into()),
            (
                "AGENT_LS_MODEL__BASE_URL".into(),
                format!("{}/v1", server.url),
            ),
            ("OPENAI_API_KEY".into(), "test-key".into()),
        ],
        ..Spawn::default()
    });
    c.initialize(
        ws.path(),
        json!({}),
        json!({"agent": {"approval": "auto", "evaluate": false, "review": "off"}}),
    );
    c.open(&uri, BROKEN);
    let buffers: Buffers = Arc::new(Mutex::new(HashMap::from([(
        uri.clone(),
        (BROKEN.to_string(), 1),
    )])));
    editor_applies(&mut c, buffers.clone(), vec![uri.clone()]);
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = run_finished(&mut c);
    assert_eq!(done["status"], "done", "{done}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[1].body.get("tools").is_none());
    assert!(
        requests[2]
            .body
            .to_string()
            .contains("calc.py:4: def add(a, b):"),
        "{}",
        requests[2].body
    );
    let result = c
        .notifications
        .iter()
        .find(|n| n["method"] == "agent-ls/runEvent" && n["params"]["type"] == "tool_result")
        .expect("the view hears of the call");
    assert_eq!(result["params"]["data"]["name"], "grep");
}

#[test]
fn test_on_open_publishes_the_failures_when_the_first_file_opens() {
    let ws = support::example();
    let py = support::python();
    let mut c = Client::spawn(Spawn::default());
    c.initialize(
        ws.path(),
        json!({}),
        json!({"test": {"command": [py, "-m", "pytest"], "allowlist": [py], "on_open": true}}),
    );
    let calc = file_uri(&ws.path().join("calc.py"));
    c.open(&calc, BROKEN);
    // No save, no command: opening the file is enough for the failures to be on their lines.
    let published = c.wait_notification("textDocument/publishDiagnostics", |p| {
        p["diagnostics"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["source"] == "agent-ls test"))
    });
    assert!(
        published["uri"].as_str().unwrap().ends_with(".py"),
        "{published}"
    );
    // Once a session: a second file opened starts no other run.
    let runs = |c: &Client| {
        c.notifications
            .iter()
            .filter(|n| n["method"] == "agent-ls/testStatus" && n["params"]["state"] == "running")
            .count()
    };
    let before = runs(&c);
    c.open(&file_uri(&ws.path().join("test_calc.py")), "");
    assert_eq!(c.document_state(&calc)["text"], BROKEN);
    assert_eq!(runs(&c), before);
}
