//! Rewind (docs/rewind.md): a run taken back to one of its steps, code and conversation
//! together, and a new run from there with a new instruction, through each surface: the
//! files go back to the step, the new run's first model request carries the earlier
//! conversation up to the step and the new instruction, and a file edited by hand since at a
//! later step's lines is a refusal that names it and changes nothing.

use crate::support;

use std::path::Path;
use std::process::Output;

use agent_ls_runtime::store::Store;
use serde_json::{Value, json};
use support::model_server::{ModelServer, openai_text};

/// Step 1: the wrong way round; step 2: the fix; the rewound run's answer: the other sum.
const WRONG: &str =
    "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return b - a\n>>>>>>> REPLACE\n";
const RIGHT: &str =
    "calc.py\n<<<<<<< SEARCH\n    return b - a\n=======\n    return a + b\n>>>>>>> REPLACE\n";
const INSTEAD: &str =
    "calc.py\n<<<<<<< SEARCH\n    return b - a\n=======\n    return b + a\n>>>>>>> REPLACE\n";
const REFLECTION: &str = r#"{"task_id": "T1", "passed": false, "report": "add subtracts the wrong way round", "next_step": "make add return the sum"}"#;

/// The example, with the evaluator and the review off so the model answers only the
/// coder's and the reflector's calls.
fn workspace() -> tempfile::TempDir {
    let ws = support::example();
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        "[agent]\nevaluate = false\nreview = \"off\"\n",
    )
    .unwrap();
    ws
}

fn openai_env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AGENT_LS_MODEL__PROVIDER", "openai".into()),
        ("AGENT_LS_MODEL__BASE_URL", format!("{url}/v1")),
        ("OPENAI_API_KEY", "test-key".into()),
    ]
}

fn run(ws: &Path, home: &Path, url: &str, args: &[&str]) -> Output {
    support::cli(&[&["run"], args].concat(), ws, home)
        .envs(openai_env(url))
        .output()
        .unwrap()
}

fn calc(ws: &Path) -> String {
    std::fs::read_to_string(ws.join("calc.py")).unwrap()
}

/// A fix in two steps by one run: the wrong way round (step 1, tests fail), then the sum
/// (step 2, tests pass). The steps' ids, oldest first.
fn fixed_in_two_steps(ws: &Path, home: &Path) -> Vec<u64> {
    let model = ModelServer::start(vec![
        openai_text(&[WRONG]),
        openai_text(&[REFLECTION]),
        openai_text(&[RIGHT]),
    ]);
    let out = run(ws, home, &model.url, &["fix the failing tests", "--yes"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(calc(ws).contains("return a + b"));
    let (store, _) = Store::open(ws).unwrap();
    let steps: Vec<u64> = store
        .load_steps()
        .unwrap()
        .iter()
        .map(|(s, _)| s.id)
        .collect();
    assert_eq!(steps.len(), 2, "{steps:?}");
    steps
}

/// The text of every message of a recorded OpenAI request, in order.
fn said(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn run_from_a_step_goes_back_to_it_and_follows_its_conversation() {
    let (ws, home) = (workspace(), tempfile::tempdir().unwrap());
    let steps = fixed_in_two_steps(ws.path(), home.path());
    let model = ModelServer::start(vec![openai_text(&[INSTEAD])]);
    let step = steps[0].to_string();
    let instruction = "instead, fix add so it returns b + a";
    let out = run(
        ws.path(),
        home.path(),
        &model.url,
        &["--from", &step, instruction, "--yes"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&format!("to step {step}")), "{stderr}");
    // The result is applied on the files as they were after step 1.
    assert!(
        calc(ws.path()).contains("return b + a"),
        "{}",
        calc(ws.path())
    );
    // The first request: the earlier goal, the step's answer and its tests, then the new
    // instruction; nothing of what came after the step.
    let first = &model.requests()[0].body;
    let texts = said(first);
    let joined = texts.join("\n---\n");
    let at = |needle: &str| texts.iter().position(|t| t.contains(needle));
    let goal = at("Goal: fix the failing tests").expect(&joined);
    let answer = at("return b - a").expect(&joined);
    let new = at(&format!("Goal: {instruction}")).expect(&joined);
    assert!(goal < answer && answer < new, "{joined}");
    assert_eq!(first["messages"][answer]["role"], "assistant", "{joined}");
    assert!(joined.contains("The tests after it: failed"), "{joined}");
    assert!(
        !joined.contains("return a + b\n>>>>>>>"),
        "step 2's answer: {joined}"
    );
    // The journal says what the new run is.
    let o: Value = serde_json::from_slice(&out.stdout).unwrap();
    let journal = std::fs::read_dir(ws.path().join(".agent-ls/runs"))
        .unwrap()
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .contains(o["run_id"].as_str().unwrap())
        })
        .unwrap();
    let text = std::fs::read_to_string(journal.path()).unwrap();
    let rewound: Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["type"] == "rewound")
        .expect(&text);
    assert_eq!(rewound["data"]["step"], json!(steps[0]));
    // Step 2 is undone (and, once the new run wrote, dropped like any undone step): it is
    // never taken back a second time.
    let (store, _) = Store::open(ws.path()).unwrap();
    let applied: Vec<u64> = store
        .load_steps()
        .unwrap()
        .iter()
        .filter(|(_, undone)| !undone)
        .map(|(s, _)| s.id)
        .collect();
    assert!(
        applied.contains(&steps[0]) && !applied.contains(&steps[1]),
        "{applied:?}"
    );
}

#[test]
fn a_file_edited_since_refuses_the_rewind_naming_it_and_changes_nothing() {
    let (ws, home) = (workspace(), tempfile::tempdir().unwrap());
    let steps = fixed_in_two_steps(ws.path(), home.path());
    // The user edits the line step 2 changed.
    let edited = calc(ws.path()).replace("return a + b", "return a + b  # mine");
    std::fs::write(ws.path().join("calc.py"), &edited).unwrap();
    let model = ModelServer::start(vec![openai_text(&[INSTEAD])]);
    let step = steps[0].to_string();
    let out = run(
        ws.path(),
        home.path(),
        &model.url,
        &[
            "--from",
            &step,
            "instead, fix add so it returns b + a",
            "--yes",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("calc.py") && stderr.contains("nothing was rewound"),
        "{stderr}"
    );
    assert_eq!(calc(ws.path()), edited);
    assert_eq!(model.count(), 0, "no run started");
    let (store, _) = Store::open(ws.path()).unwrap();
    assert!(
        store
            .load_steps()
            .unwrap()
            .iter()
            .all(|(_, undone)| !undone)
    );
}

const BROKEN: &str = "\"\"\"A tiny calculator with a bug for the agent to fix.\"\"\"\n\n\ndef add(a, b):\n    return a - b\n\n\ndef multiply(a, b):\n    return a * b\n";

/// The server's settings with the model at `url`: changes applied without asking, no
/// evaluation or review.
fn settings(url: &str) -> Value {
    json!({"model": {"provider": "openai", "base_url": format!("{url}/v1"), "name": "m"},
           "agent": {"approval": "auto", "evaluate": false, "review": "off"}})
}

#[test]
fn agent_ls_rewind_over_lsp_moves_the_buffer_back_and_starts_the_instruction() {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use support::editor::{Buffers, applies};
    use support::{Client, file_uri};

    let ws = support::example();
    let model = ModelServer::start(vec![
        openai_text(&[WRONG]),
        openai_text(&[REFLECTION]),
        openai_text(&[RIGHT]),
        openai_text(&[INSTEAD]),
    ]);
    let mut c = Client::spawn(Default::default());
    c.initialize(ws.path(), json!({}), settings(&model.url));
    let calc = file_uri(&ws.path().join("calc.py"));
    c.open(&calc, BROKEN);
    let buffers: Buffers = Arc::new(Mutex::new(HashMap::from([(
        calc.clone(),
        (BROKEN.to_string(), 1),
    )])));
    applies(&mut c, buffers.clone(), vec![calc.clone()]);
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}\n{}", c.stderr());
    let status = c.settled_status();
    let mut steps: Vec<u64> = status["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_u64())
        .collect();
    steps.sort();
    assert_eq!(steps.len(), 2, "{status}");
    c.notifications.clear();

    let goal = "instead, fix add so it returns b + a";
    // Typed, unsaved, at the line step 2 changed: refused, naming the file; nothing moves.
    let version = buffers.lock().unwrap()[&calc].1;
    let line = "    return a + b";
    let end = line.len() as u32;
    c.edit(&calc, version as i32 + 1, (4, end), (4, end), "  # mine");
    let refused = c
        .command("agent-ls.rewind", json!({"step": steps[0], "goal": goal}))
        .unwrap_err();
    let why = refused["message"].as_str().unwrap_or_default();
    assert!(why.contains("calc.py") && why.contains("step"), "{refused}");
    let disk = std::fs::read_to_string(ws.path().join("calc.py")).unwrap();
    assert!(disk.contains("return a + b\n"), "{disk}");
    c.edit(&calc, version as i32 + 2, (4, end), (4, end + 8), "");
    buffers.lock().unwrap().get_mut(&calc).unwrap().1 = version + 2;
    let answer = c
        .command("agent-ls.rewind", json!({"step": steps[0], "goal": goal}))
        .unwrap_or_else(|e| panic!("{e}\n{}", c.stderr()));
    assert_eq!(answer["rewound"]["undone"], json!([steps[1]]), "{answer}");
    assert_eq!(answer["rewound"]["files"], json!(["calc.py"]), "{answer}");
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}\n{}", c.stderr());
    assert_eq!(done["run_id"], answer["run_id"], "{done}");
    let text = buffers.lock().unwrap()[&calc].0.clone();
    assert!(text.contains("return b + a"), "{text}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("calc.py")).unwrap(),
        text
    );
    // The new run's first request follows the earlier conversation up to step 1.
    let texts = said(&model.requests()[3].body);
    let joined = texts.join("\n---\n");
    let at = |needle: &str| texts.iter().position(|t| t.contains(needle));
    let answer_at = at("return b - a").expect(&joined);
    let new = at(&format!("Goal: {goal}")).expect(&joined);
    assert!(answer_at < new, "{joined}");
    assert!(!joined.contains("return a + b\n>>>>>>>"), "{joined}");
    // Step 2 is undone in the session's history too: the status says so.
    let status = c.settled_status();
    let second = status["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == json!(steps[1]));
    assert!(second.is_none_or(|s| s["undone"] == true), "{status}");
    // A step that does not exist is refused, naming it.
    let err = c
        .command("agent-ls.rewind", json!({"step": 99, "goal": goal}))
        .unwrap_err();
    assert!(
        err["message"].as_str().unwrap().contains("step 99"),
        "{err}"
    );
}

#[test]
fn acp_rewind_goes_back_and_runs_the_instruction_in_the_session() {
    use crate::acp::RawAcp;

    let (ws, home) = (workspace(), tempfile::tempdir().unwrap());
    let steps = fixed_in_two_steps(ws.path(), home.path());
    let model = ModelServer::start(vec![openai_text(&[INSTEAD])]);
    let env = openai_env(&model.url);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cwd = ws.path().canonicalize().unwrap();
    let mut acp = RawAcp::start_with(home.path(), &env);
    let (created, _) = acp.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let id = created["result"]["sessionId"].clone();
    // Without both its parts, a rewind says how to write it and does nothing.
    let (_, seen) = acp.request(
        2,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "/rewind"}]}),
    );
    let told: String = seen
        .iter()
        .filter_map(|n| n["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(told.contains("/rewind STEP INSTRUCTION"), "{told}");
    let goal = "instead, fix add so it returns b + a";
    let prompt = format!("/rewind {} {goal}", steps[0]);
    let (answer, seen) = acp.request(
        3,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": prompt}]}),
    );
    acp.close();
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let said: String = seen
        .iter()
        .filter_map(|n| n["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(
        said.contains(&format!("to step {}: undid step(s) {}", steps[0], steps[1])),
        "{said}"
    );
    assert!(
        calc(ws.path()).contains("return b + a"),
        "{}",
        calc(ws.path())
    );
    let texts = said_to_model(&model);
    let answer_at = texts.iter().position(|t| t.contains("return b - a"));
    let new = texts
        .iter()
        .position(|t| t.contains(&format!("Goal: {goal}")));
    assert!(
        matches!((answer_at, new), (Some(a), Some(n)) if a < n),
        "{texts:?}"
    );
}

/// The texts of the model's first request.
fn said_to_model(model: &ModelServer) -> Vec<String> {
    said(&model.requests()[0].body)
}

#[test]
fn mcp_run_from_a_step_rewinds_then_runs_the_goal() {
    use std::io::{BufRead, Write};

    let (ws, home) = (workspace(), tempfile::tempdir().unwrap());
    let steps = fixed_in_two_steps(ws.path(), home.path());
    let model = ModelServer::start(vec![openai_text(&[INSTEAD])]);
    let mut mcp = support::in_workspace(&["mcp"], ws.path(), home.path())
        .envs(openai_env(&model.url))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = mcp.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(mcp.stdout.take().unwrap());
    let goal = "instead, fix add so it returns b + a";
    let requests = [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "run",
            "arguments": {"goal": goal, "from": steps[0], "yes": true}}}),
    ];
    let mut answers = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        writeln!(stdin, "{request}").unwrap();
        if i == 0 {
            writeln!(
                stdin,
                "{}",
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
            )
            .unwrap();
        }
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        answers.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    drop(stdin);
    mcp.wait().unwrap();
    let result = &answers[1]["result"];
    assert_eq!(result["structuredContent"]["status"], "done", "{result}");
    let notes = result["structuredContent"]["notes"].to_string();
    assert!(notes.contains(&format!("to step {}", steps[0])), "{notes}");
    assert!(
        calc(ws.path()).contains("return b + a"),
        "{}",
        calc(ws.path())
    );
    let texts = said_to_model(&model);
    let answer_at = texts.iter().position(|t| t.contains("return b - a"));
    let new = texts
        .iter()
        .position(|t| t.contains(&format!("Goal: {goal}")));
    assert!(
        matches!((answer_at, new), (Some(a), Some(n)) if a < n),
        "{texts:?}"
    );
}
