//! The response cache (docs/cache.md) through the real binary and a model server on
//! 127.0.0.1 that counts its requests: a repeated explanation is answered without a model
//! call and `agent-ls cache stats` counts what it saved; a near duplicate (≥ 70% of the words)
//! hits and a question sharing half its words does not; a changed file misses; the coder's
//! answers are never reused across differing prompts; no request or answer with a secret is
//! stored; LRU within `cache.max_entries`; `agent-ls cache clear`.

use crate::support;

use std::path::Path;

use agent_ls_runtime::config::Config;
use agent_ls_runtime::model::{Message, Models, Request, Response, Role};
use serde_json::Value;
use support::model_server::{ModelServer, openai_text, openai_tool_call};
use tokio_util::sync::CancellationToken;

const CANARY: &str = "sk-canary-3f9a1c77d2";
const QUESTION: &str = "explain what the add function in calc.py does";

/// A home whose config keeps the runs to the calls under test: no evaluator, no reviewer, no
/// memory (whose section would change the prompts from run to run).
fn home() -> tempfile::TempDir {
    support::home_with("[agent]\nevaluate = false\nreview = \"off\"\n[memory]\nenabled = false\n")
}

/// A model that answers every request with `answer`.
fn model(answer: &'static str) -> ModelServer {
    ModelServer::answering(move |_| openai_text(&[answer]))
}

/// `agent-ls run GOAL --yes --json` against `server`, with `env` added.
fn run_with(
    ws: &Path,
    home: &Path,
    server: &ModelServer,
    goal: &str,
    env: &[(&str, &str)],
) -> Value {
    let mut cmd = support::cli(&["run", goal, "--yes"], ws, home);
    cmd.env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", CANARY);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
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

fn run(ws: &Path, home: &Path, server: &ModelServer, goal: &str) -> Value {
    run_with(ws, home, server, goal, &[])
}

fn cache(args: &[&str], ws: &Path, home: &Path) -> Value {
    let out = support::cli(&[&["cache"], args].concat(), ws, home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The `model_call` lines of the run's journal.
fn model_calls(ws: &Path, run_id: &str) -> Vec<Value> {
    let dir = ws.join(".agent-ls/runs");
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(run_id))
        .flat_map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect::<Vec<_>>()
        })
        .filter(|l| l["type"] == "model_call")
        .collect()
}

/// The cache's rows as text: (label, scope, answer).
fn rows(ws: &Path) -> Vec<(String, Option<String>, String)> {
    let conn = rusqlite::Connection::open(ws.join(".agent-ls/store.sqlite")).unwrap();
    let mut stmt = conn
        .prepare("SELECT label, scope, answer FROM cache ORDER BY used")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_repeated_explanation_calls_the_model_once_and_stats_count_what_it_saved() {
    let (ws, home) = (support::example(), home());
    let server = model("add returns a minus b, which is the bug.");
    let first = run(ws.path(), home.path(), &server, QUESTION);
    let second = run(ws.path(), home.path(), &server, QUESTION);
    assert_eq!(
        server.count(),
        1,
        "the second explanation came from the cache"
    );
    assert_eq!(first["answer"], second["answer"]);
    assert_eq!(second["tokens"], 0, "nothing was spent: {second}");

    let calls = model_calls(ws.path(), second["run_id"].as_str().unwrap());
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["data"]["cached"], "exact", "{}", calls[0]);
    assert_eq!(calls[0]["data"]["saved_tokens"], 18);
    let calls = model_calls(ws.path(), first["run_id"].as_str().unwrap());
    assert!(calls[0]["data"].get("cached").is_none());

    let stats = cache(&["stats"], ws.path(), home.path());
    assert_eq!(stats["entries"], 1, "{stats}");
    assert_eq!(
        (stats["exact_hits"].as_u64(), stats["near_hits"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(stats["misses"], 1);
    // The fake model reports 11 prompt and 7 completion tokens.
    assert_eq!(
        (
            stats["saved_input_tokens"].as_u64(),
            stats["saved_output_tokens"].as_u64()
        ),
        (Some(11), Some(7))
    );
    let text = support::in_workspace(&["cache", "stats"], ws.path(), home.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("1 exact, 0 near"), "{text}");
    assert!(text.contains("tokens saved: 18"), "{text}");

    // Emptied: the same question goes to the model again.
    assert_eq!(cache(&["clear"], ws.path(), home.path())["removed"], 1);
    let stats = cache(&["stats"], ws.path(), home.path());
    assert_eq!(
        (stats["entries"].as_u64(), stats["exact_hits"].as_u64()),
        (Some(0), Some(0))
    );
    run(ws.path(), home.path(), &server, QUESTION);
    assert_eq!(server.count(), 2);
}

#[test]
fn a_near_duplicate_question_hits_and_one_sharing_half_its_words_does_not() {
    let (ws, home) = (support::example(), home());
    let server = model("add subtracts.");
    run(ws.path(), home.path(), &server, QUESTION);
    // 8 of the 10 words either has (0.8).
    let near = run(
        ws.path(),
        home.path(),
        &server,
        "Explain what the add function in calc.py returns",
    );
    assert_eq!(server.count(), 1);
    let calls = model_calls(ws.path(), near["run_id"].as_str().unwrap());
    assert_eq!(calls[0]["data"]["cached"], "near", "{}", calls[0]);

    // 9 of the 17 words either has (0.53).
    run(
        ws.path(),
        home.path(),
        &server,
        "explain what the add function in calc.py does when given very large negative numbers or floats",
    );
    assert_eq!(server.count(), 2, "half the words is not a near duplicate");
    let stats = cache(&["stats"], ws.path(), home.path());
    assert_eq!(
        (stats["near_hits"].as_u64(), stats["misses"].as_u64()),
        (Some(1), Some(2))
    );
    // The miss was the overlap's doing: both entries share one scope (same files, role, model).
    let rows = rows(ws.path());
    assert_eq!(rows.len(), 2);
    assert!(rows[0].1.is_some() && rows[0].1 == rows[1].1, "{rows:?}");
}

#[test]
fn a_changed_file_misses() {
    let (ws, home) = (support::example(), home());
    let server = model("add subtracts.");
    run(ws.path(), home.path(), &server, QUESTION);
    let calc = ws.path().join("calc.py");
    let text = std::fs::read_to_string(&calc).unwrap();
    std::fs::write(&calc, text.replace("return a - b", "return a + b")).unwrap();
    run(ws.path(), home.path(), &server, QUESTION);
    assert_eq!(
        server.count(),
        2,
        "the file's new version is another request"
    );
    // And the old version again is the first request again.
    std::fs::write(&calc, text).unwrap();
    run(ws.path(), home.path(), &server, QUESTION);
    assert_eq!(server.count(), 2);
}

/// A coder that fixes calc.py with a SEARCH/REPLACE block.
fn fixing_coder() -> ModelServer {
    ModelServer::answering(|_| {
        openai_text(&[
            "calc.py\n<<<<<<< SEARCH\ndef add(a, b):\n    return a - b\n=======\ndef add(a, b):\n    return a + b\n>>>>>>> REPLACE\n",
        ])
    })
}

#[test]
fn the_coders_answers_are_never_reused_across_differing_prompts() {
    let (ws, home) = (support::example(), home());
    let calc = ws.path().join("calc.py");
    let broken = std::fs::read_to_string(&calc).unwrap();
    let server = fixing_coder();
    let fix = |goal: &str, env: &[(&str, &str)]| {
        std::fs::write(&calc, &broken).unwrap();
        run_with(ws.path(), home.path(), &server, goal, env)
    };
    // By default the coder's edits are not cached at all.
    fix("fix the failing tests in calc.py", &[]);
    fix("fix the failing tests in calc.py", &[]);
    assert_eq!(server.count(), 2);
    assert_eq!(cache(&["stats"], ws.path(), home.path())["entries"], 0);

    // With `all`, the very same prompt is answered from the cache; a differing one, however
    // near, never is.
    let all = [("AGENT_LS_CACHE__ENABLED", "all")];
    fix("fix the failing tests in calc.py", &all);
    assert_eq!(server.count(), 3);
    let again = fix("fix the failing tests in calc.py", &all);
    assert_eq!(server.count(), 3, "an exact hit");
    let calls = model_calls(ws.path(), again["run_id"].as_str().unwrap());
    assert_eq!(calls[0]["role"], "coder");
    assert_eq!(calls[0]["data"]["cached"], "exact");
    fix("fix the failing tests in calc.py now", &all);
    assert_eq!(
        server.count(),
        4,
        "a near duplicate of an edit is not reused"
    );
    let stats = cache(&["stats"], ws.path(), home.path());
    assert_eq!(
        (stats["exact_hits"].as_u64(), stats["near_hits"].as_u64()),
        (Some(1), Some(0))
    );
}

#[test]
fn no_request_or_answer_with_a_secret_is_stored() {
    let (ws, home) = (support::example(), home());
    // The key agent-ls knows (OPENAI_API_KEY), quoted in the question.
    let server = model("add subtracts.");
    let goal = format!("explain what the add function does with the key {CANARY}");
    run(ws.path(), home.path(), &server, &goal);
    run(ws.path(), home.path(), &server, &goal);
    assert_eq!(server.count(), 2, "never answered from the cache");
    // A key-shaped string in the answer.
    let leaky = model("add subtracts; the server uses sk-live-abcdefghijklmnop1234.");
    run(ws.path(), home.path(), &leaky, QUESTION);
    run(ws.path(), home.path(), &leaky, QUESTION);
    assert_eq!(leaky.count(), 2);
    let stats = cache(&["stats"], ws.path(), home.path());
    assert_eq!(stats["entries"], 0, "{stats}");
    assert!(rows(ws.path()).is_empty());
    // A clean answer is kept, so the two above were refused for their secrets.
    let clean = model("add subtracts.");
    run(ws.path(), home.path(), &clean, QUESTION);
    assert_eq!(rows(ws.path()).len(), 1);
    let all: String = rows(ws.path())
        .into_iter()
        .map(|(l, s, a)| format!("{l}{s:?}{a}"))
        .collect();
    assert!(!all.contains(CANARY) && !all.contains("sk-live-"));
}

#[test]
fn at_most_max_entries_are_kept_and_the_least_recently_used_goes_first() {
    let (ws, home) = (support::example(), home());
    let server = model("an answer.");
    let env = [("AGENT_LS_CACHE__MAX_ENTRIES", "3")];
    let questions = [
        "explain what the add function in calc.py does",
        "explain why multiply exists at all",
        "explain how test_calc checks results",
        "explain which module docstring describes calculator",
    ];
    let ask = |q: &str| run_with(ws.path(), home.path(), &server, q, &env);
    ask(questions[0]);
    ask(questions[1]);
    ask(questions[2]);
    assert_eq!(server.count(), 3);
    ask(questions[0]); // a hit: the first is now the most recently used
    assert_eq!(server.count(), 3);
    ask(questions[3]); // evicts the second, the least recently used
    assert_eq!(server.count(), 4);
    assert_eq!(cache(&["stats"], ws.path(), home.path())["entries"], 3);
    ask(questions[0]);
    assert_eq!(server.count(), 4, "the first was kept");
    ask(questions[1]);
    assert_eq!(server.count(), 5, "the second was evicted");
    assert_eq!(cache(&["stats"], ws.path(), home.path())["entries"], 3);
}

/// The models of a workspace at `root`, calling the model server at `url`.
fn models(url: &str, root: &Path) -> Models {
    let mut c = Config::default();
    c.model.provider = Some("openai".into());
    c.model.base_url = Some(format!("{url}/v1"));
    c.model.name = Some("test-model".into());
    Models::new(&c, Some(root))
}

/// A planner's request for `goal`, as the driver makes it.
fn plan_request(goal: &str) -> Request {
    Request {
        messages: vec![
            Message::system("Plan the work as JSON."),
            Message::user(format!(
                "Goal: {goal}\n\nFiles:\ncalc.py\n```\ndef add(a, b):\n    return a - b\n```\n"
            )),
        ],
        question: Some(goal.to_string()),
        reading_only: true,
        ..Request::default()
    }
}

fn call(m: &Models, role: Role, request: &Request) -> Response {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(m.call(role, request, &CancellationToken::new(), None))
        .unwrap()
}

#[test]
fn a_repeated_planner_request_is_one_model_call_and_a_tool_call_is_reused_only_exactly() {
    let ws = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        openai_text(&["{\"plan_id\": \"p\", \"tasks\": []}"]),
        openai_tool_call("read_file", &["{\"path\": \"calc.py\"}"]),
        openai_tool_call("read_file", &["{\"path\": \"calc.py\"}"]),
    ]);
    let m = models(&server.url, ws.path());
    let goal = "make add in calc.py add its two numbers";
    let first = call(&m, Role::Planner, &plan_request(goal));
    let second = call(&m, Role::Planner, &plan_request(goal));
    assert_eq!(server.count(), 1);
    assert_eq!(first.text, second.text);
    assert_eq!(first.cached, None);
    let cached = second.cached.expect("answered from the cache");
    assert_eq!(cached.hit.as_str(), "exact");
    assert_eq!(
        (cached.saved.input_tokens, cached.saved.output_tokens),
        (11, 7)
    );
    assert_eq!(
        (second.usage.input_tokens, second.usage.output_tokens),
        (0, 0)
    );

    // An answer that calls tools: reused for the very request, never for a near duplicate.
    let other = "explain what the add function in calc.py does";
    let explain = |goal: &str| Request {
        reading_only: true,
        ..plan_request(goal)
    };
    let asked = call(&m, Role::Coder, &explain(other));
    assert_eq!(asked.tool_calls.len(), 1);
    let again = call(&m, Role::Coder, &explain(other));
    assert_eq!(server.count(), 2);
    assert_eq!(again.tool_calls, asked.tool_calls);
    call(
        &m,
        Role::Coder,
        &explain("explain what the add function in calc.py returns"),
    );
    assert_eq!(
        server.count(),
        3,
        "a tool call is not reused for a near duplicate"
    );
    // And the coder's editing call is not cached by default.
    let edit = || Request {
        reading_only: false,
        ..plan_request(goal)
    };
    server.push(openai_text(&["an edit"]));
    server.push(openai_text(&["an edit"]));
    call(&m, Role::Coder, &edit());
    call(&m, Role::Coder, &edit());
    assert_eq!(server.count(), 5);
}

/// A store that came with the repository (a committed `.agent-ls/`) holds entries another
/// user wrote: their keys are salted with that user's own salt, so none answers this user's
/// call, and this user's salt is a private file.
#[test]
fn entries_written_by_another_user_never_answer() {
    let ws = support::example();
    let (theirs, mine) = (home(), home());
    let server = model("add returns a minus b, which is the bug.");
    run(ws.path(), theirs.path(), &server, QUESTION);
    assert_eq!(cache(&["stats"], ws.path(), mine.path())["entries"], 1);
    run(ws.path(), mine.path(), &server, QUESTION);
    assert_eq!(
        server.count(),
        2,
        "another user's entry answered this user's call"
    );
    // Each user's own repeat is still a hit.
    run(ws.path(), mine.path(), &server, QUESTION);
    run(ws.path(), theirs.path(), &server, QUESTION);
    assert_eq!(server.count(), 2);
    let salt = mine.path().join(".local/share/agent-ls/cache.salt");
    let meta = std::fs::metadata(&salt).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_ne!(
        std::fs::read_to_string(&salt).unwrap(),
        std::fs::read_to_string(theirs.path().join(".local/share/agent-ls/cache.salt")).unwrap()
    );
}
