//! Real models' mistakes through `agent-ls run --json` (issue 40): a scripted model makes one
//! realistic mistake on its first edit and answers well afterwards. Each run must end done,
//! with the file whole (nothing lost, nothing gained) and the tests passing.

use crate::support;

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use support::model_server::{
    ModelServer, Reply, openai_cut_off_call, openai_text, openai_text_with_bytes,
};

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

#[test]
fn a_cut_off_tool_call_is_sent_back_once_naming_its_size() {
    let ws = example();
    let cut = "{\"path\": \"calc.py\", \"search\": \"    return a - b\\n\", \"replace\": \"    ret";
    let server = ModelServer::start(vec![
        openai_cut_off_call("edit_file", cut),
        openai_text(&[GOOD]),
    ]);
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

/// calc.py fixed, with the docstring the first answer's other edit gave `multiply`.
const FIXED_DOC: &str = "\"\"\"A tiny calculator with a bug for the agent to fix.\"\"\"\n\n\ndef add(a, b):\n    return a + b\n\n\ndef multiply(a, b):\n    \"\"\"The product.\"\"\"\n    return a * b\n";

/// The edit that gives `multiply` its docstring.
const DOC: &str = "calc.py\n<<<<<<< SEARCH\ndef multiply(a, b):\n    return a * b\n=======\ndef multiply(a, b):\n    \"\"\"The product.\"\"\"\n    return a * b\n>>>>>>> REPLACE\n";

#[test]
fn a_file_that_does_not_hold_its_edit_after_the_write_is_never_called_done() {
    let ws = example();
    // One file under two names: each name's change is computed on the same text and written
    // whole, so the second write takes back the first one's edit.
    std::os::unix::fs::symlink("calc.py", ws.path().join("alias.py")).unwrap();
    let fix_through_alias = GOOD.replacen("calc.py", "alias.py", 1);
    let first = format!("{DOC}\n{fix_through_alias}");
    let out = fix(ws.path(), &[&first, DOC]);
    let o: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(o["status"], "done", "{o}");
    assert_eq!(o["tests"], json!({"passed": 3, "failed": 0}), "{o}");
    // Done only once the file holds both edits: the second attempt mended it.
    assert_eq!(o["iterations"], 2, "{o}");
    assert_eq!(calc(ws.path()), FIXED_DOC);
    assert_eq!(repairs(ws.path()), ["damaged"]);
    let told: Vec<String> = journal(ws.path())
        .iter()
        .filter(|l| l["type"] == "repair")
        .map(|l| l["data"]["reason"].to_string())
        .collect();
    assert!(
        told[0].contains("a line the edit did not touch"),
        "{told:?}"
    );
}

/// The run against the HTTP model server at `url`, with `extra` settings for the model.
fn over_http(ws: &Path, url: &str, extra: &[(&str, String)]) -> Output {
    let mut env = vec![
        ("AGENT_LS_MODEL__PROVIDER", "openai".to_string()),
        ("AGENT_LS_MODEL__BASE_URL", format!("{url}/v1")),
        ("OPENAI_API_KEY", "test-key".into()),
    ];
    env.extend(extra.iter().cloned());
    run(ws, &env)
}

/// A first answer that fixes nothing and breaks `multiply`, whose test passed.
const WORSE: &str =
    "calc.py\n<<<<<<< SEARCH\n    return a * b\n=======\n    return a ** b\n>>>>>>> REPLACE\n";

#[test]
fn an_edit_that_made_things_worse_is_undone_before_the_retry() {
    let ws = example();
    let server = ModelServer::start(vec![openai_text(&[WORSE]), openai_text(&[GOOD])]);
    let o = done(&over_http(ws.path(), &server.url, &[]));
    assert_eq!(o["iterations"], 2, "{o}");
    // The retry went to the restored file: multiply multiplies again, add adds.
    assert_eq!(calc(ws.path()), FIXED);
    assert_eq!(repairs(ws.path()), ["worse"]);
    // No reflection on the worse change: the coder is asked again at once, told what was
    // undone, with the restored line.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let told = requests[1].body.to_string();
    assert!(told.contains("was undone because the change to calc.py made things worse: 1 test(s) passed before it and 0 pass after it"), "{told}");
    assert!(told.contains("    9 |     return a * b"), "{told}");
}

#[test]
fn with_undo_worse_off_the_retry_starts_from_the_worse_file() {
    let ws = example();
    let config = "[agent]\nevaluate = false\nreview = \"off\"\nundo_worse = false\n";
    std::fs::write(ws.path().join(".agent-ls.toml"), config).unwrap();
    let reflection = r#"{"task_id": "T1", "passed": false, "report": "multiply broke", "next_step": "fix both"}"#;
    let both = format!(
        "{GOOD}\n{}",
        WORSE
            .replace("a * b", "@")
            .replace("a ** b", "a * b")
            .replace("@", "a ** b")
    );
    let server = ModelServer::start(vec![
        openai_text(&[WORSE]),
        openai_text(&[reflection]),
        openai_text(&[&both]),
    ]);
    let o = done(&over_http(ws.path(), &server.url, &[]));
    assert_eq!(o["iterations"], 2, "{o}");
    assert_eq!(calc(ws.path()), FIXED);
    assert!(repairs(ws.path()).is_empty());
}

#[test]
fn a_cut_off_answer_is_asked_again_once_with_the_larger_max_tokens_the_provider_allows() {
    let ws = example();
    let cut = {
        let piece = json!({"choices": [{"index": 0, "delta": {"content": &GOOD[..40]}, "finish_reason": null}]});
        let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]});
        Reply::Sse {
            events: vec![piece.to_string(), end.to_string(), "[DONE]".into()],
            stall_after: None,
        }
    };
    let server = ModelServer::start(vec![cut, openai_text(&[GOOD])]);
    let consent = [("AGENT_LS_MODEL__RETRY_MAX_TOKENS", "8192".to_string())];
    let o = done(&over_http(ws.path(), &server.url, &consent));
    // Recovered inside the one coder call: no repair, no second iteration.
    assert_eq!(o["iterations"], 1, "{o}");
    assert_eq!(calc(ws.path()), FIXED);
    assert!(repairs(ws.path()).is_empty(), "{:?}", repairs(ws.path()));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body["max_tokens"], 2048);
    assert_eq!(requests[1].body["max_tokens"], 8192);
}

#[test]
fn invalid_utf8_in_an_edit_is_refused_naming_the_bytes_and_the_retry_lands_clean() {
    let ws = example();
    let bad = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b  # sum @BAD@\n>>>>>>> REPLACE\n";
    let server = ModelServer::start(vec![
        openai_text_with_bytes(bad, b"\xff\xfe"),
        openai_text(&[GOOD]),
    ]);
    let o = done(&over_http(ws.path(), &server.url, &[]));
    assert_eq!(o["iterations"], 2, "{o}");
    // Nothing of the bad answer was written: no U+FFFD in the file.
    assert_eq!(calc(ws.path()), FIXED);
    assert_eq!(repairs(ws.path()), ["utf8"]);
    let told = server.requests()[1].body.to_string();
    assert!(told.contains("0xff 0xfe"), "{told}");
}
