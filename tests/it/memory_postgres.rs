//! Memory in a team's PostgreSQL store (`memory.url`, docs/memory.md "PostgreSQL") through
//! the real binary, a scripted model server and a real PostgreSQL with pgvector on 127.0.0.1
//! (scripts/postgres, started by scripts/test): runs remember and recall there and `agent-ls
//! memory` reads and forgets there; `memory.scope = "user"` shares a user's records across
//! workspaces; a workspace file may not name a server unless trusted; an unreachable server
//! fails fast, without its password in any message, and a run goes on without memory.
//!
//! The tests that need the server skip without AGENT_LS_TEST_POSTGRES_URL, saying so, unless
//! AGENT_LS_REQUIRE_POSTGRES is set (scripts/test sets both).

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};
use support::git::git;
use support::model_server::{ModelServer, openai_text};

const CANARY: &str = "sk-canary-3f9a1c77d2";
const PASSWORD: &str = "hunter2-db-password";

/// A login name no other test uses, for the records' owner.
fn someone() -> String {
    let dir = tempfile::tempdir().unwrap();
    let name = dir
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    format!("dev{}", name.replace(|c: char| !c.is_alphanumeric(), ""))
}

fn home() -> tempfile::TempDir {
    support::home_with("[agent]\nevaluate = false\n")
}

fn coder(from: &str, to: &str) -> String {
    format!(
        "calc.py\n<<<<<<< SEARCH\ndef add(a, b):\n    return {from}\n=======\ndef add(a, b):\n    return {to}\n>>>>>>> REPLACE\n"
    )
}

/// A model that guesses wrong, reflects (repeating the key) and then fixes the bug: a run
/// that needs a retry, and leaves a record worth recalling.
fn retrying_model() -> ModelServer {
    let reflection = format!(
        "{{\"task_id\": \"T1\", \"passed\": false, \"report\": \"zebra: multiplied instead of adding; key {CANARY}\", \"next_step\": \"use +\"}}"
    );
    ModelServer::start(vec![
        openai_text(&[&coder("a - b", "a * b")]),
        openai_text(&[&reflection]),
        openai_text(&[&coder("a * b", "a + b")]),
    ])
}

/// `agent-ls ARGS --json` in `ws` with the memory settings in `env`.
fn agent(args: &[&str], ws: &Path, home: &Path, env: &[(&str, &str)]) -> Command {
    let mut cmd = support::cli(args, ws, home);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn fix(ws: &Path, home: &Path, model: &ModelServer, env: &[(&str, &str)]) -> (Value, String) {
    let out = agent(&["run", "fix the failing tests", "--yes"], ws, home, env)
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", model.url))
        .env("OPENAI_API_KEY", CANARY)
        .env("AGENT_LS_AGENT__REVIEW", "off")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let o: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(o["status"], "done", "{o}\n{stderr}");
    (o, stderr)
}

fn memory_json(args: &[&str], ws: &Path, home: &Path, env: &[(&str, &str)]) -> Value {
    let out = agent(&[&["memory"], args].concat(), ws, home, env)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn ids(records: &Value) -> Vec<String> {
    records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

fn memory_lines(ws: &Path) -> Vec<Value> {
    support::journaled(ws, "memory")
}

/// A clone of the team's repository: the example, with the team's `origin`.
fn clone_of_team_repo(remote: &str) -> tempfile::TempDir {
    let ws = support::example();
    git(ws.path(), &["init", "-q"]);
    git(ws.path(), &["remote", "add", "origin", remote]);
    ws
}

/// search, show and export read the team's rows (`listed` of them), with no key in any.
fn search_show_and_export_read_postgres(
    ws: &Path,
    home: &Path,
    env: &[(&str, &str)],
    run1: &str,
    listed: usize,
) {
    let id = format!("{run1}-1");
    let hits = memory_json(&["search", "zebra multiplied"], ws, home, env);
    assert_eq!(hits[0]["record"]["id"], id.as_str(), "{hits}");
    assert!(hits[0]["score"].as_f64().unwrap() > 0.0);
    let shown = memory_json(&["show", &id], ws, home, env);
    assert_eq!(shown["run_id"], run1);
    let export = agent(&["memory", "export"], ws, home, env)
        .output()
        .unwrap();
    let export = String::from_utf8_lossy(&export.stdout).into_owned();
    assert_eq!(export.lines().count(), listed, "{export}");
    assert!(export.contains("zebra") && export.contains("<redacted>"));
    assert!(!export.contains(CANARY), "{export}");
}

#[test]
fn runs_remember_in_postgres_and_a_teammates_clone_recalls_and_the_commands_read_and_forget_there()
{
    let Some(url) = support::postgres_url() else {
        return;
    };
    let remote = format!("https://git.example/team/{}.git", someone());
    // Two developers, each with a clone of the team's repository.
    let (alice, bob) = (someone(), someone());
    let env_a = [("AGENT_LS_MEMORY__URL", url.as_str()), ("USER", &alice)];
    let env_b = [("AGENT_LS_MEMORY__URL", url.as_str()), ("USER", &bob)];
    let (home_a, home_b) = (home(), home());
    let (ws_a, ws_b) = (clone_of_team_repo(&remote), clone_of_team_repo(&remote));

    let model_a = retrying_model();
    let (o1, _) = fix(ws_a.path(), home_a.path(), &model_a, &env_a);
    assert_eq!(model_a.count(), 3);
    let run1 = o1["run_id"].as_str().unwrap().to_string();

    // Bob's run finds Alice's record in its first prompt and needs one call.
    let model_b = ModelServer::start(vec![openai_text(&[&coder("a - b", "a + b")])]);
    let (o2, _) = fix(ws_b.path(), home_b.path(), &model_b, &env_b);
    assert_eq!(o2["iterations"], 1);
    let first = model_b.requests()[0].body.to_string();
    assert!(first.contains("Remembered from earlier runs"), "{first}");
    assert!(first.contains(&format!("run {run1}")), "{first}");
    assert!(
        first.contains("zebra: multiplied instead of adding"),
        "{first}"
    );
    let used = memory_lines(ws_b.path());
    let mut used_ids: Vec<&str> = used[0]["data"]["used"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    used_ids.sort();
    assert_eq!(used_ids, [format!("{run1}-1"), format!("{run1}-2")]);

    // The records are in PostgreSQL, not in the workspace's SQLite store.
    let listed = memory_json(&["list"], ws_b.path(), home_b.path(), &env_b);
    let listed_ids = ids(&listed);
    assert!(listed_ids.contains(&format!("{run1}-1")), "{listed}");
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["memory"]["type"] == "pattern" && r["memory"]["count"] == 2),
        "two runs fixed the same kind: a pattern: {listed}"
    );
    let local = memory_json(&["list"], ws_b.path(), home_b.path(), &[]);
    assert_eq!(local, json!([]));

    search_show_and_export_read_postgres(
        ws_a.path(),
        home_a.path(),
        &env_a,
        &run1,
        listed_ids.len(),
    );

    // forget deletes the row for everyone.
    let id = format!("{run1}-1");
    let gone = memory_json(&["forget", &id], ws_a.path(), home_a.path(), &env_a);
    assert_eq!(gone, json!({"id": id, "forgotten": true}));
    let out = agent(&["memory", "show", &id], ws_b.path(), home_b.path(), &env_b)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let out = agent(
        &["memory", "forget", &id],
        ws_b.path(),
        home_b.path(),
        &env_b,
    )
    .output()
    .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
}

#[test]
fn with_memory_scope_user_runs_in_two_workspaces_see_each_others_records() {
    let Some(url) = support::postgres_url() else {
        return;
    };
    let me = someone();
    let env = [
        ("AGENT_LS_MEMORY__URL", url.as_str()),
        ("AGENT_LS_MEMORY__SCOPE", "user"),
        ("USER", me.as_str()),
    ];
    let home = home();
    // Two unrelated folders: different scopes.
    let (ws1, ws2) = (support::example(), support::example());
    let model1 = retrying_model();
    let (o1, _) = fix(ws1.path(), home.path(), &model1, &env);
    let run1 = o1["run_id"].as_str().unwrap().to_string();
    let model2 = ModelServer::start(vec![openai_text(&[&coder("a - b", "a + b")])]);
    fix(ws2.path(), home.path(), &model2, &env);
    let first = model2.requests()[0].body.to_string();
    assert!(first.contains(&format!("run {run1}")), "{first}");

    // Run 2's records are seen from workspace 1 the same way.
    let hits = memory_json(
        &["search", "assertionerror test_add"],
        ws1.path(),
        home.path(),
        &env,
    );
    let scopes: std::collections::BTreeSet<&str> = hits
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["record"]["scope"].as_str().unwrap())
        .collect();
    assert!(scopes.len() >= 2, "both workspaces' records: {hits}");
    // A user-wide pattern, and `--user` lists every workspace's records of this user.
    let mine = memory_json(&["list", "--user"], ws1.path(), home.path(), &env);
    assert!(
        mine.as_array()
            .unwrap()
            .iter()
            .any(|r| r["memory"]["type"] == "pattern" && r["scope"] == format!("user:{me}")),
        "{mine}"
    );
    // Scoped to its workspace, a third folder of the same user sees none of them; another
    // user sees none of them with --user.
    let ws3 = support::example();
    let scoped = [
        ("AGENT_LS_MEMORY__URL", url.as_str()),
        ("USER", me.as_str()),
    ];
    assert_eq!(
        memory_json(
            &["search", "assertionerror"],
            ws3.path(),
            home.path(),
            &scoped
        ),
        json!([])
    );
    let other = [
        ("AGENT_LS_MEMORY__URL", url.as_str()),
        ("USER", "nobody-else"),
    ];
    let theirs = memory_json(&["list", "--user"], ws1.path(), home.path(), &other);
    assert!(
        !ids(&theirs).iter().any(|i| i.starts_with(&run1)),
        "{theirs}"
    );
}

/// A port on 127.0.0.1 that nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn a_workspace_file_names_a_memory_server_only_in_a_trusted_folder() {
    let home = home();
    let ws = support::example();
    let url = format!(
        "postgres://agent_ls:{PASSWORD}@127.0.0.1:{}/agent_ls",
        closed_port()
    );
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        format!("[memory]\nurl = \"{url}\"\n"),
    )
    .unwrap();
    // Untrusted: ignored, and said so; the embedded store answers.
    let out = agent(&["memory", "list"], ws.path(), home.path(), &[])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("not trusted"), "{}", text(&out));
    assert!(text(&out).contains("`memory.url`"), "{}", text(&out));
    assert!(!text(&out).contains(PASSWORD));
    // Trusted: the server applies (and cannot be reached here), its password never shown.
    let trusted = support::agent_ls(&["trust", &ws.path().display().to_string()], home.path())
        .output()
        .unwrap();
    assert!(trusted.status.success(), "{}", text(&trusted));
    let out = agent(&["memory", "list"], ws.path(), home.path(), &[])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("cannot connect"), "{}", text(&out));
    assert!(!text(&out).contains(PASSWORD), "{}", text(&out));
    let config = agent(&["config"], ws.path(), home.path(), &[])
        .output()
        .unwrap();
    let shown = text(&config);
    assert!(
        shown.contains("postgres://agent_ls:<redacted>@127.0.0.1"),
        "{shown}"
    );
    assert!(!shown.contains(PASSWORD), "{shown}");
}

#[test]
fn an_unreachable_memory_server_fails_fast_and_a_run_goes_on_without_memory() {
    let home = home();
    let ws = support::example();
    let url = format!(
        "postgres://agent_ls:{PASSWORD}@127.0.0.1:{}/agent_ls",
        closed_port()
    );
    let env = [("AGENT_LS_MEMORY__URL", url.as_str())];
    let started = std::time::Instant::now();
    let out = agent(
        &["memory", "search", "assertionerror"],
        ws.path(),
        home.path(),
        &env,
    )
    .output()
    .unwrap();
    // Generous: the connect timeout is 3 s, and a refused connection answers at once.
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("the PostgreSQL memory store postgres://agent_ls:<redacted>@127.0.0.1"),
        "{said}"
    );
    assert!(said.contains("cannot connect"), "{said}");
    assert!(!said.contains(PASSWORD), "{said}");

    // A run goes on without memory, warning once for the search and once for the records.
    let model = ModelServer::start(vec![openai_text(&[&coder("a - b", "a + b")])]);
    let (o, stderr) = fix(ws.path(), home.path(), &model, &env);
    assert_eq!(o["iterations"], 1);
    assert!(
        stderr.contains("this run goes on without memory"),
        "{stderr}"
    );
    assert!(!stderr.contains(PASSWORD), "{stderr}");
    let used = memory_lines(ws.path());
    assert_eq!(used[0]["data"]["used"], json!([]));
}
