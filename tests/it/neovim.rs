//! The Neovim plugin with the real binary in a real headless Neovim (0.12), through the
//! user's path: the code action, the question before applying, the file, the tests and the
//! diagnostics, :AgentReview's findings as diagnostics, and the review question at a run's
//! end (its findings in a split, "Roll back run" taking the buffer back). scripts/test
//! installs Neovim and sets AGENT_LS_TEST_NVIM.

use std::process::Command;

use crate::support;

fn nvim() -> Option<String> {
    match std::env::var("AGENT_LS_TEST_NVIM") {
        Ok(p) => Some(p),
        Err(_) if std::env::var("AGENT_LS_REQUIRE_REAL_MODEL").is_ok() => {
            panic!("AGENT_LS_TEST_NVIM is not set; scripts/test installs Neovim")
        }
        Err(_) => {
            eprintln!("skipped: no Neovim (scripts/test installs one)");
            None
        }
    }
}

fn scenario(name: &str, replay: &str) -> Vec<serde_json::Value> {
    scenario_with(name, replay, |_| {})
}

/// A scenario in a copy of the example that `prepare` may add files to.
fn scenario_with(
    name: &str,
    replay: &str,
    prepare: impl FnOnce(&std::path::Path),
) -> Vec<serde_json::Value> {
    let Some(nvim) = nvim() else {
        return Vec::new();
    };
    let ws = tempfile::tempdir().unwrap();
    support::copy_example(ws.path());
    prepare(ws.path());
    // A project's root marker, as a real checkout has: the plugin takes the nearest folder
    // with one as the workspace (without one, Neovim's working directory).
    if !ws.path().join(".git").exists() {
        std::fs::create_dir(ws.path().join(".git")).unwrap();
    }
    std::fs::write(ws.path().join(".replay.jsonl"), replay).unwrap();
    let state = tempfile::tempdir().unwrap();
    let result = state.path().join("result.jsonl");
    let mut out = Command::new(nvim)
        .args([
            "--headless",
            "-u",
            "NONE",
            "-i",
            "NONE",
            "-n",
            "-c",
            "luafile tests/e2e/neovim_fix.lua",
        ])
        .env("XDG_CONFIG_HOME", state.path().join("config"))
        .env("XDG_STATE_HOME", state.path().join("state"))
        .env("XDG_DATA_HOME", state.path().join("data"))
        .env("RESULT", &result)
        .env("SCENARIO", name)
        .env("WORKSPACE", ws.path().canonicalize().unwrap())
        .env("PLUGIN", support::repo("editors/neovim"))
        .env("AGENT_LS", env!("CARGO_BIN_EXE_agent-ls"))
        .env(
            "BASEDPYRIGHT",
            std::env::var("AGENT_LS_TEST_BASEDPYRIGHT").unwrap_or_default(),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A question Neovim asks (a prompt in a headless editor) would wait forever: the
    // scenario gets two minutes, then fails with what Neovim said.
    let started = std::time::Instant::now();
    let mut timed_out = false;
    while out.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(120) {
            let _ = out.kill();
            timed_out = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = out.wait_with_output().unwrap();
    let text = std::fs::read_to_string(&result).unwrap_or_else(|e| {
        panic!(
            "no results ({e}); nvim said: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let mut results: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    if timed_out {
        results.push(serde_json::json!({
            "name": "the scenario ends (Neovim was stopped after 120 s, waiting at a prompt?)",
            "ok": false,
            "detail": String::from_utf8_lossy(&out.stdout),
        }));
    }
    results
}

fn assert_all(results: &[serde_json::Value]) {
    let failed: Vec<_> = results.iter().filter(|r| r["ok"] != true).collect();
    assert!(
        failed.is_empty(),
        "failed checks: {failed:#?}\nall: {results:#?}"
    );
}

const FIX: &str = "{\"role\": \"coder\", \"content\": \"calc.py\\n<<<<<<< SEARCH\\n    return a - b\\n=======\\n    return a + b\\n>>>>>>> REPLACE\\n\"}\n";

#[test]
fn the_fix_flow_in_neovim_accepted() {
    let results = scenario("accept", FIX);
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 10, "{results:#?}");
    assert_all(&results);
}

#[test]
fn the_fix_flow_in_neovim_rejected() {
    let results = scenario("reject", FIX);
    if results.is_empty() {
        return;
    }
    assert_all(&results);
}

#[test]
fn rerun_and_cancel_in_neovim() {
    let results = scenario("rerun_cancel", FIX);
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 10, "{results:#?}");
    assert_all(&results);
}

#[test]
fn an_explanation_opens_in_a_split_in_neovim() {
    let explain = "{\"role\": \"coder\", \"content\": \"`add` is meant to sum its arguments.\\n\\nIt subtracts instead:\\n\\n- `add(2, 3)` gives -1\\n- the tests expect 5\\n\"}\n";
    let results = scenario("explain", explain);
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 5, "{results:#?}");
    assert_all(&results);
}

#[test]
fn a_run_that_creates_a_module_then_undo_and_redo_in_neovim() {
    let results = scenario_with("create", &support::create_module_replay(), |ws| {
        std::fs::write(ws.join("test_helpers.py"), support::TEST_HELPERS).unwrap();
    });
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 10, "{results:#?}");
    assert_all(&results);
}

#[test]
fn the_run_view_in_neovim_shows_two_iterations_and_undoes_the_first_step() {
    let results = scenario("runview", &support::two_iterations_replay());
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 10, "{results:#?}");
    assert_all(&results);
}

#[test]
fn agent_rewind_in_neovim_takes_the_run_back_to_a_step_and_runs_the_instruction() {
    // The scenario gives the rewound run its own script once the first run has ended.
    let results = scenario("rewind", &support::two_iterations_replay());
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 7, "{results:#?}");
    assert_all(&results);
}

#[test]
fn a_test_command_that_cannot_run_is_an_error_not_failing_tests_in_neovim() {
    let results = scenario("broken", FIX);
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 7, "{results:#?}");
    assert_all(&results);
}

#[test]
fn a_run_rolled_back_in_neovim_after_a_second_confirmation() {
    let replay = support::replay_script(&[serde_json::json!(
        {"role": "coder", "content": support::git::FIX_AND_CREATE}
    )]);
    let results = scenario_with("rollback", &replay, support::git::commit_all);
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 12, "{results:#?}");
    assert_all(&results);
}

#[test]
fn agent_review_in_neovim_puts_the_reviewers_findings_on_their_lines() {
    let results = scenario_with(
        "review",
        &support::git::review_findings_replay(),
        support::git::uncommitted_change,
    );
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 12, "{results:#?}");
    assert_all(&results);
}

#[test]
fn a_fix_runs_review_in_neovim_is_a_warning_on_its_line_until_undo() {
    let reviewer = serde_json::json!({
        "findings": [{"title": "[P2] no test for negative numbers", "body": "add(-1, 1)",
            "priority": 2, "confidence": 0.9, "path": "calc.py", "start_line": 5, "end_line": 5}],
        "verdict": "incorrect", "explanation": "untested", "confidence": 0.9
    });
    let replay = format!(
        "{FIX}{}\n",
        serde_json::json!({"role": "reviewer", "content": reviewer.to_string()})
    );
    let results = scenario("run_review", &replay);
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 7, "{results:#?}");
    assert_all(&results);
}

#[test]
fn the_review_question_in_neovim_shows_the_finding_and_rolls_the_run_back() {
    let reviewer = serde_json::json!({
        "findings": [{"title": "[P1] add overflows", "body": "big numbers", "priority": 1,
            "confidence": 0.9, "path": "calc.py", "start_line": 5, "end_line": 5}],
        "verdict": "incorrect", "explanation": "overflow", "confidence": 0.85
    });
    let replay = format!(
        "{FIX}{}\n",
        serde_json::json!({"role": "reviewer", "content": reviewer.to_string()})
    );
    let results = scenario_with("review_question", &replay, support::git::commit_all);
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 10, "{results:#?}");
    assert_all(&results);
}

#[test]
fn the_failing_test_action_in_neovim_creates_the_test_file_and_undo_removes_it() {
    let test = "import unittest\n\nfrom calc import add\n\n\nclass AddTests(unittest.TestCase):\n    def test_add_sums(self):\n        self.assertEqual(add(2, 3), 5)\n";
    let answer = serde_json::json!({"tests": [{"path": "test_add.py", "name": "test_add_sums",
        "kind": "example", "reason": "add must sum", "expect": "AssertionError: -1 != 5",
        "content": test}]});
    let replay = format!(
        "{}\n{FIX}",
        serde_json::json!({"role": "tester", "content": answer.to_string()})
    );
    let results = scenario("tester", &replay);
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 13, "{results:#?}");
    assert_all(&results);
}

#[test]
fn the_run_view_in_neovim_says_which_runs_records_were_remembered() {
    let results = scenario("runs_memory", FIX);
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 5, "{results:#?}");
    assert_all(&results);
}

#[test]
fn neovims_own_diagnostics_check_the_agents_edit_with_no_server_spawned() {
    // A second language server in Neovim, the real basedpyright, reports the bad edit's
    // undefined name; the plugin forwards it, the run sends it back to the model, whose next
    // answer fixes it before any test runs, and agent-ls starts no server of its own.
    if std::env::var_os("AGENT_LS_TEST_BASEDPYRIGHT").is_none() {
        eprintln!("skipped: AGENT_LS_TEST_BASEDPYRIGHT is not set (pip install basedpyright)");
        return;
    }
    let coder = |from: &str, to: &str| {
        serde_json::json!({"role": "coder", "content": format!(
            "calc.py\n<<<<<<< SEARCH\n    return {from}\n=======\n    return {to}\n>>>>>>> REPLACE\n"
        )})
    };
    let replay = support::replay_script(&[coder("a - b", "a + c"), coder("a + c", "a + b")]);
    let results = scenario_with("diagnostics", &replay, |ws| {
        // basedpyright's standard mode (its default calls unannotated code an error).
        std::fs::write(
            ws.join("pyrightconfig.json"),
            r#"{"typeCheckingMode": "standard"}"#,
        )
        .unwrap();
    });
    if results.is_empty() {
        return;
    }
    assert!(
        results
            .iter()
            .any(|r| r["name"] == "agent-ls started no language server of its own"),
        "{results:#?}"
    );
    assert_all(&results);
}
