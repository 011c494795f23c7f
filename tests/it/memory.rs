//! Memory across runs (docs/memory.md) through the real binary and a scripted model server on
//! 127.0.0.1: a run that needed a retry leaves a record that a second run on a copy finds in
//! its first prompt, and so needs fewer model calls; patterns; a key never reaches the stores;
//! `agent-ls memory` lists, searches, shows and forgets; search ranks the right record first
//! among 1,000.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};
use support::model_server::{ModelServer, openai_text};

const CANARY: &str = "sk-canary-3f9a1c77d2";

fn coder(from: &str, to: &str) -> String {
    format!(
        "calc.py\n<<<<<<< SEARCH\ndef add(a, b):\n    return {from}\n=======\ndef add(a, b):\n    return {to}\n>>>>>>> REPLACE\n"
    )
}

/// A home whose user config keeps records in the user's store too.
fn home() -> tempfile::TempDir {
    support::home_with("[agent]\nevaluate = false\n[memory]\nscope = \"user\"\n")
}

fn fix(ws: &Path, home: &Path, server: &ModelServer) -> Value {
    let out = support::cli(&["run", "fix the failing tests", "--yes"], ws, home)
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", CANARY)
        // The model calls are counted: no reviewer call (docs/review.md) among them.
        .env("AGENT_LS_AGENT__REVIEW", "off")
        .output()
        .unwrap();
    let o: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        o["status"],
        "done",
        "{o}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    o
}

fn memory(args: &[&str], ws: &Path, home: &Path) -> Output {
    support::cli(&[&["memory"], args].concat(), ws, home)
        .output()
        .unwrap()
}

fn memory_json(args: &[&str], ws: &Path, home: &Path) -> Value {
    let out = memory(args, ws, home);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The user's store and its WAL, as bytes.
fn user_store_bytes(home: &Path) -> String {
    let db = home.join(".local/share/agent-ls/memory.sqlite");
    assert!(db.exists(), "no user store at {}", db.display());
    ["", "-wal"]
        .iter()
        .map(|s| PathBuf::from(format!("{}{s}", db.display())))
        .filter(|p| p.exists())
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned())
        .collect()
}

#[test]
fn a_second_run_on_a_copy_gets_the_first_runs_fix_in_its_first_prompt_and_needs_fewer_calls() {
    let home = home();
    // Run 1: a wrong guess, the reflector (which repeats the key, as an obedient model
    // might), then the fix, which carries a key-shaped string in a comment.
    let ws1 = support::example();
    let reflection = format!(
        "{{\"task_id\": \"T1\", \"passed\": false, \"report\": \"zebra: multiplied instead of adding; key {CANARY}\", \"next_step\": \"use +\"}}"
    );
    let server1 = ModelServer::start(vec![
        openai_text(&[&coder("a - b", "a * b")]),
        openai_text(&[&reflection]),
        openai_text(&[&coder("a * b", "a + b  # sk-live-abcdefghijklmnop1234")]),
    ]);
    let o1 = fix(ws1.path(), home.path(), &server1);
    assert_eq!(o1["iterations"], 2);
    assert_eq!(server1.count(), 3);
    let run1 = o1["run_id"].as_str().unwrap().to_string();

    // Run 2: a copy elsewhere, its test file shifted so every line number differs.
    let ws2 = support::example();
    let test = std::fs::read_to_string(ws2.path().join("test_calc.py")).unwrap();
    std::fs::write(
        ws2.path().join("test_calc.py"),
        format!("# shifted\n\n\n{test}"),
    )
    .unwrap();
    let server2 = ModelServer::start(vec![openai_text(&[&coder("a - b", "a + b")])]);
    let o2 = fix(ws2.path(), home.path(), &server2);
    assert_eq!(o2["iterations"], 1);
    assert!(server2.count() < server1.count());

    the_first_prompt_shows_run_1s_record(&server2, ws1.path(), ws2.path(), &run1);
    two_fixes_of_one_kind_make_a_pattern(ws2.path(), home.path());
    no_key_is_kept_anywhere(ws1.path(), home.path());
    show_and_search_find_the_record_and_forget_removes_it(ws1.path(), home.path(), &run1);
}

/// The first prompt of run 2 (in `ws2`) shows run 1's record: what failed, why, and what
/// worked; the journal says which record was used, with its score.
fn the_first_prompt_shows_run_1s_record(server2: &ModelServer, ws1: &Path, ws2: &Path, run1: &str) {
    let first = server2.requests()[0].body.to_string();
    assert!(first.contains("Remembered from earlier runs"), "{first}");
    assert!(first.contains(&format!("run {run1}")), "{first}");
    assert!(
        first.contains("zebra: multiplied instead of adding"),
        "{first}"
    );
    assert!(first.contains("return a + b"), "{first}");
    // The journal says which record was used, with its score.
    let used: Vec<Value> = support::journal(ws2)
        .into_iter()
        .filter(|l| l["type"] == "memory")
        .collect();
    assert_eq!(used.len(), 1, "{used:?}");
    // One record per failing test of run 1 (test_add and test_add_negative).
    let recs = used[0]["data"]["used"].as_array().unwrap();
    let mut ids: Vec<&str> = recs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, [format!("{run1}-1"), format!("{run1}-2")], "{used:?}");
    assert!(
        recs.iter().all(|r| r["score"].as_f64().unwrap() > 0.0),
        "{used:?}"
    );
    // Run 1 found nothing to use.
    let none: Vec<Value> = support::journal(ws1)
        .into_iter()
        .filter(|l| l["type"] == "memory")
        .collect();
    assert_eq!(none[0]["data"]["used"], json!([]));
}

/// Two runs fixed the same kind of failure: a pattern.
fn two_fixes_of_one_kind_make_a_pattern(ws2: &Path, home: &Path) {
    let user = memory_json(&["list", "--user"], ws2, home);
    let kinds: Vec<&str> = user
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["memory"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "episode").count(),
        4,
        "{user}"
    );
    let pattern = user
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["memory"]["type"] == "pattern")
        .unwrap_or_else(|| panic!("no pattern: {user}"));
    assert_eq!(pattern["memory"]["count"], 2);
    assert_eq!(pattern["memory"]["kind"], "AssertionError in test_calc.py");
}

fn no_key_is_kept_anywhere(ws1: &Path, home: &Path) {
    // Neither the key nor the key-shaped string is kept: not in the user's store's bytes or
    // WAL, not in the workspace's records.
    let bytes = user_store_bytes(home);
    assert!(
        bytes.contains("zebra"),
        "the record is not in the user's store"
    );
    assert!(!bytes.contains(CANARY), "the user's store carries the key");
    // Nor in run 1's journal (its prompts, answers and reflection), nor in the reflection the
    // workspace's store keeps with the iteration's figures.
    let lines = support::journal(ws1);
    assert!(lines.iter().any(|l| l["type"] == "reflection"), "{lines:?}");
    let text: String = lines.iter().map(|l| l.to_string()).collect();
    assert!(text.contains("zebra"), "{text}");
    assert!(
        !text.contains(CANARY) && !text.contains("sk-live-abcdef"),
        "the journal carries a key: {text}"
    );
    let db = rusqlite::Connection::open(ws1.join(".agent-ls/store.sqlite")).unwrap();
    let reflections: Vec<String> = db
        .prepare("SELECT reflection FROM iterations WHERE reflection IS NOT NULL")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(
        reflections.iter().any(|r| r.contains("zebra")),
        "{reflections:?}"
    );
    assert!(
        reflections.iter().all(|r| !r.contains(CANARY)),
        "the workspace's store carries the key: {reflections:?}"
    );
    assert!(!bytes.contains("sk-live-abcdefghijklmnop1234"));
    let export = memory(&["export"], ws1, home);
    let export = String::from_utf8_lossy(&export.stdout).into_owned();
    assert!(
        export.contains("zebra") && export.contains("<redacted>"),
        "{export}"
    );
    assert!(
        !export.contains(CANARY) && !export.contains("sk-live-abcdef"),
        "{export}"
    );
}

fn show_and_search_find_the_record_and_forget_removes_it(ws1: &Path, home: &Path, run1: &str) {
    // `show` and `search` find the record; `forget` removes it from both stores, its text
    // gone from the user's store's files.
    let id = format!("{run1}-1");
    let shown = memory_json(&["show", &id], ws1, home);
    assert_eq!(shown["run_id"], run1);
    let hits = memory_json(&["search", "zebra multiplied"], ws1, home);
    assert_eq!(hits[0]["record"]["id"], id.as_str(), "{hits}");
    let gone = memory_json(&["forget", &id], ws1, home);
    assert_eq!(gone, json!({"id": id, "forgotten": true}));
    assert!(!memory(&["show", &id], ws1, home).status.success());
    assert!(!memory(&["show", &id, "--user"], ws1, home).status.success());
    // Run 1's other record (test_add_negative) carries the same reflection.
    memory_json(&["forget", &format!("{run1}-2")], ws1, home);
    assert!(
        !user_store_bytes(home).contains("zebra"),
        "the forgotten text is still on disk"
    );
    assert!(!memory(&["forget", &id], ws1, home).status.success());
}

/// 1,000 records through the runtime's API: one is about a renamed import in a settings
/// loader; the rest are other failures, many of them import errors too, and some share the
/// function's name or the module's.
#[test]
fn search_ranks_the_right_record_first_among_a_thousand() {
    use agent_ls_core::memory::{Memory, episodes};
    use agent_ls_core::test_output::{Failure, Location};
    let ws = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (store, _) = agent_ls_runtime::store::Store::open(ws.path()).unwrap();
    let kinds = [
        "ImportError",
        "AssertionError",
        "KeyError",
        "TypeError",
        "ValueError",
    ];
    let words = [
        "config", "loader", "parser", "client", "cache", "settings", "router", "model",
    ];
    let failure = |i: usize, message: String| Failure {
        test_id: format!(
            "tests.test_{}.Test{i}.test_case_{i}",
            words[i % words.len()]
        ),
        location: Some(Location {
            file: format!("tests/test_{}.py", words[(i / 3) % words.len()]),
            line: (i % 97) as u32 + 1,
            column: None,
        }),
        message,
        frames: Vec::new(),
    };
    let target = 617;
    for i in 0..1000 {
        // Decoys that share half of the target's words.
        let message = if i == target {
            "ImportError: cannot import name 'parse_config' from 'settings.loader'".to_string()
        } else if i % 50 == 1 {
            "TypeError: parse_config() missing 1 required positional argument".to_string()
        } else if i % 50 == 2 {
            format!("ImportError: cannot import name 'load_{i}' from 'settings.loader'")
        } else {
            format!(
                "{}: cannot use '{}_{i}' from '{}.{}'",
                kinds[i % kinds.len()],
                words[(i * 7) % words.len()],
                words[(i * 3) % words.len()],
                words[(i * 5) % words.len()]
            )
        };
        let e = episodes(
            &[failure(i, message)],
            &["app.py".into()],
            &[],
            Some("-a\n+b\n"),
            "done",
        );
        let m: Vec<Memory> = e.into_iter().map(Memory::Episode).collect();
        store
            .remember("/w", &format!("run_{i:04}"), &m, false)
            .unwrap();
    }
    drop(store);
    let hits = memory_json(
        &[
            "search",
            "ImportError parse_config settings.loader",
            "--limit",
            "5",
        ],
        ws.path(),
        home.path(),
    );
    assert_eq!(
        hits[0]["record"]["id"],
        format!("run_{target:04}-1"),
        "{hits:#}"
    );
    if let Some(second) = hits.get(1) {
        assert!(hits[0]["score"].as_f64().unwrap() > second["score"].as_f64().unwrap());
    }
}

/// `agent-ls memory search` as the user reads it (issue 37), in a git repository that two
/// runs fixed: each score is the BM25 the search ranked by, never `0.000`, and the kind's
/// pattern (kept by the workspace's store and the user's) is listed once. Once the second run
/// is rolled back (`agent-ls rollback`), its records say `rolled back` rather than `done`, and
/// the pattern, now of one kept fix, is gone.
#[test]
fn memory_search_shows_real_scores_each_record_once_and_a_rolled_back_run_as_rolled_back() {
    let home = home();
    let ws = support::git::example_repository();
    let first = ModelServer::start(vec![openai_text(&[&coder("a - b", "a + b")])]);
    fix(ws.path(), home.path(), &first);
    // Put back by hand, not rolled back: the first run's fix counts.
    support::git::git(ws.path(), &["checkout", "--", "calc.py"]);
    let second = ModelServer::start(vec![openai_text(&[&coder("a - b", "a + b")])]);
    let run2 = fix(ws.path(), home.path(), &second)["run_id"]
        .as_str()
        .unwrap()
        .to_string();

    // As the user reads it: not `--json`.
    let text = |args: &[&str]| {
        let out = support::in_workspace(args, ws.path(), home.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let search = || text(&["memory", "search", "AssertionError test_calc"]);
    let before = search();
    let lines: Vec<&str> = before.lines().collect();
    assert!(lines.len() >= 3, "{before}");
    for l in &lines {
        assert!(l.starts_with("bm25 "), "{before}");
        assert!(!l.contains("0.000"), "{before}");
    }
    let patterns = lines.iter().filter(|l| l.contains(" pattern ")).count();
    assert_eq!(patterns, 1, "{before}");
    let mut ids: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let all = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), all, "{before}");

    text(&["rollback"]);
    let after = search();
    let of_run2: Vec<&str> = after.lines().filter(|l| l.contains(&run2)).collect();
    assert!(!of_run2.is_empty(), "{after}");
    for l in &of_run2 {
        assert!(l.contains("episode  rolled back "), "{after}");
    }
    assert!(!after.contains(" pattern "), "{after}");
    let list = text(&["memory", "list"]);
    assert!(
        list.lines()
            .filter(|l| l.contains(&run2))
            .all(|l| l.contains("rolled back")),
        "{list}"
    );
    let user = text(&["memory", "--user", "list"]);
    assert!(
        user.contains(&format!("{run2}-1  episode  rolled back")),
        "{user}"
    );
}
