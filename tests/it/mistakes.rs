//! Real models' mistakes through `agent-ls run --json` (issue 40): a scripted model makes one
//! realistic mistake on its first edit and answers well afterwards. Each run must end done,
//! with the file whole (nothing lost, nothing gained) and the tests passing.

use crate::support;

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use support::model_server::{ModelServer, Reply, openai_text};

/// The bundled example's calc.py once `add` is fixed: every line of it, nothing more.
const FIXED: &str = "\"\"\"A tiny calculator with a bug for the agent to fix.\"\"\"\n\n\ndef add(a, b):\n    return a + b\n\n\ndef multiply(a, b):\n    return a * b\n";

/// The good second answer: the fix as one small SEARCH/REPLACE.
const GOOD: &str =
    "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";

/// The example with the evaluator and the review off, so the script answers the coder only.
fn example() -> tempfile::TempDir {
    let ws = support::example();
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        "[agent]\nevaluate = false\nreview = \"off\"\n",
    )
    .unwrap();
    ws
}

/// `agent-ls run "fix the failing tests" --yes --json` with the coder's answers `answers`.
fn fix(ws: &Path, answers: &[&str]) -> Output {
    let lines: Vec<Value> = answers
        .iter()
        .map(|a| json!({"role": "coder", "content": a}))
        .collect();
    let file = ws.join(".replay.jsonl");
    std::fs::write(&file, support::replay_script(&lines)).unwrap();
    run(
        ws,
        &[
            ("AGENT_LS_MODEL__PROVIDER", "replay".into()),
            ("AGENT_LS_MODEL__REPLAY_FILE", file.display().to_string()),
        ],
    )
}

/// The same run with the model settings `env`.
fn run(ws: &Path, env: &[(&str, String)]) -> Output {
    let home = tempfile::tempdir().unwrap();
    support::cli(&["run", "fix the failing tests", "--yes"], ws, home.path())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap()
}

/// The run's JSON outcome, which must be done with the tests passing.
fn done(out: &Output) -> Value {
    let o: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {:?}\nstderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(o["status"], "done", "{o}");
    assert_eq!(o["tests"], json!({"passed": 3, "failed": 0}), "{o}");
    assert_eq!(o["files_changed"], json!(["calc.py"]), "{o}");
    o
}

/// Every journal line of the runs in `ws`.
fn journal(ws: &Path) -> Vec<Value> {
    let runs = ws.join(".agent-ls/runs");
    std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .flat_map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap();
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The classes of the repairs the journal records.
fn repairs(ws: &Path) -> Vec<String> {
    journal(ws)
        .iter()
        .filter(|l| l["type"] == "repair")
        .map(|l| l["data"]["class"].as_str().unwrap_or("").to_string())
        .collect()
}

fn calc(ws: &Path) -> String {
    std::fs::read_to_string(ws.join("calc.py")).unwrap()
}

#[test]
fn an_elided_replacement_is_refused_and_the_retry_leaves_the_file_whole() {
    let ws = example();
    let elided = "calc.py\n<<<<<<< SEARCH\ndef add(a, b):\n    return a - b\n\n\ndef multiply(a, b):\n    return a * b\n=======\ndef add(a, b):\n    return a + b\n\n\n# ... existing code ...\n>>>>>>> REPLACE\n";
    let o = done(&fix(ws.path(), &[elided, GOOD]));
    assert_eq!(o["iterations"], 2, "{o}");
    assert_eq!(calc(ws.path()), FIXED);
    assert_eq!(repairs(ws.path()), ["elision"]);
    // `agent-ls stats` counts the repairs by class.
    let home = tempfile::tempdir().unwrap();
    let stats = support::cli(&["stats"], ws.path(), home.path())
        .output()
        .unwrap();
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["repairs"], json!({"elision": 1}), "{stats}");
}

#[test]
fn an_elided_whole_file_is_refused_and_the_retry_leaves_the_file_whole() {
    let ws = example();
    let elided = json!({"path": "calc.py", "content": "\"\"\"A tiny calculator with a bug for the agent to fix.\"\"\"\n\n\ndef add(a, b):\n    return a + b\n\n\n# ... rest of the file unchanged ...\n"}).to_string();
    let o = done(&fix(ws.path(), &[&elided, GOOD]));
    assert_eq!(o["iterations"], 2, "{o}");
    assert_eq!(calc(ws.path()), FIXED);
    assert_eq!(repairs(ws.path()), ["elision"]);
}

#[test]
fn a_search_indented_deeper_than_the_file_with_a_right_replace_lands_whole() {
    let ws = example();
    let deeper = "calc.py\n<<<<<<< SEARCH\n  def add(a, b):\n      return a - b\n=======\ndef add(a, b):\n    return a + b\n>>>>>>> REPLACE\n";
    let o = done(&fix(ws.path(), &[deeper]));
    assert_eq!(o["iterations"], 1, "{o}");
    assert_eq!(calc(ws.path()), FIXED);
}

/// An OpenAI stream whose `edit_file` call stops at the output limit mid-arguments.
fn cut_off_edit_call(arguments: &str) -> Reply {
    let call = |f: Value| json!({"choices": [{"index": 0, "delta": {"tool_calls": [f]}}]});
    let events = vec![
        call(json!({"index": 0, "id": "call_1", "type": "function", "function": {"name": "edit_file", "arguments": ""}})).to_string(),
        call(json!({"index": 0, "function": {"arguments": arguments}})).to_string(),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}).to_string(),
        "[DONE]".into(),
    ];
    Reply::Sse {
        events,
        stall_after: None,
    }
}

#[test]
fn a_cut_off_tool_call_is_sent_back_once_naming_its_size() {
    let ws = example();
    let cut = "{\"path\": \"calc.py\", \"search\": \"    return a - b\\n\", \"replace\": \"    ret";
    let server = ModelServer::start(vec![cut_off_edit_call(cut), openai_text(&[GOOD])]);
    let out = run(
        ws.path(),
        &[
            ("AGENT_LS_MODEL__PROVIDER", "openai".into()),
            ("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url)),
            ("OPENAI_API_KEY", "test-key".into()),
        ],
    );
    done(&out);
    assert_eq!(calc(ws.path()), FIXED);
    assert_eq!(repairs(ws.path()), ["truncated"]);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let told = requests[1].body.to_string();
    let expected = format!("your edit_file call was cut off after {} bytes", cut.len());
    assert!(told.contains(&expected), "{told}");
}

#[test]
fn prose_around_json_edits_is_read_as_the_edits() {
    let ws = example();
    let answer = format!(
        "Here is the fix.\n{}\nThat makes add add.",
        json!({"path": "calc.py", "search": "    return a - b", "replace": "    return a + b"})
    );
    let o = done(&fix(ws.path(), &[&answer]));
    assert_eq!(o["iterations"], 1, "{o}");
    assert_eq!(calc(ws.path()), FIXED);
}
