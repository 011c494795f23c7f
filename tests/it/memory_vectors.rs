//! Memory's vector ranking (docs/memory.md, `[memory] embeddings`) through the real binary,
//! with a stand-in embeddings server on 127.0.0.1 whose embedding is a hashed bag of
//! "concepts" (synonyms share one), so texts with different words but the same meaning are
//! close: a record that shares no word with the failure is recalled only with embeddings on;
//! a server that is down leaves text recall working, with a warning; an untrusted workspace
//! file cannot name the server; the key never reaches it.

use crate::support;

use std::path::Path;

use serde_json::{Value, json};
use support::model_server::{ModelServer, Reply, openai_text};

const CANARY: &str = "sk-canary-3f9a1c77d2";
const MODEL: &str = "bag-of-concepts";
const DIMS: usize = 64;

/// Words of one meaning share a bucket; other words hash to their own.
fn concept(w: &str) -> &str {
    match w {
        "add" | "adding" | "plus" | "sum" | "sums" | "addition" => "ADD",
        "test" | "tests" | "check" | "checks" | "suite" => "TEST",
        "calc" | "calctests" | "arith" | "arithmetic" => "CALC",
        "assertionerror" | "mismatch" | "wrong" => "WRONG",
        other => other,
    }
}

fn embed(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; DIMS];
    for w in text.split(|c: char| !c.is_alphanumeric()) {
        if w.chars().count() <= 2 {
            continue;
        }
        let mut h: u64 = 0xcbf29ce484222325;
        for b in concept(&w.to_lowercase()).bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
        }
        v[(h % DIMS as u64) as usize] += 1.0;
    }
    v
}

/// The stand-in embeddings server: an OpenAI-compatible `/v1/embeddings`.
fn embeddings_server() -> ModelServer {
    ModelServer::answering(|body| {
        let data: Vec<Value> = body["input"]
            .as_array()
            .map(|a| a.iter().map(|t| t.as_str().unwrap_or("")).collect())
            .unwrap_or_else(|| vec![body["input"].as_str().unwrap_or("")])
            .into_iter()
            .enumerate()
            .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": embed(t)}))
            .collect();
        Reply::json(json!({"object": "list", "data": data, "model": body["model"]}))
    })
}

fn coder(from: &str, to: &str) -> String {
    format!(
        "calc.py\n<<<<<<< SEARCH\ndef add(a, b):\n    return {from}\n=======\ndef add(a, b):\n    return {to}\n>>>>>>> REPLACE\n"
    )
}

/// A home whose user config names the embeddings server (`None`: no embeddings).
fn home(embeddings: Option<&str>) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    let mut text = "[agent]\nevaluate = false\n".to_string();
    if let Some(url) = embeddings {
        text.push_str(&format!(
            "[memory.embeddings]\nurl = \"{url}/v1\"\nmodel = \"{MODEL}\"\napi_key_env = \"EMBED_TEST_KEY\"\n"
        ));
    }
    std::fs::write(home.path().join("agent-ls/config.toml"), text).unwrap();
    home
}

/// `agent-ls run` to fix the example; its JSON answer and stderr.
fn fix(ws: &Path, home: &Path, server: &ModelServer) -> (Value, String) {
    let out = support::cli(&["run", "fix the failing tests", "--yes"], ws, home)
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", CANARY)
        .env("EMBED_TEST_KEY", "embed-key-1234")
        .env("AGENT_LS_AGENT__REVIEW", "off")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let o: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(o["status"], "done", "{o}\n{stderr}");
    (o, stderr)
}

/// The run's `memory` journal line's data.
fn memory_event(ws: &Path) -> Value {
    let lines = support::journaled(ws, "memory");
    assert_eq!(lines.len(), 1, "{lines:?}");
    lines[0]["data"].clone()
}

/// An earlier run's record in the workspace's store: a failure about a wrong sum in an
/// arithmetic suite, which shares no word with the example's failures (`test_add`,
/// AssertionError), with its embedding when `vector`; and an unrelated one about a disk.
fn seed(ws: &Path, vector: bool) {
    use agent_ls_core::memory::{Memory, episodes, search_text};
    use agent_ls_core::test_output::{Failure, Location};
    let failure = |test: &str, file: &str, message: &str| Failure {
        test_id: test.into(),
        location: Some(Location {
            file: file.into(),
            line: 4,
            column: None,
        }),
        message: message.into(),
        frames: Vec::new(),
    };
    let scope = agent_ls_runtime::memory::scope_of(ws);
    let (store, _) = agent_ls_runtime::store::Store::open(ws).unwrap();
    for (run, f, files, fixed) in [
        (
            "run_sums",
            failure(
                "suite.arith_checks.check_plus",
                "arith_checks.rb",
                "mismatch: wrong sum, the plus of two numbers",
            ),
            "arith.rb",
            "-  x - y\n+  x + y\n",
        ),
        (
            "run_disk",
            failure(
                "io.net_io.socket_write",
                "net_io.c",
                "OSError: disk full on network socket",
            ),
            "net_io.c",
            "-  write(fd)\n+  flush(fd)\n",
        ),
    ] {
        let m: Vec<Memory> = episodes(&[f], &[files.into()], &[], Some(fixed), "done")
            .into_iter()
            .map(Memory::Episode)
            .collect();
        let vectors: Vec<Option<Vec<f32>>> = m
            .iter()
            .map(|r| vector.then(|| embed(&search_text(r))))
            .collect();
        store
            .remember_embedded(&scope, run, &m, &vectors, MODEL, false)
            .unwrap();
    }
}

#[test]
fn a_record_in_other_words_is_recalled_only_with_embeddings_and_the_journal_shows_its_vector_score()
{
    // Embeddings off: the record shares no word with the failures, so nothing is found.
    let ws = support::example();
    seed(ws.path(), true);
    let models = ModelServer::start(vec![openai_text(&[&coder("a - b", "a + b")])]);
    fix(ws.path(), home(None).path(), &models);
    let off = memory_event(ws.path());
    assert_eq!(off["used"], json!([]), "{off}");
    assert!(off.get("embeddings").is_none(), "{off}");

    // Embeddings on: found by its embedding, shown in the first prompt.
    let ws = support::example();
    seed(ws.path(), true);
    let embedder = embeddings_server();
    let models = ModelServer::start(vec![openai_text(&[&coder("a - b", "a + b")])]);
    fix(ws.path(), home(Some(&embedder.url)).path(), &models);
    let on = memory_event(ws.path());
    let used = on["used"].as_array().unwrap();
    assert_eq!(
        used.len(),
        1,
        "only the close record, not the disk one: {on}"
    );
    assert_eq!(used[0]["id"], "run_sums-1", "{on}");
    let similarity = used[0]["vector"].as_f64().unwrap();
    assert!(similarity > 0.8, "{on}");
    assert!(used[0].get("text").is_none(), "no word in common: {on}");
    // Its fused score: first of the vector ranking, in no text ranking.
    assert!(
        (used[0]["score"].as_f64().unwrap() - 1.0 / 61.0).abs() < 1e-9,
        "{on}"
    );
    assert!(on["embeddings"].as_str().unwrap().contains("fused"), "{on}");
    let first = models.requests()[0].body.to_string();
    assert!(first.contains("check_plus"), "{first}");

    // The query, then the run's own two records, each embedded; the key is the one named.
    let asked = embedder.requests();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked.iter().all(|r| r.path == "/v1/embeddings"));
    assert_eq!(asked[0].body["model"], MODEL);
    assert!(asked[0].body.to_string().contains("AssertionError"));
    assert_eq!(asked[1].body["input"].as_array().unwrap().len(), 2);
    assert_eq!(
        asked[0].header("authorization"),
        Some("Bearer embed-key-1234")
    );
    let db = rusqlite::Connection::open(ws.path().join(".agent-ls/store.sqlite")).unwrap();
    let vectors: i64 = db
        .query_row(
            "SELECT count(*) FROM memory_vectors WHERE model = ?1 AND dims = ?2",
            rusqlite::params![MODEL, DIMS as i64],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(vectors, 4, "two seeded records and the run's two");
}

#[test]
fn with_the_embeddings_server_down_text_recall_still_works_with_a_warning() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ws = support::example();
    seed(ws.path(), false);
    // A record in the failures' own words, kept before embeddings were configured.
    {
        use agent_ls_core::memory::{Memory, episodes};
        use agent_ls_core::test_output::{Failure, Location};
        let f = Failure {
            test_id: "test_calc.CalcTests.test_add".into(),
            location: Some(Location {
                file: "test_calc.py".into(),
                line: 8,
                column: None,
            }),
            message: "AssertionError: -1 != 5".into(),
            frames: Vec::new(),
        };
        let m: Vec<Memory> = episodes(&[f], &["calc.py".into()], &[], Some("+a + b\n"), "done")
            .into_iter()
            .map(Memory::Episode)
            .collect();
        let scope = agent_ls_runtime::memory::scope_of(ws.path());
        let (store, _) = agent_ls_runtime::store::Store::open(ws.path()).unwrap();
        store.remember(&scope, "run_text", &m, false).unwrap();
    }
    let models = ModelServer::start(vec![openai_text(&[&coder("a - b", "a + b")])]);
    let home = home(Some(&format!("http://127.0.0.1:{port}")));
    let (_, stderr) = fix(ws.path(), home.path(), &models);
    let event = memory_event(ws.path());
    let used = event["used"].as_array().unwrap();
    assert_eq!(used.len(), 1, "{event}");
    assert_eq!(used[0]["id"], "run_text-1");
    assert!(used[0]["text"].as_f64().unwrap() > 0.0, "{event}");
    assert!(used[0].get("vector").is_none(), "{event}");
    let why = event["embeddings"].as_str().unwrap();
    assert!(
        why.contains("could not be reached") && why.contains("ranked by text alone"),
        "{why}"
    );
    assert!(
        stderr.contains("embeddings server") && stderr.contains("text alone"),
        "{stderr}"
    );
    // The run's own records are kept, without vectors: two seeded, one in the failures'
    // words, the run's two, and the pattern its fix and run_text's make.
    let db = rusqlite::Connection::open(ws.path().join(".agent-ls/store.sqlite")).unwrap();
    let (records, vectors): (i64, i64) = db
        .query_row(
            "SELECT (SELECT count(*) FROM memories), (SELECT count(*) FROM memory_vectors)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((records, vectors), (6, 0));
}

#[test]
fn an_untrusted_workspace_file_cannot_name_an_embeddings_server() {
    let ws = support::example();
    let embedder = embeddings_server();
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        format!(
            "[memory.embeddings]\nurl = \"{}/v1\"\nmodel = \"{MODEL}\"\n",
            embedder.url
        ),
    )
    .unwrap();
    let models = ModelServer::start(vec![openai_text(&[&coder("a - b", "a + b")])]);
    let (_, stderr) = fix(ws.path(), home(None).path(), &models);
    assert!(
        stderr.contains("not trusted") && stderr.contains("`memory.embeddings.url`"),
        "{stderr}"
    );
    assert_eq!(
        embedder.count(),
        0,
        "nothing goes to the workspace's server"
    );
    assert!(memory_event(ws.path()).get("embeddings").is_none());
}

#[test]
fn the_key_never_reaches_the_embeddings_server() {
    let ws = support::example();
    let embedder = embeddings_server();
    // A wrong guess, the reflector (which repeats the key), then the fix, which carries a
    // key-shaped string: the records embedded at the end hold all three.
    let reflection = format!(
        "{{\"task_id\": \"T1\", \"passed\": false, \"report\": \"zebra: multiplied instead of adding; key {CANARY}\", \"next_step\": \"use +\"}}"
    );
    let models = ModelServer::start(vec![
        openai_text(&[&coder("a - b", "a * b")]),
        openai_text(&[&reflection]),
        openai_text(&[&coder("a * b", "a + b  # sk-live-abcdefghijklmnop1234")]),
    ]);
    fix(ws.path(), home(Some(&embedder.url)).path(), &models);
    let sent: Vec<String> = embedder
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(
        sent.iter().any(|b| b.contains("zebra")),
        "the records were embedded: {sent:?}"
    );
    for body in &sent {
        assert!(!body.contains(CANARY), "{body}");
        assert!(!body.contains("sk-live-abcdef"), "{body}");
    }
    assert!(sent.iter().any(|b| b.contains("<redacted>")), "{sent:?}");
}
