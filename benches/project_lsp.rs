//! What the project's language server saves (issue 42, docs/project-lsp.md): the same run of
//! "fix the failing tests" on a typed calculator whose first edit has a type error (`add`
//! returns a string), with basedpyright checking each edit and without a server. Prints the
//! wait per edit (the journal's `diagnostics` lines), each run's test runs and model calls,
//! and when its first model request went out (the journal's `phases`: the server's start
//! no longer delays it). Needs basedpyright-langserver (AGENT_LS_TEST_BASEDPYRIGHT or on PATH) and pytest
//! (AGENT_LS_TEST_PYTHON); run with `cargo bench --bench project_lsp`. Asserts nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};

const CALC: &str = "def add(a: int, b: int) -> int:\n    return a - b\n\n\ndef multiply(a: int, b: int) -> int:\n    return a * b\n";
const TESTS: &str = "from calc import add, multiply\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_multiply():\n    assert multiply(2, 3) == 6\n";

fn edit(from: &str, to: &str) -> String {
    format!(
        "calc.py\n<<<<<<< SEARCH\n    return {from}\n=======\n    return {to}\n>>>>>>> REPLACE\n"
    )
}

/// The script: a first edit that returns a string, then the fix; a reflection for the run
/// whose tests see the first edit fail. Each call takes the next line of its role.
fn script() -> String {
    [
        json!({"role": "coder", "content": edit("a - b", "str(a + b)")}),
        json!({"role": "reflector", "content": r#"{"task_id": "T1", "passed": false, "report": "add returns a string", "next_step": "return the int"}"#}),
        json!({"role": "coder", "content": edit("str(a + b)", "a + b")}),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect()
}

/// The figures of one run: test runs, model calls, each check's wait, and the whole time.
struct Figures {
    status: String,
    test_runs: usize,
    model_calls: usize,
    waits: Vec<u64>,
    /// From the run's start to its first model request.
    first_request_ms: Option<u64>,
    seconds: f64,
}

fn run(server: Option<&str>, python: &str) -> Figures {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("calc.py"), CALC).unwrap();
    std::fs::write(ws.path().join("test_calc.py"), TESTS).unwrap();
    std::fs::write(
        ws.path().join("pyrightconfig.json"),
        r#"{"typeCheckingMode": "standard"}"#,
    )
    .unwrap();
    std::fs::write(ws.path().join(".replay.jsonl"), script()).unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    let lsp = match server {
        Some(s) => format!(
            "[lsp_servers]\nwait_ms = 30000\n[lsp_servers.servers.python]\ncommand = {}\npatterns = [\"*.py\"]\n",
            json!([s, "--stdio"])
        ),
        None => "[lsp_servers]\nenabled = false\n".into(),
    };
    let config = format!(
        "[test]\ncommand = {}\n[agent]\nevaluate = false\nreview = \"off\"\n[model]\nprovider = \"replay\"\nreplay_file = \".replay.jsonl\"\n{lsp}",
        json!([python, "-m", "pytest", "-q"])
    );
    std::fs::write(home.path().join("agent-ls/config.toml"), config).unwrap();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_agent-ls"))
        .args([
            "run",
            "fix the failing tests of calc.py",
            "--yes",
            "--json",
            "--workspace",
        ])
        .arg(ws.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .output()
        .expect("agent-ls runs");
    let seconds = started.elapsed().as_secs_f64();
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let journal = journal(ws.path());
    let count = |kind: &str| journal.iter().filter(|l| l["type"] == kind).count();
    Figures {
        status: outcome["status"].as_str().unwrap_or("?").to_string(),
        test_runs: count("test_result"),
        model_calls: count("model_call"),
        waits: journal
            .iter()
            .filter(|l| l["type"] == "diagnostics")
            .filter_map(|l| l["data"]["wait_ms"].as_u64())
            .collect(),
        first_request_ms: journal
            .iter()
            .find(|l| l["type"] == "phases")
            .and_then(|l| l["data"]["first_request_ms"].as_u64()),
        seconds,
    }
}

fn journal(ws: &Path) -> Vec<Value> {
    let runs = ws.join(".agent-ls/runs");
    std::fs::read_dir(runs)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect::<Vec<Value>>()
        })
        .collect()
}

fn server() -> Option<String> {
    if let Ok(p) = std::env::var("AGENT_LS_TEST_BASEDPYRIGHT") {
        return Some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("basedpyright-langserver"))
            .find(|p| p.is_file())
            .map(|p: PathBuf| p.display().to_string())
    })
}

fn main() {
    let Some(server) = server() else {
        eprintln!(
            "project_lsp: no basedpyright-langserver (AGENT_LS_TEST_BASEDPYRIGHT or PATH); nothing measured"
        );
        return;
    };
    let python = std::env::var("AGENT_LS_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    println!("project_lsp: a fix whose first edit has a type error (add returns str)");
    for (name, with) in [
        ("with basedpyright", Some(server.as_str())),
        ("without a server", None),
    ] {
        let f = run(with, &python);
        println!(
            "  {name:18} status {:5} test runs {}  model calls {}  run {:.1} s  first request {} ms  waits per check (ms) {:?}",
            f.status,
            f.test_runs,
            f.model_calls,
            f.seconds,
            f.first_request_ms.map_or("?".into(), |m| m.to_string()),
            f.waits
        );
    }
    println!(
        "  (the first wait of the server's run is the goal's files before any edit, the server's start included, in the background)"
    );
}
