//! Test failures as diagnostics through the real binary: a save runs the tests and publishes
//! failures on the right lines (also in files that are not open), fixing the code clears them,
//! `agent-ls.rerunTests` runs them on demand, a newer run replaces an older one, and a second
//! editor window on the workspace sees the first one's results.

use crate::support;

use serde_json::{Value, json};
use support::{Client, file_uri, python, workspace};

const CALC_BROKEN: &str = "def add(a, b):\n    return a - b\n";
const CALC_FIXED: &str = "def add(a, b):\n    return a + b\n";
const TEST_FILE: &str = "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n";

fn start(ws: &std::path::Path, test: Value) -> Client {
    let mut c = Client::spawn(Default::default());
    c.initialize(
        ws,
        json!({"window": {"workDoneProgress": true}}),
        json!({"test": test}),
    );
    c
}

fn pytest_config(extra: Value) -> Value {
    let py = python();
    let mut cfg = json!({"command": [py, "-m", "pytest"], "allowlist": [py]});
    cfg.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    cfg
}

fn final_status(c: &mut Client) -> Value {
    c.wait_notification("agent-ls/testStatus", |p| p["state"] != "running")
}

#[test]
fn saving_publishes_failures_on_their_lines_and_fixing_clears_them() {
    let have_pytest = std::process::Command::new(python())
        .args(["-m", "pytest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_pytest {
        assert!(
            std::env::var("AGENT_LS_REQUIRE_REAL_MODEL").is_err(),
            "pytest is missing; scripts/test installs it"
        );
        eprintln!("skipped: pytest is not installed (scripts/test installs it)");
        return;
    }
    let ws = workspace(&[
        ("calc.py", CALC_BROKEN),
        ("tests/test_calc.py", TEST_FILE),
        (
            "pyproject.toml",
            "[tool.pytest.ini_options]\npythonpath = [\".\"]\n",
        ),
    ]);
    let mut c = start(
        ws.path(),
        pytest_config(json!({"on_save": true, "debounce_ms": 50})),
    );
    let calc = file_uri(&ws.path().join("calc.py"));
    let test_uri = file_uri(&ws.path().join("tests/test_calc.py"));
    c.open(&calc, CALC_BROKEN);
    c.notify(
        "textDocument/didSave",
        json!({"textDocument": {"uri": calc}}),
    );

    let status = final_status(&mut c);
    assert_eq!(status["state"], "failed", "{status}");
    assert_eq!(
        (status["passed"].as_u64(), status["failed"].as_u64()),
        (Some(1), Some(1))
    );
    // The failing test's file is not open in the editor, and still gets its diagnostic.
    let diags = c.wait_notification("textDocument/publishDiagnostics", |p| p["uri"] == test_uri);
    let d = &diags["diagnostics"][0];
    assert_eq!(d["range"]["start"]["line"], 4, "{d}");
    assert_eq!(d["range"]["start"]["character"], 4, "{d}");
    assert_eq!(d["severity"], 1);
    assert_eq!(d["source"], "agent-ls test");
    assert_eq!(d["code"], "tests/test_calc.py::test_add");
    assert!(
        d["message"].as_str().unwrap().contains("assert 0 == 4"),
        "{d}"
    );
    // The test is named once, by the code; editors show both side by side.
    assert!(!d["message"].as_str().unwrap().contains("test_add"), "{d}");
    assert_eq!(d["data"]["location"]["file"], "tests/test_calc.py");
    assert!(c.notifications.iter().all(|n| {
        n["method"] != "window/showMessage"
            || !n["params"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("error")
    }));
    assert!(
        c.server_requests
            .iter()
            .any(|r| r["method"] == "window/workDoneProgress/create"),
        "progress is reported"
    );

    std::fs::write(ws.path().join("calc.py"), CALC_FIXED).unwrap();
    c.notify(
        "textDocument/didSave",
        json!({"textDocument": {"uri": calc}}),
    );
    let status = final_status(&mut c);
    assert_eq!(status["state"], "passed", "{status}");
    let cleared = c.wait_notification("textDocument/publishDiagnostics", |p| p["uri"] == test_uri);
    assert_eq!(cleared["diagnostics"], json!([]));
}

#[test]
fn saving_does_nothing_unless_configured() {
    let ws = workspace(&[("calc.py", CALC_BROKEN), ("tests/test_calc.py", TEST_FILE)]);
    // With no debounce a save's run would start as the save is handled.
    let mut c = start(ws.path(), pytest_config(json!({"debounce_ms": 0})));
    let calc = file_uri(&ws.path().join("calc.py"));
    c.notify(
        "textDocument/didSave",
        json!({"textDocument": {"uri": calc}}),
    );
    c.command("agent-ls.rerunTests", Value::Null).unwrap();
    final_status(&mut c);
    // Everything sent before an answer arrives before it: the rerun was the only run.
    c.request("agent-ls/configuration", Value::Null).unwrap();
    let started = c
        .notifications
        .iter()
        .filter(|n| n["method"] == "agent-ls/testStatus" && n["params"]["state"] == "running")
        .count();
    assert_eq!(started, 1, "{:#?}", c.notifications);
}

#[test]
fn the_rerun_command_runs_tests_and_a_newer_run_replaces_an_older_one() {
    let ws = workspace(&[]);
    let mut c = start(
        ws.path(),
        json!({"command": ["sh", "-c", "sleep 1; echo 'src/app.py:3: boom'; exit 1"], "allowlist": ["sh -c"]}),
    );
    std::fs::create_dir_all(ws.path().join("src")).unwrap();
    std::fs::write(ws.path().join("src/app.py"), "a\nb\nc = 1\n").unwrap();
    let first = c
        .request(
            "workspace/executeCommand",
            json!({"command": "agent-ls.rerunTests"}),
        )
        .unwrap();
    assert_eq!(first["started"], true);
    c.request(
        "workspace/executeCommand",
        json!({"command": "agent-ls.rerunTests"}),
    )
    .unwrap();
    let status = final_status(&mut c);
    assert_eq!(status["state"], "failed", "{status}");
    let diags = c.wait_notification("textDocument/publishDiagnostics", |_| true);
    assert_eq!(diags["diagnostics"][0]["range"]["start"]["line"], 2);
    // Only one run reached the end: the first was cancelled by the second and its result
    // dropped. It ended long before the second, and everything sent before an answer
    // arrives before it.
    c.request("agent-ls/configuration", Value::Null).unwrap();
    let finals: Vec<&Value> = c
        .notifications
        .iter()
        .filter(|n| n["method"] == "agent-ls/testStatus" && n["params"]["state"] != "running")
        .collect();
    assert!(finals.is_empty(), "a superseded run published: {finals:?}");
}

#[test]
fn a_refused_command_is_reported_and_never_run() {
    let ws = workspace(&[("keep.txt", "x")]);
    let mut c = start(ws.path(), json!({"command": ["rm", "keep.txt"]}));
    c.request(
        "workspace/executeCommand",
        json!({"command": "agent-ls.rerunTests"}),
    )
    .unwrap();
    let status = final_status(&mut c);
    assert_eq!(status["state"], "error");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("not on the allowlist"),
        "{status}"
    );
    let shown = c.wait_notification("window/showMessage", |p| {
        p["message"].as_str().unwrap_or("").contains("allowlist")
    });
    assert_eq!(shown["type"], 2);
    assert!(ws.path().join("keep.txt").exists());
}

#[test]
fn cancel_stops_a_run_and_keeps_the_previous_diagnostics() {
    let ws = workspace(&[]);
    let mut c = start(
        ws.path(),
        json!({"command": ["sh", "-c", "sleep 30"], "allowlist": ["sh -c"]}),
    );
    c.request(
        "workspace/executeCommand",
        json!({"command": "agent-ls.rerunTests"}),
    )
    .unwrap();
    c.wait_notification("agent-ls/testStatus", |p| p["state"] == "running");
    let started = std::time::Instant::now();
    c.request(
        "workspace/executeCommand",
        json!({"command": "agent-ls.cancel"}),
    )
    .unwrap();
    let status = final_status(&mut c);
    assert_eq!(status["state"], "cancelled");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// Two editor windows on one workspace are two servers: a run in the first is published in
/// the second too (it saw none of it), and a window opened later starts with the workspace's
/// latest result.
#[test]
fn a_second_window_sees_the_first_window_s_test_diagnostics() {
    let ws = workspace(&[]);
    std::fs::create_dir_all(ws.path().join("src")).unwrap();
    std::fs::write(ws.path().join("src/app.py"), "a\nb\nc = 1\n").unwrap();
    let test = json!({"command": ["sh", "-c", "echo 'src/app.py:3: boom'; exit 1"], "allowlist": ["sh -c"]});
    let app = file_uri(&ws.path().join("src/app.py"));
    let mut second = start(ws.path(), test.clone());
    let mut first = start(ws.path(), test.clone());
    first
        .request(
            "workspace/executeCommand",
            json!({"command": "agent-ls.rerunTests"}),
        )
        .unwrap();
    assert_eq!(final_status(&mut first)["state"], "failed");
    let seen = second.wait_notification("textDocument/publishDiagnostics", |p| p["uri"] == app);
    let d = &seen["diagnostics"][0];
    assert_eq!(d["range"]["start"]["line"], 2, "{d}");
    assert_eq!(d["source"], "agent-ls test", "{d}");
    let status = second.wait_notification("agent-ls/testStatus", |p| p["state"] == "failed");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or("")
            .contains("another window"),
        "{status}"
    );
    // The first window does not take its own result back as another's.
    first
        .request("agent-ls/configuration", Value::Null)
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    first
        .request("agent-ls/configuration", Value::Null)
        .unwrap();
    let echoed = first.notifications.iter().any(|n| {
        n["method"] == "agent-ls/testStatus"
            && n["params"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("another window"))
    });
    assert!(!echoed, "the first window republished its own run");
    // A third window, opened after the run, starts with it.
    let mut third = start(ws.path(), test.clone());
    let seen = third.wait_notification("textDocument/publishDiagnostics", |p| p["uri"] == app);
    assert_eq!(seen["diagnostics"][0]["range"]["start"]["line"], 2);
    // Once every window is closed, the next session does not take the last one's result
    // for another window's.
    drop((first, second, third));
    let mut later = start(ws.path(), test);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    later
        .request("agent-ls/configuration", Value::Null)
        .unwrap();
    assert!(
        !later
            .notifications
            .iter()
            .any(|n| n["method"] == "textDocument/publishDiagnostics"),
        "{:?}",
        later.notifications
    );
}
