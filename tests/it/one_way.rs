//! The one-way server through the real binary: one owner of test runs (the agent's too),
//! messages on the wire in the order they were produced, a session that no busy store can
//! stall, and one run per workspace whoever starts it.

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::model_server::{ModelServer, Reply};
use support::{Client, file_uri, workspace};

/// A test command that numbers its runs, logs when each starts and ends, takes a second (the
/// first run takes `first_secs`), and reports one failure at line N of app.py for run N.
fn counting_tests(first_secs: u32) -> String {
    format!(
        "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; \
         echo \"start $n\" >> runs.log; if [ $n = 1 ]; then sleep {first_secs}; else sleep 1; fi; \
         echo \"end $n\" >> runs.log; echo \"app.py:$n: boom $n\"; exit 1"
    )
}

fn counting_server(first_secs: u32) -> (Client, tempfile::TempDir) {
    let ws = workspace(&[("app.py", "a = 1\nb = 2\nc = 3\n")]);
    let mut c = Client::spawn(Default::default());
    let command = counting_tests(first_secs);
    c.initialize(
        ws.path(),
        json!({}),
        json!({"test": {"command": ["sh", "-c", command], "allowlist": ["sh -c"]}}),
    );
    (c, ws)
}

fn runs_log(ws: &Path) -> Vec<String> {
    std::fs::read_to_string(ws.join("runs.log"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn statuses(c: &Client) -> Vec<String> {
    c.log
        .iter()
        .filter(|m| m["method"] == "agent-ls/testStatus")
        .map(|m| m["params"]["state"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_rerun_during_the_agents_test_run_waits_for_it_and_diagnostics_come_from_the_newest() {
    let (mut c, ws) = counting_server(1);
    c.command("agent-ls.run", json!({"goal": "run the tests"}))
        .unwrap();
    c.wait_notification("agent-ls/testStatus", |p| p["state"] == "running");
    c.command("agent-ls.rerunTests", Value::Null).unwrap();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(
        done["status"], "done",
        "the agent's run was not disturbed: {done}"
    );
    c.wait_notification("agent-ls/testStatus", |p| p["state"] == "failed");
    c.wait_notification("agent-ls/testStatus", |p| p["state"] == "failed");
    // One test process at a time: the rerun started after the agent's ended.
    assert_eq!(
        runs_log(ws.path()),
        ["start 1", "end 1", "start 2", "end 2"]
    );
    assert_eq!(statuses(&c), ["running", "failed", "running", "failed"]);
    let app = file_uri(&ws.path().join("app.py"));
    let last = c
        .log
        .iter()
        .rev()
        .find(|m| m["method"] == "textDocument/publishDiagnostics" && m["params"]["uri"] == app)
        .expect("diagnostics for app.py");
    assert_eq!(
        last["params"]["diagnostics"][0]["range"]["start"]["line"], 1,
        "from run 2, the newest: {last}"
    );
}

#[test]
fn the_agents_test_run_supersedes_a_rerun_in_progress() {
    // The rerun would take 30 s: however long the agent's run takes to start on a busy
    // machine, the rerun is still running then, and only being ended lets it stop early.
    let (mut c, ws) = counting_server(30);
    c.command("agent-ls.rerunTests", Value::Null).unwrap();
    c.wait_notification("agent-ls/testStatus", |p| p["state"] == "running");
    // "running" comes when the process is started; on a busy machine its shell may not yet
    // have counted itself, and the agent's run would then count as the first (the 30 s one).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while runs_log(ws.path()).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the rerun never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    c.command("agent-ls.run", json!({"goal": "run the tests"}))
        .unwrap();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}");
    // Everything sent before an answer arrives before it.
    c.request("agent-ls/configuration", Value::Null).unwrap();
    // The rerun's process was ended when the agent's started, and its result never published.
    assert_eq!(runs_log(ws.path()), ["start 1", "start 2", "end 2"]);
    assert_eq!(statuses(&c), ["running", "running", "failed"]);
}

#[test]
fn a_runs_messages_reach_the_client_in_the_order_they_were_produced() {
    let ws = support::example();
    let mut c = server_fixing_calc(ws.path(), json!({"window": {"workDoneProgress": true}}));
    let started = c.command("agent-ls.fixTests", Value::Null).unwrap();
    let run_id = started["run_id"].as_str().unwrap().to_string();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}");
    // The client reacts to the end at once, as the editors' undo buttons do.
    c.command("agent-ls.undo", Value::Null).unwrap();
    c.wait_until(
        |c| {
            c.server_requests
                .iter()
                .any(|r| {
                    r["params"]["label"]
                        .as_str()
                        .unwrap_or("")
                        .contains("undo step")
                })
                .then_some(())
        },
        "the undo's applyEdit",
    );
    let at = |what: &str, pred: &dyn Fn(&Value) -> bool| {
        c.log
            .iter()
            .position(pred)
            .unwrap_or_else(|| panic!("no {what} in {:#?}", c.log))
    };
    let token = format!("agent-ls/run/{run_id}");
    let progress_end = at("progress end", &|m| {
        m["method"] == "$/progress"
            && m["params"]["token"] == token
            && m["params"]["value"]["kind"] == "end"
    });
    let passed = at("the last test status", &|m| {
        m["method"] == "agent-ls/testStatus" && m["params"]["state"] == "passed"
    });
    let finished = at("runFinished", &|m| m["method"] == "agent-ls/runFinished");
    let undo = at("the undo's applyEdit", &|m| {
        m["method"] == "workspace/applyEdit"
            && m["params"]["label"]
                .as_str()
                .unwrap_or("")
                .contains("undo step")
    });
    assert!(
        passed < progress_end && progress_end < finished && finished < undo,
        "tests passed at {passed}, progress end at {progress_end}, runFinished at {finished}, undo at {undo}"
    );
}

#[test]
fn typing_is_answered_at_once_while_another_process_holds_the_store() {
    let ws = support::example();
    let mut c = server_fixing_calc(ws.path(), json!({}));
    // The store is open once the status (which reads it) is answered.
    c.command("agent-ls.status", Value::Null).unwrap();
    let uri = "file:///notes/scratch.txt";
    c.open(uri, "notes\n");
    // Another process takes the store's write lock and keeps it until the run has ended.
    let db = rusqlite::Connection::open(ws.path().join(".agent-ls/store.sqlite")).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let locked = Instant::now();
    // A run writes its record and an applied step to the store: those wait on the lock.
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let mut slowest = Duration::ZERO;
    for version in 2..=11 {
        let started = Instant::now();
        c.edit(uri, version, (0, 0), (0, 0), "x");
        let state = c.document_state(uri);
        slowest = slowest.max(started.elapsed());
        assert_eq!(state["version"], version);
    }
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    // A run that waited on its two writes would take their busy timeouts, 5 s each, and end
    // after 10 s; 9 s leaves a loaded machine room and still tells the two apart.
    assert!(
        locked.elapsed() < Duration::from_secs(9),
        "the run took {:?}: it waited on the locked store",
        locked.elapsed()
    );
    db.execute_batch("COMMIT").unwrap();
    assert_eq!(
        done["status"], "done",
        "the run does not wait on the store: {done}"
    );
    // A request that waited on the store would take the 5 s of its busy timeout; half of it
    // leaves room for CI's loaded machine and still tells the two apart.
    assert!(
        slowest < Duration::from_millis(2500),
        "a change and a request took {slowest:?} with the store locked"
    );
}

/// A server for `ws` whose model (a replay script) fixes calc.py in one edit, applied
/// without asking; `capabilities` are the client's.
fn server_fixing_calc(ws: &Path, capabilities: Value) -> Client {
    let replay = ws.join(".replay.jsonl");
    std::fs::write(
        &replay,
        support::replay_script(&[json!({"role": "coder", "content": "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n"})]),
    )
    .unwrap();
    let mut c = Client::spawn(support::Spawn {
        env: vec![
            ("AGENT_LS_MODEL__PROVIDER".into(), "replay".into()),
            (
                "AGENT_LS_MODEL__REPLAY_FILE".into(),
                replay.display().to_string(),
            ),
        ],
        ..Default::default()
    });
    c.initialize(
        ws,
        capabilities,
        json!({"agent": {"approval": "auto", "evaluate": false}}),
    );
    c
}

/// `agent-ls run GOAL --yes` on `ws` with the model at `url` (an OpenAI-compatible test
/// server), the user's folders in `ws/.xdg`.
fn run_goal(ws: &Path, url: &str, goal: &str) -> Command {
    let mut cmd = support::cli(&["run", goal, "--yes"], ws, &ws.join(".xdg"));
    cmd.env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{url}/v1"))
        .env("AGENT_LS_MODEL__NAME", "m")
        .env("AGENT_LS_AGENT__EVALUATE", "false")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn stalling_model() -> ModelServer {
    ModelServer::start(vec![Reply::Sse {
        events: vec![],
        stall_after: Some(0),
    }])
}

#[test]
fn a_second_agent_ls_run_on_the_same_workspace_is_refused_naming_the_first() {
    let ws = support::example();
    let model = stalling_model();
    let mut first = run_goal(ws.path(), &model.url, "fix the failing tests")
        .spawn()
        .unwrap();
    // The first run is at its coder call, which stalls: it holds the workspace.
    model.wait_for_requests(1);
    let second = run_goal(ws.path(), &model.url, "add a docstring to add")
        .output()
        .unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(3), "{said}");
    assert!(
        said.contains(&format!("process {}", first.id())) && said.contains("fix the failing tests"),
        "{said}"
    );
    // The first run's process is gone, and with it the lock.
    let third = run_goal(ws.path(), &model.url, "explain add")
        .output()
        .unwrap();
    assert_ne!(
        third.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
}

#[test]
fn the_server_and_agent_ls_run_take_turns_on_a_workspace() {
    let ws = support::example();
    let model = stalling_model();
    let mut c = Client::spawn(support::Spawn {
        env: vec![
            ("AGENT_LS_MODEL__PROVIDER".into(), "openai".into()),
            (
                "AGENT_LS_MODEL__BASE_URL".into(),
                format!("{}/v1", model.url),
            ),
            ("AGENT_LS_MODEL__NAME".into(), "m".into()),
        ],
        ..Default::default()
    });
    c.initialize(ws.path(), json!({}), Value::Null);
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    model.wait_for_requests(1);
    let server_pid = c.pid();
    // A headless run while the editor's run goes on: refused, naming the server.
    let out = run_goal(ws.path(), &model.url, "add a docstring")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(said.contains(&format!("process {server_pid}")), "{said}");
    // A second run in the same server is refused the same way.
    let err = c
        .command("agent-ls.run", json!({"goal": "add a docstring"}))
        .unwrap_err();
    assert_eq!(err["code"], -32803);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("fix the failing tests"),
        "{err}"
    );
    // Once the editor's run is cancelled, the workspace is free for the other.
    c.command("agent-ls.cancel", Value::Null).unwrap();
    c.wait_notification("agent-ls/runFinished", |_| true);
    let model2 = stalling_model();
    let mut headless = run_goal(ws.path(), &model2.url, "fix the failing tests")
        .spawn()
        .unwrap();
    model2.wait_for_requests(1);
    let err = c
        .command("agent-ls.run", json!({"goal": "add a docstring"}))
        .unwrap_err();
    headless.kill().unwrap();
    headless.wait().unwrap();
    assert_eq!(err["code"], -32803);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains(&format!("process {}", headless.id())),
        "{err}"
    );
}
