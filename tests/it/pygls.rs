//! A client we did not write: pygls 2.1 on lsprotocol 2025.0 (tests/e2e/pygls_client.py, in
//! the virtual environment scripts/test installs) runs "Agent: fix failing tests" end to end
//! against the real binary. lsprotocol reads any code action with a `command` key as a
//! `Command`, so a `CodeAction` that runs a command was read as a `Command` whose command was
//! the object turned into a string ("unknown command `{'title': ...`"): a client that announces
//! no code action literals now gets `Command`s, as the specification says, and one that does
//! reads them with the structure hook docs/lsp-extensions.md gives.

use std::process::Command;

use crate::support;

/// The pygls environment's python, or None to skip where it is not installed (with
/// AGENT_LS_REQUIRE_PROTOCOL_TESTS set, as scripts/test does, that fails instead).
fn python() -> Option<String> {
    match std::env::var("AGENT_LS_TEST_PYGLS_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ if std::env::var_os("AGENT_LS_REQUIRE_PROTOCOL_TESTS").is_some() => {
            panic!("AGENT_LS_TEST_PYGLS_PYTHON is not set; scripts/test installs pygls")
        }
        _ => {
            eprintln!(
                "skipped: AGENT_LS_TEST_PYGLS_PYTHON is not set (pip install pygls==2.1.1 lsprotocol==2025.0.0)"
            );
            None
        }
    }
}

const FIX: &str = "{\"role\": \"coder\", \"content\": \"calc.py\\n<<<<<<< SEARCH\\n    return a - b\\n=======\\n    return a + b\\n>>>>>>> REPLACE\\n\"}\n{\"role\": \"reviewer\", \"content\": \"{\\\"findings\\\": [], \\\"verdict\\\": \\\"correct\\\", \\\"explanation\\\": \\\"adds\\\", \\\"confidence\\\": 0.9}\"}\n";

/// Runs the client in `mode` on a copy of the example; its checks, each asserted.
fn check(mode: &str) -> Vec<serde_json::Value> {
    let Some(python) = python() else {
        return Vec::new();
    };
    let ws = support::example();
    std::fs::write(ws.path().join(".replay.jsonl"), FIX).unwrap();
    std::fs::create_dir(ws.path().join(".git")).unwrap();
    let state = tempfile::tempdir().unwrap();
    let result = state.path().join("result.jsonl");
    let out = Command::new(python)
        .arg(support::repo("tests/e2e/pygls_client.py"))
        .arg(mode)
        .arg(env!("CARGO_BIN_EXE_agent-ls"))
        .arg(ws.path())
        .arg(&result)
        .env("HOME", state.path())
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&result).unwrap_or_else(|e| {
        panic!(
            "no results ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let results: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let failed: Vec<_> = results.iter().filter(|r| r["ok"] != true).collect();
    assert!(
        failed.is_empty(),
        "failed checks: {failed:#?}\nall: {results:#?}"
    );
    results
}

fn names(results: &[serde_json::Value]) -> Vec<&str> {
    results.iter().filter_map(|r| r["name"].as_str()).collect()
}

/// The stock client, announcing no code action literals: a `Command`, executed, the run done,
/// its edit applied by the client.
#[test]
fn a_stock_pygls_client_runs_the_agents_code_action_end_to_end() {
    let results = check("commands");
    if results.is_empty() {
        return;
    }
    let names = names(&results);
    for name in [
        "it is a Command running agent-ls",
        "the run finishes done",
        "the document holds the fix",
    ] {
        assert!(names.contains(&name), "{name} was not checked: {names:?}");
    }
}

/// A pygls client announcing code action literals and LSP 3.18's `LLMGenerated` tag gets a
/// tagged `CodeAction`; with lsprotocol's own hook it still reads it as a `Command` (the
/// upstream bug, docs/lsprotocol-code-action-hook.patch), with the documented hook it runs it.
#[test]
fn a_pygls_client_with_literals_reads_tagged_code_actions_with_the_documented_hook() {
    let results = check("literals");
    if results.is_empty() {
        return;
    }
    let checked = names(&results);
    for name in [
        "it is a CodeAction tagged LLMGenerated",
        "the run finishes done",
    ] {
        assert!(
            checked.contains(&name),
            "{name} was not checked: {checked:?}"
        );
    }
    let stock = check("stock-literals");
    assert!(
        names(&stock).contains(&"lsprotocol's own hook reads the action as a Command"),
        "{stock:#?}"
    );
}
