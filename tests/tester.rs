//! The tester role through `agent-ls run --json`, the real binary over a scripted
//! OpenAI-compatible server on 127.0.0.1, on a small pytest project whose `parse` drops the
//! last field of a line that ends with a comma and whose one test passes: the tester's tests
//! are written, run three times for real, kept only when they fail for the reason named, and
//! proposed as their own change; then the coder fixes the bug.

mod support;

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use support::model_server::{ModelServer, openai_text};

const PARSE: &str = "def parse(line):\n    \"\"\"Splits a comma-separated line into its fields.\"\"\"\n    fields = line.split(\",\")\n    if line.endswith(\",\"):\n        fields = fields[:-1]\n    return fields\n";

const OLD_TEST: &str = "from csvline import parse\n\n\ndef test_two_fields():\n    assert parse(\"a,b\") == [\"a\", \"b\"]\n";

/// The coder's fix: the trailing empty field stays.
const FIX: &str = "csvline.py\n<<<<<<< SEARCH\n    fields = line.split(\",\")\n    if line.endswith(\",\"):\n        fields = fields[:-1]\n    return fields\n=======\n    return line.split(\",\")\n>>>>>>> REPLACE\n";

const BUG: &str = "fix: parse drops the last field when the line ends with a comma";

/// The pytest project, with `tester` settings in its configuration (no review, no
/// evaluator: the script plays the tester and the coder only).
fn project(tester: &str) -> tempfile::TempDir {
    support::workspace(&[
        ("csvline.py", PARSE),
        ("tests/test_csvline.py", OLD_TEST),
        (
            ".agent-ls.toml",
            &format!("[agent]\nevaluate = false\nreview = \"off\"\n\n[tester]\n{tester}"),
        ),
    ])
}

/// The tester's answer: one test in `tests/test_trailing.py` with this body and `expect`.
fn tester(body: &str, expect: &str) -> String {
    let content = format!("from csvline import parse\n\n\ndef test_trailing_comma():\n{body}");
    json!({"tests": [{"path": "tests/test_trailing.py", "name": "test_trailing_comma",
        "kind": "example", "reason": "a line ending with a comma has an empty last field",
        "expect": expect, "content": content}]})
    .to_string()
}

const EXPECT: &str = "assert ['a', 'b'] == ['a', 'b', '']";

/// A test that passes on the buggy code.
fn passing_test() -> String {
    tester("    assert parse(\"a,b\") == [\"a\", \"b\"]\n", EXPECT)
}

/// The right test, importing a module that does not exist.
fn import_error_test() -> String {
    let content = "from csvlinex import parse\n\n\ndef test_trailing_comma():\n    assert parse(\"a,b,\") == [\"a\", \"b\", \"\"]\n";
    json!({"tests": [{"path": "tests/test_trailing.py", "name": "test_trailing_comma",
        "kind": "example", "reason": "r", "expect": EXPECT, "content": content}]})
    .to_string()
}

fn good_test() -> String {
    tester(
        "    assert parse(\"a,b,\") == [\"a\", \"b\", \"\"]\n",
        EXPECT,
    )
}

/// `agent-ls run GOAL --yes --json` (and `extra`) against a server that answers `replies` in
/// order; the outcome, once it exited `code`, and the requests the server got.
fn run(
    ws: &Path,
    goal: &str,
    extra: &[&str],
    replies: &[String],
    code: i32,
) -> (Value, ModelServer) {
    let server = ModelServer::start(replies.iter().map(|r| openai_text(&[r])).collect());
    let home = tempfile::tempdir().unwrap();
    let command = json!([
        support::python(),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider"
    ]);
    let out: Output = support::cli(&[&["run", goal, "--yes"], extra].concat(), ws, home.path())
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", "test-key")
        .env("AGENT_LS_TEST__COMMAND", command.to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {:?}\nstderr {stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(out.status.code(), Some(code), "{v}\nstderr {stderr}");
    (v, server)
}

fn read(ws: &Path, path: &str) -> Option<String> {
    std::fs::read_to_string(ws.join(path)).ok()
}

/// What the `n`th model call was told last (its last message).
fn told(server: &ModelServer, n: usize) -> String {
    let requests = server.requests();
    let messages = requests[n].body["messages"].as_array().unwrap().clone();
    messages.last().unwrap()["content"].to_string()
}

#[test]
fn a_described_bug_gets_a_test_that_fails_for_its_reason_first_then_the_fix() {
    let ws = project("");
    let replies = [
        passing_test(),
        import_error_test(),
        good_test(),
        FIX.to_string(),
    ];
    let (o, server) = run(ws.path(), BUG, &[], &replies, 0);
    assert_eq!(o["status"], "done", "{o}");
    let t = &o["tester"];
    assert_eq!(t["mode"], "reproduce", "{t}");
    assert_eq!(t["status"], "kept", "{t}");
    assert_eq!(t["attempts"], 3, "{t}");
    let refused = t["refused"].as_array().unwrap();
    assert!(
        refused[0]
            .as_str()
            .unwrap()
            .contains("passes on the code with the bug"),
        "{t}"
    );
    assert!(refused[1].as_str().unwrap().contains("import error"), "{t}");
    assert_eq!(t["tests"][0]["path"], "tests/test_trailing.py");
    assert_eq!(t["tests"][0]["expect"], EXPECT);
    assert_eq!(t["ran"]["before"]["state"], "failed", "{t}");
    assert_eq!(t["ran"]["before"]["runs"], 3, "{t}");
    assert!(
        t["ran"]["before"]["message"]
            .as_str()
            .unwrap()
            .contains("AssertionError"),
        "{t}"
    );
    assert_eq!(t["ran"]["after"]["state"], "passed", "{t}");
    // The tester heard why each test was refused, with the run's output.
    let second = told(&server, 1);
    assert!(
        second.contains("passes on the code with the bug"),
        "{second}"
    );
    let third = told(&server, 2);
    assert!(third.contains("ModuleNotFoundError"), "{third}");
    // The kept test is on disk, and the fix; the refused ones left nothing behind.
    assert!(
        read(ws.path(), "tests/test_trailing.py")
            .unwrap()
            .contains("parse(\"a,b,\")")
    );
    assert!(
        read(ws.path(), "csvline.py")
            .unwrap()
            .contains("return line.split(\",\")")
    );
    // Two changes, the test's alone first.
    let patches: Vec<Value> = support::journaled(ws.path(), "patch")
        .iter()
        .map(|p| p["data"]["files"].clone())
        .collect();
    assert_eq!(
        patches,
        [json!(["tests/test_trailing.py"]), json!(["csvline.py"])]
    );
    assert_eq!(support::journaled(ws.path(), "approval").len(), 2);
    // Each verdict is journaled, the last with the run after the fix.
    let records = support::journaled(ws.path(), "tester");
    let statuses: Vec<&str> = records
        .iter()
        .map(|r| r["data"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["refused", "refused", "kept", "kept"],
        "{records:?}"
    );
    assert_eq!(records[3]["role"], "tester");
    assert_eq!(records[3]["data"]["ran"]["after"]["state"], "passed");
}

#[test]
fn a_flaky_test_is_rejected_and_counts_as_an_attempt() {
    let ws = project("");
    // Fails on its first and third runs, passes on the second: a test whose result depends
    // on more than the code.
    let flaky = tester(
        "    import os\n    count = os.path.join(os.path.dirname(__file__), \".runs\")\n    n = int(open(count).read()) if os.path.exists(count) else 0\n    open(count, \"w\").write(str(n + 1))\n    if n % 2 == 0:\n        assert parse(\"a,b,\") == [\"a\", \"b\", \"\"]\n",
        EXPECT,
    );
    let replies = [flaky, good_test(), FIX.to_string()];
    let (o, server) = run(ws.path(), BUG, &[], &replies, 0);
    let t = &o["tester"];
    assert_eq!(
        (t["status"].as_str(), t["attempts"].as_u64()),
        (Some("kept"), Some(2)),
        "{t}"
    );
    let why = t["refused"][0].as_str().unwrap();
    assert!(
        why.contains("flaky") && why.contains("failed, passed, failed"),
        "{why}"
    );
    assert!(told(&server, 1).contains("flaky"));
    assert_eq!(o["status"], "done", "{o}");
}

#[test]
fn when_the_attempts_are_spent_the_run_stops_and_keeps_no_test() {
    let ws = project("max_attempts = 2\n");
    // The first in a folder of its own, which the trial makes and removes.
    let in_new_folder =
        passing_test().replace("tests/test_trailing.py", "tests/unit/test_trailing.py");
    let replies = [in_new_folder, import_error_test()];
    let (o, server) = run(ws.path(), BUG, &[], &replies, 1);
    assert_eq!(o["status"], "failed", "{o}");
    let answer = o["answer"].as_str().unwrap();
    assert!(
        answer.contains("could not be reproduced") && answer.contains("tester.max_attempts"),
        "{answer}"
    );
    assert_eq!(o["tester"]["status"], "exhausted", "{o}");
    assert_eq!(o["tester"]["attempts"], 2);
    // No test kept, no coder call, the code as it was.
    assert_eq!(read(ws.path(), "tests/test_trailing.py"), None);
    assert!(
        !ws.path().join("tests/unit").exists(),
        "the trial's folder stays"
    );
    assert_eq!(read(ws.path(), "csvline.py").unwrap(), PARSE);
    assert_eq!(server.count(), 2);
    assert!(o["files_changed"].as_array().unwrap().is_empty());
}

#[test]
fn reproduce_makes_a_test_first_for_any_goal() {
    let ws = project("");
    let (o, _) = run(
        ws.path(),
        "parse and trailing commas",
        &["--reproduce"],
        &[good_test(), FIX.to_string()],
        0,
    );
    assert_eq!(o["tester"]["status"], "kept", "{o}");
    assert_eq!(o["status"], "done", "{o}");
    assert!(read(ws.path(), "tests/test_trailing.py").is_some());
}

#[test]
fn after_a_change_no_test_covered_a_regression_test_must_fail_before_and_pass_after() {
    let ws = project("after_fix = \"always\"\n");
    // The first test passes on the code before the change too: it tells nothing apart.
    let replies = [FIX.to_string(), passing_test(), good_test()];
    let goal = "change parse to keep the empty last field of a line ending with a comma";
    let (o, server) = run(ws.path(), goal, &[], &replies, 0);
    assert_eq!(o["status"], "done", "{o}");
    let t = &o["tester"];
    assert_eq!(
        (t["mode"].as_str(), t["status"].as_str()),
        (Some("after_fix"), Some("kept")),
        "{t}"
    );
    assert_eq!(t["ran"]["before"]["state"], "failed", "{t}");
    assert_eq!(t["ran"]["after"]["state"], "passed", "{t}");
    assert!(
        t["refused"][0]
            .as_str()
            .unwrap()
            .contains("passes on the code with the bug"),
        "{t}"
    );
    // The tester saw the change it writes the test for.
    let first = server.requests()[1].body["messages"].to_string();
    assert!(first.contains("return line.split"), "{first}");
    // The fix stays, the code before it was put back after the trials, and the test is its
    // own change after the fix's.
    assert!(
        read(ws.path(), "csvline.py")
            .unwrap()
            .contains("return line.split(\",\")")
    );
    assert!(read(ws.path(), "tests/test_trailing.py").is_some());
    let patches: Vec<Value> = support::journaled(ws.path(), "patch")
        .iter()
        .map(|p| p["data"]["files"].clone())
        .collect();
    assert_eq!(
        patches,
        [json!(["csvline.py"]), json!(["tests/test_trailing.py"])]
    );
}
