//! Big repositories (issue 39, docs/bigrepo.md) through `agent-ls run --json` and a model
//! server on 127.0.0.1: the repo map's per-file cache refreshes a changed file and forgets a
//! deleted one in a warm run, a slow map does not hold back the first request, and
//! `agent-ls serve` and `agent-ls acp` keep the map between runs.

use crate::support;

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use support::model_server::{ModelServer, openai_text};

/// `agent-ls run GOAL --json` in `ws` against `server`, with `env` besides: its journal's
/// `phases` line.
fn run(ws: &Path, goal: &str, server: &ModelServer, env: &[(&str, &str)]) -> Value {
    let home = tempfile::tempdir().expect("home");
    let out = support::cli(&["run", goal, "--yes"], ws, home.path())
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", "test-key")
        .env("AGENT_LS_AGENT__EVALUATE", "false")
        .env("AGENT_LS_AGENT__REVIEW", "off")
        .env("AGENT_LS_CACHE__ENABLED", "false")
        .envs(env.iter().copied())
        .output()
        .expect("agent-ls runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The newest run's line (the journals are read in no particular order).
    let phases = support::journaled(ws, "phases");
    phases
        .iter()
        .max_by_key(|l| l["ts"].as_u64())
        .unwrap_or_else(|| panic!("no phases line in the journal; stderr: {stderr}"))["data"]
        .clone()
}

/// The text of a request's messages.
fn prompt(body: &Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The repo map's lines of a prompt (`path:line: signature`), from its map section.
fn map_lines(prompt: &str) -> Vec<String> {
    let Some(at) = prompt.find("Repo map (") else {
        return Vec::new();
    };
    prompt[at..]
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(String::from)
        .collect()
}

/// The paths the map's cache holds a row for.
fn cached_paths(ws: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(ws.join(".agent-ls/repomap.sqlite")).expect("the cache");
    let mut stmt = conn
        .prepare("SELECT path FROM files ORDER BY path")
        .expect("its files");
    stmt.query_map([], |r| r.get(0))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("paths")
}

/// The map's lines after `app/alpha.py` was rewritten and `app/gamma.py` deleted: the new
/// signature, and neither the old one nor the deleted file.
fn renamed_and_deleted(lines: &[String]) {
    assert!(
        lines.contains(&"app/alpha.py:1: def alpha_renamed(x, y):".to_string()),
        "{lines:?}"
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("alpha_helper") || l.contains("gamma")),
        "{lines:?}"
    );
}

#[test]
fn a_warm_run_reparses_a_changed_file_and_forgets_a_deleted_one() {
    let ws = support::workspace(&[
        ("app/alpha.py", "def alpha_helper(x):\n    return x\n"),
        ("app/beta.py", "def beta_helper(x):\n    return x\n"),
        ("app/gamma.py", "def gamma_helper(x):\n    return x\n"),
    ]);
    let server = ModelServer::answering(|_| openai_text(&["They return their argument."]));
    let goal = "explain what the helpers in app do";
    let cold = run(ws.path(), goal, &server, &[]);
    assert_eq!(
        (cold["map_parsed"].as_u64(), cold["map_cached"].as_u64()),
        (Some(3), Some(0)),
        "{cold}"
    );
    let first = map_lines(&prompt(&server.requests()[0].body));
    assert!(
        first.iter().any(|l| l.contains("def gamma_helper")),
        "{first:?}"
    );
    assert_eq!(
        cached_paths(ws.path()),
        ["app/alpha.py", "app/beta.py", "app/gamma.py"]
    );

    rename_and_delete(ws.path());
    let n = server.count();
    let warm = run(ws.path(), goal, &server, &[]);
    // Only the changed file was parsed; the unchanged one came from the cache.
    assert_eq!(
        (warm["map_parsed"].as_u64(), warm["map_cached"].as_u64()),
        (Some(1), Some(1)),
        "{warm}"
    );
    let lines = map_lines(&prompt(&server.requests()[n].body));
    renamed_and_deleted(&lines);
    assert_eq!(cached_paths(ws.path()), ["app/alpha.py", "app/beta.py"]);

    // `agent-ls stats` shows each run's phases, newest first.
    let home = tempfile::tempdir().expect("home");
    let out = support::cli(&["stats"], ws.path(), home.path())
        .output()
        .expect("stats");
    let stats: Value = serde_json::from_slice(&out.stdout).expect("stats JSON");
    assert_eq!(stats["runs"][0]["phases"]["map_parsed"], 1, "{stats}");
    assert_eq!(stats["runs"][1]["phases"]["map_parsed"], 3, "{stats}");
    let home = tempfile::tempdir().expect("home");
    let text = support::in_workspace(&["stats"], ws.path(), home.path())
        .output()
        .expect("stats");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("phases, ms") && text.contains("1st req"),
        "{text}"
    );
}

#[test]
fn the_first_request_goes_out_before_a_slow_map_is_built() {
    let ws = support::workspace(&[
        (
            "app/pricing.py",
            "def net_price(price, tax):\n    return price + tax\n",
        ),
        ("app/other.py", "def unrelated_helper(x):\n    return x\n"),
    ]);
    // Whether the map's cache existed when each request arrived.
    let seen: Arc<Mutex<Vec<bool>>> = Arc::default();
    let (s, cache) = (seen.clone(), ws.path().join(".agent-ls/repomap.sqlite"));
    let server = ModelServer::answering(move |_| {
        s.lock().expect("seen").push(cache.exists());
        openai_text(&["It adds the tax."])
    });
    // A file outside the workspace, which the goal names by its absolute path and by one
    // relative to the workspace: neither is read for the map.
    let outside = tempfile::tempdir().expect("outside");
    let secret = outside.path().join("secret_mod.py");
    std::fs::write(&secret, "def secret_function():\n    return 1\n").expect("secret");
    let name = outside
        .path()
        .file_name()
        .expect("a name")
        .to_string_lossy();
    let goal = format!(
        "explain how app/pricing.py computes net_price, beside {} and ../{name}/secret_mod.py",
        secret.display()
    );
    // The background build waits a minute before it starts: far longer than the run.
    let delay = [(agent_ls_runtime::repomap::DELAY_ENV, "60000")];
    let phases = run(ws.path(), &goal, &server, &delay);
    assert_eq!(phases["map_late"], true, "{phases}");
    assert_eq!(seen.lock().expect("seen").first(), Some(&false));
    // The first request's map holds the file the goal names, parsed on the spot.
    let lines = map_lines(&prompt(&server.requests()[0].body));
    assert!(
        lines.contains(&"app/pricing.py:1: def net_price(price, tax):".to_string()),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("unrelated_helper")),
        "{lines:?}"
    );
    assert!(
        !prompt(&server.requests()[0].body).contains("secret_function"),
        "{lines:?}"
    );
    assert!(phases["first_request_ms"].as_u64().is_some(), "{phases}");
}

/// A workspace of two Python helpers, `app/alpha.py` and `app/gamma.py`.
fn two_helpers() -> tempfile::TempDir {
    support::workspace(&[
        ("app/alpha.py", "def alpha_helper(x):\n    return x\n"),
        ("app/gamma.py", "def gamma_helper(x):\n    return x\n"),
    ])
}

/// What another program does between two runs: `app/alpha.py` rewritten, `app/gamma.py`
/// deleted (`renamed_and_deleted` checks a map saw both).
fn rename_and_delete(ws: &Path) {
    std::fs::write(
        ws.join("app/alpha.py"),
        "def alpha_renamed(x, y):\n    return x + y\n",
    )
    .expect("rewrite");
    std::fs::remove_file(ws.join("app/gamma.py")).expect("delete");
}

/// The newest run's `phases` line in `ws`'s journal.
fn newest_phases(ws: &Path) -> Value {
    support::journaled(ws, "phases")
        .into_iter()
        .max_by_key(|l| l["ts"].as_u64())
        .expect("a phases line")["data"]
        .clone()
}

/// `agent-ls serve` keeps the map between runs: built after `initialize`, lent to each run,
/// and caught up with the disk, so a file another program changed between two runs is
/// current in the second run's map, and a deleted one is gone.
#[test]
fn the_server_keeps_the_map_warm_and_a_run_sees_what_changed_on_disk() {
    let ws = two_helpers();
    let server = ModelServer::answering(|_| openai_text(&["They return their argument."]));
    let mut c = support::Client::spawn(support::Spawn {
        env: vec![
            ("AGENT_LS_MODEL__PROVIDER".into(), "openai".into()),
            (
                "AGENT_LS_MODEL__BASE_URL".into(),
                format!("{}/v1", server.url),
            ),
            ("OPENAI_API_KEY".into(), "test-key".into()),
        ],
        ..Default::default()
    });
    c.initialize(
        ws.path(),
        serde_json::json!({}),
        serde_json::json!({"agent": {"evaluate": false, "review": "off"}, "cache": {"enabled": false}}),
    );
    let goal = serde_json::json!({"goal": "explain what the helpers in app do"});
    c.command("agent-ls.run", goal.clone()).expect("a run");
    c.wait_notification("agent-ls/runFinished", |_| true);
    let first = newest_phases(ws.path());
    assert_eq!(first["map_kept"], true, "{first}");
    let lines = map_lines(&prompt(&server.requests()[0].body));
    assert!(
        lines.iter().any(|l| l.contains("def gamma_helper")),
        "{lines:?}"
    );

    rename_and_delete(ws.path());
    let n = server.count();
    c.command("agent-ls.run", goal).expect("a second run");
    c.wait_notification("agent-ls/runFinished", |_| true);
    let second = newest_phases(ws.path());
    assert_eq!(second["map_kept"], true, "{second}");
    // Caught up: the changed file parsed again, and the deleted one gone; nothing else, and
    // no walk: the server's watch named them.
    assert_eq!(second["map_parsed"], 2, "{second}");
    assert_eq!(second["map_watched"], true, "{second}");
    let lines = map_lines(&prompt(&server.requests()[n].body));
    renamed_and_deleted(&lines);
}

/// `agent-ls acp` keeps a session's map as `serve` does: built at `session/new`, lent to each
/// prompt's run and caught up with the disk, so the second prompt's map has the file another
/// program rewrote and not the one it deleted, and parsed only that one again.
#[test]
fn an_acp_session_keeps_the_map_and_its_next_prompt_sees_what_changed_on_disk() {
    let ws = two_helpers();
    let server = ModelServer::answering(|_| openai_text(&["They return their argument."]));
    let home = tempfile::tempdir().expect("home");
    let base = format!("{}/v1", server.url);
    let mut acp = crate::acp::RawAcp::start_with(
        home.path(),
        &[
            ("AGENT_LS_MODEL__PROVIDER", "openai"),
            ("AGENT_LS_MODEL__BASE_URL", &base),
            ("OPENAI_API_KEY", "test-key"),
            ("AGENT_LS_AGENT__EVALUATE", "false"),
            ("AGENT_LS_AGENT__REVIEW", "off"),
            ("AGENT_LS_CACHE__ENABLED", "false"),
        ],
    );
    let cwd = ws.path().canonicalize().expect("cwd");
    let (created, _) = acp.request(
        1,
        "session/new",
        serde_json::json!({"cwd": cwd, "mcpServers": []}),
    );
    let id = created["result"]["sessionId"].clone();
    let prompt_once = |acp: &mut crate::acp::RawAcp, n: u64| {
        let (answer, _) = acp.request(
            n,
            "session/prompt",
            serde_json::json!({"sessionId": id, "prompt": [
                {"type": "text", "text": "explain what the helpers in app do"}
            ]}),
        );
        assert!(answer.get("error").is_none(), "{answer}");
        newest_phases(ws.path())
    };
    let first = prompt_once(&mut acp, 2);
    assert_eq!(first["map_kept"], true, "{first}");

    rename_and_delete(ws.path());
    let n = server.count();
    let second = prompt_once(&mut acp, 3);
    acp.close();
    assert_eq!(second["map_kept"], true, "{second}");
    assert_eq!(second["map_parsed"], 2, "{second}");
    assert_eq!(second["map_watched"], true, "{second}");
    let lines = map_lines(&prompt(&server.requests()[n].body));
    renamed_and_deleted(&lines);
}

/// `agent-ls map GOAL` prints the map a run's prompt shows, ranked toward what the goal
/// names, and fills the cache on the way: the run after it parses nothing, and a second
/// `map` after a change parses that file alone and drops the deleted one.
#[test]
fn agent_ls_map_prints_the_map_and_warms_the_cache_for_the_next_run() {
    let ws = support::workspace(&[
        (
            "app/core.py",
            "from app.alpha import alpha_helper\n\ndef compute(x):\n    return alpha_helper(x)\n",
        ),
        ("app/alpha.py", "def alpha_helper(x):\n    return x\n"),
        ("app/gamma.py", "def gamma_helper(x):\n    return x\n"),
    ]);
    let home = tempfile::tempdir().expect("home");
    let map = |goal: &str| {
        let out = support::cli(&["map", goal], ws.path(), home.path())
            .output()
            .expect("agent-ls map");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).expect("map --json")
    };
    let first = map("explain how app/core.py computes");
    assert_eq!(
        (first["files"].as_u64(), first["parsed"].as_u64()),
        (Some(3), Some(3)),
        "{first}"
    );
    // What the named file uses comes first.
    let lines: Vec<&str> = first["map"].as_str().expect("the map").lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"app/alpha.py:1: def alpha_helper(x):"),
        "{first}"
    );
    assert!(
        lines.contains(&"app/gamma.py:1: def gamma_helper(x):"),
        "{first}"
    );

    let server = ModelServer::answering(|_| openai_text(&["It calls alpha_helper."]));
    let warm = run(ws.path(), "explain how app/core.py computes", &server, &[]);
    assert_eq!(
        (
            warm["map_parsed"].as_u64(),
            warm["map_cached"].as_u64(),
            warm["map_late"].as_bool()
        ),
        (Some(0), Some(3), Some(false)),
        "{warm}"
    );

    rename_and_delete(ws.path());
    let again = map("");
    assert_eq!(
        (
            again["files"].as_u64(),
            again["parsed"].as_u64(),
            again["cached"].as_u64()
        ),
        (Some(2), Some(1), Some(1)),
        "{again}"
    );
    let text = again["map"].as_str().expect("the map");
    assert!(
        text.contains("def alpha_renamed(x, y)") && !text.contains("gamma"),
        "{text}"
    );

    // Outside `--json`, the map on stdout and what the build did on stderr.
    let out = support::in_workspace(&["map"], ws.path(), home.path())
        .output()
        .expect("agent-ls map");
    assert!(String::from_utf8_lossy(&out.stdout).contains("app/alpha.py:1: def alpha_renamed"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("2 files in the map, 0 parsed now and 2 from the cache"),
        "{said}"
    );
}
